"""devmem's conformance kit, run by ACME's CI against the installed ``acme`` platform."""

import pytest
from devmem_acme.platform import AcmePlatform

from devmem.testing import HostFixtures, PlatformConformance


class AcmeFixtures(HostFixtures):
    @pytest.fixture
    def platform(self):
        return AcmePlatform()


class TestAcme(PlatformConformance, AcmeFixtures):
    pass
