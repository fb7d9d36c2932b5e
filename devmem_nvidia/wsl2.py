"""The ``wsl2`` platform: NVIDIA GPUs under the Windows display driver model (WSL2, native Windows WDDM).

Under WDDM the Windows kernel, not the NVIDIA driver, manages device memory: NVML cannot attribute
memory to processes, and an over-subscribed allocation is paged to host RAM instead of failing, so a
caching allocator never frees its cache and retries. Device memory comes from NVML where it answers,
else from the CUDA runtime's ``mem_get_info`` (called lazily, only then).
"""

from __future__ import annotations

import logging
import os
import sys
from collections.abc import Callable, Mapping
from typing import Any

from devmem import Detection, DevmemError, PlatformBase
from devmem.sdk import REAL_FILES, DeviceMemory, Files, ProcessMemory, ReasonKind, checked_memory
from devmem_nvidia.driver import NO_DRIVER, NOT_WSL, driver_loaded, wsl_marker
from devmem_nvidia.nvml_access import NvmlCallError, NvmlSession, device_name, driver_model, read_memory
from devmem_nvidia.visible import DeviceTable

log = logging.getLogger("devmem.nvidia")

WDDM_REASON = "WDDM does not report per-process memory"
NVML_DRIVER_WDDM = 0


def detect_wsl2(nvml: Any = None, files: Files = REAL_FILES, system: str = sys.platform) -> Detection:
    """WSL2 (``/dev/dxg``, microsoft kernel) or native Windows with a WDDM device, with NVML listing a GPU."""
    marker = wsl_marker(files) if system != "win32" else None
    if system != "win32" and marker is None:
        return Detection(False, NOT_WSL)
    if nvml is None and not driver_loaded(files, system):
        return Detection(False, f"{marker}, but {NO_DRIVER}")
    session = NvmlSession.for_module(nvml)
    found, reason = session.probe()
    if not found:
        return Detection(False, f"{marker or 'Windows'}, but {reason}")
    if marker is not None:
        return Detection(True, f"WSL2 ({marker}); {reason}")
    try:
        handles = [session.handle_by_index(i) for i in range(session.device_count())]
    except DevmemError as exc:
        return Detection(False, f"Windows, but {exc}")
    if any(driver_model(session, h) == NVML_DRIVER_WDDM for h in handles):
        return Detection(True, f"Windows with the WDDM driver model; {reason}")
    return Detection(False, "Windows, but no device uses the WDDM driver model (TCC/MCDM: the nvml platform applies)")


def _torch_mem_get_info(device: int) -> tuple[int, int]:
    import torch

    return torch.cuda.mem_get_info(device)


class WslPlatform(PlatformBase):
    """NVIDIA under WDDM. ``mem_get_info(device) -> (free, total)`` is the runtime fallback (torch's by default)."""

    name = "wsl2"
    torch_device = "cuda"
    dist_backend = "nccl"

    def __init__(
        self,
        *,
        nvml: Any = None,
        files: Files = REAL_FILES,
        environ: Mapping[str, str] | None = None,
        mem_get_info: Callable[[int], tuple[int, int]] | None = None,
    ):
        self._session = NvmlSession.for_module(nvml)
        self._files = files
        self._table = DeviceTable(self._session, os.environ if environ is None else environ)
        self._mem_get_info = mem_get_info or _torch_mem_get_info

    def device_count(self) -> int:
        return len(self._table.devices())

    def _memory(self, device: int) -> DeviceMemory:
        dev = self._table.devices()[device]
        try:
            reading = read_memory(self._session, dev.handle)
        except NvmlCallError as exc:
            log.debug("devmem: wsl2: NVML memory info failed on device %d (%s); asking the CUDA runtime", device, exc)
            try:
                free, total = self._mem_get_info(device)
            except Exception as rt_exc:  # the runtime's own error type varies (RuntimeError, torch errors)
                raise DevmemError(
                    f"wsl2: cannot read the memory of device {device}: NVML said {exc.error} and "
                    f"the CUDA runtime said {type(rt_exc).__name__}: {rt_exc}"
                ) from rt_exc
            source = f"the CUDA runtime's mem_get_info (NVML: {exc.error})"
            return checked_memory(free, total, {"free": source, "total": source}, "the CUDA runtime's mem_get_info")
        source = f"NVML memory info v{reading.version}"
        total_source = source + (" total - reserved" if reading.reserved is not None else "")
        return checked_memory(
            reading.free, reading.runtime_total, {"free": source, "total": total_source}, "NVML memory info"
        )

    def _process_memory(self, device: int) -> ProcessMemory:
        return ProcessMemory.unknown(ReasonKind.DRIVER_MODEL, WDDM_REASON)

    def _is_integrated(self, device: int) -> bool:
        return False

    def _pages_instead_of_failing(self, device: int) -> bool:
        return True

    def _device_name(self, device: int) -> str:
        dev = self._table.devices()[device]
        try:
            return device_name(self._session, dev.handle)
        except NvmlCallError:
            return f"NVIDIA {dev.uuid}"

    def _notes(self, device: int) -> list[str]:
        return [
            "WDDM: the driver pages over-subscribed memory to host RAM instead of failing an allocation; "
            "release the allocator cache before large allocations",
            WDDM_REASON,
        ]
