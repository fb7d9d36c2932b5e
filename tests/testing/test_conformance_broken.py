"""A backend that gets the contract wrong on purpose fails the kit, with messages naming each mistake.

The kit runs on it in a separate pytest process (its failures must not fail this suite); these tests
read that run's JUnit report.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import time
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from devmem.cpu import CpuPlatform
from devmem.platform import DeviceMemory, PlatformBase, ProcessMemory
from devmem.testing import Scenario, ScriptedDevice
from devmem.types import GiB, KiB, MemoryInfo, MiB

pytestmark = pytest.mark.slow  # runs the kit in a pytest subprocess: `pytest -m slow` and CI run it


def broken_scenario() -> Scenario:
    return Scenario(devices=[ScriptedDevice(name="Broken 16G", total=16 * GiB, reserved=0)])


class BrokenPlatform(PlatformBase):
    """Reads a Scenario as its vendor library, and makes the mistakes the kit exists to catch."""

    name = "broken"

    def __init__(self, *, scenario: Scenario):
        self._sc = scenario

    def device_count(self) -> int:
        return len(self._sc.devices)

    def _device(self, device):
        return self._sc.devices[device]  # no check_device: -1 wraps around, count raises IndexError

    def memory(self, device=0):
        dev = self._device(device)
        return DeviceMemory(MemoryInfo(self._sc.device_free(device) // KiB, dev.total // KiB))  # KiB, not bytes

    def device_memory_info(self, device=0):
        return self.memory(device).info

    def process_memory(self, device=0):
        self._device(device)
        return ProcessMemory(self._sc.device_used(device))  # every process on the device, not this one

    def get_process_memory_usage(self, device=0):
        return self.process_memory(device).used

    def is_integrated_gpu(self, device=0):
        self._device(device)
        return True

    def pages_instead_of_failing(self, device=0):
        self._device(device)
        return False  # integrated, yet claims over-subscription fails

    def device_name(self, device=0):
        time.sleep(0.08)  # a slow vendor query on every call
        return self._device(device).name

    def notes(self, device=0):
        return "runs hot"  # a str, not a list of str


KIT_FILE = """
from devmem.testing import PlatformConformance, scripted_fixtures
from test_conformance_broken import BrokenPlatform, broken_scenario


class TestBrokenBackend(PlatformConformance, scripted_fixtures(
        broken_scenario, lambda sc: BrokenPlatform(scenario=sc))):
    pass
