"""``devmem top``: one line per device, one per process, the static facts once, sampled until Ctrl-C (its screen is
:mod:`devmem.command.screens`'s, its loop :mod:`devmem.command.watch`'s)."""

from __future__ import annotations

import argparse

from devmem.command.common import add_command
from devmem.command.flags import interval
from devmem.command.info import add_info_flags


def add_parser(sub: argparse._SubParsersAction) -> None:
    """``devmem top``: ``devmem info``'s flags, sampled every 2 s by default, compact."""
    top = add_command(
        sub,
        "top",
        "memory and processes, one line each, every SECONDS (default 2) until Ctrl-C",
        "One line per device (used, free and total, a bar and the share in use) and one per process on it "
        "(PID, user, device memory, the command cut to the column; whole with -v), sampled every SECONDS. "
        "What does not change between samples (integrated or not, paging, where each figure comes from, "
        "driver notes) is written once, above. Redrawn in place on a terminal (not under TERM=dumb); "
        "through a pipe the samples follow each other (counted on stderr where it is a terminal). Ctrl-C, "
        "SIGTERM or q on a terminal stops it with exit 0, and so does a reader going away. `devmem info` shows "
        "one device per block with every detail.",
        "  devmem top                            # every 2 s\n"
        "  devmem top 1                          # every second, as watch -n 1 or nvidia-smi -l 1\n"
        "  devmem top -v --device 0              # whole command lines\n"
        "  devmem top --json > samples.jsonl     # one JSON line per sample",
    )
    top.add_argument(
        "interval",
        nargs="?",
        type=interval,
        default=None,
        metavar="SECONDS",
        help="seconds between samples (the same as --interval)",
    )
    add_info_flags(top, watch_default=2.0)
    top.set_defaults(compact=True)
