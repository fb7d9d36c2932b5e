"""Caps that only the CUDA runtime shows: what ``cuMemGetInfo`` reports to this process, next to NVML's reading.

NVML reports the device; the runtime reports what this process may use. The two differ where something between
the process and the device caps it, and the process's environment need not say so:

- an MPS pinned-memory limit set on the control daemon (``set_default_device_pinned_mem_limit``): the client's
  ``free`` is the limit less its own usage while ``total`` stays the device's (measured on the H200 with an 8 GiB
  daemon default: runtime free 7.40 GiB and total 139.80 GiB, NVML free 139.13 GiB, this process 0.60 GiB);
- an interposed vGPU library (HAMi-core's ``libvgpu.so``): ``total`` is the limit, ``free`` what is left of it.

The runtime is read only where this process already holds a CUDA context (it maps an NVIDIA device, so
``cuInit`` has run) and has one on the device (:meth:`CudaDriver.mem_get_info` creates none). A gap counts only
beyond :func:`slack` and, for ``free``, only when NVML's free read again after the runtime still exceeds it: a
co-tenant allocating between the reads cannot fake a cap. The runtime's figures pass the checked-readings rule
(:func:`devmem.sdk.checked_memory`): a free above total (a buggy interposer) is taken as the total, with a
note; figures that are no whole numbers of bytes, or a negative total, make the runtime's view unreadable.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from devmem import DevmemError, MemoryInfo
from devmem.sdk import DeviceMemory, Files, MemoryLimit, checked_memory, gib
from devmem_nvidia.cuda_driver import CudaDriver
from devmem_nvidia.pidns import cuda_in_use

log = logging.getLogger("devmem.nvidia")

MiB = 1 << 20
#: The driver's page: an estimated limit is rounded down to it (NVML's per-process figure runs a little over what
#: MPS counts against the limit: 1.85 MiB on the H200), so the estimate never exceeds the real limit by that.
PAGE = 2 * MiB


def slack(total: int) -> int:
    """How far the runtime's figure must fall below NVML's to count as a cap: 1 % of the device, at least 512 MiB
    (more than the driver's reservation that an NVML v1 total still includes)."""
    return max(512 * MiB, total // 100)


class RuntimeView:
    """``cuMemGetInfo`` for this process's devices, where it can be read without loading or creating anything.

    ``library``: a loaded ``libcuda`` or a scripted one; ``None`` uses the real one (only where ``real``).
    ``files``: ``/proc/self/maps`` tells whether this process already uses CUDA (:func:`cuda_in_use`)."""

    def __init__(self, library: Any, files: Files, *, real: bool):
        self._driver = CudaDriver(library) if library is not None else None
        self._real = real
        self._files = files
        self._cuda_seen = False  # once CUDA is in use here cuInit has run, so /proc/self/maps need not be read again

    def _cuda_in_use(self) -> bool:
        if not self._cuda_seen:
            self._cuda_seen = bool(cuda_in_use(self._files))
        return self._cuda_seen

    def may_read(self) -> bool:
        """Whether :meth:`checked` may ask the runtime at all: one is configured and CUDA is in use here."""
        return (self._driver is not None or self._real) and self._cuda_in_use()

    def reading(self, device: int) -> MemoryInfo | None:
        """``(free, total)`` as the runtime reports them to this process, or ``None`` where it cannot be read
        without initialising CUDA or creating a context (:meth:`checked` without its notes)."""
        checked = self.checked(device)
        return None if checked is None else checked.info

    def checked(self, device: int) -> DeviceMemory | None:
        """The runtime's ``(free, total)`` through the checked-readings rule, with a note where it corrected one;
        ``None`` where it cannot be read without initialising CUDA or creating a context, or is unusable."""
        if not self.may_read():
            return None
        if self._driver is None:
            self._driver = CudaDriver.shared()
        try:
            reading = self._driver.mem_get_info(device)
            if reading is None:
                return None
            return checked_memory(reading[0], reading[1], {}, "the CUDA runtime (cuMemGetInfo)")
        except DevmemError as exc:
            log.debug("devmem: the CUDA runtime's view of device %d is not readable: %s", device, exc)
            return None


def runtime_limits(
    runtime: MemoryInfo,
    nvml: MemoryInfo,
    nvml_free_again: Callable[[], int],
    process_used: Callable[[], int | None],
    known: list[MemoryLimit],
) -> list[MemoryLimit]:
    """The caps the runtime's reading shows beyond NVML's and the ``known`` limits (those read from the
    environment or the cgroup explain a gap themselves, so it is not named twice)."""
    margin = slack(nvml.total)

    def explained(limit: int) -> bool:
        return any(lim.limit <= limit + margin for lim in known)

    if runtime.total < nvml.total - margin:
        if explained(runtime.total):
            return []
        return [
            MemoryLimit(
                runtime.total,
                "device memory limit the CUDA runtime reports",
                f"cuMemGetInfo total {gib(runtime.total)} below NVML's {gib(nvml.total)}: "
                "an interposed vGPU library (HAMi-style) or a driver cap",
                used=runtime.total - runtime.free,
            )
        ]
    if runtime.free >= nvml.free - margin or runtime.free >= nvml_free_again() - margin:
        return []
    used = process_used()
    limit = (runtime.free + (used or 0)) // PAGE * PAGE
    if explained(limit):
        return []
    counted = f"+ this process's {gib(used)}" if used is not None else "(this process's usage unknown: counted as 0)"
    counted += ", rounded down to 2 MiB"
    return [
        MemoryLimit(
            limit,
            "per-process limit the CUDA runtime enforces",
            f"cuMemGetInfo free {gib(runtime.free)} {counted}, below NVML's free {gib(nvml.free)}: "
            "an MPS pinned-memory limit set on the control daemon (not in this process's environment)",
            used=used or 0,
        )
    ]


__all__ = ["RuntimeView", "runtime_limits", "slack"]
