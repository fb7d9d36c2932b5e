"""The ``devmem`` command: what this machine really has, and why an engine's KV cache is the size it is.

This module builds the parser from the module of the command being run (:mod:`.info`, :mod:`.top`,
:mod:`.plugins`, :mod:`.doctor`, :mod:`.plan`, :mod:`.fit`, :mod:`.exporter`; every one of them for ``--help``) and
dispatches to the handler the command set: a command imports only what it needs.
Exit codes: 0 success (``doctor``: nothing to fix), 1 a :class:`~devmem.DevmemError` (one line, no traceback;
with ``--json`` also an object of kind ``error`` on stdout), a plan that does not fit, or ``doctor`` warnings, 2 a
usage error, 130 Ctrl-C; a reader that goes away changes none of them.
Human output scales its units (B..TiB) and wraps to the terminal's width (in a pipe, screens to ``COLUMNS`` or 80
columns, prose whole); ``--json`` output shows exact bytes.
"""

from __future__ import annotations

import argparse
import importlib
import logging
import re
import sys
from collections.abc import Sequence

from devmem import __version__
from devmem.command.common import ENVIRONMENT, EXIT_CODES, HelpFormatter, Parser, emit_json
from devmem.command.output import OutputError, StderrFormatter, error_line
from devmem.types import DevmemError

#: The commands, in the order ``devmem --help`` lists them: each is the module of its name in :mod:`devmem.command`.
COMMANDS = ("info", "top", "plugins", "doctor", "plan", "fit", "exporter")
_HELP = ("-h", "--help")


def build_parser(argv: Sequence[str] | None = None) -> argparse.ArgumentParser:
    """The command's parser. With ``argv``, only the commands it names are built in full, each importing its module
    (every command where it asks for ``--help``); the others are named, so argparse still lists them in a usage
    error, but import nothing: ``devmem info`` loads neither the exporter's HTTP stack nor the planner's models."""
    wanted = set(COMMANDS) if argv is None or any(a in _HELP for a in argv) else set(argv)
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
    for name in COMMANDS:
        if name in wanted:
            importlib.import_module(f"devmem.command.{name}").add_parser(sub)
        else:
            sub.add_parser(name, add_help=False)
    return parser


def _with_command(argv: list[str]) -> list[str]:
    """``argv`` with ``info`` in front where it names no command: ``devmem --json`` is ``devmem info --json``.

    Left as it is: a command anywhere, ``--help``/``--version``, and a first word that is neither a command
    nor a value (argparse then names the valid commands); a value is a number or a list of them (``-i 0,2``)."""
    if any(a in COMMANDS for a in argv) or any(a in (*_HELP, "-V", "--version") for a in argv):
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
    given = _with_command(list(sys.argv[1:] if argv is None else argv))
    parser = build_parser(given)
    try:
        args = parser.parse_args(given)
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
