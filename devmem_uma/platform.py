"""The ``uma`` platform: devices whose memory is the host's (DGX Spark GB10, Jetson, AMD APUs).

``free`` is what a new allocation can obtain, which on unified memory includes the page cache the kernel
reclaims on demand; ``cudaMemGetInfo`` leaves that out (on a GB10: 59.2 GiB "free" while MemAvailable
said 115.6 GiB, and 106 GiB could be committed).

- NVIDIA (GB10, Jetson): ``free`` = MemAvailable; ``total`` = the CUDA runtime's total where this process
  already has the runtime initialised, else MemTotal. Per-process memory comes from NVML's per-process
  list (through :class:`devmem_nvidia.NvmlPlatform`, which also handles PID namespaces), never from its
  device-level memory query, which is NotSupported there; ``None`` with a reason where NVML is absent.
- AMD APUs (Strix Halo, MI300A, ...): where the kernel serves device allocations from GTT,
  ``free`` = min(MemAvailable, GTT total - GTT used) and ``total`` = GTT total + the VRAM carve-out;
  where the carve-out is the larger pool, its own figures. Per-process memory from this process's DRM
  fdinfo. See :mod:`devmem_uma.amd` for which card counts as an APU.

MemAvailable is capped by the process's cgroup memory limit, as for the ``cpu`` platform.
"""

from __future__ import annotations

import logging
import os
import threading
from dataclasses import dataclass
from typing import Any, Callable, Mapping

from devmem.host import REAL_FILES, CpuPlatform, Files
from devmem.platform import PlatformBase
from devmem.types import DevmemError, MemoryInfo, gib
from devmem_nvidia.nvml_access import session_for
from devmem_nvidia.nvml_platform import NvmlPlatform
from devmem_nvidia.pidns import DeviceAllocator
from devmem_uma import amd
from devmem_uma.runtime import MemGetInfo, runtime_integrated, runtime_mem_get_info
from devmem_uma.survey import NvidiaGpu, Survey, survey
from devmem_uma.tegra import jetson_model

log = logging.getLogger("devmem.uma")

RELEASE_NOTE = ("memory the allocator keeps cached is memory the OS does not have here: devmem releases the "
                "allocator cache before every KV-cache allocation")


@dataclass(frozen=True)
class _Figures:
    info: MemoryInfo
    sources: dict[str, str]
    notes: tuple[str, ...] = ()


