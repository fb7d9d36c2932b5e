"""devmem's AMD backend: the ``rocm`` platform for discrete AMD GPUs (MI200, MI300X, Radeon) through amdsmi.

AMD APUs (MI300A, Strix Halo, Ryzen iGPUs) are the unified-memory platform's (``devmem_uma``). The amdsmi
access layer is :mod:`devmem_rocm.smi`; the HIP device mapping :mod:`devmem_rocm.visible`.
"""

from devmem_rocm.platform import RocmPlatform, detect

__all__ = ["RocmPlatform", "detect"]
