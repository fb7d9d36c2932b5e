"""The one checked boundary where a vendor's memory figures enter devmem, the same rule for every backend.

- :func:`whole_bytes`: a figure must be a whole number of bytes: an integer (not a ``bool``), or a float with no
  fraction, of less than 2**64 bytes either way; anything else is an error naming the call and the value (a broken
  or mismatched vendor library), never a guess. A device's free and total enter through
  :func:`devmem.platform.checked_memory`, beside the :class:`~devmem.platform.DeviceMemory` it makes: a negative
  total is an error (e.g. a driver reservation larger than the total it came with); a negative free is taken as 0,
  and a free above total as total, each with a note saying what was reported.

The other figures a vendor hands over pass here too, each into ``None`` where it is not what it should be, so
that the caller gives ``None`` with a reason (or skips one entry) instead of a traceback or a wrong number:

- :func:`process_bytes`: a per-process figure: a whole number of bytes from 0 to below 2**63 (``True``, ``-1``,
  NVML's "not available" sentinel ``2**64 - 1``, ``nan`` and text are unknown);
- :func:`process_id`: a process id: a whole number from 0 to below 2**32;
- :func:`process_list`: a list of processes: any iterable but text, bytes or a mapping, read in full (``None``
  and other non-iterables, or one that fails while read, are no list);
- :func:`vendor_text`: what a vendor program printed: text, or bytes read as UTF-8 with anything else replaced.
"""

from __future__ import annotations

import math
import operator
from collections.abc import Iterable, Mapping
from typing import Any

from devmem._text import shown
from devmem.errors import DevmemError

#: No device figure reaches this many bytes (16 EiB), either way.
FIGURE_LIMIT = 1 << 64


def _integer(value: Any) -> int | None:
    """``value`` as an ``int`` where it is an integer (a numpy one too, not a ``bool``) or a float with no
    fraction, else ``None``."""
    if isinstance(value, bool):
        return None
    if isinstance(value, float):
        return int(value) if math.isfinite(value) and value.is_integer() else None
    try:
        return operator.index(value)
    except TypeError:
        return None


def whole_bytes(value: Any, what: str) -> int:
    """``value`` as ``int`` bytes; raises :class:`DevmemError` naming ``what`` where it is not a whole number of
    less than 2**64 bytes either way."""
    number = _integer(value)
    if number is None or not -FIGURE_LIMIT < number < FIGURE_LIMIT:
        raise DevmemError(
            f"{what} is {shown(value)}, not a whole number of bytes below 2**64: the vendor library answered "
            "something devmem cannot use; check that it matches the installed driver"
        )
    return number


#: Per-process figures at or above this are sentinels seen through a signed type, not bytes.
PROCESS_BYTES_LIMIT = 1 << 63


def process_bytes(value: Any) -> int | None:
    """A per-process figure as ``int`` bytes, or ``None`` where it is none: anything but an integer (a ``bool``
    is not one; a numpy integer is) or a float with no fraction, or a value outside ``0 <= value < 2**63``."""
    number = _integer(value)
    return number if number is not None and 0 <= number < PROCESS_BYTES_LIMIT else None


#: Process ids are below this (Linux allows at most 2**22; Windows' are 32-bit).
PID_LIMIT = 1 << 32


def process_id(value: Any) -> int | None:
    """A process id a vendor lists, as ``int``, or ``None`` where it is none: anything but an integer (a
    ``bool`` is not one), or a value outside ``0 <= value < 2**32``."""
    number = None if isinstance(value, float) else _integer(value)
    return number if number is not None and 0 <= number < PID_LIMIT else None


def process_list(value: Any) -> list[Any] | None:
    """The entries of a process list as a ``list``, or ``None`` where ``value`` is not one: ``None``, a number,
    text, bytes, a mapping, or an iterable that raises while it is read."""
    if type(value) is list:  # what vendor bindings answer: no further checks
        return list(value)
    if value is None or isinstance(value, (str, bytes, bytearray, Mapping)) or not isinstance(value, Iterable):
        return None
    try:
        return list(value)
    except Exception:  # a vendor's iterable that fails part-way: no list rather than a partial one
        return None


def vendor_text(value: Any) -> str | None:
    """What a vendor program or library printed, as text: ``str`` as it is, ``bytes`` read as UTF-8 with what is
    not UTF-8 replaced (so it parses as no number), anything else ``None``."""
    if isinstance(value, str):
        return value
    if isinstance(value, (bytes, bytearray)):
        return bytes(value).decode("utf-8", errors="replace")
    return None


__all__ = [
    "FIGURE_LIMIT",
    "PID_LIMIT",
    "PROCESS_BYTES_LIMIT",
    "process_bytes",
    "process_id",
    "process_list",
    "vendor_text",
    "whole_bytes",
]
