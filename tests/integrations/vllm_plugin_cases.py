"""devmem's vLLM plugin on one vLLM release's real classes, its sizing on a scripted H200 whose torch runtime is
scripted. tests/integrations/test_vllm_plugin.py runs this file once per release, each in a process of its own
(tests/integrations/vllm_releases.py); by hand:
``PYTHONPATH=/tmp/vllm-0.26.0 python3 -m pytest tests/integrations/vllm_plugin_cases.py``."""

from __future__ import annotations

import contextlib
import functools
import gc
import inspect
import json
import logging
import os
import sys
from types import ModuleType, SimpleNamespace

import pytest

import devmem
import devmem.resolution.plugins as resolution
from devmem import GiB, MiB, ReservationRefused
from devmem.integrations import kit
from devmem.integrations import vllm as plugin
from devmem.integrations.vllm import worker
from devmem.testing.torch_runtime import ScriptedTorch
from devmem.units import format_size
from devmem_nvidia.nvml_platform import NvmlPlatform
from devmem_nvidia.testing import ScriptedNvml, h200_scenario

gpu_worker = pytest.importorskip("vllm.v1.worker.gpu_worker", reason="vLLM is not importable in this process")
import vllm  # noqa: E402
from vllm.config import CacheConfig, CUDAGraphMode, ParallelConfig  # noqa: E402
from vllm.platforms import current_platform  # noqa: E402

ParallelConfig(), CacheConfig()  # their first construction imports modules that need the real torch

RELEASE = os.environ.get("DEVMEM_TEST_VLLM_RELEASE")
PAGE = 352 * 1024  # TinyLlama's page of 16 tokens on one layer, bf16
LAYERS = 22
ACTIVATIONS = [300 * MiB + 1, 2 * GiB + 5]
GRAPHS = 256 * MiB  # what the scripted capture keeps
ROWS, VOCAB, CHUNK = 256, 32000, 2048  # the largest batch, TinyLlama's vocabulary, the longest prefill of a request


def _sampler(kind: str):
    """The sampler the runner ``kind`` builds (its class, without the device state its start allocates): V2's keeps
    its penalty counts (``penalties_state``) from its start; V1's has none."""
    if kind == "v1":
        from vllm.v1.sample.sampler import Sampler

        return object.__new__(Sampler)
    from vllm.v1.worker.gpu.sample.penalties import PenaltiesState
    from vllm.v1.worker.gpu.sample.sampler import Sampler

    sampler = object.__new__(Sampler)
    sampler.penalties_state = object.__new__(PenaltiesState)
    return sampler


def _runner_classes() -> dict[str, type]:
    """This release's model runners: V2 in every release, V1 up to 0.33."""
    found = {}
    for name, module in (("v1", "vllm.v1.worker.gpu_model_runner"), ("v2", "vllm.v1.worker.gpu.model_runner")):
        with contextlib.suppress(ImportError):
            found[name] = __import__(module, fromlist=["GPUModelRunner"]).GPUModelRunner
    return found


RUNNERS = _runner_classes()


@pytest.fixture
def vllm_log(caplog):
    """vLLM's log (its logger does not propagate to the root, where caplog listens)."""
    logger = logging.getLogger("vllm")
    if logger.propagate:  # a release whose logger propagates reaches caplog already
        yield caplog
        return
    logger.addHandler(caplog.handler)
    yield caplog
    logger.removeHandler(caplog.handler)


@pytest.fixture
def h200():
    return h200_scenario()


@pytest.fixture
def current(h200, monkeypatch, tmp_path):
    """The scripted H200 as devmem's current platform, its scripted torch runtime as ``torch``, a profile store
    of the test's own."""
    platform = NvmlPlatform(nvml=ScriptedNvml(h200), files=h200.fs, environ=h200.environ)
    monkeypatch.setattr(resolution, "current_platform", lambda: platform)
    monkeypatch.setenv("DEVMEM_PROFILE_DIR", str(tmp_path / "profiles"))
    rt = _scripted_torch(h200)
    monkeypatch.setitem(sys.modules, "torch", rt)
    return rt


