"""``devmem info``: per device, its memory, the processes holding it and the reservations on it (the default
command); its flags are ``devmem top``'s too."""

from __future__ import annotations

import argparse
import sys

from devmem._deadline import device_count
from devmem._host import REAL_FILES, Files
from devmem.command.common import add_command, emit_json, out
from devmem.command.devices import chosen_candidate, device_json, sample, why_chosen
from devmem.command.flags import device_index, interval, interval_ms, positive
from devmem.command.screens import screen, top_facts, top_screen
from devmem.platform import Platform
from devmem.resolution.plugins import current_platform, platform_candidates


def cmd_info(args: argparse.Namespace, platform: Platform | None = None, files: Files = REAL_FILES) -> int:
    """``devmem info`` on ``platform`` (the resolved one by default); ``files`` is where /proc is read."""
    platform = platform or current_platform()
    chosen = chosen_candidate(platform.name, platform_candidates())
    because = why_chosen(chosen)
    count = device_count(platform)
    indices = [args.device] if args.device is not None else list(range(count))
    if args.watch is not None:
        from devmem.command.watch import watch

        return watch(args, platform, because, indices, files)
    if args.count is not None:
        args.parser.error("--count applies to --watch: give --watch SECONDS with it")
    devices = sample(platform, indices, files)
    if args.json:
        emit_json(
            {
                "platform": platform.name,
                "chosen_because": because,
                "distribution": chosen.distribution if chosen else None,
                "device_count": count,
                "devices": [device_json(d) for d in devices],
            }
        )
        return 0
    from devmem.command.format import Painter, wants_colour, width_for

    paint, width = Painter(wants_colour(sys.stdout)), width_for(sys.stdout)
    if len(devices) >= COMPACT_FROM and not args.details:
        hint = f"every figure per device: devmem info --details (or --device N); {len(devices)} devices"
        out.print(
            *top_facts(platform, because, devices, width, "devmem info"), *top_screen(args, devices, width, paint), hint
        )
        return 0
    out.print(screen(platform, because, devices, paint, width))
    return 0


#: From this many devices on, ``devmem info`` shows ``top``'s compact screen (one line per device and per process,
#: the facts they share once) unless ``--details`` asks for every device's block.
COMPACT_FROM = 4

#: The interval flags operators bring from other tools: nvidia-smi's ``-l/--loop``, gpustat's ``-i/--interval``
#: (nvitop's ``--interval``), each the same as ``--watch`` (named in its help, not listed apart); nvidia-smi's
#: ``-lms/--loop-ms`` takes milliseconds.
WATCH_ALIASES = ("-l", "--loop", "-i", "--interval")
WATCH_MS_ALIASES = ("-lms", "--loop-ms")


def add_info_flags(parser: argparse.ArgumentParser, *, watch_default: float | None) -> None:
    parser.add_argument(
        "--json",
        action="store_true",
        help="machine-readable output with exact bytes (one line per sample with --watch)",
    )
    parser.add_argument("--device", type=device_index, default=None, help="only this device index")
    if watch_default is None:
        parser.add_argument(
            "--details",
            action="store_true",
            help=f"every figure of every device, also on {COMPACT_FROM} devices or more (where info is compact, "
            "one line per device and per process, by default)",
        )
        parser.add_argument(
            "--watch",
            type=interval,
            nargs="?",
            const=2.0,
            default=None,
            metavar="SECONDS",
            help="sample again every SECONDS (default 2) until Ctrl-C; redraws in place on a terminal "
            "(-l/--loop as nvidia-smi, -lms/--loop-ms in milliseconds, -i/--interval as gpustat and nvitop)",
        )
    else:
        parser.add_argument(
            "--watch",
            "--interval",
            type=interval,
            nargs="?",
            const=watch_default,
            default=watch_default,
            metavar="SECONDS",
            help=f"seconds between samples (default {watch_default:g}; -l/--loop as nvidia-smi, -lms/--loop-ms in "
            "milliseconds, -i/--interval as gpustat and nvitop)",
        )
    watch = parser._option_string_actions["--watch"]
    aliases = [flag for flag in WATCH_ALIASES if flag not in parser._option_string_actions]
    parser.add_argument(
        *aliases,
        dest="watch",
        type=interval,
        nargs=watch.nargs,
        const=watch.const,
        default=watch.default,
        help=argparse.SUPPRESS,
    )
    parser.add_argument(
        *WATCH_MS_ALIASES, dest="watch", type=interval_ms, default=watch.default, metavar="MS", help=argparse.SUPPRESS
    )
    parser.add_argument(
        "-n",
        "--count",
        type=positive("sample count"),
        default=None,
        metavar="N",
        help="stop after N samples (exit 0)" + (" (with --watch)" if watch_default is None else ""),
    )
    parser.set_defaults(handler=cmd_info)


INFO_DESCRIPTION = """\
Per device: free and total memory, what a new process can allocate, every process holding memory on it
(PID, user, command and bytes as the driver reports them; NS PID is the PID inside the process's own
container where it differs; a process the platform names, such as a server holding memory for its
clients, is marked with its role), and where each figure came from.
User and command are "-" for a PID this PID namespace cannot see. Where engines reserved memory on a
device (devmem.reserve), each reservation is listed: owner, reserved, used now, over or under.
Sizes scale from B to TiB; --json gives exact bytes. `devmem` alone is `devmem info`, so `devmem --json` works too."""


def add_parser(sub: argparse._SubParsersAction) -> None:
    """``devmem info`` and its flags."""
    info = add_command(
        sub,
        "info",
        "device memory and the processes holding it, per device (the default command)",
        INFO_DESCRIPTION,
        "  devmem                       # the same as devmem info\n"
        "  devmem info --device 0\n"
        "  devmem info --watch 1        # redraw every second until Ctrl-C\n"
        "  devmem --json | jq '.devices[0].processes'\n"
        "  DEVMEM_PLATFORM=cpu devmem info",
    )
    add_info_flags(info, watch_default=None)
