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

import os
from collections.abc import Callable, Mapping

import devmem_nvidia
from devmem import PlatformBase
from devmem.sdk import REAL_FILES, CpuPlatform, DeviceMemory, Files, ForkSafeLock, ProcessMemory
from devmem_uma import amd
from devmem_uma.devices import AmdApu, Jetson, NvidiaUnified, UmaDevice
from devmem_uma.runtime import MemGetInfo, runtime_integrated, runtime_mem_get_info
from devmem_uma.survey import Survey, survey

RELEASE_NOTE = (
    "memory the allocator keeps cached is memory the OS does not have here: devmem releases the "
    "allocator cache before every KV-cache allocation"
)


class UmaPlatform(PlatformBase):
    """Unified-memory devices, one :mod:`devmem_uma.devices` object per device. See the module docstring.

    ``nvml``: the pynvml module or a scripted one (``None``: the process-wide pynvml session);
    ``files``: the /proc and sysfs boundary; ``mem_get_info(device) -> (free, total) | None``: the CUDA
    runtime's view (default: ``torch.cuda.mem_get_info`` only where torch has already initialised CUDA);
    ``cuda_integrated(device) -> bool | None``: the runtime's integrated attribute (same default);
    ``environ``: ``CUDA_VISIBLE_DEVICES`` and friends; ``allocator``: passed to the NVML per-process lookup
    for learning this process's driver-side PID in a container.
    """

    name = "uma"
    torch_device = "cuda"  # CUDA and ROCm builds of torch both serve these devices under the cuda namespace
    dist_backend = "nccl"

    def __init__(
        self,
        *,
        nvml: object = None,
        files: Files = REAL_FILES,
        mem_get_info: MemGetInfo | None = None,
        cuda_integrated: Callable[[int], bool | None] | None = None,
        environ: Mapping[str, str] | None = None,
        allocator: devmem_nvidia.DeviceAllocator | None = None,
    ):
        self._nvml = nvml
        self._files = files
        self._mem_get_info = mem_get_info or runtime_mem_get_info
        self._cuda_integrated = cuda_integrated or runtime_integrated
        self._environ = os.environ if environ is None else environ
        self._allocator = allocator
        self._host = CpuPlatform(files=files)
        self._lock = ForkSafeLock()
        self._survey: Survey | None = None
        self._devices_seen: list[UmaDevice] = []
        self._conflicts: tuple[str, ...] = ()
        self._per_process: devmem_nvidia.NvmlPlatform | None = None

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
        found = survey(
            self._files, devmem_nvidia.NvmlSession.for_module(self._nvml), self._environ, self._cuda_integrated
        )
        if found.vendor == "nvidia":
            if found.nvidia_integrated:
                self._devices_seen = [
                    NvidiaUnified(g, self._host, self._mem_get_info, self._nvml_processes)
                    for g in found.nvidia_integrated
                ]
            elif _jetson_visible(self._environ):
                self._devices_seen = [
                    Jetson(self._files, self._host, self._mem_get_info, str(found.jetson), found.nvml_reason)
                ]
        elif found.vendor == "amd":
            cards, self._conflicts = amd.visible_apus(found.amd_apus, self._environ)
            self._devices_seen = [AmdApu(card, self._files, self._host) for card in cards]
        return found

    def _devices(self) -> list[UmaDevice]:
        self.survey()
        return self._devices_seen

    def device_count(self) -> int:
        return len(self._devices())

    def _nvml_processes(self) -> devmem_nvidia.NvmlPlatform:
        """NVIDIA's per-process lookup (NSpid, learned driver PID), over the same CUDA-visible devices."""
        with self._lock:
            if self._per_process is None:
                self._per_process = devmem_nvidia.NvmlPlatform(
                    nvml=self._nvml, files=self._files, environ=self._environ, allocator=self._allocator
                )
            return self._per_process

    def _prepare(self, device: int) -> None:
        """On an NVIDIA part, let NVML's per-process lookup learn this process's driver-side PID
        (:meth:`devmem_nvidia.NvmlPlatform.prepare`, which may allocate 42 + 26 MiB once); nothing elsewhere."""
        if isinstance(self._devices()[device], NvidiaUnified):
            self._nvml_processes()._prepare(device)  # the same visible devices: the index is checked

    # ---- the contract --------------------------------------------------------------------------
    def _memory(self, device: int) -> DeviceMemory:
        return self._devices()[device].memory(device)

    def _is_integrated(self, device: int) -> bool:
        return True

    def _pages_instead_of_failing(self, device: int) -> bool:
        return True

    def _process_memory(self, device: int) -> ProcessMemory:
        return self._devices()[device].process_memory(device)

    def _other_processes_memory(self, device: int) -> dict[int, int] | None:
        return self._devices()[device].other_processes_memory(device)

    def _device_name(self, device: int) -> str:
        return self._devices()[device].name()

    def _notes(self, device: int) -> list[str]:
        dev = self._devices()[device]
        return [f"unified memory: {dev.evidence()}", *dev.memory(device).notes, *self._conflicts, RELEASE_NOTE]


def _jetson_visible(environ: Mapping[str, str]) -> bool:
    """Whether ``CUDA_VISIBLE_DEVICES`` leaves a Jetson's one GPU visible (its UUID is unknown without NVML)."""
    raw = environ.get("CUDA_VISIBLE_DEVICES")
    if raw is None:
        return True
    first = raw.split(",")[0].strip().upper()
    return first == "0" or (first.startswith(("GPU-", "MIG-")) and len(first) > 4)
