"""devmem's conformance kit against ACME's scripted psutil: the same facilities a built-in backend uses."""

from devmem_acme.platform import AcmePlatform
from devmem_acme.testing import BASE_RSS, ScriptedPsutil, acme_scenario

from devmem.testing import PlatformConformance, scripted_fixtures
from devmem.types import GiB


class TestAcmeScripted(
    PlatformConformance,
    scripted_fixtures(
        acme_scenario,
        lambda sc: AcmePlatform(psutil=ScriptedPsutil(sc)),
        integrated=True,
        pages_instead_of_failing=True,
    ),
):
    pass


def test_free_is_what_the_host_has_available():
    sc = acme_scenario()
    assert AcmePlatform(psutil=ScriptedPsutil(sc)).device_memory_info(0) == (48 * GiB, 64 * GiB)


def test_process_memory_is_the_resident_set():
    sc = acme_scenario()
    sc.allocate(2 * GiB)
    assert AcmePlatform(psutil=ScriptedPsutil(sc)).get_process_memory_usage(0) == BASE_RSS + 2 * GiB
