"""devmem's NVIDIA backends: the ``nvml`` platform (discrete GPUs, MIG, containers) and ``wsl2`` (WDDM).

The NVML access layer (:mod:`devmem_nvidia.nvml_access`, :mod:`devmem_nvidia.visible`,
:mod:`devmem_nvidia.pidns`) is shared with the unified-memory backend. No vendor library is imported here.
"""

from devmem.lazy import lazy_exports

#: Public names, imported from their modules on first use (PEP 562): the entry point loads this package's
#: ``plugin`` module, which must stay cheap.
_LAZY = {
    "CudaDriverAllocator": "devmem_nvidia.pidns",
    "NvmlCallError": "devmem_nvidia.nvml_access",
    "NvmlSession": "devmem_nvidia.nvml_access",
    "NvmlUnavailable": "devmem_nvidia.nvml_access",
    "session_for": "devmem_nvidia.nvml_access",
    "NvmlPlatform": "devmem_nvidia.nvml_platform",
    "detect_nvml": "devmem_nvidia.nvml_platform",
    "WslPlatform": "devmem_nvidia.wsl2",
    "detect_wsl2": "devmem_nvidia.wsl2",
}

__all__ = sorted(_LAZY)


__getattr__, __dir__ = lazy_exports(globals(), _LAZY)
