"""Sizes as people write them (``16GiB``, ``512MiB``, ``1.5GB``, ``4096``) turned into int bytes."""

from __future__ import annotations

import re

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
_SIZE = re.compile(r"^\s*([0-9]+(?:\.[0-9]*)?|\.[0-9]+)\s*([a-z]*)\s*$", re.IGNORECASE)


def parse_size(text: str) -> int:
    """Bytes from a size: a plain byte count, or a number with ``B``, ``KB``..``TB`` (powers of 10) or
    ``KiB``..``TiB`` (powers of 2), case-insensitive. Fractions of a byte are dropped.

    >>> parse_size("1.5GB"), parse_size("16GiB"), parse_size("4096")
    (1500000000, 17179869184, 4096)

    Raises :class:`ValueError` naming the text and what is accepted.
    """
    from decimal import Decimal  # only here: importing decimal costs start-up time

    match = _SIZE.match(text) if isinstance(text, str) else None
    unit = match.group(2).lower() if match else None
    if match is None or unit not in _UNITS:
        raise ValueError(
            f"{text!r} is not a size: write a byte count (4096) or a number with a unit: "
            "B, KB, MB, GB, TB (powers of 10) or KiB, MiB, GiB, TiB (powers of 2), e.g. 16GiB or 1.5GB"
        )
    return int(Decimal(match.group(1)) * _UNITS[unit])


def format_size(nbytes: int | float) -> str:
    """Bytes for people: GiB from 0.1 GiB up, MiB from 1 MiB up, else bytes (``'0.73 GiB'``, ``'2.25 MiB'``)."""
    if abs(nbytes) >= _UNITS["gib"] // 10:
        return f"{nbytes / _UNITS['gib']:.2f} GiB"
    if abs(nbytes) >= _UNITS["mib"]:
        return f"{nbytes / _UNITS['mib']:.2f} MiB"
    return f"{nbytes} B"