def _scripted_torch(scenario):
    rt = ScriptedTorch(scenario, "cuda")
    rt.inference_mode = contextlib.nullcontext
    return rt


def _runner(kind: str = "v2"):
    """This release's runner class (``kind``), doing to device memory what vLLM's does: weights, the profile run's
    activations, a throwaway graph capture and the capture for good; the rest is the class's own."""
    base = RUNNERS[kind]

    class Runner(base):  # type: ignore[misc, valid-type]
        def __init__(self, rt, during_profile=lambda: None):
            self.rt, self.during_profile, self.model_memory_usage, self.captured = rt, during_profile, 0, []
            self.sampler = _sampler(kind)

        def load(self):
            self.rt.malloc(2 * GiB)
            self.model_memory_usage = 2 * GiB

        def profile_run(self, *args, **kwargs):
            handles = [self.rt.malloc(n) for n in ACTIVATIONS]
            self.during_profile()
            self._dummy_sampler_run(None)  # vLLM's: the last hidden states still held
            for h in handles:
                self.rt.free(h)

        def _dummy_sampler_run(self, hidden_states):
            self.rt.free(self.rt.malloc(ROWS * VOCAB * 4))  # fp32 logits of the largest batch

        def profile_cudagraph_memory(self):
            self.rt.free(self.rt.malloc(GRAPHS))
            return GRAPHS

        @functools.wraps(base.capture_model)  # its parameters are the release's: they tell the runners apart
        def capture_model(self, *args, **kwargs):
            self.captured.append(self.rt.malloc(GRAPHS))
            return GRAPHS

        def get_kv_cache_spec(self):
            return {f"model.layers.{i}.self_attn": SimpleNamespace(page_size_bytes=PAGE) for i in range(LAYERS)}

    Runner.__name__ = base.__name__
    return Runner


class _Patched(gpu_worker.Worker):
    """This release's worker, patched as the plugin patches it (a subclass: vLLM's own class stays as it is)."""


worker.patch_worker(_Patched)


def _worker(
    runner,
    utilization=0.3,
    kv_cache_memory_bytes=None,
    graphs=False,
    model="tinyllama",
    cls=_Patched,
    max_logprobs=20,
    max_num_seqs=ROWS,
):
    w = object.__new__(cls)
    w.local_rank = 0
    w.cache_config = CacheConfig(gpu_memory_utilization=utilization, kv_cache_memory_bytes=kv_cache_memory_bytes)
    w.parallel_config = ParallelConfig()
    w.model_runner = runner
    mode = CUDAGraphMode.FULL_DECODE_ONLY if graphs else CUDAGraphMode.NONE
    w.vllm_config = SimpleNamespace(
        compilation_config=SimpleNamespace(cudagraph_mode=mode, cudagraph_capture_sizes=[1])
    )
    w.model_config = SimpleNamespace(
        enforce_eager=not graphs,
        model=model,
        dtype="bfloat16",
        max_model_len=CHUNK,
        multimodal_config=None,
        max_logprobs=max_logprobs,
        get_vocab_size=lambda: VOCAB,
    )
    w.scheduler_config = SimpleNamespace(max_num_seqs=max_num_seqs, max_num_batched_tokens=8192)
    return w


def _started(h200, runner, **options):
    w = _worker(runner, **options)
    worker.start(lambda _: h200.allocate(545 * MiB), w)  # vLLM's init_device: the CUDA context, after the baseline
    runner.load()
    return w


def _sized(w):
    return worker.determine(lambda _: pytest.fail("vLLM's own sizing ran"), w)


def test_the_release_under_test_is_the_one_imported():
    assert RELEASE is None or vllm.__version__ == RELEASE


def test_this_release_is_one_the_plugin_knows_without_a_warning():
    assert kit.version_note("vLLM", vllm.__version__, worker.OLDEST, worker.VERIFIED) == (True, None)


def test_the_plugin_wraps_this_releases_worker():
    class Fresh(gpu_worker.Worker):
        pass

    assert worker.patch_worker(Fresh, gpu_worker)
    for name in worker.WORKER_METHODS:
        if name != "get_kv_cache_spec":
            assert getattr(Fresh.__dict__[name], "__devmem_step__", False), name


