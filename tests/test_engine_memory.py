"""devmem.EngineMemory: the engine's memory from its start to its KV cache, in order, on a scripted H200 whose
torch runtime is scripted (devmem.testing.torch_runtime), and on the cpu platform with the real torch."""

from __future__ import annotations

import sys

import pytest

import devmem
from devmem import EngineMemory, EngineMemoryError, GiB, KvLayout, MiB
from devmem.engine.block_cost import BlockRun
from devmem.engine.kvcache import ALLOCATOR_GRANULARITY
from devmem.engine.memory import BLOCK_COST_KIND
from devmem.engine.profile_store import ProfileStore
from devmem.testing.torch_runtime import ScriptedTorch
from devmem_nvidia.nvml_platform import NvmlPlatform
from devmem_nvidia.testing import ScriptedNvml, h200_scenario

PAGE = 3 * MiB + 4096  # a page that does not fill whole 2 MiB units
LAYERS = 22


@pytest.fixture
def h200():
    return h200_scenario()


@pytest.fixture
def torch_rt(h200, monkeypatch):
    rt = ScriptedTorch(h200, "cuda")
    monkeypatch.setitem(sys.modules, "torch", rt)
    return rt


@pytest.fixture
def platform(h200):
    return NvmlPlatform(nvml=ScriptedNvml(h200), files=h200.fs, environ=h200.environ)


def _forward(rt, sizes):
    for handle in [rt.malloc(n) for n in sizes]:
        rt.free(handle)


def _capture(rt, sizes):
    rt.cuda.empty_cache()
    pool = object()
    return [rt.malloc(n, pool=pool) for n in sizes]


def _serve(h200, rt, memory, plan, activations, tensors):
    """The engine allocates its own ``tensors`` equal tensors, runs the pass again, and reads the driver."""
    memory.release_allocator_cache()
    each = plan.num_blocks * plan.block_bytes // tensors
    for _ in range(tensors):
        rt.malloc(each)
    _forward(rt, activations)
    return h200.processes(0)[h200.own_driver_pid]


ACTIVATIONS = [300 * MiB + 1, 2 * GiB + 5]


def _engine(h200, rt, platform, *, graphs: bool, utilization=0.1):
    memory = EngineMemory(0, utilization=utilization, platform=platform)
    h200.allocate(545 * MiB)  # the device context, created after the baseline
    rt.malloc(4 * GiB)  # the weights
    with memory.profile(weights_memory=4 * GiB):
        _forward(rt, ACTIVATIONS)
    if graphs:
        with memory.graphs():
            _capture(rt, [400 * MiB + 3, 12 * MiB])
    return memory


