"""A full backend's reading that never returns (NVML blocked in the driver) is bounded in EngineMemory as a minimal
backend's is: every platform call EngineMemory makes is given DEVMEM_READ_TIMEOUT seconds on one reused thread
(devmem/_bounded.py), and one past it is an error naming the platform, the call and the deadline; on a scripted H200
whose NVML blocks on an Event."""

from __future__ import annotations

import os
import threading

import pytest
from ledger_workers import no_hang
from test_forks import child_status

from devmem import DevmemError, EngineMemory
from devmem_nvidia.testing import ScriptedNvml, h200_scenario, scripted_platform

DEADLINE = "0.3"
#: The NVML query every reading of the device makes.
MEMORY_INFO = "nvmlDeviceGetMemoryInfo_v2"


class BlockingNvml(ScriptedNvml):
    """The scripted NVML whose queries named in ``blocked`` wait for ``release`` (a vendor call blocked in the
    driver), recording the thread each query ran on."""

    def __init__(self, scenario):
        super().__init__(scenario)
        self.blocked: set[str] = set()
        self.release = threading.Event()
        self.threads: set[int] = set()

    def _enter(self, name, **kwargs):
        super()._enter(name, **kwargs)
        self.threads.add(threading.get_ident())
        if name in self.blocked:
            self.release.wait()


@pytest.fixture
def nvml():
    library = BlockingNvml(h200_scenario())
    yield library
    library.release.set()  # the hung calls return, so that no thread outlives its test


@pytest.fixture
def platform(nvml):
    return scripted_platform(nvml.scenario, nvml=nvml)


@pytest.fixture
def deadline(monkeypatch):
    monkeypatch.setenv("DEVMEM_READ_TIMEOUT", DEADLINE)


def _created(platform):
    return EngineMemory(0, utilization=0.1, platform=platform, reserve=False)


def _late(call):
    return rf"platform 'nvml' \(devmem_nvidia\.nvml_platform\.NvmlPlatform\): {call} did not answer within 0\.3 s"


def test_an_engines_start_on_a_reading_that_never_returns_is_an_error_naming_the_platform_the_call_and_deadline(
    nvml, platform, deadline
):
    nvml.blocked.add(MEMORY_INFO)
    with no_hang(10), pytest.raises(DevmemError, match=_late(r"prepare_and_read\(0\)")):
        _created(platform)


def test_the_error_of_a_reading_past_its_deadline_says_how_to_change_it(nvml, platform, deadline):
    nvml.blocked.add(MEMORY_INFO)
    with no_hang(10), pytest.raises(DevmemError) as late:
        _created(platform)
    assert str(late.value).endswith("raise DEVMEM_READ_TIMEOUT")


def test_a_profile_window_on_a_reading_that_never_returns_is_an_error_not_a_hang(nvml, platform, deadline):
    memory = _created(platform)
    nvml.blocked.add(MEMORY_INFO)
    with no_hang(10), pytest.raises(DevmemError, match=_late(r"read\(0\)")), memory.profile():
        pass


def test_a_call_after_a_hung_one_is_an_error_naming_the_call_still_running(nvml, platform, deadline):
    memory = _created(platform)
    nvml.blocked.add(MEMORY_INFO)
    with no_hang(10):
        with pytest.raises(DevmemError):
            memory.platform.device_memory_info(0)
        with pytest.raises(DevmemError, match=r"device_name\(0\) was not asked: the earlier call, .*"):
            memory.platform.device_name(0)


def test_a_hung_reading_holds_one_thread_however_many_calls_follow_it(nvml, platform, deadline):
    memory = _created(platform)
    nvml.blocked.add(MEMORY_INFO)
    threads = threading.active_count()
    with no_hang(20):
        for _ in range(4):
            with pytest.raises(DevmemError):
                memory.platform.device_memory_info(0)
    assert threading.active_count() <= threads + 1


def test_readings_that_answer_run_on_one_reused_thread_not_the_engines(nvml, platform):
    memory = _created(platform)
    with memory.profile():
        pass
    memory.platform.device_memory_info(0)
    assert len(nvml.threads) == 1 and threading.get_ident() not in nvml.threads


def test_a_reading_that_answers_gives_what_the_platform_gives(platform):
    memory = _created(platform)
    assert memory.platform.read(0) == platform.read(0)


def test_readings_work_again_once_the_hung_call_returns(nvml, platform, deadline):
    memory = _created(platform)
    nvml.blocked.add(MEMORY_INFO)
    with no_hang(10), pytest.raises(DevmemError):
        memory.platform.device_memory_info(0)
    nvml.blocked.clear()
    nvml.release.set()
    assert memory.platform.device_memory_info(0) == platform.device_memory_info(0)


def test_an_engine_memory_given_a_bounded_platform_keeps_it(platform):
    first = _created(platform)
    assert _created(first.platform).platform is first.platform


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs os.fork")
def test_a_forked_child_reads_although_its_parent_has_a_call_hanging(nvml, platform, deadline):
    memory = _created(platform)
    nvml.blocked.add(MEMORY_INFO)
    with no_hang(10), pytest.raises(DevmemError):
        memory.platform.device_memory_info(0)

    def in_child() -> None:
        nvml.blocked.clear()  # the child's NVML answers; the parent's call never finishes there
        memory.platform.device_memory_info(0)

    assert os.waitstatus_to_exitcode(child_status(in_child)) == 0
