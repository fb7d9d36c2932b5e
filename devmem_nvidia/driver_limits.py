"""The memory limits the driver enforces and reports (NVML ``nvmlDeviceGetMemoryLimits_v1``, driver r615+).

NVIDIA's memory partitioning lets a process read its partition's limits: ``hardLimit`` (allocations past it fail),
``softLimit`` (what is guaranteed before allocations may fail under pressure) and ``currentUsed`` (what is counted
against them). No limit is set where ``softLimit`` is 0 and ``hardLimit`` is ``NVML_DEVICE_MEMORY_LIMIT_MAX``. The
hard limit caps the device's total and free (what sizing and admission read); a driver or a pynvml without the
call (``FunctionNotFound``, ``NotSupported``) sets no limit, and so does a hard limit of 0 (no partition a running
process could be in). A call that fails otherwise is :meth:`DriverLimits.unread`: the platform keeps the hard limit
it read before, and asks again at the next reading.
"""

from __future__ import annotations

import logging
from typing import Any

from devmem import format_size
from devmem.sdk import DevmemError, MemoryLimit
from devmem_nvidia.nvml_access import NvmlCallError, NvmlSession

log = logging.getLogger("devmem.nvidia")

#: The call, as nvidia-ml-py names it.
CALL = "nvmlDeviceGetMemoryLimits_v1"
#: ``NVML_DEVICE_MEMORY_LIMIT_MAX`` (nvidia-ml-py's value): a hard limit at (or above) it is no limit.
NO_HARD_LIMIT = (1 << 64) - 1


class DriverLimits:
    """The driver's reported limits for one device: ``hard`` (``None``: none), ``soft``, ``used`` (``None``: not
    read); ``failed``: the call failed, and nothing was read."""

    def __init__(self, hard: int | None, soft: int, used: int | None, failed: bool = False):
        self.hard, self.soft, self.used, self.failed = hard, soft, used, failed

    @classmethod
    def unread(cls) -> DriverLimits:
        """What a call that failed tells: nothing."""
        return cls(None, 0, None, failed=True)

    def limit(self) -> MemoryLimit | None:
        """The hard limit as a cap on what this process may use, with what already counts against it."""
        if self.hard is None:
            return None
        return MemoryLimit(self.hard, "the driver's hard memory limit", CALL, used=self.used)

    def note(self) -> str | None:
        if self.hard is None and not self.soft:
            return None
        hard = "none" if self.hard is None else format_size(self.hard)
        return (
            f"the driver enforces a memory partition ({CALL}): hard limit {hard}, soft limit "
            f"{format_size(self.soft)} (guaranteed before allocations may fail under pressure), "
            + ("its use not read" if self.used is None else f"{format_size(self.used)} used against it")
        )


def read_driver_limits(session: NvmlSession, handle: Any) -> DriverLimits | None:
    """The limits the driver reports for ``handle``, or ``None`` where it offers none (an older driver or pynvml,
    a device that does not support it, or a figure that is not a whole number); :meth:`DriverLimits.unread` where
    the call failed otherwise."""
    if not session.has(CALL):
        return None
    struct = getattr(session.module, "c_nvmlGetMemoryLimits_v1_t", None)
    if struct is None:
        return None
    raw = struct()  # nameSpace left NULL: the partition this process runs in
    try:
        session.call(CALL, handle, raw)
    except NvmlCallError as exc:
        if exc.not_supported:
            return None
        log.debug("devmem: %s failed: %s", CALL, exc)
        return DriverLimits.unread()
    except DevmemError as exc:
        log.debug("devmem: %s failed: %s", CALL, exc)
        return DriverLimits.unread()
    figures = [int(getattr(raw, name, -1)) for name in ("hardLimit", "softLimit", "currentUsed")]
    if any(f < 0 for f in figures):
        log.debug("devmem: %s answered figures that are not whole numbers: %r", CALL, figures)
        return None
    hard, soft, used = figures
    if hard == 0:
        log.debug("devmem: %s answered a hard limit of 0 B, which no running process is under: no limit set", CALL)
    return DriverLimits(None if hard >= NO_HARD_LIMIT or hard == 0 else hard, soft, used)


__all__ = ["CALL", "NO_HARD_LIMIT", "DriverLimits", "read_driver_limits"]
