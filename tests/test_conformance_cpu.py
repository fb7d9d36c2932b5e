"""The conformance kit against the built-in ``cpu`` platform on the real kernel (real allocations)."""

from __future__ import annotations

import pytest

from devmem.host import CpuPlatform
from devmem.testing import HostFixtures, PlatformConformance


class CpuFixtures(HostFixtures):
    @pytest.fixture
    def platform(self):
        return CpuPlatform()


class TestCpuConformance(PlatformConformance, CpuFixtures):
    pass
