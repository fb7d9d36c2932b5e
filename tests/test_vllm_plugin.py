"""devmem's vLLM plugin on vLLM's real classes (vLLM 0.24 installed with ``--no-deps``, as .ci/run does), its sizing
on a scripted H200 whose torch runtime is scripted; skipped where vLLM is not installed."""

from __future__ import annotations

import contextlib
import logging
import sys
from pathlib import Path
from types import ModuleType, SimpleNamespace

import pytest
import tomllib

import devmem
import devmem.resolution.plugins as resolution
from devmem import GiB, MiB, ReservationRefused
from devmem.integrations import vllm as plugin
from devmem.integrations.vllm import versions, worker
from devmem.testing.torch_runtime import ScriptedTorch
from devmem_nvidia.nvml_platform import NvmlPlatform
from devmem_nvidia.testing import ScriptedNvml, h200_scenario

gpu_worker = pytest.importorskip(
    "vllm.v1.worker.gpu_worker", reason="vLLM is not installed (.ci/run installs 0.24.0 with --no-deps)"
)
from vllm.config import CUDAGraphMode  # noqa: E402
from vllm.v1.worker.gpu_model_runner import GPUModelRunner  # noqa: E402

PAGE = 352 * 1024  # TinyLlama's page of 16 tokens on one layer, bf16
LAYERS = 22
ACTIVATIONS = [300 * MiB + 1, 2 * GiB + 5]


@pytest.fixture
def vllm_log(caplog):
    """vLLM's log (its logger does not propagate to the root, where caplog listens)."""
    logger = logging.getLogger("vllm")
    logger.addHandler(caplog.handler)
    yield caplog
    logger.removeHandler(caplog.handler)


@pytest.fixture
def h200():
    return h200_scenario()


@pytest.fixture
def current(h200, monkeypatch):
    """The scripted H200 as devmem's current platform, and its scripted torch runtime as ``torch``."""
    platform = NvmlPlatform(nvml=ScriptedNvml(h200), files=h200.fs, environ=h200.environ)
    monkeypatch.setattr(resolution, "current_platform", lambda: platform)
    rt = ScriptedTorch(h200, "cuda")
    monkeypatch.setitem(sys.modules, "torch", rt)
    return rt


class Runner:
    """What vLLM's model runner does to device memory: weights, then the profile run's activations."""

    def __init__(self, rt, during_profile=lambda: None):
        self.rt, self.during_profile = rt, during_profile
        self.model_memory_usage = 0

    def load(self):
        self.rt.malloc(2 * GiB)
        self.model_memory_usage = 2 * GiB

    def profile_run(self):
        handles = [self.rt.malloc(n) for n in ACTIVATIONS]
        self.during_profile()
        for h in handles:
            self.rt.free(h)

    def get_kv_cache_spec(self):
        return {f"model.layers.{i}.self_attn": SimpleNamespace(page_size_bytes=PAGE) for i in range(LAYERS)}


def _worker(runner, utilization=0.3, kv_cache_memory_bytes=None, cls=gpu_worker.Worker):
    w = object.__new__(cls)
    w.local_rank = 0
    w.cache_config = SimpleNamespace(gpu_memory_utilization=utilization, kv_cache_memory_bytes=kv_cache_memory_bytes)
    w.parallel_config = SimpleNamespace(
        distributed_executor_backend="uni",
        data_parallel_backend="mp",
        nnodes_within_dp=1,
        data_parallel_rank_local=0,
        data_parallel_index=0,
        pipeline_parallel_size=1,
        tensor_parallel_size=1,
    )
    w.model_runner = runner
    w.vllm_config = SimpleNamespace(compilation_config=SimpleNamespace(cudagraph_mode=CUDAGraphMode.NONE))
    w.model_config = SimpleNamespace(enforce_eager=True)
    return w


def _started(h200, runner, **options):
    w = _worker(runner, **options)
    worker.start(lambda _: h200.allocate(545 * MiB), w)  # vLLM's init_device: the CUDA context, after the baseline
    runner.load()
    return w


def test_plugin_wraps_vllm_workers_methods():
    assert worker.patch_worker(gpu_worker.Worker, GPUModelRunner)
    assert getattr(gpu_worker.Worker, worker.PATCHED)
    for name in ("init_device", "determine_available_memory", "initialize_from_config", "shutdown"):
        method = getattr(gpu_worker.Worker, name)
        assert method.__wrapped__.__module__ == gpu_worker.__name__ and method is not method.__wrapped__


