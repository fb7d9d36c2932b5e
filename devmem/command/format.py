"""Text for a terminal: lines wrapped at word boundaries to its width, and colour only where it belongs.

A size (``22.79 GiB``) is never split from its unit and no word is ever cut. In a pipe or a file, a screen (a
table, a bar, a device's rows) is fitted to ``COLUMNS``, else to 80 columns, as on a terminal of that width: nothing
is sized from an unbounded width. Prose (a plan's arithmetic, an error) keeps each line whole there unless
``COLUMNS`` asks, so ``grep`` finds it. Colour is used only when the stream is a terminal other than ``TERM=dumb`` and
``NO_COLOR`` is unset or empty (https://no-color.org); a pipe gets plain text.
"""

from __future__ import annotations

import os
import re
import sys
import textwrap
from collections.abc import Iterable
from typing import IO

from devmem._text import printable as printable  # text from outside devmem, shown on one line

_NBSP = "\u00a0"
_NUMBER_UNIT = re.compile(r"(\d) (B|KiB|MiB|GiB|TiB|KB|MB|GB|TB|bytes|blocks)\b")
_STYLES = {"bold": "1", "green": "32", "yellow": "33", "red": "31", "dim": "2"}


#: The width of a screen written to a pipe or a file where ``COLUMNS`` does not say one.
PIPE_WIDTH = 80
#: The width of prose written to a pipe or a file where ``COLUMNS`` does not say one: each line whole (never a
#: screen's width: see :func:`prose_width`).
UNWRAPPED = 1 << 20


#: The narrowest width anything is laid out for, whatever ``COLUMNS`` says (a line wider than the screen wraps).
MIN_WIDTH = 20


def terminal_columns() -> int:
    """``shutil.get_terminal_size((80, 24)).columns`` without importing :mod:`shutil` (which imports the compression
    modules: milliseconds of every command): ``COLUMNS`` above 0, else stdout's terminal's width, else 80."""
    try:
        columns = int(os.environ["COLUMNS"])
    except (KeyError, ValueError):
        columns = 0
    if columns <= 0:
        try:
            columns = os.get_terminal_size(sys.__stdout__.fileno()).columns  # type: ignore[union-attr]
        except (AttributeError, ValueError, OSError):
            columns = 0
    return columns or 80


def terminal_width() -> int:
    """Columns to fit on a screen: ``COLUMNS``, else the terminal's width, else 80; at least :data:`MIN_WIDTH`."""
    return max(MIN_WIDTH, terminal_columns())


def columns_set() -> bool:
    """Whether ``COLUMNS`` names a width (ASCII digits, above 0)."""
    columns = os.environ.get("COLUMNS", "").strip()
    return columns.isascii() and columns.isdigit() and int(columns) > 0


def width_for(stream: IO[str] | None) -> int:
    """Columns to fit a screen for ``stream`` to: ``COLUMNS`` when set above 0, the terminal's width on a terminal,
    else :data:`PIPE_WIDTH` (a pipe or a file)."""
    if columns_set() or is_terminal(stream):
        return terminal_width()
    return PIPE_WIDTH


def prose_width(stream: IO[str] | None) -> int:
    """Columns to wrap prose for ``stream`` to: :func:`width_for`'s on a terminal or where ``COLUMNS`` is set, else
    :data:`UNWRAPPED` (a pipe or a file gets each line whole)."""
    return width_for(stream) if columns_set() or is_terminal(stream) else UNWRAPPED


def height_for(stream: IO[str] | None) -> int | None:
    """Lines a screen for ``stream`` may take: ``LINES`` when set above 0, the terminal's height on a terminal,
    else ``None`` (a pipe or a file gets every line)."""
    given = os.environ.get("LINES", "").strip()
    if given.isascii() and given.isdigit() and int(given) > 0:
        return max(2, int(given))
    if not is_terminal(stream):
        return None
    try:
        lines = os.get_terminal_size(stream.fileno()).lines  # type: ignore[union-attr]
    except (AttributeError, ValueError, OSError):  # a terminal whose size cannot be read
        lines = 0
    return max(2, lines) if lines > 0 else 24  # a terminal that says 0 lines (a new pseudo-terminal): 24


