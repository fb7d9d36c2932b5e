"""``devmem info``: per device, its memory, the processes holding it and the reservations on it (the default
command); its flags are ``devmem top``'s too."""

from __future__ import annotations

import argparse
import sys

from devmem._deadline import device_count
from devmem._host import REAL_FILES, Files
from devmem.command.common import add_command, emit_json, out
from devmem.command.devices import chosen_candidate, device_json, sample, why_chosen
from devmem.command.flags import add_device_flag, interval, interval_ms, positive
from devmem.command.screens import COMPACT_FROM, compact_screen, screen
from devmem.platform import Platform
from devmem.resolution.plugins import current_platform, platform_candidates


def cmd_info(args: argparse.Namespace, platform: Platform | None = None, files: Files = REAL_FILES) -> int:
    """``devmem info`` on ``platform`` (the resolved one by default); ``files`` is where /proc is read."""
    platform = platform or current_platform()
    chosen = chosen_candidate(platform.name, platform_candidates())
    because = why_chosen(chosen)
    count = device_count(platform)
    indices = args.device if args.device is not None else list(range(count))
    query = getattr(args, "query_gpu", None)
    if query is not None and args.json:
        args.parser.error("--query-gpu writes CSV: give it without --json")
    if getattr(args, "format", None) is not None and query is None:
        args.parser.error("--format applies to --query-gpu: give --query-gpu=FIELDS with it")
    if args.watch is not None:
        from devmem.command.watch import watch

        return watch(args, platform, because, indices, files)
    if args.count is not None:
        args.parser.error("--count applies to --watch: give --watch SECONDS with it")
    devices = sample(platform, indices, files)
    if query is not None:
        from devmem.command import query as csv

        out.print(*csv.lines(devices, count, query, args.format or frozenset({"csv"}), first=True))
        return 0
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
    from devmem.command.format import Painter, height_for, wants_colour, width_for

    paint, width = Painter(wants_colour(sys.stdout)), width_for(sys.stdout)
    height = height_for(sys.stdout)
    # a screen leaves the terminal's last line to the prompt; -v and --details ask for every line
    room = None if height is None or args.verbose or args.details else height - 1
    if len(devices) >= COMPACT_FROM and not args.details:
        hint = f"{len(devices)} devices; every figure: devmem info --details (or -i N); every process: -v"
        facts, body = compact_screen(args, platform, because, devices, width, paint, room, "devmem info", 1)
        out.print(*facts, *body, hint if len(hint) <= width else hint[: width - 3] + "...")
        return 0
    out.print(screen(platform, because, devices, paint, width, bool(args.verbose), room))
    return 0


#: The interval's spellings a command's help does not list apart: ``info`` shows ``-l/--loop/--watch`` (nvidia-smi's
#: and its own), ``top`` ``-l/--loop/--interval`` (nvidia-smi's, nvitop's and gpustat's); each takes the others.
#: nvidia-smi's ``-lms/--loop-ms`` takes milliseconds. ``-i`` is nvidia-smi's device selection (``--device``), not
#: gpustat's interval.
WATCH_ALIASES = ("--watch", "--interval")
WATCH_MS_ALIASES = ("-lms", "--loop-ms")


def add_info_flags(parser: argparse.ArgumentParser, *, watch_default: float | None) -> None:
    parser.add_argument(
        "--json",
        action="store_true",
        help="machine-readable output with exact bytes (one line per sample with --watch)",
    )
    add_device_flag(parser)
    if watch_default is None:
        from devmem.command.query import FIELDS, output_format, query_fields

        parser.add_argument(
            "--query-gpu",
            type=query_fields,
            default=None,
            metavar="FIELDS",
            help=f"CSV for scripts, as nvidia-smi's: one line per device with these fields ({', '.join(FIELDS)}; "
            "sizes in MiB)",
        )
        parser.add_argument(
            "--format",
            type=output_format,
            default=None,
            metavar="csv[,noheader][,nounits]",
            help="--query-gpu's format, as nvidia-smi's (default csv)",
        )
        parser.add_argument(
            "--details",
            action="store_true",
            help=f"every figure of every device, also on {COMPACT_FROM} devices or more (where info is compact, "
            "one line per device and per process, by default)",
        )
        parser.add_argument(
            "-l",
            "--loop",
            "--watch",
            dest="watch",
            type=interval,
            nargs="?",
            const=2.0,
            default=None,
            metavar="SECONDS",
            help="sample again every SECONDS (default 2) until Ctrl-C, as nvidia-smi -l; redraws in place on a "
            "terminal (-lms/--loop-ms in milliseconds, --interval as nvitop and gpustat)",
        )
    else:
        parser.add_argument(
            "-l",
            "--loop",
            "--interval",
            dest="watch",
            type=interval,
            nargs="?",
            const=watch_default,
            default=watch_default,
            metavar="SECONDS",
            help=f"seconds between samples (default {watch_default:g}), as nvidia-smi -l, nvitop and gpustat "
            "--interval (-lms/--loop-ms in milliseconds)",
        )
    watch = parser._option_string_actions["--loop"]
    aliases = [flag for flag in WATCH_ALIASES if flag not in parser._option_string_actions]
    if aliases:
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
