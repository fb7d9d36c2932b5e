"""Registers the ``rocm`` platform. Imports no vendor library and not the platform module: ``detect``
checks for the amdgpu driver's files first (:mod:`devmem_rocm.driver`), and only then imports amdsmi (silently)."""

from __future__ import annotations

from devmem import hookimpl
from devmem.sdk import DriverGate
from devmem_rocm.driver import NO_DRIVER, driver_loaded

PLATFORM = "devmem_rocm.platform"

#: What /proc/self/maps shows once the HIP runtime is loaded or initialised.
RUNTIME_MARKERS = ("libamdhip64", "libhsa-runtime64", "/dev/kfd")


@hookimpl
def devmem_platforms():
    yield DriverGate(driver_loaded, NO_DRIVER, RUNTIME_MARKERS).spec(
        "rocm",
        100,
        f"{PLATFORM}:detect",
        f"{PLATFORM}:RocmPlatform",
        "discrete AMD GPUs (MI200, MI300X, Radeon) through amdsmi; APUs are left to uma",
    )