def test_the_worker_module_imported_by_vllm_is_patched_through_the_entry_point(monkeypatch):
    module = ModuleType(worker.WORKER_MODULE)

    class Worker(gpu_worker.Worker):
        pass

    module.Worker = Worker
    monkeypatch.setitem(sys.modules, worker.WORKER_MODULE, module)
    plugin.register()
    assert Worker.__dict__.get(kit.PATCHED)


def test_each_runner_of_this_release_has_what_the_plugin_calls():
    assert RUNNERS
    for runner in RUNNERS.values():
        assert devmem.integrations.kit.shape_mismatches(runner, worker.RUNNER_METHODS) == []


@pytest.mark.parametrize("kind", sorted(RUNNERS))
def test_vllm_is_given_devmems_plan_within_its_share(h200, current, kind):
    runner = _runner(kind)(current)
    w = _started(h200, runner)
    budget = _sized(w)
    memory = getattr(w, worker.MEMORY)
    assert budget == memory.kv_plan.num_blocks * PAGE * LAYERS
    memory.release_allocator_cache()
    tensors = memory.layout.count or LAYERS  # one backing allocation from 0.30, a tensor per layer before
    for _ in range(tensors):
        current.malloc(budget // tensors)
    heaviest = [current.malloc(n) for n, _ in worker.sampler_charges(w).values()]  # serving's heaviest sampling
    runner.profile_run()
    for handle in heaviest:
        current.free(handle)
    footprint = h200.processes(0)[h200.own_driver_pid]
    assert footprint <= memory.requested
    assert memory.requested - footprint <= 64 * MiB


def test_vllms_log_line_shows_devmems_figure(h200, current, vllm_log):
    w = _started(h200, _runner()(current))
    with vllm_log.at_level(logging.INFO):
        budget = _sized(w)
    from vllm.utils.mem_utils import format_gib

    assert f"Available KV cache memory: {format_gib(budget)} GiB" in vllm_log.text
    assert "devmem sized the KV cache from process-scoped (this process's own memory)" in vllm_log.text


def test_the_attributes_vllm_reads_after_sizing_are_set(h200, current):
    w = _started(h200, _runner()(current))
    budget = _sized(w)
    profile = getattr(w, worker.MEMORY).profile_result
    assert w.available_kv_cache_memory_bytes == budget
    assert (w.total_consumed, w.peak_activation_memory) == (profile.total_consumed, profile.transient_peak_bytes)


def test_a_pinned_kv_cache_memory_bytes_gives_vllm_the_pinned_size_in_whole_blocks(h200, current):
    w = _started(h200, _runner()(current), kv_cache_memory_bytes=8 * GiB)
    budget = _sized(w)
    block = PAGE * LAYERS
    assert budget % block == 0 and budget <= 8 * GiB
    assert 8 * GiB - budget < block + LAYERS * 2 * MiB


def _checkpoint(folder, weights):
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps({"model_type": "llama"}))
    index = {"metadata": {"total_size": weights}, "weight_map": {}}
    (folder / "model.safetensors.index.json").write_text(json.dumps(index))
    return str(folder)


def test_a_pinned_start_reserves_its_weights_beside_the_cache(h200, current, tmp_path):
    model = _checkpoint(tmp_path / "model", 16 * GiB)
    w = _started(h200, _runner()(current), kv_cache_memory_bytes=60 * GiB, model=model)
    assert getattr(w, worker.MEMORY).reservation.bytes == 76 * GiB


def test_a_second_pinned_start_that_does_not_fit_is_refused_before_its_weights(h200, current, tmp_path):
    model = _checkpoint(tmp_path / "model", 16 * GiB)
    first = _started(h200, _runner()(current), kv_cache_memory_bytes=60 * GiB, model=model)  # held: it serves
    started = []
    with pytest.raises(ReservationRefused):
        worker.start(started.append, _worker(_runner()(current), kv_cache_memory_bytes=60 * GiB, model=model))
    assert started == [] and not getattr(first, worker.MEMORY).closed


