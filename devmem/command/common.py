"""What every ``devmem`` command shares: the one stdout writer, JSON and wrapped text for people, and the
sub-command parser whose help fits the terminal (description, examples, environment, exit codes)."""

from __future__ import annotations

import argparse
import json
import re
import sys
from collections.abc import Iterable
from typing import Any, NoReturn

from devmem.command.output import Output, error_line

#: Every command's stdout: the verdict's exit code survives a reader that went away.
out = Output()


def emit_json(obj: object) -> None:
    out.print(json.dumps(obj, indent=2, sort_keys=False))


def print_wrapped(*lines: str) -> None:
    """Lines for people, each wrapped to the terminal's width under its own indentation (plus two); a pipe or a
    file gets them whole."""
    from devmem.command.format import prose_width, wrap

    width = prose_width(sys.stdout)
    wrapped = []
    for line in "\n".join(lines).splitlines():
        indent = line[: len(line) - len(line.lstrip())]
        wrapped += wrap(line.lstrip(), width, indent, indent + "  ")
    out.print(*wrapped)


def yes(flag: bool) -> str:
    return "yes" if flag else "no"


ENVIRONMENT = """environment:
  DEVMEM_PLATFORM=NAME       use this platform (by name; `devmem plugins` lists them)
  DEVMEM_LOAD_PLUGINS=A,B    load only these plugins' entry points (cpu is always loaded)
  CUDA_VISIBLE_DEVICES, CUDA_DEVICE_ORDER, HIP_VISIBLE_DEVICES, ROCR_VISIBLE_DEVICES
                             which devices a process sees, and their order, as the device runtime applies them
  DEVMEM_LEDGER_DIR=DIR      the reservation ledger's directory (default /dev/shm/devmem)
  NO_COLOR=1                 no colour (colour is used only on a terminal, not under TERM=dumb)
  COLUMNS=N                  wrap human output to N columns (default: the terminal's width; to a pipe
                             or a file, screens are 80 columns and prose is not wrapped)"""

EXIT_CODES = """exit codes:
  0  success
  1  an error devmem explains in one line (a bad device index, a plan that does not fit)
  2  a usage error (an unknown flag, a value that is not a size)
  130  interrupted (Ctrl-C); top and --watch stop with 0
with --json, an error of exit 1 is also a JSON object on stdout: {"kind": "error", "error": "..."}"""


class HelpFormatter(argparse.RawDescriptionHelpFormatter):
    """Descriptions and epilogs fitted to the terminal: a paragraph is wrapped, an indented line (an example, a
    table row) keeps its start and wraps under its text column. Its width is the command's own
    (:func:`devmem.command.format.terminal_width`, at least 20 columns), not argparse's ``COLUMNS - 2``, which is
    0 or less at ``COLUMNS=1`` or ``2`` and made every command raise."""

    def __init__(
        self, prog: str, indent_increment: int = 2, max_help_position: int = 24, width: int | None = None, **kw: Any
    ):
        if width is None:  # read without importing shutil
            from devmem.command.format import terminal_width

            width = terminal_width() - 2
        super().__init__(prog, indent_increment, max_help_position, width, **kw)

    def _fill_text(self, text: str, width: int, indent: str) -> str:
        import re

        from devmem.command.format import wrap

        lines: list[str] = []
        for line in text.splitlines():
            column = re.match(r"\s+\S+(?: \S+)*\s{2,}", line) if line[:1].isspace() else None
            start = line[: len(line) - len(line.lstrip())]
            hanging = " " * len(column.group(0)) if column else start + ("    " if len(start) <= 2 else "")
            if width - len(hanging) < 20:  # a column too far right for the terminal: a short indent instead
                start = start[:2]
                hanging = start + "    "
            lines += wrap(line.strip(), width, indent + start, indent + hanging, break_long=True) if line else [""]
        return "\n".join(lines)

    def _format_usage(self, usage: Any, actions: Any, groups: Any, prefix: Any) -> str:
        """argparse's usage, or where a line of it is wider than the terminal (argparse keeps each ``[option]``
        whole, indented under the program), the options wrapped under a short indent, each kept whole."""
        from devmem.command.format import wrap

        text = super()._format_usage(usage, actions, groups, prefix)
        if all(len(line) <= self._width for line in text.splitlines()):
            return text
        depth, glued = 0, []
        for char in " ".join(text.split()):
            depth += (char in "[(") - (char in "])")
            glued.append("\u00a0" if char == " " and depth > 0 else char)
        return "\n".join(wrap("".join(glued), self._width, "", "    ")) + "\n\n"

    def _format_action_invocation(self, action: argparse.Action) -> str:
        """``-n, --count N``: the value named once, after every spelling (as Python 3.13 writes it)."""
        if not action.option_strings or action.nargs == 0:
            return super()._format_action_invocation(action)
        value = self._format_args(action, self._get_default_metavar_for_optional(action))
        return f"{', '.join(action.option_strings)} {value}"


