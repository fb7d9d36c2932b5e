"""The vendor sessions (NVML's and amdsmi's) are one base class: lazy init once, a recorded failure, errors as
DevmemError, shut down at exit, usable in a forked child, one shared session per process."""

from __future__ import annotations

import functools
import os
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import pytest

from devmem import DevmemError
from devmem.sdk import sessions
from devmem.sdk.sessions import LibraryUnavailable, VendorSession, shutdown_all
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


class Blocker:
    """Something a thread enters and stays in until released: :meth:`hold` is called by the blocked step."""

    def __init__(self):
        self.entered, self.release = threading.Event(), threading.Event()

    def hold(self) -> None:
        self.entered.set()
        self.release.wait(10)

    def fork_while_held(self, busy, work) -> int:
        """Run ``busy`` in a thread until it is inside :meth:`hold` (holding whatever lock it holds), fork a child
        running ``work``, then release ``busy``; the child's exit status."""
        thread = threading.Thread(target=busy)
        thread.start()
        self.entered.wait(5)
        try:
            return child_status(work)
        finally:
            self.release.set()
            thread.join()


def test_amdsmi_session_works_in_a_child_forked_during_a_call():
    fake = ScriptedAmdsmi(mi300x_scenario())
    session = AmdsmiSession(fake)
    blocker, original = Blocker(), fake.amdsmi_get_processor_handles
    fake.amdsmi_get_processor_handles = lambda: (blocker.hold(), original())[1]

    def in_child():
        fake.amdsmi_get_processor_handles = original  # the child's call must not block on the parent's thread
        session.call("amdsmi_get_processor_handles")

    busy = functools.partial(session.call, "amdsmi_get_processor_handles")
    assert blocker.fork_while_held(busy, in_child) == 0


def test_nvml_session_works_in_a_child_forked_during_init():
    fake = ScriptedNvml(h200_scenario())
    session = NvmlSession(fake)
    blocker, original = Blocker(), fake.nvmlInit
    fake.nvmlInit = lambda: (blocker.hold(), original())[1]

    def in_child():
        fake.nvmlInit = original
        session.device_count()

    assert blocker.fork_while_held(session.device_count, in_child) == 0


def test_shutdown_all_shuts_nvml_down():
    fake = ScriptedNvml(h200_scenario())
    session = NvmlSession(fake)
    session.device_count()
    shutdown_all()
    assert fake.initialised == 0


def test_both_sessions_answer_the_same_names():
    names = {"module", "has", "call", "initialise", "shutdown", "renew_locks", "failure", "action", "shared"}
    nvml = NvmlSession(ScriptedNvml(h200_scenario()))
    amdsmi = AmdsmiSession(ScriptedAmdsmi(mi300x_scenario()))
    assert names <= set(dir(nvml)) and names <= set(dir(amdsmi))
    assert isinstance(nvml, VendorSession) and isinstance(amdsmi, VendorSession)


def test_rocm_platform_on_the_real_module_honours_its_clock_and_sleep(monkeypatch):
    from devmem.testing import ScriptedClock
    from devmem_rocm import RocmPlatform, smi

    sc = mi300x_scenario()
    monkeypatch.setitem(sys.modules, "amdsmi", ScriptedAmdsmi(sc))  # what `import amdsmi` finds
    monkeypatch.setattr(smi, "_imported", None)  # this process has not imported it yet
    monkeypatch.setattr(sessions, "_shared", {})  # nor made its shared session
    clock = ScriptedClock()
    RocmPlatform(environ={}, clock=clock, sleep=clock.sleep).process_memory(0)
    assert clock.slept == [1.0]


# ---- the base class every vendor session is -------------------------------------------------------
class ToyError(Exception):
    """What the toy library raises."""


class ToyLibrary:
    """A vendor library at its boundary: counts its init and shutdown calls; ``init_error`` makes init fail."""

    def __init__(self, init_error: Exception | None = None, init_wait: float = 0.0):
        self.inits = self.shutdowns = 0
        self.init_error, self.init_wait = init_error, init_wait

    def toy_init(self) -> None:
        time.sleep(self.init_wait)  # widens the window in which a second thread could also initialise
        self.inits += 1
        if self.init_error is not None:
            raise self.init_error

    def toy_shutdown(self) -> None:
        self.shutdowns += 1

    def toy_count(self) -> int:
        return 3

    def toy_broken(self) -> int:
        raise ToyError("device lost")


