"""devmem's NVIDIA backends: ``nvml`` (discrete GPUs, MIG, containers), ``wsl2`` (WDDM) and ``cuda`` (no NVML).

No vendor library is imported here. The names below are this package's public surface; other backends (the
unified-memory one) use these and nothing else:

- platforms: ``NvmlPlatform``, ``WslPlatform``, ``CudaPlatform`` (the CUDA driver API where NVML cannot serve),
  ``detect_nvml``, ``detect_wsl2``, ``detect_cuda``;
- the driver's files: ``driver_loaded(files)``, ``NO_DRIVER``;
- the NVML session: ``NvmlSession`` (``NvmlSession.shared()``, ``NvmlSession.for_module(nvml)``),
  ``NvmlUnavailable``, ``NvmlCallError``;
- NVML readings: ``read_memory(session, handle)``, ``device_name(session, handle)``;
- CUDA devices: ``visible_devices(session, environ) -> devmem.sdk.visible.VisibleDevices[VisibleDevice]``;
- this process's driver-side PID: ``DeviceAllocator`` (the runtime boundary), ``CudaDriverAllocator``.
"""

from typing import TYPE_CHECKING

from devmem.sdk import lazy_exports

if TYPE_CHECKING:  # the lazy names, for type checkers
    from devmem_nvidia.driver import NO_DRIVER, driver_loaded
    from devmem_nvidia.nvml_access import (
        NvmlCallError,
        NvmlSession,
        NvmlUnavailable,
        device_name,
        read_memory,
    )
    from devmem_nvidia.nvml_platform import NvmlPlatform, detect_nvml
    from devmem_nvidia.pidns import CudaDriverAllocator, DeviceAllocator
    from devmem_nvidia.visible import VisibleDevice, visible_devices
    from devmem_nvidia.wsl2 import WslPlatform, detect_wsl2


__all__ = [
    "CudaDriverAllocator",
    "DeviceAllocator",
    "NO_DRIVER",
    "NvmlCallError",
    "NvmlPlatform",
    "NvmlSession",
    "NvmlUnavailable",
    "VisibleDevice",
    "WslPlatform",
    "detect_nvml",
    "detect_wsl2",
    "device_name",
    "driver_loaded",
    "read_memory",
    "visible_devices",
]


#: Public names, imported from their modules on first use (PEP 562): the entry point loads this package's
#: ``plugin`` module, which must stay cheap.
__getattr__, __dir__ = lazy_exports(
    globals(),
    {
        "NO_DRIVER": "devmem_nvidia.driver",
        "driver_loaded": "devmem_nvidia.driver",
        "CudaDriverAllocator": "devmem_nvidia.pidns",
        "DeviceAllocator": "devmem_nvidia.pidns",
        "NvmlCallError": "devmem_nvidia.nvml_access",
        "NvmlSession": "devmem_nvidia.nvml_access",
        "NvmlUnavailable": "devmem_nvidia.nvml_access",
        "device_name": "devmem_nvidia.nvml_access",
        "read_memory": "devmem_nvidia.nvml_access",
        "CudaPlatform": "devmem_nvidia.cuda_platform",
        "detect_cuda": "devmem_nvidia.cuda_platform",
        "NvmlPlatform": "devmem_nvidia.nvml_platform",
        "detect_nvml": "devmem_nvidia.nvml_platform",
        "VisibleDevice": "devmem_nvidia.visible",
        "visible_devices": "devmem_nvidia.visible",
        "WslPlatform": "devmem_nvidia.wsl2",
        "detect_wsl2": "devmem_nvidia.wsl2",
    },
)
