"""devmem's conformance kit against ACME's scripted machine: the same facilities a built-in backend uses."""

from devmem_acme.classic import ClassicAcmePlatform
from devmem_acme.platform import AcmePlatform
from devmem_acme.testing import BASE_RSS, ScriptedAcmeDriver, ScriptedPsutil, acme_scenario

from devmem import GiB
from devmem.testing import PlatformConformance, Scenario, scripted_fixtures


def acme(sc):
    return AcmePlatform(psutil=ScriptedPsutil(sc), files=sc.fs)


class TestAcmeScripted(
    PlatformConformance,
    scripted_fixtures(acme_scenario, acme, integrated=True, pages_instead_of_failing=True),
):
    pass


class TestAcmeClassicScripted(
    PlatformConformance,
    scripted_fixtures(
        acme_scenario,
        lambda sc: ClassicAcmePlatform(psutil=ScriptedPsutil(sc)),
        integrated=True,
        pages_instead_of_failing=True,
    ),
):
    pass


def test_free_is_what_the_host_has_available():
    assert acme(acme_scenario()).device_memory_info(0) == (48 * GiB, 64 * GiB)


def test_process_memory_is_the_resident_set():
    sc = acme_scenario()
    sc.allocate(2 * GiB)
    assert acme(sc).get_process_memory_usage(0) == BASE_RSS + 2 * GiB


def test_notes_name_the_driver_version_its_module_states():
    sc = acme_scenario(drivers=[ScriptedAcmeDriver(version="0.4.0")])
    assert acme(sc).notes(0) == ["acme driver 0.4.0"]


def test_without_the_module_there_are_no_notes():
    assert AcmePlatform(psutil=ScriptedPsutil(acme_scenario()), files=Scenario().fs).notes(0) == []