def test_a_pinned_start_whose_measured_need_no_longer_fits_is_refused_at_its_sizing(h200, current, tmp_path):
    first = _started(
        h200, _runner()(current), kv_cache_memory_bytes=60 * GiB, model=_checkpoint(tmp_path / "a", 16 * GiB)
    )
    total = getattr(first, worker.MEMORY).baseline.total
    pinned = total - 76 * GiB - 2 * GiB - 256 * MiB  # with its 2 GiB of weights it fits at the door, by 256 MiB
    second = _started(
        h200, _runner()(current), kv_cache_memory_bytes=pinned, model=_checkpoint(tmp_path / "b", 2 * GiB)
    )
    with pytest.raises(ReservationRefused):  # its context, weights and activations beside the cache do not
        second.determine_available_memory()
    assert getattr(second, worker.MEMORY).closed and not getattr(first, worker.MEMORY).closed


def test_the_allocator_cache_is_released_right_before_vllm_allocates_its_kv_cache(h200, current):
    w = _started(h200, _runner()(current))
    _sized(w)
    current.free(current.malloc(512 * MiB))  # what warm-up left cached
    seen = []
    worker.allocate(lambda _: seen.append(current.cuda.memory_reserved(0) - current.cuda.memory_allocated(0)), w)
    assert seen == [0]


def test_another_process_freeing_memory_during_the_profile_is_no_assertion(h200, current, monkeypatch):
    alone = _sized(_started(h200, _runner()(current)))
    devmem.clear_cache()
    other = h200_scenario()
    other.allocate(16 * GiB, pid=4242)
    rt = _scripted_torch(other)
    monkeypatch.setitem(sys.modules, "torch", rt)
    platform = NvmlPlatform(nvml=ScriptedNvml(other), files=other.fs, environ=other.environ)
    monkeypatch.setattr(resolution, "current_platform", lambda: platform)
    w = _started(other, _runner()(rt, during_profile=lambda: other.release(16 * GiB, pid=4242)))
    assert _sized(w) == alone


def test_an_over_committed_start_is_refused_before_vllm_starts(h200, current):
    first = _started(h200, _runner()(current), utilization=0.6)  # held: it serves
    started = []
    with pytest.raises(ReservationRefused):
        worker.start(started.append, _worker(_runner()(current), utilization=0.6))
    assert started == [] and not getattr(first, worker.MEMORY).closed


def test_a_profile_run_that_fails_gives_the_reservation_back(h200, current):
    runner = _runner()(current)
    w = _started(h200, runner, utilization=0.6)

    def out_of_memory(*args, **kwargs):
        raise RuntimeError("CUDA out of memory")

    runner.profile_run = out_of_memory
    with pytest.raises(RuntimeError, match="CUDA out of memory"):
        w.determine_available_memory()
    _started(h200, _runner()(current), utilization=0.6)  # admitted: the failed start holds nothing


def test_a_kv_cache_allocation_that_fails_gives_the_reservation_back(h200, current):
    w = _started(h200, _runner()(current), utilization=0.6)
    with pytest.raises(AttributeError):  # vLLM's own initialize_from_config, on a worker it did not build
        w.initialize_from_config(None)
    _started(h200, _runner()(current), utilization=0.6)


def test_a_start_dropped_after_its_sizing_gives_its_share_back(h200, current):
    w = _started(h200, _runner()(current), utilization=0.6)
    _sized(w)  # then vLLM's engine core refuses the cache it was given, and drops the worker
    del w
    gc.collect()
    _started(h200, _runner()(current), utilization=0.6)


def test_init_device_twice_on_one_worker_is_admitted(h200, current):
    w = _started(h200, _runner()(current), utilization=0.6)
    worker.start(lambda _: None, w)
    assert not getattr(w, worker.MEMORY).closed


def test_shutdown_releases_the_reservation(h200, current):
    w = _started(h200, _runner()(current), utilization=0.6)
    worker.stop(lambda _: None, w)
    _started(h200, _runner()(current), utilization=0.6)


