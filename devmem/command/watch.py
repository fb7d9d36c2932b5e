"""``--watch`` and ``devmem top``'s loop: a sample every interval, redrawn in place on a terminal that can."""

from __future__ import annotations

import argparse
import json
import sys
from contextlib import AbstractContextManager, nullcontext

from devmem._deadline import device_count
from devmem._host import Files
from devmem.command.common import out
from devmem.command.devices import device_json, sample
from devmem.command.keys import Keys
from devmem.command.screens import COMPACT_FROM, compact_screen, screen, top_facts, top_screen
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

    from devmem.command import format as fmt

    def stop(signum, frame):
        raise _Stop

    previous = signal.signal(signal.SIGTERM, stop)
    in_place = not args.json and getattr(args, "query_gpu", None) is None and fmt.redraw_ok(sys.stdout)
    keys = Keys()
    if in_place:
        keys.start()
    every = f"every {args.watch:g} s"
    if fmt.is_terminal(sys.stdout):
        every += ", q or Ctrl-C to stop" if keys.reading else ", Ctrl-C to stop"
    paint = fmt.Painter(fmt.wants_colour(sys.stdout))
    compact = getattr(args, "compact", False)
    facts_written = False  # through a pipe, top's static facts are written once, above the first sample
    samples = 0
    try:
        while not out.lost and samples != args.count:
            samples += 1
            started = time.monotonic()
            devices = sample(platform, indices, files)
            width = fmt.width_for(sys.stdout) if not compact else min(fmt.terminal_width(), fmt.width_for(sys.stdout))
            # a frame never takes the terminal's last line: the newline after it would scroll the screen
            height = fmt.height_for(sys.stdout) if in_place else None
            room = None if height is None else height - 1
            stamp = datetime.now().astimezone().strftime("%Y-%m-%d %H:%M:%S %Z")
            if getattr(args, "query_gpu", None) is not None:  # CSV rows each sample, the header once
                from devmem.command import query as csv

                count = device_count(platform)
                words = args.format or frozenset({"csv"})
                out.print(*csv.lines(devices, count, args.query_gpu, words, first=samples == 1))
            elif args.json:
                stamp = datetime.now(timezone.utc).isoformat(timespec="milliseconds")
                line = {"time": stamp, "platform": platform.name, "devices": [device_json(d) for d in devices]}
                out.write(json.dumps(line) + "\n")
            elif in_place:
                above, below = _screen(args, platform, because, devices, width, paint, room)
                out.frame([*above, f"{stamp}  {every}", *below], first=samples == 1)
            elif compact:
                if not facts_written:
                    out.write("\n".join(top_facts(platform, because, devices, width)) + "\n")
                    facts_written = True
                out.write("\n".join([f"{stamp}  {every}", *top_screen(args, devices, width, paint)]) + "\n\n")
            else:
                text = screen(platform, because, devices, paint, width, bool(getattr(args, "verbose", False)))
                out.write(f"{stamp}  {every}\n{text}\n\n")
            bar.update()
            if samples != args.count and keys.wait(args.watch - (time.monotonic() - started)):
                return 0  # q pressed
        return 0
    except (KeyboardInterrupt, _Stop):
        return 0
    finally:
        keys.restore()
        signal.signal(signal.SIGTERM, previous)


def _screen(
    args: argparse.Namespace,
    platform: Platform,
    because: str,
    devices: list[dict[str, object]],
    width: int,
    paint,
    room: int | None,
) -> tuple[list[str], list[str]]:
    """One sample's screen, the lines above its time line and those below, in at most ``room - 1`` lines:
    ``top``'s compact screen (its facts above) for ``top``, and for ``info --watch`` the screen ``devmem info``
    shows (compact from :data:`~devmem.command.screens.COMPACT_FROM` devices on, unless ``--details``)."""
    if getattr(args, "compact", False) or (len(devices) >= COMPACT_FROM and not getattr(args, "details", False)):
        command = "devmem top" if getattr(args, "compact", False) else "devmem info"
        return compact_screen(args, platform, because, devices, width, paint, room, command, 1)
    verbose = bool(getattr(args, "verbose", False))
    return [], screen(platform, because, devices, paint, width, verbose, None if room is None else room - 1).split("\n")
