"""A forked child keeps working with what it inherited although a parent thread held a lock at the fork: every
lock of devmem and its backends is a ForkSafeLock, renewed in the child."""

from __future__ import annotations

import ast
import os
import pathlib
import signal
import threading
from collections.abc import Callable

import pytest

import devmem
import devmem_nvidia
import devmem_rocm
import devmem_uma
from devmem._forksafe import ForkSafeLock
from devmem_nvidia.testing import (
    H200_CONTEXT,
    ScriptedAllocator,
    ScriptedLibcuda,
    ScriptedMpsControl,
    ScriptedNvml,
    h200_scenario,
    mps_scenario,
    scripted_platform,
)
from devmem_uma import UmaPlatform

pytestmark = pytest.mark.skipif(not hasattr(os, "fork"), reason="needs os.fork")

HOST_PID = 81234


def child_status(work) -> int:
    """Fork; the child runs ``work`` under a 5 s alarm (a hang kills it) and exits 0 when it returns."""
    pid = os.fork()
    if pid == 0:  # pragma: no cover - runs in the child
        signal.alarm(5)
        try:
            work()
            os._exit(0)
        except BaseException:
            os._exit(1)
    _, status = os.waitpid(pid, 0)
    return status


class Hold:
    """The vendor step a parent thread stays in (holding whatever devmem lock is around it) until released."""

    def __init__(self):
        self.entered, self.released = threading.Event(), threading.Event()
        self.first = True

    def __call__(self) -> None:
        if self.first:  # only the parent's first call blocks: the child's own call goes through
            self.first = False
            self.entered.set()
            self.released.wait(10)

    def fork_while_held(self, busy, work) -> int:
        thread = threading.Thread(target=busy)
        thread.start()
        assert self.entered.wait(5), "the parent thread never reached the vendor step"
        try:
            return child_status(work)
        finally:
            self.released.set()
            thread.join()


class SlowMpsControl(ScriptedMpsControl):
    """``nvidia-cuda-mps-control`` whose first run does not answer until released."""

    def __init__(self, hold: Hold, defaults: dict[int, str]):
        super().__init__(defaults)
        self.hold = hold

    def __call__(self, commands: str) -> str:
        self.hold()
        return super().__call__(commands)


class SlowAllocator(ScriptedAllocator):
    """The runtime boundary PID learning allocates through, whose first allocation blocks until released."""

    def __init__(self, scenario, hold: Hold):
        super().__init__(scenario)
        self.hold = hold

    def allocate(self, device: int, nbytes: int):
        self.hold()
        return super().allocate(device, nbytes)


def test_child_reads_memory_while_a_parent_thread_asks_the_mps_daemon():
    hold = Hold()
    platform = scripted_platform(mps_scenario(), mps_control=SlowMpsControl(hold, {0: "8G"}))

    def in_child() -> None:
        assert platform.device_memory_info(0).total == 8 * devmem.GiB

    assert hold.fork_while_held(lambda: platform.device_memory_info(0), in_child) == 0


def test_child_prepares_the_device_while_a_parent_thread_learns_the_pid():
    hold = Hold()
    sc = h200_scenario(driver_pid=HOST_PID, nspid_visible=False)
    sc.allocate(H200_CONTEXT)
    platform = scripted_platform(sc, allocator=SlowAllocator(sc, hold))

    def in_child() -> None:
        platform.prepare(0)

    assert hold.fork_while_held(lambda: platform.prepare(0), in_child) == 0


class SlowEnumerationNvml(ScriptedNvml):
    """pynvml whose first device lookup blocks until released (the device table's enumeration holds its lock)."""

    def __init__(self, scenario, hold: Hold):
        super().__init__(scenario)
        self.hold = hold

    def nvmlDeviceGetHandleByIndex(self, index: int):
        self.hold()
        return super().nvmlDeviceGetHandleByIndex(index)


def test_child_counts_devices_while_a_parent_thread_enumerates_them():
    hold = Hold()
    sc = h200_scenario()
    platform = scripted_platform(sc, nvml=SlowEnumerationNvml(sc, hold))

    def in_child() -> None:
        assert platform.device_count() == 1

    assert hold.fork_while_held(platform.device_count, in_child) == 0


