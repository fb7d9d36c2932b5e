"""One object per kind of unified-memory device, each answering the same questions.

- :class:`NvidiaUnified`: an NVIDIA part NVML lists (DGX Spark GB10, Jetson Thor): host figures, the CUDA
  runtime's total where it is initialised, this process from NVML's per-process list.
- :class:`Jetson`: a Jetson seen without NVML (Orin and older): host figures; no per-process source.
- :class:`AmdApu`: an AMD APU (Strix Halo, MI300A): its GTT pool or VRAM carve-out, this process from the
  kernel's DRM fdinfo.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Protocol

from devmem import DevmemError, MemoryInfo, Platform
from devmem.sdk import (
    CpuPlatform,
    DeviceMemory,
    Files,
    ProcessMemory,
    ReasonKind,
    checked_memory,
    client_memory,
    format_size,
    shown,
)
from devmem_uma import amd
from devmem_uma.runtime import MemGetInfo
from devmem_uma.survey import NvidiaGpu
from devmem_uma.tegra import jetson_model

log = logging.getLogger("devmem.uma")


class UmaDevice(Protocol):
    """What the uma platform asks of each device; ``index`` is its device index."""

    def memory(self, index: int) -> DeviceMemory: ...

    def process_memory(self, index: int) -> ProcessMemory: ...

    def other_processes_memory(self, index: int) -> dict[int, int] | None: ...

    def name(self) -> str: ...

    def evidence(self) -> str: ...


def _host(host: CpuPlatform) -> tuple[MemoryInfo, str]:
    memory = host.memory(0)
    return memory.info, memory.sources["free"]


def runtime_figures(host: CpuPlatform, mem_get_info: MemGetInfo, index: int) -> DeviceMemory:
    """Free is MemAvailable (page cache included); total the CUDA runtime's where it is initialised, else MemTotal
    (capped by the host's memory within this cgroup's limit either way)."""
    info, free_source = _host(host)
    try:
        runtime = mem_get_info(index)
    except Exception as exc:  # the runtime's failure must not become ours: MemTotal will do
        log.debug("devmem: the CUDA runtime's mem_get_info(%d) failed: %s", index, exc)
        runtime = None
    reading = None
    if runtime is not None:
        try:
            free, total = runtime
            reading = checked_memory(free, total, {}, f"the CUDA runtime's mem_get_info({index})")
        except (DevmemError, TypeError, ValueError) as exc:  # not a pair of whole numbers: MemTotal will do
            log.debug("devmem: the CUDA runtime's mem_get_info(%d) answered %s: %s", index, shown(runtime), exc)
    if reading is None:
        total = info.total
        total_source = "MemTotal (the CUDA runtime is not initialised in this process)"
    else:
        total = reading.info.total
        total_source = "the CUDA runtime's total (cudaMemGetInfo)"
        if info.total < total:  # the GPU maps the host's memory: no more than the host (within its cgroup) gives
            total_source = f"{host.memory_sources(0)['total']}, below the CUDA runtime's total {format_size(total)}"
            total = info.total
        free_source += (
            f"; the CUDA runtime's own figure, {format_size(reading.info.free)}, leaves the page cache out and "
            "is not used"
        )
    return DeviceMemory(
        MemoryInfo(free=max(0, min(info.free, total)), total=total),
        {"free": free_source, "total": total_source},
        () if reading is None else reading.notes,
    )


class NvidiaUnified:
    """An NVIDIA unified-memory part that NVML lists; ``per_process()`` is NVML's per-process lookup."""

    def __init__(
        self, gpu: NvidiaGpu, host: CpuPlatform, mem_get_info: MemGetInfo, per_process: Callable[[], Platform]
    ):
        self._gpu, self._host, self._mem_get_info, self._per_process = gpu, host, mem_get_info, per_process

    def memory(self, index: int) -> DeviceMemory:
        return runtime_figures(self._host, self._mem_get_info, index)

    def process_memory(self, index: int) -> ProcessMemory:
        return self._per_process().process_memory(index)

    def other_processes_memory(self, index: int) -> dict[int, int] | None:
        return self._per_process().other_processes_memory(index)

    def name(self) -> str:
        return self._gpu.name

    def evidence(self) -> str:
        return self._gpu.evidence


