"""devmem's NVIDIA platforms, registered through the ``devmem`` entry-point group like any vendor wheel.

Importing this module imports no vendor library and none of the platform modules: detection checks for
the driver's files first (:mod:`devmem_nvidia.driver`), and only then imports pynvml and the platform.
"""

from __future__ import annotations

import sys

from devmem.hookspecs import hookimpl
from devmem.types import Detection, PlatformSpec
from devmem_nvidia.driver import NO_DRIVER, NOT_WSL, driver_loaded, wsl_marker

#: What /proc/self/maps shows once the CUDA runtime is loaded or initialised (NVML may load libcuda.so without
#: initialising it, so the driver library alone is no evidence).
RUNTIME_MARKERS = ("libcudart", "/dev/nvidia-uvm")


def _detect_nvml() -> Detection:
    if not driver_loaded():
        return Detection(False, NO_DRIVER)
    from devmem_nvidia.nvml_platform import detect_nvml

    return detect_nvml()


def _nvml():
    from devmem_nvidia.nvml_platform import NvmlPlatform

    return NvmlPlatform()


def _detect_wsl2() -> Detection:
    if sys.platform != "win32" and wsl_marker() is None:
        return Detection(False, NOT_WSL)
    from devmem_nvidia.wsl2 import detect_wsl2

    return detect_wsl2()


def _wsl2():
    from devmem_nvidia.wsl2 import WslPlatform

    return WslPlatform()


@hookimpl
def devmem_platforms():
    yield PlatformSpec(
        name="nvml",
        priority=100,
        detect=_detect_nvml,
        factory=_nvml,
        runtime_markers=RUNTIME_MARKERS,
        description="discrete NVIDIA GPUs through NVML (whole GPUs, MIG instances, containers)",
    )
    yield PlatformSpec(
        name="wsl2",
        priority=150,
        detect=_detect_wsl2,
        factory=_wsl2,
        runtime_markers=RUNTIME_MARKERS,
        description="NVIDIA GPUs under WDDM (WSL2, native Windows): no per-process figures, pages instead of failing",
    )