def test_installed_vllm_has_the_shape_the_plugin_knows():
    assert versions.supported_version() is None
    assert versions.shape_mismatches(gpu_worker.Worker, GPUModelRunner) == []


def test_another_vllm_release_is_named_in_the_refusal():
    assert versions.supported_version("0.33.0") == "vLLM 0.33.0 is not a release this plugin was verified on (0.24.x)"


def test_a_changed_signature_leaves_vllm_stock_with_one_warning(vllm_log):
    caplog = vllm_log

    class Changed(gpu_worker.Worker):
        def determine_available_memory(self, headroom):  # type: ignore[override]
            return 0

    with caplog.at_level(logging.WARNING, logger="vllm.devmem"):
        assert not worker.patch_worker(Changed, GPUModelRunner)
    assert [r.levelname for r in caplog.records] == ["WARNING"]
    assert "determine_available_memory('self', 'headroom')" in caplog.text
    assert not Changed.__dict__.get(worker.PATCHED)


def test_a_worker_module_without_its_worker_class_is_left_stock_with_one_warning(monkeypatch, vllm_log):
    monkeypatch.setitem(sys.modules, versions.WORKER_MODULE, ModuleType(versions.WORKER_MODULE))
    with vllm_log.at_level(logging.WARNING, logger="vllm.devmem"):
        plugin.register()
    assert [r.getMessage() for r in vllm_log.records] == [
        f"devmem: {versions.WORKER_MODULE} has no class Worker; vLLM sizes its KV cache itself"
    ]


def test_an_unrecognised_devmem_vllm_value_is_named_in_one_warning(monkeypatch, vllm_log):
    monkeypatch.setenv(plugin.ENABLE_ENV, "disable")
    with vllm_log.at_level(logging.WARNING, logger="vllm.devmem"):
        plugin.register()
    assert [r.getMessage() for r in vllm_log.records] == [
        "devmem: DEVMEM_VLLM='disable' is none of 1, true, yes, on (on) or 0, false, no, off (off); the plugin stays on"
    ]


def test_environment_variable_turns_the_plugin_off(monkeypatch):
    monkeypatch.setenv(plugin.ENABLE_ENV, "0")
    hooks = list(sys.meta_path)
    plugin.register()
    assert sys.meta_path == hooks