class UmaPlatform(PlatformBase):
    """Unified-memory devices. See the module docstring.

    ``nvml``: the pynvml module or a scripted one (``None``: the process-wide pynvml session);
    ``files``: the /proc and sysfs boundary; ``mem_get_info(device) -> (free, total) | None``: the CUDA
    runtime's view (default: ``torch.cuda.mem_get_info`` only where torch has already initialised CUDA);
    ``cuda_integrated(device) -> bool | None``: the runtime's integrated attribute (same default);
    ``environ``: ``CUDA_VISIBLE_DEVICES`` and friends; ``allocator``: passed to the NVML per-process lookup
    for learning this process's driver-side PID in a container.
    """

    name = "uma"

    def __init__(self, *, nvml: Any = None, files: Files = REAL_FILES, mem_get_info: MemGetInfo | None = None,
                 cuda_integrated: Callable[[int], bool | None] | None = None,
                 environ: Mapping[str, str] | None = None,
                 allocator: DeviceAllocator | None = None):
        self._nvml = nvml
        self._files = files
        self._mem_get_info = mem_get_info or runtime_mem_get_info
        self._cuda_integrated = cuda_integrated or runtime_integrated
        self._environ = os.environ if environ is None else environ
        self._allocator = allocator
        self._host = CpuPlatform(files=files)
        self._lock = threading.Lock()
        self._survey: Survey | None = None
        self._devices_seen: list[Any] = []
        self._conflicts: tuple[str, ...] = ()
        self._per_process: NvmlPlatform | None = None

    # ---- devices -------------------------------------------------------------------------------
    def survey(self) -> Survey:
        """What this platform found on the machine (probed once, on first use, as the runtimes read their
        ``*_VISIBLE_DEVICES`` variables once)."""
        found = self._survey
        if found is None:
            with self._lock:
                if self._survey is None:
                    self._survey = self._probe()
                found = self._survey
        return found

    def _probe(self) -> Survey:
        found = survey(self._files, session_for(self._nvml), self._environ, self._cuda_integrated)
        if found.vendor == "nvidia":
            self._devices_seen = (list(found.nvidia_integrated) if found.nvidia_integrated
                                  else [None] if _jetson_visible(self._environ) else [])
        elif found.vendor == "amd":
            self._devices_seen, self._conflicts = amd.visible_apus(found.amd_apus, self._environ)
        return found

    def _devices(self) -> list[Any]:
        """The visible devices: ``NvidiaGpu``, ``None`` for a Jetson seen without NVML, or ``AmdCard``."""
        self.survey()
        return self._devices_seen

    def device_count(self) -> int:
        return len(self._devices())

    def _device(self, device: int) -> Any:
        return self._devices()[self.check_device(device)]

    def _nvml_processes(self) -> NvmlPlatform:
        """NVIDIA's per-process lookup (NSpid, learned driver PID), over the same CUDA-visible devices."""
        with self._lock:
            if self._per_process is None:
                self._per_process = NvmlPlatform(nvml=self._nvml, files=self._files, environ=self._environ,
                                                 allocator=self._allocator)
            return self._per_process

    # ---- memory --------------------------------------------------------------------------------
    def _host_figures(self) -> tuple[MemoryInfo, str]:
        info = self._host.device_memory_info(0)
        return info, self._host.memory_sources(0)["free"]

    def _nvidia_figures(self, device: int) -> _Figures:
        host, free_source = self._host_figures()
        try:
            runtime = self._mem_get_info(device)
        except Exception as exc:  # the runtime's failure must not become ours: MemTotal will do
            log.debug("devmem: the CUDA runtime's mem_get_info(%d) failed: %s", device, exc)
            runtime = None
        if runtime is None:
            total = host.total
            total_source = "MemTotal (the CUDA runtime is not initialised in this process)"
        else:
            total = int(runtime[1])
            total_source = "the CUDA runtime's total (cudaMemGetInfo)"
            free_source += (f"; the CUDA runtime's own figure, {gib(runtime[0])}, leaves the page cache out "
                            "and is not used")
        return _Figures(MemoryInfo(free=max(0, min(host.free, total)), total=total),
                        {"free": free_source, "total": total_source})

    def _amd_figures(self, card: amd.AmdCard) -> _Figures:
        try:
            mem = amd.read_memory(self._files, card)
        except OSError as exc:
            raise DevmemError(f"uma: cannot read the memory of AMD card{card.card}: {exc}") from exc
        where = f"sysfs card{card.card}"
        if mem.pool == "vram":
            free = max(0, mem.vram_total - mem.vram_used)
            return _Figures(MemoryInfo(free=free, total=mem.vram_total), {
                "free": f"VRAM carve-out left (mem_info_vram_total - mem_info_vram_used, {where})",
                "total": f"VRAM carve-out (mem_info_vram_total, {where})",
            }, (f"the {gib(mem.vram_total)} VRAM carve-out is larger than the {gib(mem.gtt_total)} GTT pool, so "
                "the kernel serves device allocations from the carve-out",))
        host, free_source = self._host_figures()
        gtt_left = max(0, mem.gtt_total - mem.gtt_used)
        total = mem.gtt_total + mem.vram_total
        binding = "the GTT limit binds" if gtt_left < host.free else "MemAvailable binds"
        sources = {
            "free": (f"min(MemAvailable {gib(host.free)}, GTT left {gib(gtt_left)} = mem_info_gtt_total - "
                     f"mem_info_gtt_used): {binding}; {free_source}"),
            "total": f"GTT {gib(mem.gtt_total)} + VRAM carve-out {gib(mem.vram_total)} ({where})",
        }
        notes = ()
        if gtt_left < host.free:
            notes = (f"the GTT limit ({gib(mem.gtt_total)}, ttm.pages_limit) binds before the host's memory "
                     f"does: raise it to let the GPU use more of the {gib(host.free)} the OS could give",)
        return _Figures(MemoryInfo(free=max(0, min(host.free, gtt_left, total)), total=total), sources, notes)

    def _figures(self, device: int) -> _Figures:
        dev = self._device(device)
        if isinstance(dev, amd.AmdCard):
            return self._amd_figures(dev)
        return self._nvidia_figures(device)

    def device_memory_info(self, device: int = 0) -> MemoryInfo:
        return self._figures(device).info

    def memory_sources(self, device: int = 0) -> dict[str, str]:
        return dict(self._figures(device).sources)

    def is_integrated_gpu(self, device: int = 0) -> bool:
        self.check_device(device)
        return True

    def pages_instead_of_failing(self, device: int = 0) -> bool:
        self.check_device(device)
        return True

    # ---- this process --------------------------------------------------------------------------
    def _process(self, device: int) -> tuple[int | None, str | None]:
        dev = self._device(device)
        if isinstance(dev, amd.AmdCard):
            return amd.process_memory(self._files, dev.pci_slot)
        if dev is None:
            return None, (f"no NVML on this Jetson ({self.survey().nvml_reason}); Tegra's driver "
                          "reports per-process GPU memory only in debugfs (/sys/kernel/debug/nvmap), which needs root")
        nvml = self._nvml_processes()
        used = nvml.get_process_memory_usage(device)
        return used, None if used is not None else nvml.process_memory_reason(device)

    def get_process_memory_usage(self, device: int = 0) -> int | None:
        return self._process(device)[0]

    def process_memory_reason(self, device: int = 0) -> str | None:
        return self._process(device)[1]

    def other_processes_memory(self, device: int = 0) -> dict[int, int] | None:
        if isinstance(self._device(device), NvidiaGpu):
            return self._nvml_processes().other_processes_memory(device)
        return None

    # ---- for people ----------------------------------------------------------------------------
    def device_name(self, device: int = 0) -> str:
        dev = self._device(device)
        if isinstance(dev, amd.AmdCard):
            return f"AMD APU (card{dev.card}{', ' + dev.pci_slot if dev.pci_slot else ''})"
        return dev.name if dev is not None else jetson_model(self._files)

    def notes(self, device: int = 0) -> list[str]:
        dev = self._device(device)
        if isinstance(dev, amd.AmdCard):
            head = f"unified memory: {dev.reason}"
        elif dev is None:
            head = f"unified memory: NVIDIA Jetson ({self.survey().jetson})"
        else:
            head = f"unified memory: {dev.evidence}"
        return [head, *self._figures(device).notes, *self._conflicts, RELEASE_NOTE]


def _jetson_visible(environ: Mapping[str, str]) -> bool:
    """Whether ``CUDA_VISIBLE_DEVICES`` leaves a Jetson's one GPU visible (its UUID is unknown without NVML)."""
    raw = environ.get("CUDA_VISIBLE_DEVICES")
    if raw is None:
        return True
    first = raw.split(",")[0].strip().upper()
    return first == "0" or (first.startswith(("GPU-", "MIG-")) and len(first) > 4)
