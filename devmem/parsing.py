"""Whole numbers read from files and environment variables: ASCII digits only, of a bounded length.

``str.isdigit()`` and ``int()`` accept far more than a kernel or a runtime writes: full-width and other Unicode
digits (``"１"``), superscripts that ``int()`` then refuses (``"²"``), underscores (``"1_0"``) and numbers of
thousands of digits. Every integer devmem reads from text goes through :func:`parse_int` (``None`` for
anything else) or :func:`require_int` (a :class:`~devmem.DevmemError` naming where the text came from).
"""

from __future__ import annotations

import re

from devmem.types import DevmemError

#: The most digits a reading may have: 2**64 has 20, so every 64-bit counter fits.
MAX_DIGITS = 20

_INT = re.compile(r"[+-]?[0-9]+", re.ASCII)


def parse_int(text: object, *, signed: bool = False, max_digits: int = MAX_DIGITS) -> int | None:
    """The whole number ``text`` spells in ASCII digits (surrounding whitespace allowed, a sign only where
    ``signed``), or ``None`` for anything else, including more than ``max_digits`` digits."""
    if not isinstance(text, str):
        return None
    text = text.strip(" \t\n\r\f\v")
    if not _INT.fullmatch(text) or (not signed and text[0] in "+-"):
        return None
    if len(text.lstrip("+-")) > max_digits:
        return None
    return int(text)


def shown(value: object) -> str:
    """``repr(value)`` for an error message, cut short; a number too long to print is described instead."""
    try:
        text = repr(value)
    except ValueError:  # an int past Python's limit on digits converted to text
        return "a number too long to print"
    return text if len(text) <= 80 else f"{text[:60]}... ({len(text)} characters)"


def require_int(text: object, source: str, *, signed: bool = False, max_digits: int = MAX_DIGITS) -> int:
    """:func:`parse_int`, raising :class:`~devmem.DevmemError` that names ``source`` (a file or variable) and
    the value when ``text`` is not a whole number."""
    value = parse_int(text, signed=signed, max_digits=max_digits)
    if value is None:
        sign = "an optional sign and " if signed else ""
        raise DevmemError(
            f"{source}: {shown(text)} is not a whole number: expected {sign}1 to {max_digits} ASCII digits"
        )
    return value
