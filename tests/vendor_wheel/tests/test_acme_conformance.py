"""devmem's conformance kit, run by ACME's CI against the installed ``acme`` platform."""

import pytest

from devmem.testing import HostFixtures, PlatformConformance
from devmem_acme.platform import AcmePlatform


class AcmeFixtures(HostFixtures):
    @pytest.fixture
    def platform(self):
        return AcmePlatform()


class TestAcme(PlatformConformance, AcmeFixtures):
    pass
