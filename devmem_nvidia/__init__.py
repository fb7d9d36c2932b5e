"""devmem's NVIDIA backends: the ``nvml`` platform (discrete GPUs, MIG, containers) and ``wsl2`` (WDDM).

The NVML access layer (:mod:`devmem_nvidia.nvml_access`, :mod:`devmem_nvidia.visible`) is shared with
the unified-memory backend.
"""