def test_a_worker_method_whose_signature_cannot_be_read_leaves_vllm_stock_with_one_warning(vllm_log):
    class Odd(gpu_worker.Worker):
        pass

    def determine_available_memory(self):
        return 0

    determine_available_memory.__signature__ = "not a signature"  # inspect.signature raises TypeError/ValueError
    Odd.determine_available_memory = determine_available_memory
    module = ModuleType("odd")
    module.Worker = Odd
    with vllm_log.at_level(logging.WARNING, logger="vllm.devmem"):
        kit.patch_in(module, "Worker", worker.patch_worker, plugin.switch, None)
    assert [r.levelname for r in vllm_log.records if r.name == "vllm.devmem"] == ["WARNING"]
    assert not Odd.__dict__.get(kit.PATCHED)


def test_the_device_is_the_one_this_releases_init_device_picks_for_a_data_parallel_rank(monkeypatch):
    w = _worker(None)
    w.parallel_config = ParallelConfig(data_parallel_size=2, data_parallel_rank_local=1, tensor_parallel_size=2)
    w.local_rank = 1
    monkeypatch.setattr(type(current_platform), "logical_device_id_to_visible_device_id", lambda self, i: i)
    assert worker.device_index(w) == 3


def _graphs_on(monkeypatch):
    monkeypatch.setattr(type(current_platform), "is_cuda_alike", lambda self: True, raising=False)
    monkeypatch.setattr(type(current_platform), "is_cuda", lambda self: True)


@pytest.mark.parametrize("kind", sorted(RUNNERS))
def test_graphs_are_charged_from_the_runners_own_capture_where_it_makes_one(h200, current, monkeypatch, kind):
    _graphs_on(monkeypatch)
    runner = _runner(kind)(current)
    w = _started(h200, runner, graphs=True)
    _sized(w)
    charge = getattr(w, worker.MEMORY).graph_charge
    estimated = "profile_only" in (devmem.integrations.kit.parameters(RUNNERS[kind].capture_model) or ()) or hasattr(
        RUNNERS[kind], "_init_minimal_kv_cache_for_profiling"
    )
    assert charge.source == ("capture window" if estimated else "first-start bound")


@pytest.mark.parametrize("kind", sorted(RUNNERS))
def test_what_graph_capture_after_the_cache_kept_is_charged_on_the_next_start(h200, current, monkeypatch, kind):
    _graphs_on(monkeypatch)
    w = _started(h200, _runner(kind)(current), graphs=True)
    _sized(w)
    worker.allocate(lambda _: None, w)  # vLLM allocates the cache (its layout is the engine's)
    worker.warm_up(lambda self: self.model_runner.capture_model(), w)
    kept = getattr(w, worker.MEMORY).graph_check.kept_bytes
    worker.stop(lambda _: None, w)
    again = _started(h200, _runner(kind)(current), graphs=True)
    _sized(again)
    assert kept >= GRAPHS and getattr(again, worker.MEMORY).graph_charge.bytes >= kept


def test_an_unset_utilization_is_the_one_this_release_resolves(h200, current):
    cache = CacheConfig()
    if cache.gpu_memory_utilization is not None:
        pytest.skip(f"vLLM {vllm.__version__} defaults gpu_memory_utilization to {cache.gpu_memory_utilization}")
    w = _worker(_runner()(current))
    w.cache_config = cache
    worker.start(lambda _: None, w)
    assert getattr(w, worker.MEMORY).utilization == cache.resolved_gpu_memory_utilization


def _extensible():
    if not hasattr(gpu_worker, worker.MEASURE):
        pytest.skip(f"vLLM {vllm.__version__} has no extensible KV cache ({worker.MEASURE})")
    from vllm.v1.worker import extensible_kv_cache

    return extensible_kv_cache