def test_vllm_is_given_devmems_plan_within_its_share(h200, current):
    w = _started(h200, Runner(current))
    budget = worker.available_memory(w)
    memory = getattr(w, worker.MEMORY)
    assert budget == memory.kv_plan.num_blocks * PAGE * LAYERS
    memory.release_allocator_cache()
    for _ in range(LAYERS):  # vLLM allocates one tensor per layer
        current.malloc(budget // LAYERS)
    Runner(current).profile_run()
    footprint = h200.processes(0)[h200.own_driver_pid]
    assert footprint <= memory.requested
    assert memory.requested - footprint <= 64 * MiB


def test_vllms_log_line_shows_devmems_figure(h200, current, vllm_log):
    caplog = vllm_log
    w = _started(h200, Runner(current))
    with caplog.at_level(logging.INFO):
        budget = worker.available_memory(w)
    from vllm.utils.mem_utils import format_gib

    assert f"Available KV cache memory: {format_gib(budget)} GiB" in caplog.text
    assert "devmem sized the KV cache from process-scoped (this process's own memory)" in caplog.text


def test_a_pinned_kv_cache_memory_bytes_gives_vllm_the_pinned_size_in_whole_blocks(h200, current):
    w = _started(h200, Runner(current), kv_cache_memory_bytes=8 * GiB)
    budget = worker.available_memory(w)
    block = PAGE * LAYERS
    assert budget % block == 0 and budget <= 8 * GiB
    assert 8 * GiB - budget < block + LAYERS * 2 * MiB  # whole blocks in tensors of 2 MiB pages, one per layer


def test_the_log_line_of_a_pinned_kv_cache_names_kv_cache_memory_bytes_not_the_ignored_utilization(
    h200, current, vllm_log
):
    w = _started(h200, Runner(current), utilization=0.9, kv_cache_memory_bytes=8 * GiB)
    with vllm_log.at_level(logging.INFO, logger="vllm.devmem"):
        worker.available_memory(w)
    assert "requested 8.00 GiB of 139.80 GiB (kv_cache_memory_bytes, for the cache)" in vllm_log.text
    assert "utilization 0.9" not in vllm_log.text


def test_the_allocator_cache_is_released_right_before_vllm_allocates_its_kv_cache(h200, current):
    w = _started(h200, Runner(current))
    worker.available_memory(w)
    current.free(current.malloc(512 * MiB))  # what warm-up left cached
    seen = []
    worker.allocate(lambda _: seen.append(current.cuda.memory_reserved(0) - current.cuda.memory_allocated(0)), w)
    assert seen == [0]


def test_another_process_freeing_memory_during_the_profile_is_no_assertion(h200, current):
    alone = worker.available_memory(_started(h200, Runner(current)))
    devmem.clear_cache()
    other = h200_scenario()
    other.allocate(16 * GiB, pid=4242)
    rt = ScriptedTorch(other, "cuda")
    sys.modules["torch"] = rt
    platform = NvmlPlatform(nvml=ScriptedNvml(other), files=other.fs, environ=other.environ)
    resolution.current_platform = lambda: platform  # restored by the fixture's monkeypatch
    w = _started(other, Runner(rt, during_profile=lambda: other.release(16 * GiB, pid=4242)))
    assert worker.available_memory(w) == alone


def test_an_over_committed_start_is_refused_before_vllm_starts(h200, current):
    first = _started(h200, Runner(current), utilization=0.6)
    started = []
    with pytest.raises(ReservationRefused):
        worker.start(started.append, _worker(Runner(current), utilization=0.6))
    assert started == [] and not getattr(first, worker.MEMORY).closed


class _Patched(gpu_worker.Worker):
    """vLLM's worker, patched as the plugin patches it (a subclass: the test leaves vLLM's own class as it is)."""


def test_a_profile_run_that_fails_gives_the_reservation_back(h200, current, monkeypatch):
    assert worker.patch_worker(_Patched, GPUModelRunner)
    monkeypatch.setattr(current, "inference_mode", contextlib.nullcontext, raising=False)
    runner = Runner(current)
    w = _started(h200, runner, utilization=0.6, cls=_Patched)

    def out_of_memory():
        raise RuntimeError("CUDA out of memory")

    runner.profile_run = out_of_memory
    with pytest.raises(RuntimeError, match="CUDA out of memory"):
        w.determine_available_memory()
    _started(h200, Runner(current), utilization=0.6)  # admitted: the failed start holds nothing


def test_a_kv_cache_allocation_that_fails_gives_the_reservation_back(h200, current):
    assert worker.patch_worker(_Patched, GPUModelRunner)
    w = _started(h200, Runner(current), utilization=0.6, cls=_Patched)
    with pytest.raises(AttributeError):  # vLLM's own initialize_from_config, on a worker it did not build
        w.initialize_from_config(None)
    _started(h200, Runner(current), utilization=0.6)


def test_a_worker_on_vllms_v2_model_runner_is_left_stock_with_one_warning(h200, current, vllm_log):
    w = _worker(Runner(current))
    w.use_v2_model_runner = True
    started = []
    with vllm_log.at_level(logging.WARNING, logger="vllm.devmem"):
        worker.start(started.append, w)
    assert started == [w] and getattr(w, worker.MEMORY, None) is None
    assert [r.levelname for r in vllm_log.records] == ["WARNING"]
    assert "V2 model runner" in vllm_log.text and "vLLM sizes its KV cache itself" in vllm_log.text


def test_shutdown_releases_the_reservation(h200, current):
    w = _started(h200, Runner(current), utilization=0.6)
    worker.stop(lambda _: None, w)
    _started(h200, Runner(current), utilization=0.6)


def test_pyproject_registers_the_plugin_with_vllm():
    project = tomllib.loads((Path(__file__).parents[1] / "pyproject.toml").read_text())["project"]
    assert project["entry-points"]["vllm.general_plugins"] == {"devmem": "devmem.integrations.vllm:register"}
    assert project["optional-dependencies"]["vllm"] == ["vllm>=0.24,<0.25"]
