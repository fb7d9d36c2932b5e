"""The conformance kit against the rocm platform on scripted amdsmi: two MI300X (amdsmi lists them in the
opposite order to HIP, and process figures become valid 1 s after amdsmi starts, as documented), and a
Radeon behind the older two-step process API."""

from __future__ import annotations

from devmem.testing import PlatformConformance, Scenario, ScriptedClock, scripted_fixtures
from devmem_rocm import RocmPlatform
from devmem_rocm.testing import ScriptedAmdsmi, mi300x_scenario, radeon_scenario


def rocm_platform(sc: Scenario, api: str = "list") -> RocmPlatform:
    clock = ScriptedClock()
    amdsmi = ScriptedAmdsmi(sc, api=api, handle_order=list(range(len(sc.devices)))[::-1], settle_s=1.0, clock=clock)
    return RocmPlatform(amdsmi=amdsmi, environ=sc.environ, clock=clock, sleep=clock.sleep)


class TestRocmMi300xConformance(
    PlatformConformance,
    scripted_fixtures(lambda: mi300x_scenario(2), rocm_platform, integrated=False, pages_instead_of_failing=False),
):
    pass


class TestRocmRadeonTwoStepApiConformance(
    PlatformConformance,
    scripted_fixtures(
        radeon_scenario, lambda sc: rocm_platform(sc, api="handles"), integrated=False, pages_instead_of_failing=False
    ),
):
    pass
