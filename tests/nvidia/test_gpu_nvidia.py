"""The nvml platform on a real NVIDIA GPU (marked ``gpu``; skipped without CUDA and NVML).

Run on the GPU machine, recording the figures as JSON into a directory::

    DEVMEM_GPU_RESULTS=benchmarks/results/h200 python -m pytest -m gpu tests/nvidia/test_gpu_nvidia.py -s

Each test adds what it measured to ``test_gpu_nvidia.json`` there (and prints it), pass or fail.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from devmem import GiB, MiB
from devmem.engine.profiling import MemorySnapshot, memory_profiling
from devmem.sdk import REAL_FILES
from devmem.testing import PlatformConformance, TorchFixtures
from devmem.testing.allocations import allocate_torch_in_subprocess
from devmem_nvidia import CudaDriverAllocator, NvmlPlatform, NvmlSession
from devmem_nvidia.nvml_access import device_minor, running_processes
from devmem_nvidia.pidns import learn_driver_pid, maps_nvidia_device

try:
    import torch
except ImportError:  # pragma: no cover - torch is a test dependency
    torch = None


def _why_not() -> str | None:
    if torch is None or not torch.cuda.is_available():
        return "needs torch with a CUDA device"
    ok, why = NvmlSession.shared().probe()
    return None if ok else f"needs NVML: {why}"


WHY_NOT = _why_not()
pytestmark = [pytest.mark.gpu, pytest.mark.skipif(WHY_NOT is not None, reason=WHY_NOT or "")]

#: The driver maps device memory in 2 MiB pages; torch rounds large blocks to 2 MiB too.
GRANULARITY = 2 * MiB
RESULTS: dict[str, object] = {}


@pytest.fixture(scope="module", autouse=True)
def record():
    """Write every test's figures, pass or fail, to $DEVMEM_GPU_RESULTS/test_gpu_nvidia.json."""
    yield
    out = os.environ.get("DEVMEM_GPU_RESULTS")
    text = json.dumps(RESULTS, indent=2, default=str)
    print(text)
    if out:
        Path(out).mkdir(parents=True, exist_ok=True)
        (Path(out) / "test_gpu_nvidia.json").write_text(text + "\n")


@pytest.fixture(scope="module")
def platform():
    torch.empty(1, device="cuda:0")  # this process's CUDA context, as an engine has before it measures
    torch.cuda.synchronize()
    platform = NvmlPlatform()
    RESULTS["machine"] = {
        "device": platform.device_name(0),
        "notes": platform.notes(0),
        "pid": os.getpid(),
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "cuda_visible_devices": os.environ.get("CUDA_VISIBLE_DEVICES"),
    }
    return platform


def test_process_usage_moves_by_exactly_a_tensor(platform):
    torch.cuda.empty_cache()
    before = platform.get_process_memory_usage(0)
    tensor = torch.empty(512 * MiB, dtype=torch.uint8, device="cuda:0")
    torch.cuda.synchronize()
    after = platform.get_process_memory_usage(0)
    del tensor
    torch.cuda.empty_cache()
    RESULTS["tensor_512mib"] = {"before": before, "after": after, "moved": after - before, "expected": 512 * MiB}
    assert abs(after - before - 512 * MiB) <= GRANULARITY


def test_child_allocation_does_not_move_process_usage(platform):
    before = platform.get_process_memory_usage(0)
    with allocate_torch_in_subprocess(GiB, 0, namespace="cuda") as child:
        after = platform.get_process_memory_usage(0)
        others = platform.other_processes_memory(0)
    RESULTS["child_1gib"] = {"before": before, "after": after, "child_pid": child.pid, "others": others}
    assert after == before


def test_child_allocation_is_listed_as_another_process(platform):
    with allocate_torch_in_subprocess(GiB, 0, namespace="cuda") as child:
        others = platform.other_processes_memory(0) or {}
    RESULTS["child_listed"] = {"child_pid": child.pid, "others": others}
    assert others.get(child.pid, 0) >= GiB


def test_device_memory_info_agrees_with_torch(platform):
    ours = platform.device_memory_info(0)
    free, total = torch.cuda.mem_get_info(0)
    RESULTS["mem_get_info"] = {
        "devmem": ours._asdict(),
        "torch": {"free": free, "total": total},
        "sources": platform.memory_sources(0),
    }
    assert abs(ours.total - total) <= 64 * MiB and abs(ours.free - free) <= 64 * MiB


