"""Registers the ``rocm`` platform. Imports no vendor library: amdsmi is imported (silently) by ``detect``."""

from __future__ import annotations

from devmem.hookspecs import hookimpl
from devmem.types import PlatformSpec
from devmem_rocm.platform import RocmPlatform, detect


@hookimpl
def devmem_platforms():
    yield PlatformSpec(
        name="rocm",
        priority=100,
        detect=detect,
        factory=RocmPlatform,
        description="discrete AMD GPUs (MI200, MI300X, Radeon) through amdsmi; APUs are left to uma",
    )
