"""Limits that bind this process on a device, and how they cap a reading (vendor-neutral).

A backend reads its device, gathers the :class:`MemoryLimit` objects that bind this process there (a limit
its runtime enforces, a vGPU limit, a cgroup ``dmem.max``), and passes both to :func:`apply_limits`, which
caps ``total`` at the tightest limit and ``free`` at what each limit leaves, names the limit as the source
of every figure it lowered, and adds a note a person (and ``devmem doctor``) can read.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from devmem import arguments
from devmem.errors import InvalidValueError
from devmem.platform import DeviceMemory
from devmem.types import MemoryInfo, gib


@dataclass(frozen=True)
class MemoryLimit:
    """A cap on the device memory this process may use.

    ``limit``: bytes; ``name``: what it is, for people ("cgroup dmem limit"); ``origin``: where it was read (a
    file and its line, an environment variable and its value); ``used``: bytes already counted against it where the
    limit's owner says so (cgroup ``dmem.current``), ``None`` where this process's own usage is what counts.
    """

    limit: int
    name: str
    origin: str
    used: int | None = None

    def __post_init__(self) -> None:
        object.__setattr__(
            self, "limit", arguments.byte_count("MemoryLimit.limit", self.limit, error=InvalidValueError)
        )
        if self.used is not None:
            used = arguments.byte_count("MemoryLimit.used (or None)", self.used, error=InvalidValueError)
            object.__setattr__(self, "used", used)

    @property
    def label(self) -> str:
        return f"{self.name} ({self.origin})"


def apply_limits(memory: DeviceMemory, limits: Iterable[MemoryLimit], process_used: int | None) -> DeviceMemory:
    """``memory`` capped by every limit: ``total = min(total, limit)``; ``free = min(free, limit - used)`` where
    ``used`` is the limit's own count, else ``process_used`` (this process's bytes on the device), else unknown:
    then ``free = min(free, limit)`` and the source says so. Figures a limit lowered name it as their source."""
    free, total = memory.info
    device_total = total
    sources = dict(memory.sources)
    notes = list(memory.notes)
    for lim in limits:
        used = lim.used if lim.used is not None else process_used
        room = max(0, lim.limit - used) if used is not None else lim.limit
        if lim.limit < total:
            total = lim.limit
            sources["total"] = f"{lim.label}: {gib(lim.limit)}"
        if room < free:
            free = room
            if used is None:
                sources["free"] = (
                    f"{lim.label}: {gib(lim.limit)}, not less this process's usage "
                    "(no per-process figure here, so free may be overstated by what it already holds)"
                )
            else:
                whose = "counted by the limit" if lim.used is not None else "this process's"
                sources["free"] = f"{lim.label}: {gib(lim.limit)} less {gib(used)} in use ({whose})"
        notes.append(f"this process may use {gib(lim.limit)} of this {gib(device_total)} device: {lim.label}")
    return DeviceMemory(MemoryInfo(free=max(0, min(free, total)), total=total), sources, tuple(notes))


__all__ = ["MemoryLimit", "apply_limits"]
