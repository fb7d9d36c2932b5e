"""The one checked boundary where a vendor's memory figures enter devmem, the same rule for every backend.

- a figure must be a whole number of bytes: an ``int`` (not a ``bool``), or a float with no fraction; anything
  else is an error naming the call and the value (a broken or mismatched vendor library), never a guess;
- a negative total is an error (e.g. a driver reservation larger than the total it came with);
- a negative free is taken as 0, and a free above total as total, each with a note saying what was reported.

Per-process figures have their own rule in each backend: an impossible one becomes ``None`` with a reason.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from devmem.platform import DeviceMemory
from devmem.types import DevmemError, MemoryInfo


def whole_bytes(value: Any, what: str) -> int:
    """``value`` as ``int`` bytes; raises :class:`DevmemError` naming ``what`` where it is not a whole number."""
    if isinstance(value, int) and not isinstance(value, bool):
        return value
    if isinstance(value, float) and math.isfinite(value) and value.is_integer():
        return int(value)
    raise DevmemError(
        f"{what} is {value!r}, not a whole number of bytes: the vendor library answered something "
        "devmem cannot use; check that it matches the installed driver"
    )


def checked_memory(free: Any, total: Any, sources: Mapping[str, str], what: str) -> DeviceMemory:
    """A :class:`DeviceMemory` of ``free``/``total`` as ``what`` (the call, for messages) reported them, checked as
    the module docstring says."""
    free, total = whole_bytes(free, f"{what}: free"), whole_bytes(total, f"{what}: total")
    if total < 0:
        raise DevmemError(
            f"{what}: total is {total} bytes, below zero; the driver's figures are inconsistent "
            "(check the device with the vendor's tool)"
        )
    notes = []
    if free < 0:
        notes.append(f"{what} reported free = {free} bytes (below zero); taken as 0")
        free = 0
    elif free > total:
        notes.append(f"{what} reported free = {free} bytes, above its total of {total}; taken as the total")
        free = total
    return DeviceMemory(MemoryInfo(free=free, total=total), dict(sources), tuple(notes))


__all__ = ["checked_memory", "whole_bytes"]