def is_terminal(stream: IO[str] | None) -> bool:
    isatty = getattr(stream, "isatty", None)
    try:
        return bool(isatty and isatty())
    except (OSError, ValueError):  # closed
        return False


def redraw_ok(stream: IO[str] | None) -> bool:
    """Cursor movement (``top`` redrawn in place): a terminal whose ``TERM`` is not ``dumb``."""
    return is_terminal(stream) and os.environ.get("TERM", "") != "dumb"


def wants_colour(stream: IO[str] | None) -> bool:
    """Colour: :func:`redraw_ok`, and ``NO_COLOR`` unset or empty (https://no-color.org)."""
    return redraw_ok(stream) and not os.environ.get("NO_COLOR", "")


class Painter:
    """Wraps text in ANSI styles, or returns it unchanged where colour is off."""

    def __init__(self, enabled: bool):
        self.enabled = enabled

    def __call__(self, text: str, style: str) -> str:
        return f"\x1b[{_STYLES[style]}m{text}\x1b[0m" if self.enabled and text else text


def without_program_path(command: str) -> str:
    """``command`` with its program named without its path (``/usr/bin/python3 serve.py`` is ``python3
    serve.py``): what a command cut to its column shows, so the cut keeps what tells processes apart."""
    program, space, rest = command.partition(" ")
    return f"{program.rsplit('/', 1)[-1] if program.startswith('/') else program}{space}{rest}"


def wrap(text: str, width: int, indent: str = "", hanging: str | None = None, *, break_long: bool = False) -> list[str]:
    """``text`` as lines of at most ``width`` columns, the first prefixed by ``indent`` and the rest by
    ``hanging`` (``indent`` by default). A single word longer than a line stays whole unless ``break_long``
    (for free text such as a command line, never for figures). A ``width`` below :data:`MIN_WIDTH` is taken as it."""
    width = max(width, MIN_WIDTH)
    glued = _NUMBER_UNIT.sub(lambda m: f"{m.group(1)}{_NBSP}{m.group(2)}", text)
    lines = textwrap.wrap(
        glued,
        width=width,
        initial_indent=indent,
        subsequent_indent=indent if hanging is None else hanging,
        break_long_words=break_long,
        break_on_hyphens=False,
    ) or [indent.rstrip()]
    return [line.replace(_NBSP, " ") for line in lines]


def key_values(rows: Iterable[tuple[str, str]], width: int, indent: str = "  ") -> list[str]:
    """``key  value`` rows with the values in one column, each wrapped under its own start."""
    rows = list(rows)
    key_width = max((len(k) for k, _ in rows), default=0)
    out = []
    for key, value in rows:
        head = f"{indent}{key:<{key_width}}  "
        out += wrap(value, width, head, " " * len(head))
    return out


def table(
    header: tuple[str, ...],
    rows: list[tuple[str, ...]],
    width: int,
    indent: str = "  ",
    right: frozenset[int] = frozenset(),
) -> list[str]:
    """Columns sized to their contents; the last column (free text) wraps under its own start to fit ``width``,
    breaking a word longer than the room it has."""
    widths = [max(len(row[i]) for row in [header, *rows]) for i in range(len(header) - 1)]
    out = []
    for row in [header, *rows]:
        padded = enumerate(zip(row, widths, strict=False))  # the last cell has no width: it wraps
        cells = [cell.rjust(w) if i in right else cell.ljust(w) for i, (cell, w) in padded]
        head = indent + "  ".join(cells) + "  "
        out += wrap(row[-1], width, head, " " * len(head), break_long=True)
    return out
