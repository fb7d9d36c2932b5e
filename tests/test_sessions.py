"""The vendor sessions (NVML's and amdsmi's) follow one pattern: shut down at exit, usable in a forked child."""

from __future__ import annotations

import os
import sys
import threading

import pytest

from devmem.sessions import shutdown_all
from devmem_nvidia.nvml_access import NvmlSession
from devmem_nvidia.testing import ScriptedNvml, h200_scenario
from devmem_rocm.smi import AmdsmiSession
from devmem_rocm.testing import ScriptedAmdsmi, mi300x_scenario

pytestmark = pytest.mark.skipif(not hasattr(os, "fork"), reason="needs os.fork")


def child_status(work) -> int:
    """Fork; the child runs ``work`` under an alarm and exits 0 when it returns; the child's exit status."""
    pid = os.fork()
    if pid == 0:  # pragma: no cover - runs in the child
        import signal

        signal.alarm(5)  # a deadlocked child is killed instead of hanging the suite
        try:
            work()
            os._exit(0)
        except BaseException:
            os._exit(1)
    _, status = os.waitpid(pid, 0)
    return status


def test_amdsmi_session_works_in_a_child_forked_during_a_call():
    fake = ScriptedAmdsmi(mi300x_scenario())
    session = AmdsmiSession(fake)
    entered, release = threading.Event(), threading.Event()
    original = fake.amdsmi_get_processor_handles
    fake.amdsmi_get_processor_handles = lambda: (entered.set(), release.wait(10), original())[2]
    busy = threading.Thread(target=session.call, args=("amdsmi_get_processor_handles",))
    busy.start()
    entered.wait(5)
    try:
        fake.amdsmi_get_processor_handles = original  # the child's call must not block on the parent's thread
        status = child_status(lambda: session.call("amdsmi_get_processor_handles"))
    finally:
        release.set()
        busy.join()
    assert status == 0


def test_nvml_session_works_in_a_child_forked_during_init():
    fake = ScriptedNvml(h200_scenario())
    session = NvmlSession(fake)
    entered, release = threading.Event(), threading.Event()
    original = fake.nvmlInit
    fake.nvmlInit = lambda: (entered.set(), release.wait(10), original())[2]
    busy = threading.Thread(target=session.device_count)
    busy.start()
    entered.wait(5)
    try:
        fake.nvmlInit = original
        status = child_status(session.device_count)
    finally:
        release.set()
        busy.join()
    assert status == 0


def test_shutdown_all_shuts_nvml_down():
    fake = ScriptedNvml(h200_scenario())
    session = NvmlSession(fake)
    session.device_count()
    shutdown_all()
    assert fake.initialised == 0


def test_both_sessions_answer_the_same_names():
    names = {"module", "has", "call", "shutdown", "renew_locks"}
    nvml = NvmlSession(ScriptedNvml(h200_scenario()))
    amdsmi = AmdsmiSession(ScriptedAmdsmi(mi300x_scenario()))
    assert names <= set(dir(nvml)) and names <= set(dir(amdsmi))


def test_rocm_platform_on_the_real_module_honours_its_clock_and_sleep(monkeypatch):
    from devmem.testing import ScriptedClock
    from devmem_rocm import RocmPlatform, smi

    sc = mi300x_scenario()
    monkeypatch.setitem(sys.modules, "amdsmi", ScriptedAmdsmi(sc))  # what `import amdsmi` finds
    monkeypatch.setattr(smi, "_imported", None)  # this process has not imported it yet
    monkeypatch.setattr(smi, "_real", None)
    clock = ScriptedClock()
    RocmPlatform(environ={}, clock=clock, sleep=clock.sleep).process_memory(0)
    assert clock.slept == [1.0]