def test_the_extensible_cache_measurement_is_made_process_scoped(h200, current, monkeypatch):
    _extensible()
    module = ModuleType(gpu_worker.__name__)
    seen = []
    real = inspect.unwrap(gpu_worker.measure_kv_cache_blocks)  # vLLM's own, whatever an earlier test patched

    @functools.wraps(real)
    def recorded(kv_cache, vllm_config, device, *, init_free_memory, requested_memory):
        seen.append((init_free_memory, requested_memory))
        return 0

    module.measure_kv_cache_blocks = recorded

    class Fresh(gpu_worker.Worker):
        pass

    worker.patch_worker(Fresh, module)
    w = _started(h200, _runner()(current))
    h200.allocate(30 * GiB, pid=4242)  # a co-tenant arrives after this engine started
    memory = getattr(w, worker.MEMORY)
    free = h200.mem_get_info(0)[0]
    monkeypatch.setattr(sys.modules["vllm.utils.mem_utils"], "device_memory_info", lambda device: (free, 0))

    def warm_up(original, owner):  # vLLM's warm-up measures the extensible cache inside the worker's step
        module.measure_kv_cache_blocks(None, None, 0, init_free_memory=free + 30 * GiB, requested_memory=GiB << 10)

    kit.guarded(warm_up, worker._memory)(None, w)
    own = h200.processes(0)[h200.own_driver_pid]
    ((init_free, requested),) = seen
    assert init_free - free == own  # vLLM's init_free - free: this process's growth alone, not the co-tenant's
    assert requested == memory.requested


def test_this_releases_extensible_measurement_is_made_process_scoped_not_turned_off(vllm_log):
    _extensible()
    module = ModuleType(gpu_worker.__name__)
    module.measure_kv_cache_blocks = inspect.unwrap(gpu_worker.measure_kv_cache_blocks)

    class Fresh(gpu_worker.Worker):
        pass

    worker.patch_worker(Fresh, module)
    assert getattr(module.measure_kv_cache_blocks, "__devmem_step__", False)
    assert "extensible_kv_cache_unsupported_reason" not in Fresh.__dict__


def test_an_extensible_measurement_of_another_shape_turns_the_extensible_cache_off_with_one_line(
    h200, current, vllm_log
):
    _extensible()
    module = ModuleType(gpu_worker.__name__)
    module.measure_kv_cache_blocks = lambda kv_cache, budget: 0

    class Fresh(gpu_worker.Worker):
        def extensible_kv_cache_unsupported_reason(self):  # vLLM's all-reduce over the ranks: none here
            return None

    with vllm_log.at_level(logging.INFO, logger="vllm.devmem"):
        worker.patch_worker(Fresh, module)
    assert [r.getMessage() for r in vllm_log.records if r.name == "vllm.devmem"] == [
        f"devmem: {gpu_worker.__name__}.measure_kv_cache_blocks has another shape: "
        "the extensible KV cache is turned off"
    ]
    w = _started(h200, _runner()(current), cls=Fresh)
    assert "devmem sizes the KV cache" in w.extensible_kv_cache_unsupported_reason()


def _v1():
    if "v1" not in RUNNERS:
        pytest.skip("this release has no V1 model runner")
    return _runner("v1")


@pytest.mark.parametrize("kind", sorted(RUNNERS))
def test_the_heaviest_sampling_is_charged_beside_the_dummy_sampler_run(h200, current, kind):
    w = _started(h200, _runner(kind)(current))
    _sized(w)
    profile = getattr(w, worker.MEMORY).profile_result
    charged = sum(n for n, _ in worker.sampler_charges(w).values())
    assert profile.transient_peak_bytes >= charged + ROWS * VOCAB * 4


def test_v1s_prompt_logprobs_over_the_longest_prefill_are_its_heaviest_sampling_where_logprobs_are_accepted(
    h200, current
):
    nbytes, why = worker.sampler_charges(_worker(_v1()(current)))[worker.SAMPLER]
    assert nbytes == CHUNK * VOCAB * (2 + 4) + CHUNK * 20 * 24
    assert why.startswith(f"prompt logprobs over a prefill chunk of {CHUNK} tokens x {VOCAB} logits at 6 bytes")


def test_v1_charges_a_model_accepting_no_logprobs_the_penalties_alone(h200, current):
    nbytes, why = worker.sampler_charges(_worker(_v1()(current), max_logprobs=0))[worker.SAMPLER]
    assert nbytes == ROWS * VOCAB * 10
    assert why.startswith(f"penalties over {ROWS} rows x {VOCAB} logits at 10 bytes (")


def test_v1s_allowed_token_mask_is_kept_for_every_request_slot(h200, current):
    nbytes, why = worker.sampler_charges(_worker(_v1()(current)))[worker.ALLOWED_MASK]
    assert (nbytes, why) == (ROWS * VOCAB, f"{ROWS} request slots x {VOCAB} logits at 1 byte")