def test_profiling_counts_only_this_process_while_a_helper_allocates(platform):
    torch.cuda.empty_cache()
    baseline = MemorySnapshot.measure(0, platform)
    helper = None
    try:
        with memory_profiling(baseline, platform=platform) as result:
            held = torch.empty(256 * MiB, dtype=torch.uint8, device="cuda:0")
            torch.cuda.synchronize()
            helper = allocate_torch_in_subprocess(512 * MiB, 0, namespace="cuda")
    finally:
        if helper is not None:
            helper.free()
    RESULTS["profiling_with_helper"] = result.as_dict()
    del held
    torch.cuda.empty_cache()
    assert result.process_scoped and abs(result.total_consumed - 256 * MiB) <= GRANULARITY


def test_process_without_a_context_holds_nothing():
    code = (
        "import json; from devmem_nvidia import NvmlPlatform; from devmem_nvidia.pidns import maps_nvidia_device; "
        "p = NvmlPlatform(); used = p.get_process_memory_usage(0); "
        "print(json.dumps([used, p.process_memory_reason(0), maps_nvidia_device()]))"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    RESULTS["no_context"] = {"stdout": done.stdout.strip(), "stderr": done.stderr.strip()[-2000:]}
    assert json.loads(done.stdout)[0] == 0


def test_context_maps_its_nvidia_device(platform):
    dev = platform.visible_device(0)
    minor = device_minor(NvmlSession.shared(), dev.parent_handle if dev.mig else dev.handle)
    maps = REAL_FILES.read_text("/proc/self/maps")
    nvidia_lines = [line for line in maps.splitlines() if "/dev/nvidia" in line]
    RESULTS["maps"] = {"minor": minor, "nvidia_lines": nvidia_lines[:12]}
    assert maps_nvidia_device(REAL_FILES, minor) is True


def test_driver_pid_is_learned_as_this_process(platform):
    handle = platform.visible_device(0).handle

    def usage():
        return {pid: e.used for pid, e in running_processes(NvmlSession.shared(), handle).items()}

    pid, how = learn_driver_pid(usage, CudaDriverAllocator(), 0)
    RESULTS["learned_pid"] = {"learned": pid, "how": how, "own": os.getpid()}
    assert pid == os.getpid()


class TorchOnThisGpu(TorchFixtures):
    @pytest.fixture
    def platform(self):
        return NvmlPlatform()


class TestNvmlConformanceOnGpu(PlatformConformance, TorchOnThisGpu):
    pass


def test_runtime_view_reads_what_torch_reports():
    from devmem_nvidia.runtime_caps import RuntimeView

    torch.zeros(1, device="cuda")
    reading = RuntimeView(None, REAL_FILES, real=True).reading(0)
    free, total = torch.cuda.mem_get_info(0)
    RESULTS["runtime_view"] = {"devmem": reading and reading._asdict(), "torch": {"free": free, "total": total}}
    assert reading is not None and reading.total == total and abs(reading.free - free) <= 64 * MiB


def test_runtime_view_adds_no_limit_outside_mps():
    torch.zeros(1, device="cuda")
    sources = NvmlPlatform().memory_sources(0)
    RESULTS["sources_with_context"] = sources
    assert sources["total"].startswith("NVML memory info")


def test_graph_pool_captured_after_the_forward_is_not_subtracted_from_its_peak(platform):
    """A forward pass, then a CUDA graph capture keeping its pool, in one window: the allocator's segment history
    shows the pool was reserved after the peak, so the transient is still the forward's."""
    torch.cuda.empty_cache()
    baseline = MemorySnapshot.measure(0, platform)
    weights = torch.empty(256 * MiB, dtype=torch.uint8, device="cuda:0")
    with memory_profiling(baseline, weights_memory=weights.nbytes, platform=platform) as profile:
        activation = torch.empty(1 * GiB, dtype=torch.uint8, device="cuda:0")
        del activation
        torch.cuda.empty_cache()
        static = torch.zeros(1, device="cuda:0")
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            kept = static + torch.empty(300 * MiB // 4, device="cuda:0").fill_(1).sum()
    RESULTS["graph_after_forward"] = {
        "transient_rule": profile.transient_rule,
        "transient": profile.transient_peak_bytes,
        "kept_after_peak": profile.kept_after_peak_bytes,
        "notes": profile.notes,
    }
    assert profile.transient_rule == "history"
    assert profile.kept_after_peak_bytes >= 300 * MiB
    assert profile.transient_peak_bytes >= GiB
    del graph, kept, weights
