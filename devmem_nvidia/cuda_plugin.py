"""The ``cuda`` platform's registration (entry point ``cuda``): NVIDIA GPUs through the CUDA driver API where
NVML cannot serve. Importing this module imports no vendor library and not the platform module."""

from __future__ import annotations

from devmem.hookspecs import hookimpl
from devmem.types import Detection, PlatformSpec
from devmem_nvidia.driver import NO_DRIVER, driver_loaded
from devmem_nvidia.plugin import RUNTIME_MARKERS


def _detect() -> Detection:
    if not driver_loaded():
        return Detection(False, NO_DRIVER)
    from devmem_nvidia.cuda_platform import detect_cuda

    return detect_cuda()


def _build():
    from devmem_nvidia.cuda_platform import CudaPlatform

    return CudaPlatform()


@hookimpl
def devmem_platforms():
    yield PlatformSpec(
        name="cuda",
        priority=50,
        detect=_detect,
        factory=_build,
        runtime_markers=RUNTIME_MARKERS,
        description="NVIDIA GPUs through the CUDA driver API where NVML cannot serve (device-wide figures only)",
    )
