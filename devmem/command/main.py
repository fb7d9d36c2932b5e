"""The ``devmem`` command: what this machine really has, and why an engine's KV cache is the size it is.

This module builds the parser from each command's module (:mod:`.info`, :mod:`.top`, :mod:`.plugins`,
:mod:`.doctor`, :mod:`.plan`, :mod:`.fit`) and dispatches to the handler the command set.
Exit codes: 0 success (``doctor``: nothing to fix), 1 a :class:`~devmem.DevmemError` (one line, no traceback;
with ``--json`` also an object of kind ``error`` on stdout), a plan that does not fit, or ``doctor`` warnings, 2 a
usage error, 130 Ctrl-C; a reader that goes away changes none of them.
Human output scales its units (B..TiB) and wraps to the terminal's width (a pipe gets whole lines); ``--json``
output shows exact bytes.
"""

from __future__ import annotations

import argparse
import logging
import re
import sys
from collections.abc import Sequence

from devmem import __version__
from devmem.command import doctor, exporter, fit, info, plan, plugins, top
from devmem.command.common import ENVIRONMENT, EXIT_CODES, HelpFormatter, Parser, emit_json
from devmem.command.output import OutputError, StderrFormatter, error_line
from devmem.types import DevmemError

#: The commands, in the order ``devmem --help`` lists them.
COMMANDS = (info, top, plugins, doctor, plan, fit, exporter)


def build_parser() -> argparse.ArgumentParser:
    parser = Parser(
        prog="devmem",
        description="Show what this machine's accelerators really have, and size KV caches from it. "
        "Without a command, `devmem` runs `devmem info` (and takes its options).",
        epilog=f"{ENVIRONMENT}\n\n{EXIT_CODES}\n\n`devmem COMMAND --help` shows each command's examples.",
        formatter_class=HelpFormatter,
    )
    parser.add_argument("-V", "--version", action="version", version=f"devmem {__version__}")
    parser.add_argument("-v", "--verbose", action="store_true", help="log debug details of platform resolution")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for command in COMMANDS:
        command.add_parser(sub)
    return parser


def _with_command(parser: argparse.ArgumentParser, argv: list[str]) -> list[str]:
    """``argv`` with ``info`` in front where it names no command: ``devmem --json`` is ``devmem info --json``.

    Left as it is: a command anywhere, ``--help``/``--version``, and a first word that is neither a command
    nor a value (argparse then names the valid commands); a value is a number or a list of them (``-i 0,2``)."""
    commands = set(parser._subparsers._group_actions[0].choices)  # type: ignore[union-attr, arg-type]
    if any(a in commands for a in argv) or any(a in ("-h", "--help", "-V", "--version") for a in argv):
        return argv
    words = [a for a in argv if not a.startswith("-")]
    if words and not re.fullmatch(r"[0-9][0-9.,]*", words[0]):
        return argv
    return ["info", *argv]


#: Ctrl-C outside ``top``'s and ``--watch``'s sampling (those stop with 0): no traceback, the shell's 128 + SIGINT.
EXIT_INTERRUPTED = 130


def main(argv: Sequence[str] | None = None) -> int:
    try:
        return _run(argv)
    except KeyboardInterrupt:
        return EXIT_INTERRUPTED


def _run(argv: Sequence[str] | None) -> int:
    parser = build_parser()
    try:
        args = parser.parse_args(_with_command(parser, list(sys.argv[1:] if argv is None else argv)))
    except DevmemError as exc:  # --help or --version could not be written
        error_line(f"devmem: error: {exc}")
        return 1
    logging.basicConfig(level=logging.DEBUG if args.verbose else logging.WARNING, format="%(message)s")
    for handler in logging.getLogger().handlers:
        handler.setFormatter(StderrFormatter("%(message)s"))
    if getattr(args, "interval", None) is not None:
        args.watch = args.interval
    try:
        return args.handler(args)
    except DevmemError as exc:
        error_line(f"devmem: error: {exc}")
        if getattr(args, "json", False) and not isinstance(exc, OutputError):
            emit_json({"kind": "error", "error": str(exc)})  # a program reading stdout gets a document too
        return 1
