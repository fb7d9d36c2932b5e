"""Registers the ``rocm`` platform. Imports no vendor library and not the platform module: ``detect``
checks for the amdgpu driver's files first (:mod:`devmem_rocm.driver`), and only then imports amdsmi (silently)."""

from __future__ import annotations

from devmem.hookspecs import hookimpl
from devmem.types import Detection, PlatformSpec
from devmem_rocm.driver import NO_DRIVER, driver_loaded

#: What /proc/self/maps shows once the HIP runtime is loaded or initialised.
RUNTIME_MARKERS = ("libamdhip64", "libhsa-runtime64", "/dev/kfd")


def _detect() -> Detection:
    if not driver_loaded():
        return Detection(False, NO_DRIVER)
    from devmem_rocm.platform import detect

    return detect()


def _rocm():
    from devmem_rocm.platform import RocmPlatform

    return RocmPlatform()


@hookimpl
def devmem_platforms():
    yield PlatformSpec(
        name="rocm",
        priority=100,
        detect=_detect,
        factory=_rocm,
        runtime_markers=RUNTIME_MARKERS,
        description="discrete AMD GPUs (MI200, MI300X, Radeon) through amdsmi; APUs are left to uma",
    )
