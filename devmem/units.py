"""Sizes as people write them (``16GiB``, ``512MiB``, ``1.5GB``, ``80G``, ``4096``) turned into int bytes, and
bytes turned back into sizes people read (:func:`format_size`)."""

from __future__ import annotations

import math
import numbers
import re

from devmem._text import shown
from devmem.errors import InvalidValueError

_UNITS = {
    "": 1,
    "b": 1,
    "kb": 10**3,
    "mb": 10**6,
    "gb": 10**9,
    "tb": 10**12,
    "kib": 1 << 10,
    "mib": 1 << 20,
    "gib": 1 << 30,
    "tib": 1 << 40,
}
#: vLLM's one-letter suffixes (``human_readable_int`` in vLLM's engine arguments): lower case is a power of
#: 10, upper case a power of 2, so ``80G`` is 80 GiB and ``80g`` is 80 GB, there and here.
_LETTERS = {"k": "KB", "m": "MB", "g": "GB", "t": "TB", "K": "KiB", "M": "MiB", "G": "GiB", "T": "TiB"}
_TOO_LARGE = 1 << 64
#: ASCII only: with Unicode case folding, the Kelvin sign (U+212A) would read as ``K`` and a dotless ``ı`` as ``i``.
#: Matched on the text without its surrounding whitespace: one run of spaces to try, not two side by side (which
#: took time quadratic in their length to refuse).
_SIZE = re.compile(r"([0-9]+(?:\.[0-9]*)?|\.[0-9]+)\s*([a-z]*)", re.IGNORECASE | re.ASCII)
_SPACE = " \t\n\r\f\v"


def read_size(text: str) -> tuple[int, str]:
    """Bytes from a size, with how it was read for people (``(85899345920, '80 GiB = 85899345920 bytes')``).

    Accepted: a plain byte count; a number with ``B``, ``KB``..``TB`` (powers of 10) or ``KiB``..``TiB``
    (powers of 2), case-insensitive; or vLLM's one-letter ``k m g t`` (powers of 10) and ``K M G T`` (powers
    of 2). Fractions of a byte are dropped. Raises :class:`ValueError` naming the text and what is accepted,
    also for a size of 2**64 bytes (16 EiB) or more.
    """
    match = _SIZE.fullmatch(text.strip(_SPACE)) if isinstance(text, str) else None
    suffix = match.group(2) if match else ""
    unit = _LETTERS.get(suffix, suffix).lower() if match else None
    if match is None or unit not in _UNITS:
        raise InvalidValueError(
            f"{shown(text)} is not a size: give bytes or a unit (KB..TB; KiB, MiB, GiB, TiB; vLLM's 80G = 80 GiB)"
        )
    nbytes = _whole_bytes(match.group(1), _UNITS[unit])
    if nbytes >= _TOO_LARGE:
        raise InvalidValueError(f"{shown(text)} is larger than any memory: a size must be below 2**64 bytes (16 EiB)")
    if not unit:
        return nbytes, f"{nbytes} bytes"
    spelled = _LETTERS.get(suffix) or next(
        k for k in ("B", "KB", "MB", "GB", "TB", "KiB", "MiB", "GiB", "TiB") if k.lower() == unit
    )
    return nbytes, f"{match.group(1)} {spelled} = {nbytes} bytes"


def _whole_bytes(number: str, unit: int) -> int:
    """``number`` (ASCII digits with an optional point) times ``unit``, fractions of a byte dropped, exactly; at least
    :data:`_TOO_LARGE` for one that is (leading zeros and trailing fraction zeros are no size)."""
    whole, _, fraction = number.partition(".")
    whole, fraction = whole.lstrip("0"), fraction.rstrip("0")
    if len(whole) > 20:  # 10**20 bytes is past 2**64 already, in any unit
        return _TOO_LARGE
    fraction = fraction[:40]  # a unit is below 10**13: digits past the 40th change no whole byte
    return int(whole or "0") * unit + int(fraction or "0") * unit // 10 ** len(fraction)


def parse_size(text: str) -> int:
    """Bytes from a size (see :func:`read_size` for the spellings accepted).

    >>> parse_size("1.5GB"), parse_size("16GiB"), parse_size("80G"), parse_size("4096")
    (1500000000, 17179869184, 85899345920, 4096)
    """
    return read_size(text)[0]


def format_share(share: float) -> str:
    """A utilization (a share of a device) as a person writes it: at most four significant digits (``0.9``,
    ``0.02124`` for 0.021240179382545236); the exact figure belongs in JSON and in the arithmetic shown."""
    return f"{share:.4g}"


#: The units :func:`format_size` scales through, largest first.
_SCALE = (("EiB", 1 << 60), ("PiB", 1 << 50), ("TiB", 1 << 40), ("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10))


def format_size(nbytes: int | float) -> str:
    """Bytes for people in the largest binary unit the size reaches (``'512 B'``, ``'2.25 MiB'``,
    ``'125.50 GiB'``, ``'1.50 TiB'``), up to EiB and in exponent form beyond 1024 EiB; a negative size with a
    leading minus sign; exact bytes belong in JSON."""
    if isinstance(nbytes, bool) or not isinstance(nbytes, numbers.Real):
        from decimal import Decimal

        if not isinstance(nbytes, Decimal):  # None, text, a bool: no size, not a traceback from a comparison
            raise InvalidValueError(
                f"format_size takes a number of bytes (int or float), got {shown(nbytes)} of type "
                f"{type(nbytes).__name__}"
            )
    if not isinstance(nbytes, int):  # numpy figures, Fractions, Decimals: as the float they print as
        nbytes = float(nbytes)
    if isinstance(nbytes, float) and not math.isfinite(nbytes):
        return f"{nbytes} B"
    sign, size = ("-", -nbytes) if nbytes < 0 else ("", nbytes)
    if size >= 1 << 70:  # past what a float quotient holds, or at all
        from decimal import Decimal

        return f"{sign}{Decimal(size) / (1 << 60):.3e} EiB"
    for name, scale in _SCALE:
        if size >= scale:
            return f"{sign}{size / scale:.2f} {name}"
    return f"{sign}{int(size)} B"
