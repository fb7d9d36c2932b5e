"""The ``cuda`` platform: NVIDIA GPUs through the CUDA driver API where NVML cannot serve.

A container without ``libnvidia-ml``, or one where NVML is denied outright, still runs CUDA; this platform
(priority 50, below ``nvml``) keeps devmem on the GPU there instead of falling back to host memory.

- ``total``: ``cuDeviceTotalMem_v2``; where this process already has a CUDA context on the device, ``free`` and
  ``total`` are ``cuMemGetInfo_v2`` (what ``torch.cuda.mem_get_info`` reports). Without a context devmem does
  not create one: ``free`` is reported as ``total`` and its source says it was not readable. An engine reads
  its figures after loading its model, when its context exists.
- limits that bind this process (MPS, the MPS control daemon's default, HAMi-style, cgroup ``dmem``) cap both, as
  on ``nvml``. Under an MPS daemon's default limit the runtime's ``free`` already counts it, but its ``total`` is
  the device's: asking the daemon (:mod:`devmem_nvidia.mps_control`) is what caps ``total``.
- per process: ``None`` (``no-source``): nothing without NVML attributes device memory to processes.
- device indices are the driver's own (it applies ``CUDA_VISIBLE_DEVICES``).
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable, Mapping
from typing import Any

from devmem import Detection, DevmemError, MemoryInfo, PlatformBase
from devmem.sdk import (
    REAL_FILES,
    DeviceMemory,
    DmemLimits,
    Files,
    ProcessMemory,
    ReasonKind,
    apply_limits,
    checked_memory,
)
from devmem_nvidia.cuda_driver import CudaDriver
from devmem_nvidia.driver import NO_DRIVER, driver_loaded
from devmem_nvidia.limits import env_limits
from devmem_nvidia.mps_control import MpsDefaults, Runner, run_control

NO_PROCESS_FIGURE = (
    "the cuda platform reads device-wide figures from the CUDA driver; without NVML nothing "
    "attributes device memory to processes"
)


def detect_cuda(
    files: Files = REAL_FILES, find: Callable[[str], str | None] | None = None, system: str = sys.platform
) -> Detection:
    """An NVIDIA driver is loaded and the CUDA driver library is installed. Loads nothing (``find``, by default
    ``ctypes.util.find_library``, looks the library up by name); whether CUDA answers is learnt when the
    platform is built."""
    if system == "win32" or not driver_loaded(files, system):
        return Detection(False, NO_DRIVER if system != "win32" else "Windows: left to the wsl2 platform")
    if find is None:
        import ctypes.util

        find = ctypes.util.find_library
    path = find("cuda")
    if path is None:
        return Detection(False, "the CUDA driver library (libcuda) is not installed")
    return Detection(True, f"CUDA driver library {path} (used where NVML cannot serve)")


class CudaPlatform(PlatformBase):
    """NVIDIA GPUs through the CUDA driver API. See the module docstring.

    ``library``: a loaded ``libcuda`` or a scripted one (``None``: load ``libcuda.so.1`` on first use);
    ``files``: the /proc and cgroup boundary; ``environ``: where the limit variables come from; ``mps_control``: how
    to ask the MPS control daemon (``None``: its program, with the real ``libcuda``).
    Raises :class:`DevmemError` when the driver cannot be initialised."""

    name = "cuda"
    torch_device = "cuda"
    dist_backend = "nccl"

    def __init__(
        self,
        *,
        library: Any = None,
        files: Files = REAL_FILES,
        environ: Mapping[str, str] | None = None,
        mps_control: Runner | None = None,
    ):
        self._driver = CudaDriver.shared() if library is None else CudaDriver(library)
        self._files = files
        self._dmem = DmemLimits(files)
        self._environ = os.environ if environ is None else environ
        self._mps_defaults = MpsDefaults(
            mps_control if mps_control is not None else run_control if library is None else None, self._environ, files
        )
        self._count = self._driver.device_count()

    def device_count(self) -> int:
        return self._count

    def _memory(self, device: int) -> DeviceMemory:
        reading = self._driver.mem_get_info(device)
        if reading is None:
            total = self._driver.total_memory(device)
            memory = DeviceMemory(
                MemoryInfo(free=total, total=total),
                {
                    "free": "not readable: this process has no CUDA context on the device and devmem does not create "
                    "one; reported as total (cuDeviceTotalMem) until the process creates its context",
                    "total": "CUDA driver cuDeviceTotalMem_v2",
                },
            )
        else:
            free, total = reading
            memory = checked_memory(
                free,
                total,
                {
                    "free": "CUDA driver cuMemGetInfo_v2 free (this process's context)",
                    "total": "CUDA driver cuMemGetInfo_v2 total",
                },
                "cuMemGetInfo_v2",
            )
        limits = env_limits(self._environ, device) + self._dmem(self._driver.pci_bus_id(device))
        limits += self._mps_defaults.limit(device, self._count)
        return apply_limits(memory, limits, None) if limits else memory

    def _process_memory(self, device: int) -> ProcessMemory:
        return ProcessMemory.unknown(ReasonKind.NO_SOURCE, NO_PROCESS_FIGURE)

    def _is_integrated(self, device: int) -> bool:
        return self._driver.integrated(device)

    def _pages_instead_of_failing(self, device: int) -> bool:
        return self._is_integrated(device)

    def _device_name(self, device: int) -> str:
        try:
            return self._driver.name(device)
        except DevmemError:
            return f"cuda:{device}"

    def _device_uuid(self, device: int) -> str | None:
        """The UUID NVML gives the same device (``GPU-...``, ``MIG-...``), so that both platforms key it alike."""
        try:
            return self._driver.uuid(device)
        except DevmemError:
            return None

    def _notes(self, device: int) -> list[str]:
        return [
            "device-wide figures from the CUDA driver API (the platform for machines where NVML cannot serve)",
            *self._memory(device).notes,
        ]


__all__ = ["CudaPlatform", "detect_cuda"]
