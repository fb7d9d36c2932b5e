"""Registers the ``acme`` platform with devmem. Imports no vendor library: psutil loads only when chosen."""

from __future__ import annotations

import devmem
from devmem.lazy import deferred


def _detect() -> devmem.Detection:
    return devmem.Detection(True, "the ACME reference accelerator shares host memory, always present")


@devmem.hookimpl
def devmem_platforms():
    yield devmem.PlatformSpec(
        name="acme",
        priority=50,
        detect=_detect,
        factory=deferred("devmem_acme.platform:AcmePlatform"),
        description="ACME reference accelerator (host memory, through psutil)",
    )