@pytest.mark.parametrize("graphs", [False, True])
def test_engine_allocating_one_tensor_per_layer_stays_inside_the_request(h200, torch_rt, platform, graphs):
    memory = _engine(h200, torch_rt, platform, graphs=graphs)
    plan = memory.plan(page_size_bytes=PAGE, num_layers=LAYERS, layout=KvLayout.per_layer())
    footprint = _serve(h200, torch_rt, memory, plan, ACTIVATIONS, LAYERS)
    assert footprint <= memory.requested
    assert memory.requested - footprint <= max(64 * MiB, memory.requested // 400)


def test_graph_window_is_charged_what_capture_kept(h200, torch_rt, platform):
    memory = _engine(h200, torch_rt, platform, graphs=True)
    plan = memory.plan(page_size_bytes=PAGE, num_layers=LAYERS)
    assert plan.breakdown["graph_capture"] == 400 * MiB + 3 + 12 * MiB + (2 * MiB - 3)  # two 2 MiB-rounded segments
    assert memory.as_dict()["graph_capture_bytes"] == plan.breakdown["graph_capture"]


def test_explain_says_which_layout_the_plan_assumed(h200, torch_rt, platform):
    memory = _engine(h200, torch_rt, platform, graphs=True)
    memory.plan(page_size_bytes=PAGE, num_layers=LAYERS, layout=KvLayout.per_layer(tensors_per_layer=2))
    text = memory.explain()
    assert "44 tensor(s), each charged what torch's caching allocator reserves for its size" in text
    assert "graphs window" in text and "graph capture" in text


def test_profile_window_reopened_is_refused(h200, torch_rt, platform):
    memory = _engine(h200, torch_rt, platform, graphs=False)
    with pytest.raises(EngineMemoryError, match="already opened"), memory.profile():
        pass


def test_graph_window_before_the_profile_is_refused(platform):
    memory = EngineMemory(0, utilization=0.1, platform=platform)
    with pytest.raises(EngineMemoryError, match="before the profile window"), memory.graphs():
        pass


def test_plan_before_the_profile_is_refused(platform):
    memory = EngineMemory(0, utilization=0.1, platform=platform)
    with pytest.raises(EngineMemoryError, match="cannot plan before the profile window"):
        memory.plan(page_size_bytes=PAGE, num_layers=LAYERS)


def test_allocate_before_plan_is_refused(platform):
    memory = EngineMemory(0, utilization=0.1, platform=platform)
    with pytest.raises(EngineMemoryError, match="call plan"):
        memory.allocate()


def test_plan_of_another_engine_is_refused(h200, torch_rt, platform):
    ours = _engine(h200, torch_rt, platform, graphs=False)
    ours.plan(page_size_bytes=PAGE, num_layers=LAYERS)
    other = devmem.planner.plan_kv_cache(pinned_bytes=GiB, page_size_bytes=PAGE, num_layers=LAYERS)
    with pytest.raises(EngineMemoryError, match="not this engine's"):
        ours.allocate(other)


def test_allocating_a_plan_on_another_device_is_refused(h200, torch_rt, platform):
    memory = _engine(h200, torch_rt, platform, graphs=False)
    plan = memory.plan(page_size_bytes=PAGE, num_layers=LAYERS)
    with pytest.raises(devmem.DevmemError, match="made for device 0, not device 1"):
        devmem.engine.allocate_kv_cache(plan, LAYERS, 1, platform)


def test_engine_layout_cannot_be_allocated_by_devmem(h200, torch_rt, platform):
    memory = _engine(h200, torch_rt, platform, graphs=False)
    memory.plan(page_size_bytes=PAGE, num_layers=LAYERS, layout=KvLayout.per_layer())
    with pytest.raises(EngineMemoryError, match="allocates its own tensors"):
        memory.allocate()


@pytest.mark.parametrize(
    ("arguments", "named"),
    [
        ({"pinned_bytes": -1}, "pinned_bytes"),
        ({"utilization": "0.9"}, "'0.9'"),
        ({"utilization": 0}, "utilization"),
        ({"device": -1}, "-1"),
        ({"device": 0.0}, "0.0"),
    ],
)
def test_bad_constructor_arguments_are_named(platform, arguments, named):
    with pytest.raises(EngineMemoryError, match=named):
        EngineMemory(**{"platform": platform, **arguments})


def test_negative_weights_are_refused_before_the_window_runs(platform):
    memory = EngineMemory(0, utilization=0.1, platform=platform)
    ran = []
    with pytest.raises(EngineMemoryError, match="-5"), memory.profile(weights_memory=-5):
        ran.append(True)
    assert ran == []


def test_weights_larger_than_the_device_are_refused_before_the_window_runs(platform):
    memory = EngineMemory(0, utilization=0.1, platform=platform, reserve=False)
    ran = []
    refused = pytest.raises(EngineMemoryError, match=r"weights_memory=214748364800 .* more than device 0's total")
    with refused, memory.profile(weights_memory=200 * GiB):
        ran.append(True)
    assert ran == []


@pytest.mark.parametrize("name", ["pinned_bytes", "reserve_bytes"])
def test_a_share_larger_than_the_device_is_refused_naming_the_argument(platform, name):
    with pytest.raises(EngineMemoryError, match=rf"{name}=214748364800 .* more than device 0's total"):
        EngineMemory(0, platform=platform, **{name: 200 * GiB})


def test_a_released_reservation_is_refused_as_the_engines_share(platform):
    share = devmem.reserve(0, bytes=GiB, platform=platform)
    share.release()
    with pytest.raises(EngineMemoryError, match="reserve is a reservation of device 0 that was released"):
        EngineMemory(0, utilization=0.1, platform=platform, reserve=share)


def test_layout_of_zero_tensors_is_refused():
    with pytest.raises(EngineMemoryError, match="tensors_per_layer"):
        KvLayout.per_layer(0)


def test_startup_check_refuses_a_request_above_free_memory(h200, platform):
    h200.allocate(100 * GiB, pid=h200.other_pid)
    with pytest.raises(devmem.NotEnoughMemoryError, match="Lower the utilization"):
        EngineMemory(0, utilization=0.9, platform=platform, reserve=False)


def test_creation_reserves_the_share_and_refuses_one_that_does_not_fit_naming_the_holder(h200, platform):
    h200.allocate(100 * GiB, pid=h200.other_pid)
    with pytest.raises(devmem.ReservationRefused, match=str(h200.other_pid)):
        EngineMemory(0, utilization=0.9, platform=platform)


def test_the_reservation_is_released_by_close_and_admits_the_next_engine(platform):
    first = EngineMemory(0, utilization=0.6, platform=platform)
    assert first.reservation is not None and first.reservation.bytes == first.requested
    with pytest.raises(devmem.ReservationRefused):
        EngineMemory(0, utilization=0.6, platform=platform)
    first.close()
    with EngineMemory(0, utilization=0.6, platform=platform) as second:
        assert second.reservation is not None
    assert second.reservation.released


def test_profile_forward_runs_the_forward_twice_in_the_profile_window(platform):
    memory = EngineMemory(0, utilization=0.1, platform=platform, reserve=False)
    calls = []
    result = memory.profile_forward(lambda: calls.append(memory.profile_result), weights_memory=0)
    assert len(calls) == 2 and calls[0] is result and memory.profile_result is result


def test_profile_forward_refuses_a_forward_that_is_no_callable(platform):
    memory = EngineMemory(0, utilization=0.1, platform=platform, reserve=False)
    with pytest.raises(EngineMemoryError, match="forward must be a callable"):
        memory.profile_forward("forward")  # type: ignore[arg-type]


async def _async_forward():
    return None


def _generator_forward():
    yield None


@pytest.mark.parametrize("forward", [_async_forward, _generator_forward])
def test_profile_forward_refuses_a_forward_that_returns_work_not_yet_run(platform, forward):
    memory = EngineMemory(0, utilization=0.1, platform=platform, reserve=False)
    with pytest.raises(EngineMemoryError, match=r"forward returned (coroutine|generator) .*work that has not run"):
        memory.profile_forward(forward)
    assert memory.profile_result is not None and memory.profile_result.error is not None  # may be opened again


def test_cpu_platform_allocates_the_cache_on_torchs_cpu_device(monkeypatch):
    """The whole path with the real torch on the cpu platform: device index 0 is host memory."""
    torch = pytest.importorskip("torch")
    monkeypatch.setenv("DEVMEM_PLATFORM", "cpu")
    devmem.clear_cache()
    try:
        total = devmem.current_platform().device_memory_info(0).total
        memory = EngineMemory(0, utilization=max(512 * MiB / total, 1e-6))
        weights = torch.zeros(16 * MiB // 4, device=memory.torch_device)
        with memory.profile(weights_memory=weights.nbytes):
            torch.ones(8 * MiB // 4, device=memory.torch_device).mul_(2)  # a forward pass
        plan = memory.plan(page_size_bytes=64 * 1024, num_layers=4)
        cache = memory.allocate()
        assert cache.buffer.device.type == "cpu" and cache.nbytes == plan.num_blocks * plan.block_bytes
        assert plan.breakdown["granularity"] == ALLOCATOR_GRANULARITY
        assert memory.as_dict()["allocated_bytes"] == cache.nbytes
        with pytest.raises(EngineMemoryError, match="already allocated"):
            memory.allocate()
    finally:
        devmem.clear_cache()


def test_expandable_segments_round_the_whole_cache_once_to_their_mapping_unit(h200, torch_rt, platform, monkeypatch):
    monkeypatch.setenv("PYTORCH_CUDA_ALLOC_CONF", "expandable_segments:True")
    memory = _engine(h200, torch_rt, platform, graphs=False)
    plan = memory.plan(page_size_bytes=PAGE, num_layers=LAYERS, layout=KvLayout.per_layer())
    mapped = -(-plan.num_blocks * plan.block_bytes // (20 * MiB)) * 20 * MiB
    assert mapped <= plan.kv_cache_bytes < mapped + 20 * MiB + plan.block_bytes
    assert "22 tensor(s) packed into torch's expandable segments" in memory.explain()


def test_an_engines_own_granularity_in_expandable_segments_rounds_the_cache_once_to_20_mib(
    h200, torch_rt, platform, monkeypatch
):
    """An engine allocating with its own granularity (below the segment's) in expandable segments: its tensors are
    packed into one mapping that grows in torch's 20 MiB units, so the cache's total is rounded up to 20 MiB once."""
    monkeypatch.setenv("PYTORCH_CUDA_ALLOC_CONF", "expandable_segments:True")
    memory = EngineMemory(0, utilization=0.1, platform=platform, allocation_granularity=4096)
    h200.allocate(545 * MiB)  # the device context
    torch_rt.malloc(4 * GiB)  # the weights
    with memory.profile(weights_memory=4 * GiB):
        _forward(torch_rt, ACTIVATIONS)
    plan = memory.plan(page_size_bytes=PAGE, num_layers=LAYERS, layout=KvLayout.per_layer())
    assert plan.breakdown["granularity"] == 20 * MiB and plan.layout == "one allocation, rounded up once to 20.00 MiB"
    assert -(-plan.num_blocks * plan.block_bytes // (20 * MiB)) * 20 * MiB <= plan.kv_cache_bytes


# ---- a cache devmem cannot see into: the block cost measured from runs of the engine -------------------------------

BLOCK = 3 * MiB + 4096  # what the black-box engine really spends per block (cache, masks, read-back)
FIXED = 200 * MiB  # its forward's peak beside the blocks


def _black_box_engine(calls):
    """An engine's run at n blocks: its cache and per-block tensors held, its forward's peaks above them."""

    def run(n):
        calls.append(n)
        return BlockRun(n, held_bytes=n * BLOCK, peak_bytes=n * BLOCK + FIXED, reserved_peak_bytes=n * BLOCK + FIXED)

    return run


def _profiled(platform, **kwargs):
    memory = EngineMemory(0, utilization=0.5, platform=platform, reserve=False, **kwargs)
    with memory.profile(weights_memory=0):
        pass
    return memory


def test_a_measured_block_cost_plans_every_block_at_what_it_measured(platform):
    memory = _profiled(platform)
    cost = memory.measure_block_cost(_black_box_engine([]), [64, 128])
    plan = memory.plan()
    assert cost.block_bytes == BLOCK and plan.block_bytes == BLOCK
    assert plan.breakdown["transient_peak"] >= FIXED
    assert plan.num_blocks * BLOCK + FIXED + plan.breakdown["consumed"] <= memory.requested


def test_a_stored_block_cost_is_read_back_without_running_the_engine(platform, tmp_path):
    store, key = ProfileStore(tmp_path), {"model": "black-box", "blocks": 16}
    first = _profiled(platform)
    first.measure_block_cost(_black_box_engine([]), [64, 128], store=store, key=key)
    calls = []
    again = _profiled(platform)
    cost = again.measure_block_cost(_black_box_engine(calls), [64, 128], store=store, key=key)
    assert calls == [] and cost.block_bytes == BLOCK and "stored profile" in again.explain()
    assert again.plan().num_blocks == first.plan().num_blocks


def test_engines_of_one_key_that_measure_together_all_use_the_cost_stored_first(platform, tmp_path):
    store, key = ProfileStore(tmp_path), {"model": "black-box", "blocks": 16}
    later = _profiled(platform)
    first = _profiled(platform)

    def run_while_another_engine_stores(n):
        if not store.load(BLOCK_COST_KIND, key):  # the other engine finishes first, with another figure
            first.measure_block_cost(_black_box_engine([]), [64, 128], store=store, key=key)
            figures = {**store.load(BLOCK_COST_KIND, key).figures, "block_bytes": BLOCK + 4096}
            store.save(BLOCK_COST_KIND, key, figures, 1.0)
        return _black_box_engine([])(n)

    cost = later.measure_block_cost(run_while_another_engine_stores, [64, 128], store=store, key=key)
    assert cost.block_bytes == BLOCK + 4096 and later.plan().block_bytes == BLOCK + 4096
    assert "stored its profile first" in later.explain()


def test_an_engine_whose_twin_stored_first_plans_from_the_twins_windows_as_its_restart_will(platform, tmp_path):
    store, key = ProfileStore(tmp_path), {"model": "black-box", "blocks": 16}
    later, first = _profiled(platform), _profiled(platform)

    def run_while_another_engine_stores(n):
        if not store.load(BLOCK_COST_KIND, key):  # the twin finishes first, its window having seen more
            first.measure_block_cost(_black_box_engine([]), [64, 128], store=store, key=key)
            figures = store.load(BLOCK_COST_KIND, key).figures
            figures["windows"]["non_torch"] += 8 * MiB
            figures["windows"]["consumed"] += 8 * MiB
            store.save(BLOCK_COST_KIND, key, figures, 1.0)
        return _black_box_engine([])(n)

    later.measure_block_cost(run_while_another_engine_stores, [64, 128], store=store, key=key)
    restart = EngineMemory(0, utilization=0.5, platform=platform, reserve=False)
    restart.load_profile(store, key)
    plan = later.plan()
    assert plan.breakdown["consumed"] == store.load(BLOCK_COST_KIND, key).figures["windows"]["consumed"]
    assert plan.num_blocks == restart.plan().num_blocks


def test_a_stored_block_cost_with_incomplete_figures_is_measured_over_and_replaced(platform, tmp_path):
    store, key = ProfileStore(tmp_path), {"model": "black-box", "blocks": 16}
    store.save(BLOCK_COST_KIND, key, {"linear": True}, 0.0)  # no block_bytes, no runs
    calls = []
    measured = _profiled(platform)
    measured.measure_block_cost(_black_box_engine(calls), [64, 128], store=store, key=key)
    assert calls and store.load(BLOCK_COST_KIND, key).figures["block_bytes"] == BLOCK
    again = _profiled(platform)
    assert again.measure_block_cost(_black_box_engine([]), [64, 128], store=store, key=key).block_bytes == BLOCK
    assert "stored profile" in again.explain()


def test_measuring_a_block_cost_before_the_profile_window_is_refused(platform):
    memory = EngineMemory(0, utilization=0.5, platform=platform, reserve=False)
    with pytest.raises(EngineMemoryError, match="before the profile window"):
        memory.measure_block_cost(_black_box_engine([]), [64, 128])


def test_blocks_that_fit_refuses_a_cost_that_is_no_block_cost(platform):
    with pytest.raises(EngineMemoryError, match="cost must be a BlockCost, got 'x' of type str"):
        _profiled(platform).blocks_that_fit("x")  # type: ignore[arg-type]


def test_a_plan_without_a_page_size_or_a_measured_block_cost_is_refused(platform):
    with pytest.raises(EngineMemoryError, match="needs page_size_bytes and num_layers"):
        _profiled(platform).plan()


# ---- hostile input and misuse: a clear EngineMemoryError naming the value, never a traceback from deep inside ----


@pytest.mark.parametrize("platform_given", ["cpu", object()])
def test_a_platform_that_is_no_devmem_platform_is_refused_naming_it(platform_given):
    with pytest.raises(EngineMemoryError, match=r"platform must be a devmem Platform .*lacks name"):
        EngineMemory(0, utilization=0.1, platform=platform_given, reserve=False)


@pytest.mark.parametrize(("switch", "value"), [("check_startup", "no"), ("check_startup", None), ("reserve", 1)])
def test_switches_that_are_not_bools_are_refused_not_read_as_their_truth(platform, switch, value):
    with pytest.raises(EngineMemoryError, match=f"{switch} must be True or False, got {value!r}"):
        EngineMemory(0, utilization=0.1, platform=platform, **{switch: value})


def test_a_ledger_dir_that_is_no_folder_is_refused_before_anything_is_reserved(platform):
    with pytest.raises(EngineMemoryError, match="ledger_dir must be a folder .* got 5"):
        EngineMemory(0, utilization=0.1, platform=platform, ledger_dir=5)  # type: ignore[arg-type]


def test_a_numpy_utilization_is_kept_as_a_python_number(platform):
    import json

    np = pytest.importorskip("numpy")
    memory = EngineMemory(0, utilization=np.float32(0.25), platform=platform, reserve=False)
    assert type(memory.utilization) is float
    assert json.loads(json.dumps(memory.as_dict()))["utilization"] == memory.utilization


@pytest.mark.parametrize(
    ("fields", "named"),
    [
        ((True, 0), "KvLayout.count must be an int > 0, got 0"),
        ((True, -3), "KvLayout.count must be an int > 0, got -3"),
        ((True, 2.5), "KvLayout.count must be an int > 0, got 2.5"),
        ((True, None, 0), "KvLayout.per_layer_count must be an int > 0, got 0"),
        (("yes",), "KvLayout.by_engine must be True or False, got 'yes'"),
        ((False, 5), "use KvLayout.tensors"),
    ],
)
def test_a_layout_built_directly_with_bad_counts_is_refused(fields, named):
    with pytest.raises(EngineMemoryError, match=named):
        KvLayout(*fields)


def test_allocate_refuses_something_that_is_no_plan(h200, torch_rt, platform):
    memory = _engine(h200, torch_rt, platform, graphs=False)
    memory.plan(page_size_bytes=PAGE, num_layers=LAYERS)
    with pytest.raises(EngineMemoryError, match="plan must be the KvCachePlan .* got 'plan' of type str"):
        memory.allocate("plan")  # type: ignore[arg-type]


@pytest.mark.parametrize("failure", [RuntimeError("out of memory"), KeyboardInterrupt()])
def test_a_profile_window_that_raised_is_opened_again_and_then_plans(h200, torch_rt, platform, failure):
    memory = EngineMemory(0, utilization=0.1, platform=platform, reserve=False)
    with pytest.raises(type(failure)), memory.profile():
        raise failure
    with pytest.raises(EngineMemoryError, match="the profile window ended with an exception"):
        memory.plan(page_size_bytes=PAGE, num_layers=LAYERS)
    with memory.profile():
        _forward(torch_rt, ACTIVATIONS)
    assert memory.plan(page_size_bytes=PAGE, num_layers=LAYERS).num_blocks > 0


def test_a_profile_window_whose_end_could_not_be_read_is_opened_again_and_then_plans(h200, torch_rt, platform):
    memory = EngineMemory(0, utilization=0.1, platform=platform, reserve=False)
    with pytest.raises(devmem.DevmemError, match="GpuIsLost"), memory.profile():
        _forward(torch_rt, ACTIVATIONS)
        h200.failures["nvmlDevice*"] = "GpuIsLost"  # the device is read again when the window closes
    h200.failures.clear()
    with pytest.raises(EngineMemoryError, match=r"the profile window ended with an exception \(DevmemError"):
        memory.plan(page_size_bytes=PAGE, num_layers=LAYERS)
    with memory.profile():
        _forward(torch_rt, ACTIVATIONS)
    assert memory.plan(page_size_bytes=PAGE, num_layers=LAYERS).num_blocks > 0


def test_a_graph_window_that_raised_refuses_the_plan_until_it_is_opened_again(h200, torch_rt, platform):
    memory = _engine(h200, torch_rt, platform, graphs=False)
    with pytest.raises(RuntimeError), memory.graphs():
        raise RuntimeError("capture failed")
    with pytest.raises(EngineMemoryError, match=r"the graph window ended with an exception \(RuntimeError"):
        memory.plan(page_size_bytes=PAGE, num_layers=LAYERS)
    with memory.graphs():
        _capture(torch_rt, [12 * MiB])
    assert memory.plan(page_size_bytes=PAGE, num_layers=LAYERS).breakdown["graph_capture"] > 0


def test_plan_inside_an_open_window_is_refused_naming_the_window(h200, torch_rt, platform):
    memory = EngineMemory(0, utilization=0.1, platform=platform, reserve=False)
    with memory.profile(), pytest.raises(EngineMemoryError, match="cannot plan while the profile window is under"):
        memory.plan(page_size_bytes=PAGE, num_layers=LAYERS)


def test_the_graph_window_inside_the_profile_window_is_refused(platform):
    memory = EngineMemory(0, utilization=0.1, platform=platform, reserve=False)
    refused = pytest.raises(EngineMemoryError, match="cannot open the graph window while the profile window")
    with memory.profile(), refused, memory.graphs():
        pass


@pytest.mark.parametrize("returned", ["held", -1, BlockRun(17, 0)])
def test_a_first_run_that_returned_nothing_usable_is_profiled_again(platform, returned):
    memory = EngineMemory(0, utilization=0.5, platform=platform, reserve=False)
    with pytest.raises(devmem.DevmemError, match=r"run\(16\)|BlockRun.held_bytes"):
        memory.profile_blocks(lambda n: returned, 16)
    with pytest.raises(EngineMemoryError, match="the profile window ended with an exception"):
        memory.plan(page_size_bytes=PAGE, num_layers=LAYERS)
    assert memory.profile_blocks(lambda n: n * BLOCK, 16) == BlockRun(16, 16 * BLOCK)


def test_measuring_a_block_cost_twice_is_refused(platform):
    memory = _profiled(platform)
    memory.measure_block_cost(_black_box_engine([]), [64, 128])
    with pytest.raises(EngineMemoryError, match="a block's cost was already measured"):
        memory.measure_block_cost(_black_box_engine([]), [64, 128])


def test_every_step_after_close_is_refused_and_the_object_still_explains(h200, torch_rt, platform):
    memory = _engine(h200, torch_rt, platform, graphs=False)
    memory.close()
    memory.close()
    with pytest.raises(EngineMemoryError, match="cannot plan: this EngineMemory was closed"):
        memory.plan(page_size_bytes=PAGE, num_layers=LAYERS)
    with pytest.raises(EngineMemoryError, match="was closed"), memory:
        pass
    assert "reserved" in memory.explain() and memory.as_dict()["plan"] is None


def test_a_second_thread_cannot_open_the_window_another_thread_holds(platform):
    import threading

    memory = EngineMemory(0, utilization=0.1, platform=platform, reserve=False)
    inside, leave = threading.Event(), threading.Event()

    def forward():
        inside.set()
        leave.wait(10)

    worker = threading.Thread(target=memory.profile_forward, args=(forward,), kwargs={"passes": 1})
    worker.start()
    try:
        assert inside.wait(10)
        with pytest.raises(EngineMemoryError, match="while the profile window is under way"), memory.profile():
            pass
    finally:
        leave.set()
        worker.join(10)
    assert memory.profile_result is not None and memory.profile_result.complete


def test_a_forked_child_cannot_use_its_parents_engine_memory(h200, torch_rt, platform):
    import os

    memory = _engine(h200, torch_rt, platform, graphs=False)
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: report what plan() raised, and leave at once
        try:
            memory.plan(page_size_bytes=PAGE, num_layers=LAYERS)
            os.write(write, b"planned")
        except EngineMemoryError as exc:
            os.write(write, str(exc).encode()[:4000])
        finally:
            os._exit(0)
    os.close(write)
    os.waitpid(pid, 0)
    with os.fdopen(read, "rb") as pipe:
        said = pipe.read().decode()
    assert f"this EngineMemory was created by process {os.getpid()}" in said
    assert memory.plan(page_size_bytes=PAGE, num_layers=LAYERS).num_blocks > 0  # the parent's is untouched


def test_a_run_that_raises_propagates_its_error_and_the_cost_can_be_measured_again(platform):
    memory = _profiled(platform)

    def out_of_memory(n):
        raise MemoryError(f"out of memory at {n} blocks")

    with pytest.raises(MemoryError, match="at 64 blocks"):
        memory.measure_block_cost(out_of_memory, [64, 128])
    assert memory.block_cost is None
    assert memory.measure_block_cost(_black_box_engine([]), [64, 128]).block_bytes == BLOCK
