"""devmem's NVIDIA platforms, registered through the ``devmem`` entry-point group like any vendor wheel.

Importing this module imports no vendor library and none of the platform modules: detection checks for
the driver's files first (:mod:`devmem_nvidia.driver`), and only then imports pynvml and the platform.
"""

from __future__ import annotations

import sys

from devmem import Detection, PlatformSpec, hookimpl
from devmem.sdk import DriverGate, deferred
from devmem_nvidia.driver import NO_DRIVER, NOT_WSL, driver_loaded, wsl_marker

#: What /proc/self/maps shows once the CUDA runtime is loaded or initialised (NVML may load libcuda.so without
#: initialising it, so the driver library alone is no evidence).
RUNTIME_MARKERS = ("libcudart", "/dev/nvidia-uvm")
NVML = "devmem_nvidia.nvml_platform"
WSL2 = "devmem_nvidia.wsl2"
DEMO = "devmem_nvidia.demo"


def _wddm_possible() -> bool:
    return sys.platform == "win32" or wsl_marker() is not None


#: The nvml and cuda platforms load only where the NVIDIA driver's files are present; wsl2 only under WDDM.
DRIVER = DriverGate(driver_loaded, NO_DRIVER, RUNTIME_MARKERS)
WDDM = DriverGate(_wddm_possible, NOT_WSL, RUNTIME_MARKERS)


@hookimpl
def devmem_platforms():
    yield DRIVER.spec(
        "nvml",
        100,
        f"{NVML}:detect_nvml",
        f"{NVML}:NvmlPlatform",
        "discrete NVIDIA GPUs through NVML (whole GPUs, MIG instances, containers)",
    )
    yield WDDM.spec(
        "wsl2",
        150,
        f"{WSL2}:detect_wsl2",
        f"{WSL2}:WslPlatform",
        "NVIDIA GPUs under WDDM (WSL2, native Windows): no per-process figures, pages instead of failing",
    )
    # below the built-in cpu platform, so detection never chooses it: only DEVMEM_PLATFORM=demo does
    yield PlatformSpec(
        name="demo",
        priority=-100,
        detect=_demo,
        factory=deferred(f"{DEMO}:DemoPlatform"),
        description="a scripted node of eight NVIDIA H200s with serving engines, to try devmem without a GPU",
    )


def _demo() -> Detection:
    return Detection(True, "a scripted node of eight NVIDIA H200s with engines, chosen by DEVMEM_PLATFORM=demo")