class Jetson:
    """A Jetson seen without NVML (Orin and older): ``nvml_reason`` says why NVML is not there."""

    def __init__(self, files: Files, host: CpuPlatform, mem_get_info: MemGetInfo, why: str, nvml_reason: str):
        self._files, self._host, self._mem_get_info, self._why, self._nvml_reason = (
            files,
            host,
            mem_get_info,
            why,
            nvml_reason,
        )

    def memory(self, index: int) -> DeviceMemory:
        return runtime_figures(self._host, self._mem_get_info, index)

    def process_memory(self, index: int) -> ProcessMemory:
        return ProcessMemory.unknown(
            ReasonKind.NO_SOURCE,
            (
                f"no NVML on this Jetson ({self._nvml_reason}); Tegra's driver reports per-process GPU memory only in "
                "debugfs (/sys/kernel/debug/nvmap), which needs root"
            ),
        )

    def other_processes_memory(self, index: int) -> dict[int, int] | None:
        return None

    def name(self) -> str:
        return jetson_model(self._files)

    def evidence(self) -> str:
        return f"NVIDIA Jetson ({self._why})"


class AmdApu:
    """An AMD APU in sysfs (see :mod:`devmem_uma.amd`)."""

    def __init__(self, card: amd.AmdCard, files: Files, host: CpuPlatform):
        self._card, self._files, self._host = card, files, host

    def memory(self, index: int) -> DeviceMemory:
        card = self._card
        try:
            mem = amd.read_memory(self._files, card)
        except OSError as exc:
            raise DevmemError(f"uma: cannot read the memory of AMD card{card.card}: {exc}") from exc
        where = f"sysfs card{card.card}"
        if mem.pool == "vram":
            free = max(0, mem.vram_total - mem.vram_used)
            return DeviceMemory(
                MemoryInfo(free=free, total=mem.vram_total),
                {
                    "free": f"VRAM carve-out left (mem_info_vram_total - mem_info_vram_used, {where})",
                    "total": f"VRAM carve-out (mem_info_vram_total, {where})",
                },
                (
                    f"the {format_size(mem.vram_total)} VRAM carve-out is larger than the {format_size(mem.gtt_total)} "
                    "GTT pool, so the kernel serves device allocations from the carve-out",
                ),
            )
        host, free_source = _host(self._host)
        gtt_left = max(0, mem.gtt_total - mem.gtt_used)
        # GTT pages come from the host's memory: a GTT limit above it (or above this cgroup's limit) is no capacity
        gtt_usable = min(mem.gtt_total, host.total)
        total = gtt_usable + mem.vram_total
        binding = "the GTT limit binds" if gtt_left < host.free else "MemAvailable binds"
        sources = {
            "free": (
                f"min(MemAvailable {format_size(host.free)}, GTT left {format_size(gtt_left)} = "
                f"mem_info_gtt_total - mem_info_gtt_used): {binding}; {free_source}"
            ),
            "total": f"GTT {format_size(mem.gtt_total)} + VRAM carve-out {format_size(mem.vram_total)} ({where})",
        }
        notes: tuple[str, ...] = ()
        if gtt_usable < mem.gtt_total:
            sources["total"] = (
                f"the host's memory {format_size(host.total)} ({self._host.memory_sources(0)['total']}; below the GTT "
                f"limit {format_size(mem.gtt_total)}) + VRAM carve-out {format_size(mem.vram_total)} ({where})"
            )
            notes = (
                f"the GTT limit ({format_size(mem.gtt_total)}) is above the host's memory ({format_size(host.total)}): "
                "the GPU can map no more than the host has, so the total is capped at it",
            )
        if gtt_left < host.free:
            notes += (
                f"the GTT limit ({format_size(mem.gtt_total)}, ttm.pages_limit) binds before the host's memory "
                f"does: raise it to let the GPU use more of the {format_size(host.free)} the OS could give",
            )
        return DeviceMemory(MemoryInfo(free=max(0, min(host.free, gtt_left, total)), total=total), sources, notes)

    def process_memory(self, index: int) -> ProcessMemory:
        return client_memory(self._files, amd.DRM_DRIVER, self._card.pci_slot, amd.DRM_REGIONS)

    def other_processes_memory(self, index: int) -> dict[int, int] | None:
        return None

    def name(self) -> str:
        card = self._card
        return f"AMD APU (card{card.card}{', ' + card.pci_slot if card.pci_slot else ''})"

    def evidence(self) -> str:
        return self._card.reason
