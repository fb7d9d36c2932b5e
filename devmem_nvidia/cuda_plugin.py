"""The ``cuda`` platform's registration (entry point ``cuda``): NVIDIA GPUs through the CUDA driver API where
NVML cannot serve. Importing this module imports no vendor library and not the platform module."""

from __future__ import annotations

from devmem import hookimpl
from devmem_nvidia.plugin import DRIVER

CUDA = "devmem_nvidia.cuda_platform"


@hookimpl
def devmem_platforms():
    yield DRIVER.spec(
        "cuda",
        50,
        f"{CUDA}:detect_cuda",
        f"{CUDA}:CudaPlatform",
        "NVIDIA GPUs through the CUDA driver API where NVML cannot serve (device-wide figures only)",
    )