class Parser(argparse.ArgumentParser):
    """A usage error is its problem in one line (two on a narrow terminal) that points to ``--help``, not the
    usage block first (exit 2)."""

    def parse_args(self, args: Any = None, namespace: Any = None) -> argparse.Namespace:  # type: ignore[override]
        """As argparse's, with a flag the command does not take answered by the nearest ones it does."""
        parsed, extras = self.parse_known_args(args, namespace)
        if extras:
            command = self._commands().get(getattr(parsed, "command", None) or "")
            flags = (command or self)._option_string_actions
            message = f"unrecognized arguments: {' '.join(extras)}"
            (command or self).error(message + _did_you_mean(next((a for a in extras if a.startswith("-")), ""), flags))
        return parsed

    def parse_known_args(self, args: Any = None, namespace: Any = None) -> tuple[argparse.Namespace, list[str]]:  # type: ignore[override]
        self._given = list(sys.argv[1:] if args is None else args)  # for error(): the flags a required one hides
        return super().parse_known_args(args, namespace)

    def error(self, message: str) -> NoReturn:
        choice = re.search(r"invalid choice: '([^']*)'", message)
        if choice and "COMMAND" in message:
            message += _did_you_mean(choice.group(1), self._commands())
        elif message.startswith("the following arguments are required"):  # argparse says so before a mistyped flag
            flags = self._option_string_actions
            typed = (a.partition("=")[0] for a in getattr(self, "_given", ()) if a.startswith("--"))
            message += _did_you_mean(next((a for a in typed if a not in flags), ""), flags)
        error_line(f"{self.prog}: error: {message} (see `{self.prog} --help`)")
        sys.exit(2)

    def _commands(self) -> dict[str, argparse.ArgumentParser]:
        """The sub-commands' parsers by name (none for a sub-command's own parser)."""
        actions = self._subparsers._group_actions if self._subparsers is not None else []
        return next((dict(a.choices) for a in actions if isinstance(a.choices, dict)), {})

    def _print_message(self, message: str, file: Any = None) -> None:
        """``--help`` and ``--version`` through the CLI's stdout writer: a full disk is an error, not exit 0."""
        if message and (file is None or file is sys.stdout):
            out.write(message)
        elif message:
            error_line(message.rstrip("\n"))


def _did_you_mean(word: str, known: Iterable[str]) -> str:
    """``"; did you mean --json?"`` for the known words nearest ``word`` (as git and pip suggest); nothing for none."""
    import difflib

    near = difflib.get_close_matches(word, list(known), n=2, cutoff=0.6) if word else []
    return f"; did you mean {' or '.join(near)}?" if near else ""


def add_command(
    sub: argparse._SubParsersAction,
    name: str,
    summary: str,
    description: str,
    examples: str,
    exit_codes: str = EXIT_CODES,
    **kwargs: Any,
) -> argparse.ArgumentParser:
    """A sub-command whose help has a description, examples, the environment variables and the exit codes."""
    parser = sub.add_parser(
        name,
        help=summary,
        description=description,
        parents=[_common()],
        epilog=f"examples:\n{examples}\n\n{ENVIRONMENT}\n\n{exit_codes}",
        formatter_class=HelpFormatter,
        **kwargs,
    )
    parser.set_defaults(parser=parser)
    return parser


def _common() -> argparse.ArgumentParser:
    """``-v`` after a sub-command too (``devmem info -v``); SUPPRESS keeps ``devmem -v info`` working."""
    common = argparse.ArgumentParser(add_help=False, formatter_class=HelpFormatter)
    common.add_argument(
        "-v",
        "--verbose",
        action="store_true",
        default=argparse.SUPPRESS,
        help="log debug details of platform resolution",
    )
    return common
