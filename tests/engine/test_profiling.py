"""devmem.engine.profiling on the real kernel with the cpu platform (host RAM is the device), and on a GPU where
present.

Co-tenants are real processes that allocate and free touched host memory while this process profiles. The
device-wide checks expect no other job to churn gigabytes of host memory at the same moment (CI runs one test at
a time); the process-scoped checks hold whatever other processes do.
"""

from __future__ import annotations

import logging
import mmap
import re
import subprocess
import sys
from dataclasses import dataclass

import psutil
import pytest

from devmem import DevmemError, GiB, MiB, NotEnoughMemoryError
from devmem.arguments import ArgumentError
from devmem.cpu import CpuPlatform
from devmem.engine.profiling import (
    MemorySnapshot,
    ProfileResult,
    check_startup_memory,
    memory_profiling,
    release_allocator_cache,
)
from devmem.planner.sizing import plan_kv_cache, requested_memory
from devmem.testing.torch_runtime import ScriptedTorch
from devmem.units import format_size
from devmem_nvidia.nvml_platform import NvmlPlatform
from devmem_nvidia.testing import ScriptedNvml, h200_scenario, wsl2_scenario
from devmem_nvidia.wsl2 import WslPlatform

try:
    import torch
except ImportError:  # only the tests without CUDA and on a GPU need torch
    torch = None
no_cuda = pytest.mark.skipif(torch is None or torch.cuda.is_available(), reason="needs torch that sees no device")
needs_cuda = pytest.mark.skipif(torch is None or not torch.cuda.is_available(), reason="needs a CUDA/ROCm device")

#: This process's own allocation and what the co-tenant moves. Scaled down from 1 GiB / 2 GiB: first-touch page
#: faults on the CI virtual machines run at 0.3-0.7 GB/s, so every GiB touched costs seconds.
OWN = 512 * MiB
COTENANT = GiB

_COTENANT_CODE = """
import sys
held = None
for line in sys.stdin:
    held = None
    n = int(line)
    held = b"\\x01" * n if n else None
    print("ok", flush=True)
"""


def _per_cpu_free_pages() -> int:
    """Bytes of free pages parked on the kernel's per-CPU lists (``count:`` of every pageset in /proc/zoneinfo).

    MemAvailable does not count them, and since Linux 6.7 tunes the lists' size to the workload they can hold
    about 1 GiB per CPU: memory one process frees there is handed to the next allocation without ever showing
    as available.
    """
    with open("/proc/zoneinfo", encoding="ascii") as f:
        return sum(int(n) for n in re.findall(r"^\s+count:\s+(\d+)$", f.read(), re.MULTILINE)) * mmap.PAGESIZE


@dataclass
class Step:
    """One co-tenant step: what it moved, how far device-wide free memory dropped, and the per-CPU lists."""

    moved: int
    free_drop: int
    per_cpu_drop: int


class CoTenant:
    """Another process on this host that holds ``n`` bytes of touched memory when told ``hold(n)``.

    Each step is bracketed by device-wide snapshots and readings of the kernel's per-CPU free lists
    (``steps``).
    """

    def __init__(self) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, "-c", _COTENANT_CODE], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
        )
        self.held = 0
        self.steps: list[Step] = []

    def hold(self, nbytes: int) -> None:
        before, per_cpu_before = MemorySnapshot.measure(0, CpuPlatform()), _per_cpu_free_pages()
        self.proc.stdin.write(f"{nbytes}\n")
        self.proc.stdin.flush()
        assert self.proc.stdout.readline().strip() == "ok"
        after, per_cpu_after = MemorySnapshot.measure(0, CpuPlatform()), _per_cpu_free_pages()
        self.steps.append(Step(nbytes - self.held, before.free - after.free, per_cpu_before - per_cpu_after))
        self.held = nbytes

    def rss(self) -> int:
        return psutil.Process(self.proc.pid).memory_info().rss

    def close(self) -> None:
        self.proc.stdin.close()
        self.proc.wait(timeout=30)
        self.proc.stdout.close()


class _Records(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)


@dataclass
class Run:
    """A profile window, what it logged, and how the co-tenant's resident memory moved meanwhile."""

    result: ProfileResult
    records: list[logging.LogRecord]
    cotenant_rss_delta: int = 0

    def logged(self, level: int, words: str) -> bool:
        return any(r.levelno == level and words in r.getMessage() for r in self.records)