def test_v2s_prompt_logprobs_are_charged_one_chunk_of_1024_prompt_tokens_in_the_logits_dtype(h200, current):
    nbytes, why = worker.sampler_charges(_worker(_runner("v2")(current)))[worker.SAMPLER]
    assert nbytes == 1024 * VOCAB * 2 + 1024 * 20 * 24
    assert why.startswith(
        f"prompt logprobs over chunks of 1024 prompt tokens x {VOCAB} logits at 2 bytes; 20 logprobs a row at 24 bytes"
    )


def test_v2s_prompt_logprobs_of_an_fp32_head_are_charged_4_bytes_a_logit(h200, current):
    w = _worker(_runner("v2")(current))
    w.model_config.head_dtype = SimpleNamespace(itemsize=4)  # torch.float32 (the scripted runtime has no dtypes)
    assert worker.sampler_charges(w)[worker.SAMPLER][0] == 1024 * VOCAB * 4 + 1024 * 20 * 24


#: What V2's sampler copies of the largest batch's logits before applying its options, read from each release's
#: ``Sampler.apply_sampling_params``: 0.26.0 clones them in their own dtype (bf16 here), and only to return raw
#: logprobs; every other release makes an fp32 copy of them.
V2_CLONES = vllm.__version__ == "0.26.0"


def test_v2s_largest_batch_is_charged_the_copy_its_release_makes(h200, current):
    rows = 2048  # beyond a chunk of prompt logprobs, so that the batch is the larger charge
    w = _worker(_runner("v2")(current), max_num_seqs=rows)
    nbytes, why = worker.sampler_charges(w)[worker.SAMPLER]
    per_row = 2 if V2_CLONES else 4
    assert nbytes == rows * (VOCAB * per_row + 20 * 24)
    copy = "a copy for raw logprobs" if V2_CLONES else "an fp32 copy"
    assert why.startswith(f"{copy} over {rows} rows x {VOCAB} logits at {per_row} bytes; 20 logprobs a row")


def test_v2_charges_a_model_accepting_no_logprobs_the_copy_its_release_makes_without_them(h200, current):
    nbytes, why = worker.sampler_charges(_worker(_runner("v2")(current), max_logprobs=0))[worker.SAMPLER]
    assert nbytes == (0 if V2_CLONES else ROWS * VOCAB * 4)
    copy = "no copy (no logprobs)" if V2_CLONES else "an fp32 copy"
    assert why.startswith(f"{copy} over {ROWS} rows x {VOCAB} logits at {0 if V2_CLONES else 4} bytes (")


def test_v2_keeps_no_allowed_token_mask(h200, current):
    assert worker.ALLOWED_MASK not in worker.sampler_charges(_worker(_runner("v2")(current)))


@pytest.mark.parametrize("kind", sorted(RUNNERS))
def test_a_model_allowing_every_tokens_logprobs_is_charged_the_whole_vocabularys_top_k(h200, current, kind):
    every = worker.sampler_charges(_worker(_runner(kind)(current), max_logprobs=-1))[worker.SAMPLER]
    some = worker.sampler_charges(_worker(_runner(kind)(current), max_logprobs=20))[worker.SAMPLER]
    assert every[0] - some[0] >= ROWS * (VOCAB - 20) * 24
    assert f"{VOCAB} logprobs a row at 24 bytes each" in every[1]


@pytest.mark.parametrize("kind", sorted(RUNNERS))
def test_speculative_tokens_widen_the_largest_batch_by_their_rows_and_logits(h200, current, kind):
    w = _worker(_runner(kind)(current), max_logprobs=0)
    alone = worker.sampler_charges(w)[worker.SAMPLER][0]
    w.vllm_config.speculative_config = SimpleNamespace(num_speculative_tokens=3)
    nbytes, why = worker.sampler_charges(w)[worker.SAMPLER]
    assert nbytes == alone * 4 + 3 * ROWS * VOCAB * 2
    assert f"over {4 * ROWS} rows" in why and why.endswith(f"max_num_seqs {ROWS}, 3 speculative tokens)")