"""


class KibHostPlatform(CpuPlatform):
    """Real host memory reported in KiB (on a host above 64 GiB this passes the kit's plausibility floor)."""

    name = "kib-host"

    def _memory(self, device):
        info = super()._memory(device).info
        return DeviceMemory(MemoryInfo(info.free // KiB, info.total // KiB))


class MibFreeHostPlatform(CpuPlatform):
    """Real host memory with free in MiB and total in bytes."""

    name = "mib-free-host"

    def _memory(self, device):
        info = super()._memory(device).info
        return DeviceMemory(MemoryInfo(max(1, info.free // MiB), info.total))


HARDWARE_KIT_FILE = """
import pytest
from devmem.testing import HostFixtures, PlatformConformance
from test_conformance_broken import KibHostPlatform, MibFreeHostPlatform


class TestKib(PlatformConformance, HostFixtures):
    @pytest.fixture
    def platform(self):
        return KibHostPlatform()


class TestMibFree(PlatformConformance, HostFixtures):
    @pytest.fixture
    def platform(self):
        return MibFreeHostPlatform()
"""


def run_kit(where: Path, text: str, *options: str) -> tuple[int, dict[str, tuple[str, str]]]:
    """Run the kit file ``text`` in a fresh pytest process; return the exit code and
    "Class::test" -> (outcome, message)."""
    (where / "test_broken_kit.py").write_text(textwrap.dedent(text))
    here = Path(__file__).resolve().parent  # these tests, the shared helpers and the checkout they test
    paths = [str(here), str(here.parent), str(here.parents[1]), os.environ.get("PYTHONPATH", "")]
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(paths))
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-q",
            "-p",
            "no:cacheprovider",
            "--junitxml=report.xml",
            "test_broken_kit.py",
            *options,
        ],
        cwd=where,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    outcomes: dict[str, tuple[str, str]] = {}
    for case in ET.parse(where / "report.xml").iter("testcase"):
        result = next((e for e in case if e.tag in ("failure", "error", "skipped")), None)
        outcome = "passed" if result is None else result.tag
        name = f"{case.get('classname').rsplit('.', 1)[-1]}::{case.get('name')}"
        outcomes[name] = (outcome, "" if result is None else result.get("message", ""))
    return done.returncode, outcomes


@pytest.fixture(scope="module")
def kit_run(tmp_path_factory) -> tuple[int, dict[str, tuple[str, str]]]:
    """The kit on the broken scripted backend."""
    return run_kit(tmp_path_factory.mktemp("broken_kit"), KIT_FILE)


@pytest.fixture(scope="module")
def hardware_kit_run(tmp_path_factory) -> tuple[int, dict[str, tuple[str, str]]]:
    """The kit's unit and index checks on real host memory reported in the wrong units (no scripted allocations)."""
    return run_kit(
        tmp_path_factory.mktemp("hardware_kit"),
        HARDWARE_KIT_FILE,
        "-k",
        "independent_source or total_is_in_bytes or free_is_positive",
    )


def failure(kit_run, test: str, cls: str = "TestBrokenBackend") -> str:
    outcome, message = kit_run[1][f"{cls}::{test}"]
    assert outcome == "failure", f"{test} did not fail on the broken backend: {outcome} {message}"
    return message


def test_kit_run_fails(kit_run):
    assert kit_run[0] == 1


def test_kit_flags_figures_in_kib_as_wrong_units(kit_run):
    assert "wrong units" in failure(kit_run, "test_total_is_in_bytes")
    assert "in bytes" in failure(kit_run, "test_free_falls_by_an_allocation")
    assert "wrong units" in failure(kit_run, "test_figures_agree_with_an_independent_source")


def test_kit_flags_real_host_memory_in_kib_against_proc_meminfo(hardware_kit_run):
    message = failure(hardware_kit_run, "test_figures_agree_with_an_independent_source", "TestKib")
    assert "/proc/meminfo" in message and "wrong units" in message


def test_kit_flags_real_free_in_mib_with_total_in_bytes(hardware_kit_run):
    message = failure(hardware_kit_run, "test_figures_agree_with_an_independent_source", "TestMibFree")
    assert "free is in other units than bytes" in message
    assert hardware_kit_run[1]["TestMibFree::test_free_is_positive_and_at_most_total"][0] == "passed"


def test_kit_flags_true_as_a_device_index(kit_run):
    message = failure(kit_run, "test_bad_index_raises_devmem_error[bool-device_name]")
    assert "device_name(True)" in message


def test_kit_flags_counting_other_processes(kit_run):
    assert "counting other processes" in failure(kit_run, "test_other_process_allocation_is_not_counted")


def test_kit_flags_the_wrong_error_on_a_bad_index(kit_run):
    message = failure(kit_run, "test_bad_index_raises_devmem_error[count-device_memory_info]")
    assert "raised IndexError" in message and "wrong error on a bad device index" in message


def test_kit_flags_a_negative_index_that_does_not_raise(kit_run):
    message = failure(kit_run, "test_bad_index_raises_devmem_error[minus-one-get_process_memory_usage]")
    assert "instead of raising devmem.DevmemError" in message


def test_kit_flags_integrated_without_paging(kit_run):
    assert "is_integrated_gpu(0) is True but pages_instead_of_failing(0) is False" in failure(
        kit_run, "test_integrated_implies_pages_instead_of_failing"
    )


def test_kit_flags_a_slow_call_by_name(kit_run):
    message = failure(kit_run, "test_every_call_is_cheap")
    assert "device_name" in message and "device_memory_info" not in message


def test_kit_flags_an_explaining_member_of_the_wrong_type(kit_run):
    assert "notes(0) returned 'runs hot'" in failure(kit_run, "test_explaining_members_return_documented_types")


def test_kit_passes_what_the_broken_backend_gets_right(kit_run):
    right = [
        "test_device_count_is_a_positive_int",
        "test_flags_are_bools",
        "test_process_usage_rises_by_an_allocation",
        "test_process_usage_falls_back_after_free",
        "test_eight_threads_get_consistent_answers",
    ]
    assert {test: kit_run[1][f"TestBrokenBackend::{test}"][0] for test in right} == dict.fromkeys(right, "passed")
