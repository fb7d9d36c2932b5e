"""Registers the ``acme`` and ``acme-classic`` platforms with devmem.

Imports no vendor library: psutil loads only when a platform is chosen.
"""

from __future__ import annotations

import devmem
from devmem.sdk import deferred


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
    yield devmem.PlatformSpec(
        name="acme-classic",
        priority=40,
        detect=_detect,
        factory=deferred("devmem_acme.classic:ClassicAcmePlatform"),
        description="ACME's first backend, written to the six-member protocol (kept working by devmem's adapter)",
    )
