"""The unified-memory principle on this machine's real kernel (no GPU needed).

The uma platform reads the real /proc/meminfo here; only the device is scripted (a GB10 through scripted
NVML), since on unified memory the device's free memory is the host's. These tests show, for real, that
page cache makes MemFree fall while what an allocation can obtain does not, and that host churn by another
process moves the device-wide figure but never this process's own.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
import time

import pytest

from devmem.sdk import REAL_FILES, cgroup_memory, read_meminfo
from devmem.types import GiB, MiB, gib
from devmem_nvidia.testing import ScriptedNvml
from devmem_uma import UmaPlatform
from devmem_uma.testing import GB10_CONTEXT, gb10_scenario

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads Linux's /proc/meminfo")

CHUNK = 16 * MiB
FILE = 2 * GiB  #: written and read back: the page cache the test watches grow
SAFETY = 2 * GiB  #: what must stay available beyond anything this test holds
FILL_SECONDS_VAR = "DEVMEM_TEST_FILL_SECONDS"
#: Time allowed for shrinking MemFree with page cache before the allocation (a 24 GiB VM that touches fresh
#: memory at 1 GiB/s cannot do it in this budget; the test then skips and says so).
FILL_SECONDS = float(os.environ.get(FILL_SECONDS_VAR, "6"))


class KernelFilesWithAContext:
    """This kernel's files, where ``/proc/self/maps`` also maps the GB10's device node: the scripted GB10 holds a
    context of this process, and a process with a context maps its device."""

    DEVICE_NODE = "7f0000000000-7f0000200000 rw-s 00000000 00:05 77 /dev/nvidia0\n"

    def read_text(self, path: str) -> str:
        text = REAL_FILES.read_text(path)
        return text + self.DEVICE_NODE if path == "/proc/self/maps" else text

    def exists(self, path: str) -> bool:
        return REAL_FILES.exists(path)

    def listdir(self, path: str) -> list[str]:
        return REAL_FILES.listdir(path)


def real_platform() -> UmaPlatform:
    """The uma platform on this kernel's files, with a scripted GB10 as its device."""
    return UmaPlatform(
        nvml=ScriptedNvml(gb10_scenario()),
        files=KernelFilesWithAContext(),
        environ={},
        mem_get_info=lambda device: None,
    )


def _fstype(path: str) -> str:
    best, kind = "", ""
    with open("/proc/self/mounts") as f:
        for line in f:
            fields = line.split()
            point = fields[1].replace("\\040", " ")
            if (path == point or path.startswith(point.rstrip("/") + "/")) and len(point) >= len(best):
                best, kind = point, fields[2]
    return kind


@pytest.fixture
def disk_dir():
    """A directory on a disk-backed filesystem (page cache there is reclaimable, unlike tmpfs), removed after."""
    for base in ("/var/tmp", "/work"):
        if os.path.isdir(base) and os.access(base, os.W_OK) and _fstype(base) not in ("", "tmpfs", "ramfs"):
            where = tempfile.mkdtemp(prefix="devmem-uma-", dir=base)
            yield where
            shutil.rmtree(where, ignore_errors=True)
            return
    pytest.skip("no writable disk-backed directory (/var/tmp and /work are missing, read-only or tmpfs)")


def _read_back(f, nbytes: int) -> None:
    """Read ``nbytes`` of ``f`` into one reused buffer (no allocation per read)."""
    buffer = memoryview(bytearray(MiB))
    while nbytes > 0:
        got = f.readinto(buffer[: min(MiB, nbytes)])
        if not got:
            return
        nbytes -= got


