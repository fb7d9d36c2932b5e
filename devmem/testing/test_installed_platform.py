"""Certify a platform installed on this machine: ``pytest --pyargs devmem.testing --devmem-platform NAME``.

The platform is built as ``DEVMEM_PLATFORM=NAME`` would build it. Allocations are real: host memory for a
platform that declares no torch device namespace, torch device memory in the namespace it declares for every
other platform (when torch reaches its devices; otherwise those tests skip with the reason). Capabilities are
read from the platform itself, so the kit checks what it says against what it does. Without ``--devmem-platform``
every test here skips.
"""

from __future__ import annotations

import functools
from collections.abc import Callable

import pytest

from devmem.platform import Platform
from devmem.testing.allocations import (
    Allocation,
    allocate_host,
    allocate_host_in_subprocess,
    allocate_torch,
    allocate_torch_in_subprocess,
)
from devmem.testing.conformance import Capabilities, PlatformConformance, PlatformFixtures, torch_device_reason
from devmem.testing.fixtures import HOST_GRANULARITY, TORCH_GRANULARITY, installed_platform


def _on_host(platform: Platform) -> bool:
    return platform.torch_device is None


class InstalledPlatformFixtures(PlatformFixtures):
    @pytest.fixture(scope="class")
    @classmethod
    def platform(cls, request) -> Platform:
        return installed_platform(request.config.getoption("devmem_platform"))

    @pytest.fixture
    def capabilities(self, platform) -> Capabilities:
        reasons: dict[str, str] = {}
        answer = platform.process_memory(0)
        process = answer.used is not None
        if answer.reason is not None:
            reasons["process_memory"] = answer.reason.text
        if _on_host(platform):
            reason, granularity = None, HOST_GRANULARITY
        else:
            reason, granularity = torch_device_reason(platform), TORCH_GRANULARITY
        if reason is not None:
            reasons.update(can_allocate=reason, other_process_allocation=reason)
        reasons["free_tracks_allocations"] = "other processes may use the device meanwhile"
        return Capabilities(
            process_memory=process,
            can_allocate=reason is None,
            other_process_allocation=reason is None,
            granularity=granularity,
            reasons=reasons,
        )

    @pytest.fixture
    def allocate(self, platform) -> Callable[[int, int], Allocation]:
        return (
            allocate_host if _on_host(platform) else functools.partial(allocate_torch, namespace=platform.torch_device)
        )

    @pytest.fixture
    def allocate_in_other_process(self, platform) -> Callable[[int, int], Allocation]:
        if _on_host(platform):
            return allocate_host_in_subprocess
        return functools.partial(allocate_torch_in_subprocess, namespace=platform.torch_device)


class TestInstalledPlatform(PlatformConformance, InstalledPlatformFixtures):
    pass
