"""devmem's AMD backend: the ``rocm`` platform for discrete AMD GPUs (MI200, MI300X, Radeon) through amdsmi.

AMD APUs (MI300A, Strix Halo, Ryzen iGPUs) are the unified-memory platform's (``devmem_uma``). The amdsmi
access layer is :mod:`devmem_rocm.smi`; the HIP device mapping :mod:`devmem_rocm.visible`. No vendor library
is imported here. The names below are this package's public surface; other backends use these and nothing else:

- the platform: ``RocmPlatform``, ``detect``;
- the driver's files: ``driver_loaded(files)``, ``NO_DRIVER``;
- which GPU is an APU: ``CARVE_OUT_MAX`` (the largest VRAM that is a BIOS carve-out);
- HIP devices: ``select_visible(gpus, environ) -> devmem.sdk.visible.VisibleDevices`` for any GPUs with
  ``uuid_keys()`` (:class:`~devmem_rocm.visible.HipDevice`), in HIP order.
"""

from typing import TYPE_CHECKING

from devmem.sdk import lazy_exports

if TYPE_CHECKING:  # the lazy names, for type checkers
    from devmem_rocm.devices import CARVE_OUT_MAX
    from devmem_rocm.driver import NO_DRIVER, driver_loaded
    from devmem_rocm.platform import RocmPlatform, detect
    from devmem_rocm.visible import HipDevice, select_visible


__all__ = [
    "CARVE_OUT_MAX",
    "HipDevice",
    "NO_DRIVER",
    "RocmPlatform",
    "detect",
    "driver_loaded",
    "select_visible",
]


#: Public names, imported from their modules on first use (PEP 562): the entry point loads this package's
#: ``plugin`` module, which must stay cheap.
__getattr__, __dir__ = lazy_exports(
    globals(),
    {
        "CARVE_OUT_MAX": "devmem_rocm.devices",
        "NO_DRIVER": "devmem_rocm.driver",
        "driver_loaded": "devmem_rocm.driver",
        "RocmPlatform": "devmem_rocm.platform",
        "detect": "devmem_rocm.platform",
        "HipDevice": "devmem_rocm.visible",
        "select_visible": "devmem_rocm.visible",
    },
)