def _write_and_read_back(where: str, nbytes: int) -> None:
    path = os.path.join(where, "data.bin")
    block = os.urandom(CHUNK)
    with open(path, "wb", buffering=0) as f:
        for _ in range(nbytes // CHUNK):
            f.write(block)
        os.fsync(f.fileno())
    with open(path, "rb", buffering=0) as f:
        _read_back(f, nbytes)


def _shrink_memfree(where: str, target: int, seconds: float) -> str | None:
    """Grow the page cache, without disk traffic (reading a sparse file back), until MemFree is at most
    ``target``. Returns why not (``None`` on success) when that would take longer than ``seconds``."""
    path = os.path.join(where, "sparse.bin")
    with open(path, "wb") as f:
        f.truncate(1 << 40)
    start = time.monotonic()
    with open(path, "rb", buffering=0) as f:
        while (free := read_meminfo()["MemFree"]) > target:
            spent = time.monotonic() - start
            filled = f.tell()
            if filled and spent * (1 + (free - target) / filled) > seconds:
                return (
                    f"filling the page cache ran at {gib(filled / spent)}/s here, so bringing MemFree from "
                    f"{gib(free)} to {gib(target)} would take over {seconds:.0f} s (set {FILL_SECONDS_VAR} "
                    "to allow more)"
                )
            _read_back(f, GiB)
    return None


@pytest.mark.slow
def test_page_cache_lowers_memfree_but_not_what_the_platform_calls_free(disk_dir):
    if cgroup_memory() is not None:
        pytest.skip("a cgroup memory limit applies here; this test is about the kernel's own MemAvailable")
    if read_meminfo()["MemAvailable"] < FILE + SAFETY:
        pytest.skip(f"needs {gib(FILE + SAFETY)} available")
    platform = real_platform()
    before, free_before = read_meminfo(), platform.device_memory_info().free
    _write_and_read_back(disk_dir, FILE)
    after, free_after = read_meminfo(), platform.device_memory_info().free
    assert before["MemFree"] - after["MemFree"] >= FILE // 2, (before, after)
    assert abs(free_after - free_before) <= 0.05 * free_before, (gib(free_before), gib(free_after))


@pytest.mark.slow
def test_an_allocation_larger_than_memfree_but_within_memavailable_succeeds(disk_dir):
    if cgroup_memory() is not None:
        pytest.skip("a cgroup memory limit applies here; an allocation near it could be OOM-killed")
    platform = real_platform()
    why_not = _shrink_memfree(disk_dir, 3 * GiB, FILL_SECONDS)
    if why_not:
        pytest.skip(why_not)
    now, free = read_meminfo(), platform.device_memory_info().free
    want = now["MemFree"] + GiB
    if want > free - SAFETY:
        pytest.skip(
            f"MemFree ({gib(now['MemFree'])}) is too close to MemAvailable ({gib(free)}) to allocate "
            "more than MemFree safely"
        )
    block = bytearray(want)  # zero-filled: every page touched
    held = read_meminfo()
    del block
    assert want > now["MemFree"] and held["Cached"] < now["Cached"] - GiB // 2, (now, held)


HOG = r"""
import sys
held = None
for line in sys.stdin:
    if line.strip() == "alloc":
        held = bytearray(int(sys.argv[1]))  # zero-filled: every page touched
    else:
        held = None
    print("ok", flush=True)
"""


@pytest.mark.slow  # fills the page cache for real
def test_host_churn_by_a_process_without_gpu_context_moves_only_the_device_wide_figure():
    churn = 3 * GiB
    if read_meminfo()["MemAvailable"] < churn + SAFETY:
        pytest.skip("not enough memory available to churn 3 GiB safely")
    platform = real_platform()
    hog = subprocess.Popen(
        [sys.executable, "-c", HOG, str(churn)], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    )

    def tell(command: str) -> tuple[int, int | None]:
        hog.stdin.write(command + "\n")
        hog.stdin.flush()
        assert hog.stdout.readline().strip() == "ok"
        return platform.device_memory_info().free, platform.get_process_memory_usage()

    try:
        cycles = [(platform.device_memory_info().free, *tell("alloc"), *tell("free")) for _ in range(2)]
    finally:
        hog.stdin.close()
        hog.wait(timeout=30)
    drops = [idle - held for idle, held, *_ in cycles]
    rises = [freed - held for _, held, _, freed, _ in cycles]
    assert sum(drops) / 2 >= churn / 2 and sum(rises) / 2 >= churn / 2, (
        [gib(d) for d in drops],
        [gib(r) for r in rises],
    )
    assert {own for *_, own_held, _, own_freed in cycles for own in (own_held, own_freed)} == {GB10_CONTEXT}
