"""Registers the ``acme`` platform with devmem. Imports no vendor library: psutil loads only when chosen."""

from __future__ import annotations

import devmem


def _detect() -> devmem.Detection:
    return devmem.Detection(True, "the ACME reference accelerator shares host memory, always present")


def _build() -> devmem.Platform:
    from devmem_acme.platform import AcmePlatform

    return AcmePlatform()


@devmem.hookimpl
def devmem_platforms():
    yield devmem.PlatformSpec(name="acme", priority=50, detect=_detect, factory=_build,
                              description="ACME reference accelerator (host memory, through psutil)")
