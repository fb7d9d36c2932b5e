"""``--watch`` and ``devmem top``'s loop: a sample every interval, redrawn in place on a terminal that can."""

from __future__ import annotations

import argparse
import json
import sys
from contextlib import AbstractContextManager, nullcontext

from devmem._host import Files
from devmem.command.common import out
from devmem.command.devices import device_json, sample
from devmem.command.info import screen
from devmem.command.keys import Keys
from devmem.command.top import top_facts, top_screen
from devmem.platform import Platform
from devmem.progress import Progress, progress


class _Stop(Exception):
    """SIGTERM during ``--watch``: stop as Ctrl-C does."""


def watch(args: argparse.Namespace, platform: Platform, because: str, indices: list[int], files: Files) -> int:
    """Sample every ``args.watch`` seconds until ``args.count`` samples, Ctrl-C, SIGTERM or the reader going away
    (exit 0): one JSON line per sample with ``--json``, else the screen, redrawn in place on a terminal that can
    (the static facts of ``top`` are written once, above the part redrawn). How to stop it is said on a terminal
    only: in the screen's first line where stdout is one, else on stderr's progress line counting the samples
    (where stderr is a terminal); a pipe or a file gets the samples alone."""
    with _status(args, sys.stdout) as bar:
        return _watch(args, platform, because, indices, files, bar)


def _status(args: argparse.Namespace, stdout) -> AbstractContextManager[Progress]:
    """The samples counted on stderr where stdout is no terminal (``devmem top --json > samples.jsonl`` typed at
    one): where it is, the screen says it itself."""
    from devmem.command.format import is_terminal

    if is_terminal(stdout):
        return nullcontext(Progress())
    what = "devmem top" if getattr(args, "compact", False) else "devmem info --watch"
    return progress(f"{what}, every {args.watch:g} s (Ctrl-C to stop)", total=args.count, unit="samples")


def _watch(
    args: argparse.Namespace, platform: Platform, because: str, indices: list[int], files: Files, bar: Progress
) -> int:
    import signal
    import time
    from datetime import datetime, timezone

    from devmem.command.format import Painter, is_terminal, redraw_ok, terminal_width, wants_colour, width_for

    def stop(signum, frame):
        raise _Stop

    previous = signal.signal(signal.SIGTERM, stop)
    in_place = not args.json and redraw_ok(sys.stdout)
    keys = Keys()
    if in_place:
        keys.start()
    every = f"every {args.watch:g} s"
    if is_terminal(sys.stdout):
        every += ", q or Ctrl-C to stop" if keys.reading else ", Ctrl-C to stop"
    paint = Painter(wants_colour(sys.stdout))
    compact = getattr(args, "compact", False)
    width = width_for(sys.stdout) if not compact else min(terminal_width(), width_for(sys.stdout))
    redraw_from = None  # the screen line below the static facts, once they are written
    samples = 0
    try:
        while not out.lost and samples != args.count:
            samples += 1
            started = time.monotonic()
            devices = sample(platform, indices, files)
            if args.json:
                stamp = datetime.now(timezone.utc).isoformat(timespec="milliseconds")
                line = {"time": stamp, "platform": platform.name, "devices": [device_json(d) for d in devices]}
                out.write(json.dumps(line) + "\n")
            elif compact:
                stamp = datetime.now().astimezone().strftime("%Y-%m-%d %H:%M:%S %Z")
                body = [f"{stamp}  {every}", *top_screen(args, devices, width, paint)]
                if redraw_from is None:
                    facts = top_facts(platform, because, devices, width)
                    redraw_from = len(facts) + 1
                    head = ("\x1b[H\x1b[2J" if in_place else "") + "\n".join(facts) + "\n"
                    out.write(head)
                if in_place:
                    out.write(f"\x1b[{redraw_from};1H\x1b[J" + "\n".join(body) + "\n")
                else:
                    out.write("\n".join(body) + "\n\n")
            else:
                stamp = datetime.now().astimezone().strftime("%Y-%m-%d %H:%M:%S %Z")
                text = screen(platform, because, devices, paint, width, bool(getattr(args, "verbose", False)))
                text = f"{stamp}  {every}\n" + text
                out.write(("\x1b[H\x1b[2J" + text + "\n") if in_place else text + "\n\n")
            bar.update()
            if samples != args.count and keys.wait(args.watch - (time.monotonic() - started)):
                return 0  # q pressed
        return 0
    except (KeyboardInterrupt, _Stop):
        return 0
    finally:
        keys.restore()
        signal.signal(signal.SIGTERM, previous)