def _locks() -> dict[str, Callable[[], ForkSafeLock]]:
    """Every lock devmem and its backends hold, by where it lives (each read again in the child)."""
    from devmem.engine import profiling
    from devmem.resolution import plugins
    from devmem.sdk import sessions
    from devmem_nvidia import cuda_driver
    from devmem_rocm import smi

    sc = h200_scenario()
    nvml = scripted_platform(sc)
    uma = UmaPlatform(nvml=ScriptedNvml(sc), files=sc.fs, environ=sc.environ, mem_get_info=lambda d: None)
    driver = cuda_driver.CudaDriver(ScriptedLibcuda(sc))
    return {
        "resolution": lambda: plugins._lock,
        "session registry": lambda: sessions._registry_lock,
        "shared sessions": lambda: sessions._shared_lock,
        "a vendor session": lambda: nvml._session._lock,
        "profile windows": lambda: profiling._WINDOWS._lock,
        "shared CUDA driver": lambda: cuda_driver._shared_lock,
        "a CUDA driver": lambda: driver._lock,
        "a device table": lambda: nvml._table._lock,
        "PID learning": lambda: nvml._lock,
        "MPS daemon query": lambda: nvml._mps_defaults._lock,
        "amdsmi import": lambda: smi._import_lock,
        "uma survey": lambda: uma._lock,
    }


@pytest.mark.parametrize("where", sorted(_locks()))
def test_every_lock_held_by_another_thread_at_the_fork_is_free_in_the_child(where):
    lock, hold = _locks()[where], Hold()

    def busy() -> None:
        with lock():
            hold()

    def in_child() -> None:
        assert lock().acquire(timeout=2)

    assert hold.fork_while_held(busy, in_child) == 0


@pytest.mark.parametrize("reentrant", [False, True])
def test_lock_held_by_another_thread_at_the_fork_is_free_in_the_child(reentrant):
    lock, hold = ForkSafeLock(reentrant=reentrant), Hold()

    def busy() -> None:
        with lock:
            hold()

    def in_child() -> None:
        with lock:
            pass

    assert hold.fork_while_held(busy, in_child) == 0


def test_lock_the_forking_thread_holds_is_released_once_in_the_child():
    lock = ForkSafeLock()

    def in_child() -> None:
        lock.release()  # what the `with` around the fork does on leaving
        with lock:
            pass

    with lock:
        assert child_status(in_child) == 0
    assert lock.acquire(blocking=False)


# ---- no bare locks -------------------------------------------------------------------------------
PACKAGES = [pathlib.Path(p.__file__).parent for p in (devmem, devmem_nvidia, devmem_rocm, devmem_uma)]
BARE = {"Lock", "RLock", "allocate_lock"}


def bare_locks(path: pathlib.Path) -> list[str]:
    """``threading.Lock()``/``RLock()`` (or the names imported from ``threading``/``_thread``) made in ``path``."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    imported = {
        alias.asname or alias.name
        for node in ast.walk(tree)
        if isinstance(node, ast.ImportFrom) and node.module in ("threading", "_thread")
        for alias in node.names
        if alias.name in BARE
    }
    found = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call):
            continue
        fn = node.func
        if (isinstance(fn, ast.Attribute) and fn.attr in BARE) or (isinstance(fn, ast.Name) and fn.id in imported):
            found.append(f"{path}:{node.lineno}")
    return found


def test_no_module_makes_a_lock_that_a_fork_would_not_renew():
    found = [
        hit
        for package in PACKAGES
        for path in sorted(package.rglob("*.py"))
        if path.name != "_forksafe.py"
        for hit in bare_locks(path)
    ]
    assert found == []


def test_the_scan_finds_a_bare_lock(tmp_path):
    module = tmp_path / "m.py"
    module.write_text("import threading\nfrom threading import RLock as R\na = threading.Lock()\nb = R()\n")
    assert bare_locks(module) == [f"{module}:3", f"{module}:4"]
