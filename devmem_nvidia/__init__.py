"""devmem's NVIDIA backends: the ``nvml`` platform (discrete GPUs, MIG, containers) and ``wsl2`` (WDDM).

The NVML access layer (:mod:`devmem_nvidia.nvml_access`, :mod:`devmem_nvidia.visible`,
:mod:`devmem_nvidia.pidns`) is shared with the unified-memory backend. No vendor library is imported here.
"""

from devmem_nvidia.nvml_access import NvmlCallError, NvmlSession, NvmlUnavailable, session_for
from devmem_nvidia.nvml_platform import NvmlPlatform, detect_nvml
from devmem_nvidia.pidns import CudaDriverAllocator
from devmem_nvidia.wsl2 import WslPlatform, detect_wsl2

__all__ = [
    "CudaDriverAllocator",
    "NvmlCallError",
    "NvmlPlatform",
    "NvmlSession",
    "NvmlUnavailable",
    "WslPlatform",
    "detect_nvml",
    "detect_wsl2",
    "session_for",
]
