"""The ``uma`` platform's registration (priority 200: it outranks nvml, rocm and wsl2 on an integrated part).

Importing this module imports no vendor library: pynvml is imported by ``detect`` and ``factory``.
"""

from __future__ import annotations

import os
from typing import Any, Mapping

from devmem.host import REAL_FILES, Files
from devmem.hookspecs import hookimpl
from devmem.types import Detection, PlatformSpec
from devmem_nvidia.nvml_access import session_for
from devmem_uma.platform import UmaPlatform
from devmem_uma.survey import survey

PRIORITY = 200


def detect_uma(*, nvml: Any = None, files: Files = REAL_FILES, environ: Mapping[str, str] | None = None) -> Detection:
    """Found when every accelerator here has unified memory (see :mod:`devmem_uma.survey`); cheap, no CUDA context."""
    return survey(files, session_for(nvml), os.environ if environ is None else environ).detection()


@hookimpl
def devmem_platforms():
    yield PlatformSpec(
        name="uma",
        priority=PRIORITY,
        detect=detect_uma,
        factory=UmaPlatform,
        description="unified memory (DGX Spark GB10, Jetson, AMD APUs): free is what an allocation can obtain",
    )