class ToyCallError(DevmemError):
    pass


class ToySession(VendorSession):
    init_function = "toy_init"
    shutdown_function = "toy_shutdown"
    loads = 0

    def load_library(self):
        type(self).loads += 1
        return ToyLibrary()

    def call_error(self, name, exc):
        return ToyCallError(f"{name}: {exc}")

    def missing_function(self, name):
        return ToyCallError(f"{name}: no such function")


class SerialToySession(ToySession):
    serialise_calls = True


def test_concurrent_first_calls_initialise_the_library_once():
    library = ToyLibrary(init_wait=0.05)
    session = ToySession(library)
    barrier = threading.Barrier(8)

    def work():
        barrier.wait(timeout=10)
        return session.call("toy_count")

    with ThreadPoolExecutor(8) as pool:
        assert list(pool.map(lambda _: work(), range(8))) == [3] * 8
    assert library.inits == 1


def test_a_failed_init_is_recorded_and_raised_again_with_its_reason_without_a_retry():
    library = ToyLibrary(init_error=ToyError("no driver"))
    session = ToySession(library)
    for _ in range(3):
        with pytest.raises(LibraryUnavailable, match="toy_init failed: ToyError: no driver"):
            session.call("toy_count")
    assert (session.failure, library.inits) == ("toy_init failed: ToyError: no driver", 1)


def test_a_failed_load_is_recorded_with_what_to_do():
    class Missing(ToySession):
        loads = 0

        def load_library(self):
            type(self).loads += 1
            raise LibraryUnavailable("toylib is not installed", "pip install toylib")

    session = Missing()
    for _ in range(2):
        with pytest.raises(LibraryUnavailable, match="toylib is not installed") as info:
            session.has("toy_count")
        assert info.value.action == "pip install toylib"
    assert (session.failure, session.action, Missing.loads) == ("toylib is not installed", "pip install toylib", 1)


def test_a_library_error_becomes_the_vendors_devmem_error():
    with pytest.raises(ToyCallError, match="toy_broken: device lost") as info:
        ToySession(ToyLibrary()).call("toy_broken")
    assert isinstance(info.value.__cause__, ToyError)


def test_a_function_the_library_lacks_is_the_vendors_devmem_error():
    session = ToySession(ToyLibrary())
    assert not session.has("toy_newer")
    with pytest.raises(ToyCallError, match="toy_newer: no such function"):
        session.call("toy_newer")


def test_shutdown_of_a_session_never_initialised_leaves_the_library_alone():
    library = ToyLibrary()
    ToySession(library).shutdown()
    assert (library.inits, library.shutdowns) == (0, 0)


def test_shutdown_releases_the_library_once_and_a_later_call_initialises_it_again():
    library = ToyLibrary()
    session = ToySession(library)
    session.call("toy_count")
    session.shutdown()
    session.shutdown()
    assert (library.shutdowns, session.initialised) == (1, False)
    session.call("toy_count")
    assert (library.inits, session.initialised) == (2, True)


def test_fork_renews_the_lock_a_serialised_call_holds():
    library = ToyLibrary()
    session, blocker = SerialToySession(library), Blocker()
    library.toy_slow = blocker.hold
    assert blocker.fork_while_held(lambda: session.call("toy_slow"), lambda: session.call("toy_count")) == 0


def test_fork_renews_the_lock_of_the_shared_sessions():
    blocker = Blocker()

    class SlowToSet(ToySession):
        def __init__(self, module=None):
            blocker.hold()  # shared() holds its lock while it makes the session
            super().__init__(module)

    class Other(ToySession):
        pass

    assert blocker.fork_while_held(SlowToSet.shared, lambda: Other.shared().call("toy_count")) == 0


def test_the_shared_session_is_one_per_process_and_class_on_the_real_library():
    class Real(ToySession):
        loads = 0

    class OtherReal(ToySession):
        pass

    with ThreadPoolExecutor(8) as pool:
        sessions_seen = set(pool.map(lambda _: Real.shared(), range(16)))
    assert sessions_seen == {Real.shared()}
    assert OtherReal.shared() is not Real.shared()
    assert Real.for_module() is Real.shared()
    Real.shared().call("toy_count")
    assert Real.loads == 1  # the real library, loaded on first use


def test_an_injected_module_gets_a_session_of_its_own():
    library = ToyLibrary()
    assert ToySession.for_module(library) is not ToySession.for_module(library)
    assert ToySession.for_module(library) is not ToySession.shared()
