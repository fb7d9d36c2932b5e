"""devmem.EngineMemory: the engine's memory from its start to its KV cache, in order, on a scripted H200 whose
torch runtime is scripted (devmem.testing.torch_runtime), and on the cpu platform with the real torch."""

from __future__ import annotations

import pytest

import devmem
from devmem import EngineMemory, EngineMemoryError, GiB, KvLayout, MiB
from devmem.cpu import CpuPlatform
from devmem.engine.block_cost import BlockRun
from devmem.engine.kvcache import ALLOCATOR_GRANULARITY
from devmem.engine.phases import Phase
from devmem.engine.profile_store import BLOCK_COST_KIND, ProfileStore
from devmem.errors import StepRefused

PAGE = 3 * MiB + 4096  # a page that does not fill whole 2 MiB units
LAYERS = 22


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


def test_allocating_a_plan_on_another_device_is_refused(h200, torch_rt, platform):
    memory = _engine(h200, torch_rt, platform, graphs=False)
    plan = memory.plan(page_size_bytes=PAGE, num_layers=LAYERS)
    with pytest.raises(devmem.DevmemError, match="made for device 0, not device 1"):
        devmem.engine.allocate_kv_cache(plan, LAYERS, 1, platform)


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


def test_a_baseline_on_host_memory_leaves_out_the_c_heaps_free_pages(freed_c_heap):
    platform = CpuPlatform()
    kept = platform.get_process_memory_usage(0)
    with EngineMemory(0, utilization=0.01, platform=platform, reserve=False, check_startup=False) as memory:
        assert kept - memory.baseline.process >= 0.9 * freed_c_heap


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
        with pytest.raises(StepRefused) as refused:
            memory.allocate()
        assert (refused.value.step, refused.value.phase) == ("allocate", Phase.ALLOCATED)
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


# ---- failures: a window whose block raised, or whose end could not be read, opens again ------------------------


def test_a_numpy_utilization_is_kept_as_a_python_number(platform):
    import json

    np = pytest.importorskip("numpy")
    memory = EngineMemory(0, utilization=np.float32(0.25), platform=platform, reserve=False)
    assert type(memory.utilization) is float
    assert json.loads(json.dumps(memory.as_dict()))["utilization"] == memory.utilization


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


@pytest.mark.parametrize("returned", ["held", -1, BlockRun(17, 0)])
def test_a_first_run_that_returned_nothing_usable_is_profiled_again(platform, returned):
    memory = EngineMemory(0, utilization=0.5, platform=platform, reserve=False)
    with pytest.raises(devmem.DevmemError, match=r"run\(16\)|BlockRun.held_bytes"):
        memory.profile_blocks(lambda n: returned, 16)
    with pytest.raises(EngineMemoryError, match="the profile window ended with an exception"):
        memory.plan(page_size_bytes=PAGE, num_layers=LAYERS)
    assert memory.profile_blocks(lambda n: n * BLOCK, 16) == BlockRun(16, 16 * BLOCK)


def test_a_run_that_raises_propagates_its_error_and_the_cost_can_be_measured_again(platform):
    memory = _profiled(platform)

    def out_of_memory(n):
        raise MemoryError(f"out of memory at {n} blocks")

    with pytest.raises(MemoryError, match="at 64 blocks"):
        memory.measure_block_cost(out_of_memory, [64, 128])
    assert memory.block_cost is None
    assert memory.measure_block_cost(_black_box_engine([]), [64, 128]).block_bytes == BLOCK


# ---- a named charge held in the profile window (EngineMemory.hold) ---------------------------------------------


def _held(h200, rt, platform, nbytes=512 * MiB):
    memory = EngineMemory(0, utilization=0.1, platform=platform)
    with memory.profile(), memory.hold("the sampler", nbytes, "penalties over 256 requests x 32000 logits"):
        _forward(rt, ACTIVATIONS[:1])
    memory.plan(page_size_bytes=PAGE, num_layers=LAYERS)
    return memory


def test_a_charge_held_in_the_profile_window_lands_in_its_transient(h200, torch_rt, platform):
    memory = _held(h200, torch_rt, platform)
    assert memory.profile_result.transient_peak_bytes >= 512 * MiB + ACTIVATIONS[0]


def test_explain_names_a_held_charge_with_its_figure_and_where_it_came_from(h200, torch_rt, platform):
    text = _held(h200, torch_rt, platform).explain()
    assert (
        "profile window: 512.00 MiB held for the sampler (penalties over 256 requests x 32000 logits), inside its "
        "transient" in text
    )


def test_as_dict_carries_each_held_charge(h200, torch_rt, platform):
    said = _held(h200, torch_rt, platform).as_dict()["held_charges"]
    assert said == [{"name": "the sampler", "bytes": 512 * MiB, "detail": "penalties over 256 requests x 32000 logits"}]


def test_a_charge_held_outside_the_profile_window_is_refused(h200, torch_rt, platform):
    memory = EngineMemory(0, utilization=0.1, platform=platform)
    with pytest.raises(StepRefused, match="cannot hold in phase 'created'"), memory.hold("the sampler", MiB, "why"):
        pass


@pytest.mark.parametrize(("name", "nbytes", "detail"), [("", MiB, "why"), ("sampler", -1, "why"), ("sampler", MiB, 3)])
def test_a_held_charge_without_a_name_a_byte_count_or_a_reason_is_refused(
    h200, torch_rt, platform, name, nbytes, detail
):
    memory = EngineMemory(0, utilization=0.1, platform=platform)
    with memory.profile(), pytest.raises(EngineMemoryError), memory.hold(name, nbytes, detail):
        pass
