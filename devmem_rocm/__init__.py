"""devmem's AMD backend: the ``rocm`` platform for discrete AMD GPUs (MI200, MI300X, Radeon) through amdsmi.

AMD APUs (MI300A, Strix Halo, Ryzen iGPUs) are the unified-memory platform's (``devmem_uma``). The amdsmi
access layer is :mod:`devmem_rocm.smi`; the HIP device mapping :mod:`devmem_rocm.visible`.
"""

from devmem.lazy import lazy_exports

#: Public names, imported from their modules on first use (PEP 562): the entry point loads this package's
#: ``plugin`` module, which must stay cheap.
_LAZY = {
    "RocmPlatform": "devmem_rocm.platform",
    "detect": "devmem_rocm.platform",
}

__all__ = sorted(_LAZY)


__getattr__, __dir__ = lazy_exports(globals(), _LAZY)
