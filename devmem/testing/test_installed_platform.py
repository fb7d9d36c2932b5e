"""Certify a platform installed on this machine: ``pytest --pyargs devmem.testing --devmem-platform NAME``.

The platform is built as ``DEVMEM_PLATFORM=NAME`` would build it. Allocations are real: host memory
for ``cpu``, torch.cuda device memory for every other platform (when torch reaches its devices;
otherwise those tests skip with the reason). Capabilities are read from the platform itself, so the
kit checks what it says against what it does. Without ``--devmem-platform`` every test here skips.
"""

from __future__ import annotations

from typing import Callable

import pytest

from devmem.platform import Platform
from devmem.testing.allocations import (
    Allocation,
    allocate_host,
    allocate_host_in_subprocess,
    allocate_torch,
    allocate_torch_in_subprocess,
)
from devmem.testing.conformance import Capabilities, PlatformConformance, PlatformFixtures
from devmem.testing.fixtures import HOST_GRANULARITY, TORCH_GRANULARITY, installed_platform, torch_device_reason


def _on_host(platform: Platform) -> bool:
    return platform.name == "cpu"


class InstalledPlatformFixtures(PlatformFixtures):
    @pytest.fixture(scope="class")
    @classmethod
    def platform(cls, request) -> Platform:
        return installed_platform(request.config.getoption("devmem_platform"))

    @pytest.fixture
    def capabilities(self, platform) -> Capabilities:
        reasons: dict[str, str] = {}
        explain = getattr(platform, "process_memory_reason", None)
        process = platform.get_process_memory_usage(0) is not None
        if not process and callable(explain):
            reasons["process_memory"] = explain(0) or ""
        if _on_host(platform):
            reason, granularity = None, HOST_GRANULARITY
        else:
            reason, granularity = torch_device_reason(platform), TORCH_GRANULARITY
        if reason is not None:
            reasons.update(can_allocate=reason, other_process_allocation=reason)
        reasons["free_tracks_allocations"] = "other processes may use the device meanwhile"
        return Capabilities(process_memory=process, can_allocate=reason is None,
                            other_process_allocation=reason is None, granularity=granularity, reasons=reasons)

    @pytest.fixture
    def allocate(self, platform) -> Callable[[int, int], Allocation]:
        return allocate_host if _on_host(platform) else allocate_torch

    @pytest.fixture
    def allocate_in_other_process(self, platform) -> Callable[[int, int], Allocation]:
        return allocate_host_in_subprocess if _on_host(platform) else allocate_torch_in_subprocess


class TestInstalledPlatform(PlatformConformance, InstalledPlatformFixtures):
    pass
