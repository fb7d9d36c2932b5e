"""Numbers and names read from files and environment variables: ASCII only, of a bounded length, in a range.

``str.isdigit()``, ``int()`` and ``float()`` accept far more than a kernel, a runtime or a person writes:
full-width and other Unicode digits (``"１"``), superscripts that ``int()`` then refuses (``"²"``), underscores
(``"1_0"``), ``nan``/``inf``, and numbers of thousands of digits or past what a timeout can hold (``1e308``).

- Every integer devmem reads from text goes through :func:`parse_int` (``None`` for anything else) or
  :func:`require_int` (a :class:`~devmem.DevmemError` naming where the text came from).
- Every environment variable devmem (or a backend) reads goes through one of :func:`env_text` (text of a
  bounded length), :func:`env_seconds` (a finite decimal number of seconds in a range) or :func:`env_choice`
  (one of a few words, else the default with one log line). A value out of its range is a
  :class:`~devmem.DevmemError` (of the class the caller names) that names the variable, the value and what is
  allowed; README.md and docs/containers.md list the variables and their ranges.
- Text from outside devmem (a command line, a device's name) is shown through :func:`printable`; the command's
  sinks (``devmem.command.output.for_terminal``) apply it to every line they write, wherever the text came from.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping

from devmem.errors import DevmemError

#: The most digits a reading may have: 2**64 has 20, so every 64-bit counter fits.
MAX_DIGITS = 20

_INT = re.compile(r"[+-]?[0-9]+", re.ASCII)
#: Control characters, bidirectional overrides, and lone surrogates (JSON's ``"\\ud800"``: no encoding can write one).
_UNPRINTABLE = re.compile("[\x00-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069\ud800-\udfff]")


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
    """``repr(value)`` for an error message, cut short; a number too long to print, or a value whose ``repr``
    fails (a plugin's object), is described instead."""
    try:
        text = repr(value)
    except Exception as exc:  # an int past Python's limit on digits converted to text, or a broken __repr__
        if isinstance(value, int):
            return "a number too long to print"
        return f"a {type(value).__name__} whose repr() raised {type(exc).__name__}"
    return text if len(text) <= 80 else f"{text[:60]}... ({len(text)} characters)"


#: The most characters of an exception's text an error message repeats.
MAX_EXCEPTION_TEXT = 1000


def described(exc: BaseException) -> str:
    """``<type>: <text>`` of an exception a plugin raised, for a message: its text cut to
    :data:`MAX_EXCEPTION_TEXT` characters, and described where ``str()`` of it fails."""
    try:
        text = str(exc)
    except Exception as failure:  # a plugin's exception with a broken __str__
        text = f"(its text could not be read: {type(failure).__name__})"
    if len(text) > MAX_EXCEPTION_TEXT:
        text = f"{text[:MAX_EXCEPTION_TEXT]}... ({len(text)} characters)"
    return f"{type(exc).__name__}: {text}"


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


# ---- environment variables ----------------------------------------------------------------------------------
#: The longest value a variable may hold (a path, a list of names or devices): longer is an error.
MAX_TEXT = 4096

#: A decimal number as people write one: ASCII digits, an optional fraction and exponent, no sign but ``+``.
_DECIMAL = re.compile(r"\+?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)(?:[eE][+-]?[0-9]{1,4})?", re.ASCII)
_MAX_DECIMAL = 64


def _environ(environ: Mapping[str, str] | None) -> Mapping[str, str]:
    return os.environ if environ is None else environ


def env_text(
    name: str,
    environ: Mapping[str, str] | None = None,
    *,
    max_length: int = MAX_TEXT,
    error: type[DevmemError] = DevmemError,
) -> str:
    """Variable ``name``'s value without surrounding whitespace (``""`` where unset or empty); ``error`` naming
    the variable where it holds more than ``max_length`` characters or a NUL."""
    raw = _environ(environ).get(name)
    if not isinstance(raw, str):
        return ""
    text = raw.strip()
    if len(text) > max_length:
        raise error(f"{name}={shown(raw)} holds more than {max_length} characters: give fewer, or unset it")
    if "\0" in text:
        raise error(f"{name}={shown(raw)} holds a NUL character, which no value may hold: fix it, or unset it")
    return text


def parse_decimal(text: object) -> float | None:
    """The finite, non-negative number ``text`` spells in ASCII (``"10"``, ``"0.5"``, ``"2e3"``; surrounding
    whitespace allowed), or ``None`` for anything else: ``nan``, ``inf``, a sign other than ``+``, Unicode
    digits, underscores, more than 64 characters."""
    if not isinstance(text, str):
        return None
    text = text.strip(" \t\n\r\f\v")
    if len(text) > _MAX_DECIMAL or not _DECIMAL.fullmatch(text):
        return None
    value = float(text)
    return value if value != float("inf") else None


def env_seconds(
    name: str,
    *,
    default: float,
    high: float,
    environ: Mapping[str, str] | None = None,
    error: type[DevmemError] = DevmemError,
) -> float:
    """Variable ``name`` as seconds: ``default`` where unset or empty, else a decimal above 0 and at most
    ``high``; ``error`` naming the variable, its value and that range otherwise."""
    raw = env_text(name, environ, max_length=_MAX_DECIMAL * 2, error=error)
    if not raw:
        return default
    seconds = parse_decimal(raw)
    if seconds is None or not 0 < seconds <= high:
        raise error(
            f"{name}={shown(raw)} is not a positive number of seconds up to {high:g}: give a decimal number "
            f"above 0 and at most {high:g} (default {default:g}), or unset it"
        )
    return seconds


def env_choice(name: str, choices: tuple[str, ...], default: str, environ: Mapping[str, str] | None = None) -> str:
    """Variable ``name`` as one of ``choices`` (upper case, compared without case or surrounding whitespace):
    ``default`` where unset or empty, and where it holds anything else, with one log line naming the variable,
    the value and the choices (as the runtime that defines the variable falls back itself)."""
    raw = _environ(environ).get(name)
    text = raw.strip().upper() if isinstance(raw, str) else ""
    if not text:
        return default
    if text in choices:
        return text
    import logging  # only for a value that is wrong: the common path stays clear of logging's import

    logging.getLogger("devmem").warning(
        "devmem: %s=%s is not one of %s; taken as %s", name, shown(raw), ", ".join(choices), default
    )
    return default


def printable(text: str) -> str:
    """``text`` from outside devmem (a process's command line, a device's name) safe to show on one line: each
    control character (an escape sequence's ESC, a newline, BEL) and each bidirectional override shown as its
    escape (``\\x1b``), so that no process can move the cursor, retitle the terminal or break a row; and each lone
    surrogate too (``\\ud800``), which would stop a write to a terminal, a log or a file in any encoding."""
    return _UNPRINTABLE.sub(lambda m: repr(m.group())[1:-1], text)
