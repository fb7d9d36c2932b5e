"""``devmem plugins``: every registered platform, detected or not, and why."""

from __future__ import annotations

import argparse
import sys

from devmem.command.common import add_command, emit_json, out, yes
from devmem.resolution.plugins import platform_candidates


def cmd_plugins(args: argparse.Namespace) -> int:
    cands = platform_candidates()
    if args.json:
        emit_json([c.as_dict() for c in cands])
        return 0
    from devmem.command.format import printable, table, width_for, wrap

    header = ("", "name", "priority", "distribution", "version", "detected", "reason")
    rows: list[tuple[str, ...]] = [
        (
            "*" if c.chosen else "",
            printable(c.name),
            str(c.priority),
            printable(c.distribution),
            printable(c.version),
            yes(c.detected),
            printable("; ".join(filter(None, (c.reason, c.note, f"to use it: {c.action}" if c.action else "")))),
        )
        for c in cands
    ]
    width = width_for(sys.stdout)
    fixed = sum(max(len(row[i]) for row in [header, *rows]) + 2 for i in range(len(header) - 1))
    if width - fixed >= 40:
        out.print(*table(header, rows, width, indent=""))
        return 0
    # a narrow terminal: each reason on its own lines under its row, across the whole width
    head, *short = table(header[:-1] + ("",), [row[:-1] + ("",) for row in rows], width, indent="")
    lines = [head.rstrip()]
    for line, row in zip(short, rows, strict=True):
        lines += [line.rstrip(), *wrap(row[-1], width, "      ", "      ")]
    out.print(*lines)
    return 0


def add_parser(sub: argparse._SubParsersAction) -> None:
    """``devmem plugins`` and its flags."""
    plugins = add_command(
        sub,
        "plugins",
        "every registered platform, detected or not, and why",
        "Every platform the installed plugins offer, its priority, whether it was detected here and why, "
        "and which one `devmem info` uses (*). DEVMEM_PLATFORM overrides the choice.",
        "  devmem plugins\n  devmem plugins --json\n  DEVMEM_LOAD_PLUGINS=NAME devmem plugins",
    )
    plugins.add_argument("--json", action="store_true", help="machine-readable output")
    plugins.set_defaults(handler=cmd_plugins)
