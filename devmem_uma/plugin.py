"""The ``uma`` platform's registration (priority 200: it outranks nvml, rocm and wsl2 on an integrated part).

Importing this module imports no vendor library and not the platform module. Detection reads files first:
pynvml is imported only where an NVIDIA driver is loaded, and nothing more where neither an NVIDIA nor an
amdgpu driver nor a Jetson is found.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

import devmem_nvidia
import devmem_rocm
from devmem import Detection, PlatformSpec, hookimpl
from devmem.sdk import REAL_FILES, Files, deferred
from devmem_uma.tegra import jetson_reason

PRIORITY = 200
#: What /proc/self/maps shows once the CUDA or HIP runtime is loaded or initialised.
RUNTIME_MARKERS = ("libcudart", "/dev/nvidia-uvm", "libamdhip64", "libhsa-runtime64", "/dev/kfd")


def detect_uma(*, nvml: Any = None, files: Files = REAL_FILES, environ: Mapping[str, str] | None = None) -> Detection:
    """Found when every accelerator here has unified memory (see :mod:`devmem_uma.survey`); cheap, no CUDA context."""
    nvml_usable = nvml is not None or devmem_nvidia.driver_loaded(files)
    if not nvml_usable and not devmem_rocm.driver_loaded(files) and jetson_reason(files) is None:
        return Detection(
            False, "no unified-memory GPU: no amdgpu driver, no Jetson files, and " + devmem_nvidia.NO_DRIVER
        )
    from devmem_uma.survey import survey

    session = devmem_nvidia.NvmlSession.for_module(nvml) if nvml_usable else None
    return survey(files, session, os.environ if environ is None else environ).detection()


@hookimpl
def devmem_platforms():
    yield PlatformSpec(
        name="uma",
        priority=PRIORITY,
        detect=detect_uma,
        factory=deferred("devmem_uma.platform:UmaPlatform"),
        runtime_markers=RUNTIME_MARKERS,
        description="unified memory (DGX Spark GB10, Jetson, AMD APUs): free is what an allocation can obtain",
    )