def _profile_own_allocation(cotenant: CoTenant | None = None, *holds: int) -> Run:
    """Profile a touched ``OWN``-byte allocation of this process while the co-tenant holds ``holds`` in turn."""
    platform, handler = CpuPlatform(), _Records()
    logger = logging.getLogger("devmem.engine.profiling")
    level = logger.level
    logger.setLevel(logging.DEBUG)
    logger.addHandler(handler)
    try:
        tenant_before = cotenant.rss() if cotenant else 0
        release_allocator_cache(0, platform)  # what earlier tests freed goes back before the baseline, not mid-window
        baseline = MemorySnapshot.measure(0, platform)
        with memory_profiling(baseline, platform=platform) as result:
            own = bytearray(OWN)
            own[::4096] = b"\x01" * (OWN // 4096)
            for nbytes in holds:
                cotenant.hold(nbytes)
        del own
    finally:
        logger.removeHandler(handler)
        logger.setLevel(level)
    return Run(result, handler.records, cotenant.rss() - tenant_before if cotenant else 0)


@dataclass
class CoTenantRuns:
    runs: dict[str, Run]
    steps: list[Step]


@pytest.fixture(scope="module")
def cotenant_runs() -> CoTenantRuns:
    """Three profile runs of this process's own allocation while a co-tenant process moves memory of its own.

    - ``churn`` and ``again``: the co-tenant allocates, frees and allocates again (and holds it at the end);
    - ``release``: it frees what it held when the window opened.
    """
    tenant = CoTenant()
    try:
        runs = {"churn": _profile_own_allocation(tenant, COTENANT, 0, COTENANT)}
        tenant.hold(0)
        runs["again"] = _profile_own_allocation(tenant, COTENANT, 0, COTENANT)
        runs["release"] = _profile_own_allocation(tenant, 0)
    finally:
        tenant.close()
    return CoTenantRuns(runs, tenant.steps)


@pytest.fixture(scope="module")
def quiet_run() -> Run:
    """A profile run of this process's own allocation with no co-tenant of ours."""
    return _profile_own_allocation()


# ---- co-tenants, for real --------------------------------------------------------------------------------


@pytest.mark.slow  # real co-tenant processes churning memory
@pytest.mark.parametrize("run", ["churn", "again", "release"])
def test_total_consumed_is_own_growth_whatever_the_cotenant_does(cotenant_runs, run):
    result = cotenant_runs.runs[run].result
    assert result.process_scoped is True
    assert abs(result.total_consumed - OWN) <= 0.05 * OWN, format_size(result.total_consumed)


@pytest.mark.slow  # real co-tenant processes churning memory
def test_repeated_runs_under_cotenant_churn_agree(cotenant_runs, quiet_run):
    figures = [run.result.total_consumed for run in [*cotenant_runs.runs.values(), quiet_run]]
    assert max(figures) - min(figures) <= 0.05 * OWN


@pytest.mark.slow  # real co-tenant processes churning memory
@pytest.mark.parametrize("run", ["churn", "again", "release"])
def test_device_wide_figure_is_the_drop_of_free_memory_and_others_the_rest(cotenant_runs, run):
    r = cotenant_runs.runs[run].result
    own = r.after_profile.process - r.baseline.process
    assert r.device_wide_consumed == r.baseline.free - r.after_profile.free
    assert r.other_processes_delta == r.device_wide_consumed - own and r.total_consumed == own


@pytest.mark.slow  # real co-tenant processes churning memory
def test_device_wide_figure_moves_with_the_cotenant(cotenant_runs):
    """Over each of the co-tenant's 8 steps, device-wide free memory moves by what the co-tenant moved, but for
    the pages the kernel parks on its per-CPU free lists (see :func:`_per_cpu_free_pages`). The median over
    the steps keeps an unrelated process that moves memory at the same moment from counting."""
    errors = sorted(abs(s.free_drop + s.per_cpu_drop - s.moved) for s in cotenant_runs.steps)
    assert len(errors) == 8 and errors[len(errors) // 2] <= COTENANT // 4, [format_size(e) for e in errors]


@pytest.mark.slow  # real co-tenant processes churning memory
def test_cotenant_release_is_not_fatal(cotenant_runs):
    """The co-tenant frees 1 GiB inside the window: profiling goes on and sizes from this process alone."""
    r = cotenant_runs.runs["release"]
    assert r.cotenant_rss_delta <= -0.95 * COTENANT
    assert r.result.process_scoped
    assert abs(r.result.non_kv_cache_memory - OWN) <= 0.05 * OWN, format_size(r.result.non_kv_cache_memory)


@pytest.mark.slow  # real co-tenant processes churning memory
def test_host_memory_others_moves_logged_at_debug_only_when_128_mib_or_more(cotenant_runs, quiet_run):
    """Host memory moves with every process on the machine: what others moved is never a warning there, and
    a debug line gives both figures when it reaches 128 MiB."""
    for run in [*cotenant_runs.runs.values(), quiet_run]:
        assert not [r for r in run.records if r.levelno >= logging.WARNING]
        moved = abs(run.result.other_processes_delta) >= 128 * MiB
        assert run.logged(logging.DEBUG, "other processes moved") == moved


def test_profile_result_feeds_the_planner(quiet_run):
    result = quiet_run.result
    total = result.baseline.total
    plan = plan_kv_cache(total=total, utilization=0.5, page_size_bytes=4096, num_layers=1, **result.plan_inputs())
    assert plan.breakdown["consumed"] == result.total_consumed
    assert plan.kv_cache_bytes == -(-total // 2) - result.non_kv_cache_memory


# ---- scripted GPUs (pynvml and the CUDA runtime scripted with recorded readings) ------------------------


def _h200(sc):
    return NvmlPlatform(nvml=ScriptedNvml(sc), files=sc.fs, environ=sc.environ)


def _wsl2(sc):
    return WslPlatform(nvml=ScriptedNvml(sc), files=sc.fs, environ=sc.environ, mem_get_info=sc.mem_get_info)


def _two_engines_start(sc) -> ProfileResult:
    """We load 16 GiB of weights and keep 1 GiB from the profile run while another engine loads 30 GiB."""
    platform = _h200(sc)
    baseline = MemorySnapshot.measure(0, platform)
    sc.allocate(16 * GiB)
    sc.allocate(30 * GiB, pid=sc.other_pid)
    with memory_profiling(baseline, weights_memory=16 * GiB, platform=platform) as result:
        sc.allocate(GiB)
    return result


def test_two_engines_starting_at_once_each_count_only_their_own():
    result = _two_engines_start(h200_scenario(context=True))
    assert result.process_scoped and result.total_consumed == 17 * GiB
    assert result.other_processes_delta == 30 * GiB and result.device_wide_consumed == 47 * GiB


def test_cotenant_move_is_warned_with_both_figures(caplog):
    with caplog.at_level(logging.WARNING, logger="devmem.engine.profiling"):
        _two_engines_start(h200_scenario(context=True))
    [record] = [r for r in caplog.records if r.name == "devmem.engine.profiling"]
    assert "device-wide use changed by 47.00 GiB but this process's own by 17.00 GiB" in record.getMessage()
    assert "other processes moved 30.00 GiB" in record.getMessage()


def test_cotenant_freeing_on_a_gpu_is_not_fatal():
    sc = h200_scenario(context=True)
    sc.allocate(40 * GiB, pid=sc.other_pid)
    platform = _h200(sc)
    baseline = MemorySnapshot.measure(0, platform)
    with memory_profiling(baseline, platform=platform) as result:
        sc.allocate(8 * GiB)
        sc.release(40 * GiB, pid=sc.other_pid)
    assert result.total_consumed == 8 * GiB and result.other_processes_delta == -40 * GiB


def test_without_per_process_figures_the_device_wide_drop_is_used_and_said():
    sc = wsl2_scenario()
    platform = _wsl2(sc)
    baseline = MemorySnapshot.measure(0, platform)
    sc.allocate(4 * GiB)
    with memory_profiling(baseline, platform=platform) as result:
        sc.allocate(2 * GiB, pid=sc.other_pid)
    assert result.process_scoped is False and result.other_processes_delta is None
    assert result.total_consumed == 6 * GiB
    assert any("device-wide drop" in note for note in result.notes)


def test_device_wide_drop_that_turns_negative_counts_as_zero_and_says_so():
    sc = wsl2_scenario()
    sc.allocate(8 * GiB, pid=sc.other_pid)
    platform = _wsl2(sc)
    baseline = MemorySnapshot.measure(0, platform)
    with memory_profiling(baseline, platform=platform) as result:
        sc.allocate(GiB)
        sc.release(8 * GiB, pid=sc.other_pid)
    assert result.device_wide_consumed == -7 * GiB and result.total_consumed == 0
    assert any("taken as 0" in note for note in result.notes)


def test_start_on_a_shared_gpu_fails_naming_the_gpu_and_both_figures():
    sc = h200_scenario(context=True)
    sc.allocate(100 * GiB, pid=sc.other_pid)
    platform = _h200(sc)
    snapshot = MemorySnapshot.measure(0, platform)
    requested = requested_memory(snapshot.total, 0.9)
    with pytest.raises(NotEnoughMemoryError) as info:
        check_startup_memory(snapshot, requested, platform)
    message = str(info.value)
    assert "NVIDIA H200" in message and format_size(snapshot.free) in message and format_size(requested) in message
    assert "other processes hold 100.00 GiB" in message


# ---- snapshots -------------------------------------------------------------------------------------------


def test_snapshot_measures_the_current_platform_when_none_is_given(monkeypatch):
    monkeypatch.setenv("DEVMEM_PLATFORM", "cpu")
    snapshot = MemorySnapshot.measure()
    assert 0 < snapshot.free <= snapshot.total and snapshot.process > 0 and snapshot.timestamp > 0


def test_snapshot_difference_is_own_growth():
    platform = CpuPlatform()
    before = MemorySnapshot.measure(0, platform)
    held = bytearray(256 * MiB)
    after = MemorySnapshot.measure(0, platform)
    del held
    delta = after - before
    assert abs(delta.process - 256 * MiB) <= 16 * MiB and delta.timestamp >= 0 and delta.total == 0


def test_snapshot_difference_without_per_process_figure_has_none():
    with_process = MemorySnapshot(0, free=10 * GiB, total=80 * GiB, process=GiB)
    without = MemorySnapshot(0, free=9 * GiB, total=80 * GiB, process=None)
    assert (without - with_process).process is None and (without - with_process).free == -GiB


def test_snapshots_of_different_devices_do_not_subtract():
    with pytest.raises(ValueError, match="device 1"):
        MemorySnapshot(0, GiB, GiB, None) - MemorySnapshot(1, GiB, GiB, None)


# ---- the start-time check --------------------------------------------------------------------------------


def test_start_with_less_free_than_requested_fails_naming_both_figures_and_the_device():
    snapshot = MemorySnapshot.measure(0, CpuPlatform())
    requested = snapshot.free + GiB
    with pytest.raises(NotEnoughMemoryError) as info:
        check_startup_memory(snapshot, requested, CpuPlatform())
    message = str(info.value)
    assert format_size(snapshot.free) in message and format_size(requested) in message
    assert "device 0 (host memory)" in message
    assert info.value.breakdown["free"] == snapshot.free and info.value.breakdown["requested"] == requested


def test_start_with_enough_free_memory_passes():
    snapshot = MemorySnapshot.measure(0, CpuPlatform())
    check_startup_memory(snapshot, snapshot.free, CpuPlatform())


# ---- without CUDA ----------------------------------------------------------------------------------------


def test_profiling_host_memory_says_torch_figures_were_not_measured(quiet_run):
    result = quiet_run.result
    assert result.torch_measured is False and result.torch_peak_increase == 0 and result.released_cache_bytes == 0
    assert any(
        "host memory, which torch's device allocator does not manage" in note and "not measured" in note
        for note in result.notes
    )


@no_cuda
def test_snapshot_without_the_declared_torch_device_says_torch_figures_were_not_measured():
    snapshot = MemorySnapshot.measure(0, _h200(h200_scenario()))
    assert snapshot.torch_measured is False
    assert any("sees no cuda device" in note and "not measured" in note for note in snapshot.notes)


@no_cuda
def test_release_without_the_declared_torch_device_returns_zero_and_says_why(caplog):
    with caplog.at_level(logging.INFO, logger="devmem.engine.profiling"):
        assert release_allocator_cache(0, _h200(h200_scenario())) == 0
    assert "sees no cuda device" in caplog.text and "released bytes not measured" in caplog.text


def test_release_on_host_memory_returns_zero_and_says_why(caplog):
    with caplog.at_level(logging.INFO, logger="devmem.engine.profiling"):
        assert release_allocator_cache(0, CpuPlatform()) == 0
    assert "host memory" in caplog.text and "released bytes not measured" in caplog.text


def test_release_on_host_memory_gives_the_c_heaps_free_pages_back(freed_c_heap):
    platform = CpuPlatform()
    kept = platform.get_process_memory_usage(0)
    release_allocator_cache(0, platform)
    assert kept - platform.get_process_memory_usage(0) >= 0.9 * freed_c_heap


def test_profiling_never_imports_torch():
    code = (
        "import sys; from devmem.cpu import CpuPlatform; from devmem.engine.profiling import *; "
        "p = CpuPlatform(); "
        "b = MemorySnapshot.measure(0, p)\nwith memory_profiling(b, platform=p) as r: pass\n"
        "release_allocator_cache(); print('torch' in sys.modules, r.torch_measured, r.notes)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.startswith("False False") and "torch is not imported" in out


# ---- on a GPU: Qwen3-8B's profile pass leaves 1,220 MiB in the allocator cache ---------------------------

QWEN3_8B_CACHED = 1220 * MiB


def _cache_like_a_profile_pass() -> None:
    scratch = torch.empty(QWEN3_8B_CACHED, dtype=torch.uint8, device="cuda:0")
    scratch.fill_(1)
    torch.cuda.synchronize()
    del scratch  # freed to the caching allocator, still reserved from the driver


@pytest.mark.gpu
@needs_cuda
def test_release_before_the_pinned_kv_allocation_reports_the_cached_bytes():
    _cache_like_a_profile_pass()
    assert torch.cuda.memory_reserved(0) >= QWEN3_8B_CACHED
    released = release_allocator_cache(0)
    assert released >= QWEN3_8B_CACHED and torch.cuda.memory_reserved(0) < QWEN3_8B_CACHED
    pinned = dict(pinned_bytes=20 * GiB, page_size_bytes=64 * 1024, num_layers=36)
    assert plan_kv_cache(released_cache=released, **pinned).kv_cache_bytes == plan_kv_cache(**pinned).kv_cache_bytes


@pytest.mark.gpu
@needs_cuda
def test_profile_window_on_a_gpu_releases_and_reports_the_cache():
    baseline = MemorySnapshot.measure(0)
    with memory_profiling(baseline) as result:
        _cache_like_a_profile_pass()
    assert result.released_cache_bytes >= QWEN3_8B_CACHED
    if result.torch_measured:
        assert result.torch_peak_increase >= QWEN3_8B_CACHED
        assert result.transient_peak_bytes >= QWEN3_8B_CACHED


# ---- hostile input: a DevmemError naming the value, never an AttributeError from inside -----------------------------


@pytest.mark.parametrize(
    "call",
    [
        lambda p: MemorySnapshot.measure(0, p),
        lambda p: release_allocator_cache(0, p),
        lambda p: memory_profiling(MemorySnapshot.measure(0, CpuPlatform()), 0, p).__enter__(),
    ],
    ids=["measure", "release", "window"],
)
def test_a_platform_that_is_no_devmem_platform_is_refused_naming_it(call):
    with pytest.raises(ArgumentError, match=r"platform must be a devmem Platform .*got 'cpu' of type str"):
        call("cpu")


@pytest.mark.parametrize("device", [True, -1, 1.0, "0", None])
def test_release_allocator_cache_refuses_what_is_no_device_index(device):
    with pytest.raises(ArgumentError, match=f"device must be a device index.*got {re.escape(repr(device))}"):
        release_allocator_cache(device, CpuPlatform())


def test_release_allocator_cache_refuses_a_device_torch_has_not(monkeypatch):
    sc = h200_scenario()
    runtime = ScriptedTorch(sc, "cuda")
    monkeypatch.setitem(sys.modules, "torch", runtime)
    runtime.malloc(MiB)  # torch's runtime initialised on device 0
    with pytest.raises(DevmemError, match="device index 5 is out of range"):
        release_allocator_cache(5, _h200(sc))


def test_a_snapshot_of_a_numpy_device_index_holds_a_python_int():
    np = pytest.importorskip("numpy")
    assert type(MemorySnapshot.measure(np.int64(0), CpuPlatform()).device) is int


def test_the_startup_check_refuses_a_snapshot_of_another_kind():
    with pytest.raises(ArgumentError, match="snapshot must be a MemorySnapshot .*got 'free' of type str"):
        check_startup_memory("free", GiB, CpuPlatform())  # type: ignore[arg-type]


def test_on_host_memory_other_processes_moves_are_said_once_at_info_not_warned_each_window(caplog, monkeypatch):
    from devmem.cpu import CpuPlatform
    from devmem.engine import profiling
    from devmem.testing.scenario import HostMemory, Scenario

    monkeypatch.setattr(profiling, "_host_memory_said", set())  # a process that has said nothing yet
    sc = Scenario(host=HostMemory(total=64 * GiB, free=48 * GiB))
    platform = CpuPlatform(files=sc.fs)
    with caplog.at_level(logging.DEBUG, logger="devmem.engine.profiling"):
        for _ in range(3):  # three windows, in each another process takes 1 GiB of host memory
            with memory_profiling(MemorySnapshot.measure(0, platform), platform=platform) as result:
                sc.host.take(GiB)
            assert result.other_processes_delta == GiB
    moved = [(r.levelname, r.getMessage()) for r in caplog.records if "other processes" in r.getMessage()]
    assert [level for level, _ in moved] == ["DEBUG", "INFO", "DEBUG", "DEBUG"]
    assert [m for m in moved if m[0] != "DEBUG"] == [
        (
            "INFO",
            "devmem: device 0 (cpu) is host memory: its free memory moves with every process on this machine, so "
            "profile windows see other processes' changes; sizing uses this process's own figure",
        )
    ]
