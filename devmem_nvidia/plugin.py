"""devmem's NVIDIA platforms, registered through the ``devmem`` entry-point group like any vendor wheel.

Importing this module imports no vendor library and none of the platform modules: detection checks for
the driver's files first (:mod:`devmem_nvidia.driver`), and only then imports pynvml and the platform.
"""

from __future__ import annotations

import sys

from devmem.hookspecs import hookimpl
from devmem.lazy import deferred, gated_detect
from devmem.types import PlatformSpec
from devmem_nvidia.driver import NO_DRIVER, NOT_WSL, driver_loaded, wsl_marker

#: What /proc/self/maps shows once the CUDA runtime is loaded or initialised (NVML may load libcuda.so without
#: initialising it, so the driver library alone is no evidence).
RUNTIME_MARKERS = ("libcudart", "/dev/nvidia-uvm")
NVML = "devmem_nvidia.nvml_platform"
WSL2 = "devmem_nvidia.wsl2"


def _wddm_possible() -> bool:
    return sys.platform == "win32" or wsl_marker() is not None


@hookimpl
def devmem_platforms():
    yield PlatformSpec(
        name="nvml",
        priority=100,
        detect=gated_detect(driver_loaded, NO_DRIVER, f"{NVML}:detect_nvml"),
        factory=deferred(f"{NVML}:NvmlPlatform"),
        runtime_markers=RUNTIME_MARKERS,
        description="discrete NVIDIA GPUs through NVML (whole GPUs, MIG instances, containers)",
    )
    yield PlatformSpec(
        name="wsl2",
        priority=150,
        detect=gated_detect(_wddm_possible, NOT_WSL, f"{WSL2}:detect_wsl2"),
        factory=deferred(f"{WSL2}:WslPlatform"),
        runtime_markers=RUNTIME_MARKERS,
        description="NVIDIA GPUs under WDDM (WSL2, native Windows): no per-process figures, pages instead of failing",
    )