@pytest.mark.parametrize("kind", sorted(RUNNERS))
def test_a_pooling_model_is_charged_no_sampling(h200, current, kind):
    runner = _runner(kind)(current)
    runner.is_pooling_model = True
    assert worker.sampler_charges(_worker(runner)) == {}


def test_a_rank_without_a_sampler_is_charged_no_sampling(h200, current):
    runner = _runner("v2")(current)
    runner.sampler = None  # V2's earlier pipeline stages build none
    w = _started(h200, runner)
    _sized(w)
    assert worker.sampler_charges(w) == {}
    assert getattr(w, worker.MEMORY).held_charges == {}


def test_v2_charges_a_batch_under_8_rows_top_k_top_ps_sort_and_keeps_no_kernel_rows(h200, current):
    charges = worker.sampler_charges(_worker(_runner("v2")(current), max_logprobs=0, max_num_seqs=4))
    assert charges == {worker.SAMPLER: (4 * VOCAB * 16, charges[worker.SAMPLER][1])}
    assert charges[worker.SAMPLER][1].startswith(f"top-k/top-p's sort over 4 rows x {VOCAB} logits at 16 bytes")


def test_v2s_kernel_rows_are_one_per_request_where_the_multiprocessors_are_unknown(h200, current):
    nbytes, why = worker.sampler_charges(_worker(_runner("v2")(current)))[worker.KERNEL_ROWS]
    assert nbytes == ROWS * VOCAB * 4
    assert why == f"{ROWS} fp32 rows of {VOCAB} logits, one per multiprocessor up to {ROWS}"


@pytest.mark.parametrize(
    ("multiprocessors", "rows", "kept"), [(132, 1024, 132), (132, 100, 128), (132, 8, 8), (None, 300, 300)]
)
def test_v2s_kernel_keeps_its_programs_rows_rounded_to_a_power_of_two_at_most_the_multiprocessors(
    multiprocessors, rows, kept
):
    assert worker.kernel_rows(multiprocessors, rows) == kept


@pytest.mark.parametrize("kind", sorted(RUNNERS))
def test_what_sampling_keeps_from_its_first_use_is_held_across_the_whole_profile_pass(h200, current, kind):
    w = _started(h200, _runner(kind)(current))
    _sized(w)
    memory, charges = getattr(w, worker.MEMORY), worker.sampler_charges(w)
    kept = [name for name in worker.KEPT_CHARGES if name in charges]
    assert kept
    for name in kept:
        assert memory.held_charges[name].bytes == charges[name][0]
    beside = sum(ACTIVATIONS) + charges[worker.SAMPLER][0] + ROWS * VOCAB * 4  # the pass at its sampler step
    assert memory.profile_result.transient_peak_bytes >= beside + sum(charges[name][0] for name in kept)


def test_the_sampling_charge_says_the_settings_it_was_counted_from(h200, current):
    said = worker.sampler_charges(_worker(_runner()(current)))[worker.SAMPLER][1]
    for setting in (f"vocabulary {VOCAB}", "max_logprobs 20", "max_num_batched_tokens 8192", f"max_model_len {CHUNK}"):
        assert setting in said


def test_the_sampling_charges_are_named_in_explain_with_their_figures_and_reasons(h200, current):
    w = _started(h200, _runner()(current))
    _sized(w)
    memory = getattr(w, worker.MEMORY)
    for name, (nbytes, why) in worker.sampler_charges(w).items():
        assert memory.held_charges[name].bytes == nbytes
        assert (
            f"profile window: {format_size(nbytes)} held for {name} ({why}), inside its transient" in memory.explain()
        )


def test_the_sampling_charges_and_their_reasons_are_in_devmems_line_in_vllms_log(h200, current, vllm_log):
    w = _started(h200, _runner()(current))
    with vllm_log.at_level(logging.INFO, logger="vllm.devmem"):
        _sized(w)
    (line,) = [r.getMessage() for r in vllm_log.records if r.getMessage().startswith("devmem sized the KV cache")]
    for name, (nbytes, why) in worker.sampler_charges(w).items():
        assert f"; the profile window: {format_size(nbytes)} held for {name} ({why})" in line
