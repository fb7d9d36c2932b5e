"""devmem's NVIDIA platforms, registered through the ``devmem`` entry-point group like any vendor wheel.

Importing this module imports no vendor library: pynvml is imported by ``detect`` and ``factory``.
"""

from __future__ import annotations

from devmem.hookspecs import hookimpl
from devmem.types import PlatformSpec
from devmem_nvidia.nvml_platform import NvmlPlatform, detect_nvml
from devmem_nvidia.wsl2 import WslPlatform, detect_wsl2


@hookimpl
def devmem_platforms():
    yield PlatformSpec(
        name="nvml",
        priority=100,
        detect=detect_nvml,
        factory=NvmlPlatform,
        description="discrete NVIDIA GPUs through NVML (whole GPUs, MIG instances, containers)",
    )
    yield PlatformSpec(
        name="wsl2",
        priority=150,
        detect=detect_wsl2,
        factory=WslPlatform,
        description="NVIDIA GPUs under WDDM (WSL2, native Windows): no per-process figures, pages instead of failing",
    )
