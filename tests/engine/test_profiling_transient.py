"""What the profile window hands the planner: the reserved peak as the transient, lower bounds, nesting, failures.

torch's device runtime is scripted (``devmem.testing.torch_runtime``): a caching allocator that reserves whole
segments rounded to 2 MiB and keeps freed segments until ``empty_cache``, over a scripted H200 or WSL2 machine.
"""

from __future__ import annotations

import sys

import pytest

from devmem import DevmemError, GiB, MiB
from devmem.engine.profiling import MemorySnapshot, memory_profiling
from devmem.planner.sizing import plan_kv_cache
from devmem.testing.torch_runtime import ScriptedTorch
from devmem_nvidia.testing import ScriptedNvml, wsl2_scenario
from devmem_nvidia.wsl2 import WslPlatform


def _forward(rt, sizes):
    """One pass: allocate each activation in turn, free them all at the end (as a forward pass does)."""
    handles = [rt.malloc(n) for n in sizes]
    for h in handles:
        rt.free(h)


def test_transient_is_what_the_allocator_reserved_over_what_it_kept(torch_rt, platform):
    baseline = MemorySnapshot.measure(0, platform)
    weights = torch_rt.malloc(2 * GiB)
    # 1 MiB + 1 byte reserves 2 MiB; freed, a 3 MiB request cannot reuse it and reserves 4 MiB more.
    with memory_profiling(baseline, weights_memory=2 * GiB, platform=platform) as profile:
        _forward(torch_rt, [MiB + 1, 3 * MiB])
    assert profile.transient_source == "reserved"
    assert profile.transient_peak_bytes == 6 * MiB
    assert profile.transient_allocated_bytes == 4 * MiB + 1
    assert profile.plan_inputs()["transient_peak_bytes"] == 6 * MiB
    torch_rt.free(weights)


def test_kv_cache_and_a_second_pass_stay_inside_the_request(torch_rt, platform, h200):
    """The footprint after the KV allocation and a second identical pass never exceeds ceil(u * total)."""
    baseline = MemorySnapshot.measure(0, platform)
    torch_rt.malloc(4 * GiB)
    activations = [300 * MiB + 1, 700 * MiB + 3, 129 * MiB, 2 * GiB + 5]
    with memory_profiling(baseline, weights_memory=4 * GiB, platform=platform) as profile:
        _forward(torch_rt, activations)
    plan = plan_kv_cache(
        total=baseline.total, utilization=0.1, page_size_bytes=2 * MiB, num_layers=1, **profile.plan_inputs()
    )
    torch_rt.malloc(plan.num_blocks * plan.block_bytes)
    _forward(torch_rt, activations)
    footprint = h200.processes(0)[h200.own_driver_pid]
    requested = -(-baseline.total // 10)
    assert footprint <= requested
    assert requested - footprint < 2 * MiB + plan.block_bytes


def test_reserved_peak_survives_the_release_on_exit(torch_rt, platform):
    baseline = MemorySnapshot.measure(0, platform)
    with memory_profiling(baseline, platform=platform) as profile:
        _forward(torch_rt, [GiB])
    assert profile.released_cache_bytes == GiB
    assert profile.transient_peak_bytes == GiB


def test_nested_window_keeps_the_outer_peak(torch_rt, platform):
    baseline = MemorySnapshot.measure(0, platform)
    with memory_profiling(baseline, platform=platform) as outer:
        _forward(torch_rt, [3 * GiB])
        with memory_profiling(MemorySnapshot.measure(0, platform), platform=platform):
            _forward(torch_rt, [GiB])
    assert outer.transient_peak_bytes == 3 * GiB
    assert outer.torch_peak_increase == 3 * GiB


def test_nested_window_does_not_see_the_outer_peak(torch_rt, platform):
    baseline = MemorySnapshot.measure(0, platform)
    with memory_profiling(baseline, platform=platform):
        _forward(torch_rt, [3 * GiB])
        torch_rt.cuda.empty_cache()
        with memory_profiling(MemorySnapshot.measure(0, platform), platform=platform) as inner:
            _forward(torch_rt, [GiB])
    assert inner.transient_peak_bytes == GiB


def test_profile_whose_block_raised_cannot_feed_the_planner(torch_rt, platform):
    baseline = MemorySnapshot.measure(0, platform)
    with pytest.raises(RuntimeError, match="out of memory"), memory_profiling(baseline, platform=platform) as profile:
        raise RuntimeError("CUDA out of memory")
    assert not profile.complete and "RuntimeError: CUDA out of memory" in profile.error
    with pytest.raises(DevmemError, match="ended with an exception"):
        profile.plan_inputs()


def test_profile_still_open_cannot_feed_the_planner(platform):
    baseline = MemorySnapshot.measure(0, platform)
    with memory_profiling(baseline, platform=platform) as profile, pytest.raises(DevmemError, match="still open"):
        profile.plan_inputs()


def test_failed_inner_window_leaves_the_outer_usable(torch_rt, platform):
    baseline = MemorySnapshot.measure(0, platform)
    with memory_profiling(baseline, platform=platform) as outer:
        _forward(torch_rt, [2 * GiB])
        with pytest.raises(ValueError), memory_profiling(MemorySnapshot.measure(0, platform), platform=platform):
            raise ValueError("bad shape")
    assert outer.complete and outer.transient_peak_bytes == 2 * GiB


def test_declared_weights_bound_consumed_when_a_cotenant_frees_during_a_device_wide_window():
    """No per-process figure (WDDM) and a co-tenant frees 10 GiB: the 4 GiB of weights still count."""
    sc = wsl2_scenario()
    sc.allocate(12 * GiB, pid=sc.other_pid)
    platform = WslPlatform(nvml=ScriptedNvml(sc), files=sc.fs, environ=sc.environ)
    baseline = MemorySnapshot.measure(0, platform)
    sc.allocate(4 * GiB)
    with memory_profiling(baseline, weights_memory=4 * GiB, platform=platform) as profile:
        sc.release(10 * GiB, pid=sc.other_pid)
    assert profile.device_wide_consumed == -6 * GiB
    assert profile.total_consumed == 4 * GiB
    assert any("declared weights_memory" in note for note in profile.notes)


def test_torch_reserved_growth_bounds_consumed_when_a_cotenant_frees(monkeypatch):
    sc = wsl2_scenario()
    sc.allocate(12 * GiB, pid=sc.other_pid)
    rt = ScriptedTorch(sc, "cuda")
    monkeypatch.setitem(sys.modules, "torch", rt)
    platform = WslPlatform(nvml=ScriptedNvml(sc), files=sc.fs, environ=sc.environ)
    baseline = MemorySnapshot.measure(0, platform)
    rt.malloc(5 * GiB)
    with memory_profiling(baseline, platform=platform) as profile:
        sc.release(10 * GiB, pid=sc.other_pid)
    assert profile.total_consumed == 5 * GiB
    assert any("torch's reserved memory" in note for note in profile.notes)


def test_expandable_segments_setting_is_reported(torch_rt, platform, monkeypatch):
    monkeypatch.setenv("PYTORCH_CUDA_ALLOC_CONF", "expandable_segments:True")
    baseline = MemorySnapshot.measure(0, platform)
    with memory_profiling(baseline, platform=platform) as profile:
        _forward(torch_rt, [MiB])
    assert profile.expandable_segments is True
    assert any("expandable segments on" in note for note in profile.notes)


def _capture(rt, sizes):
    """A CUDA graph capture as engines run it: the allocator's cache is emptied first (vLLM does), then the
    graph's private pool is allocated and kept (the graph holds it)."""
    rt.cuda.empty_cache()
    pool = object()
    return [rt.malloc(n, pool=pool) for n in sizes]


def test_graph_pool_kept_after_the_peak_is_not_subtracted_from_it(torch_rt, platform):
    """Forward (peak 3 GiB above the weights) then a capture keeping 1 GiB: the next pass needs 3 GiB again
    (subtracting the pool from the peak would leave 2 GiB)."""
    baseline = MemorySnapshot.measure(0, platform)
    torch_rt.malloc(2 * GiB)
    with memory_profiling(baseline, weights_memory=2 * GiB, platform=platform) as profile:
        _forward(torch_rt, [3 * GiB])
        _capture(torch_rt, [GiB])
    assert profile.transient_rule == "history"
    assert profile.kept_after_peak_bytes == GiB
    assert profile.transient_peak_bytes == 3 * GiB


def test_graph_pool_kept_before_the_peak_is_subtracted(torch_rt, platform):
    """Capture first, then the forward: the pool existed at the peak, so the transient is the forward's alone."""
    baseline = MemorySnapshot.measure(0, platform)
    torch_rt.malloc(2 * GiB)
    with memory_profiling(baseline, weights_memory=2 * GiB, platform=platform) as profile:
        _capture(torch_rt, [GiB])
        _forward(torch_rt, [3 * GiB])
    assert profile.kept_after_peak_bytes == 0
    assert profile.transient_peak_bytes == 3 * GiB


def test_footprint_stays_inside_the_request_when_graphs_are_captured_after_the_forward(torch_rt, platform, h200):
    baseline = MemorySnapshot.measure(0, platform)
    torch_rt.malloc(4 * GiB)
    activations = [300 * MiB + 1, 2 * GiB + 5]
    with memory_profiling(baseline, weights_memory=4 * GiB, platform=platform) as profile:
        _forward(torch_rt, activations)
        _capture(torch_rt, [400 * MiB, 10 * MiB + 7])
    plan = plan_kv_cache(
        total=baseline.total, utilization=0.1, page_size_bytes=2 * MiB, num_layers=1, **profile.plan_inputs()
    )
    torch_rt.malloc(plan.num_blocks * plan.block_bytes)
    _forward(torch_rt, activations)
    assert h200.processes(0)[h200.own_driver_pid] <= -(-baseline.total // 10)


#: torch serves requests of at most 1 MiB from small segments of their own (the scripted allocator's pools).
SMALL_POOL = object()


def _capture_on_side_streams(rt, warm_ups, pool_sizes, first_stream=1):
    """A capture as torch's documentation writes it, without emptying the cache: each graph's static input is
    allocated on the default stream and kept, the graph warms up on a side stream of its own (its activations
    freed there), then its pool is allocated and kept."""
    pool, kept = object(), []
    for n, (warm_up, size) in enumerate(zip(warm_ups, pool_sizes, strict=True)):
        kept.append(rt.malloc(4096, pool=SMALL_POOL))
        for handle in [rt.malloc(warm_up, stream=first_stream + n)]:
            rt.free(handle)
        kept.append(rt.malloc(size, pool=pool, stream=99))
    return kept


def test_a_capture_warming_up_on_side_streams_after_the_forward_is_not_added_to_its_transient(torch_rt, platform):
    """Forward 3 GiB on the default stream, then two graphs warming up with 100 and 60 MiB on side streams while the
    forward's segments stay cached: the next pass needs the forward's 3 GiB, not 3 GiB + 160 MiB."""
    baseline = MemorySnapshot.measure(0, platform)
    torch_rt.malloc(2 * GiB)
    with memory_profiling(baseline, weights_memory=2 * GiB, platform=platform) as profile:
        _forward(torch_rt, [3 * GiB])
        _capture_on_side_streams(torch_rt, [100 * MiB, 60 * MiB], [GiB, 10 * MiB + 1])
    assert profile.transient_rule == "history"
    assert profile.transient_peak_bytes == 3 * GiB
    assert profile.transient_reach_bytes == 3 * GiB + 160 * MiB


def test_a_warm_up_larger_than_the_forward_is_the_transient(torch_rt, platform):
    baseline = MemorySnapshot.measure(0, platform)
    torch_rt.malloc(GiB)
    with memory_profiling(baseline, platform=platform) as profile:
        _forward(torch_rt, [100 * MiB])
        _capture_on_side_streams(torch_rt, [400 * MiB], [10 * MiB])
    assert profile.transient_peak_bytes == 400 * MiB


def test_two_streams_in_one_pass_are_charged_together(torch_rt, platform):
    """A pass whose blocks on two streams are allocated at once (compute and communication) needs both."""
    baseline = MemorySnapshot.measure(0, platform)
    torch_rt.malloc(GiB)
    with memory_profiling(baseline, platform=platform) as profile:
        compute = torch_rt.malloc(GiB, stream=0)
        comm = torch_rt.malloc(300 * MiB, stream=7)
        torch_rt.free(comm)  # the communication's buffer goes first, while the pass goes on
        more = torch_rt.malloc(500 * MiB, stream=0)
        torch_rt.free(more)
        torch_rt.free(compute)
    assert profile.transient_peak_bytes == GiB + 300 * MiB + 500 * MiB


def test_a_later_pass_on_the_same_stream_is_charged_with_the_cache_it_reuses(torch_rt, platform):
    """The second pass reuses the first's 1 GiB segment on its stream and reserves 2 GiB more: 3 GiB at once."""
    baseline = MemorySnapshot.measure(0, platform)
    torch_rt.malloc(GiB)
    with memory_profiling(baseline, platform=platform) as profile:
        _forward(torch_rt, [GiB])
        _forward(torch_rt, [GiB, 2 * GiB])
    assert profile.transient_peak_bytes == 3 * GiB


def test_a_history_of_segments_only_is_one_pass(torch_rt, platform):
    """Without block events nothing says where a pass ends: every segment the window gives back counts at once."""
    baseline = MemorySnapshot.measure(0, platform)
    torch_rt.malloc(GiB)
    with memory_profiling(baseline, platform=platform) as profile:
        _forward(torch_rt, [3 * GiB])
        _capture_on_side_streams(torch_rt, [100 * MiB], [GiB])
        trace = torch_rt.allocators[0].trace
        trace[:] = [e for e in trace if e["action"].startswith("segment")]
    assert profile.transient_rule == "history"
    assert profile.transient_peak_bytes == 3 * GiB + 100 * MiB


def test_footprint_is_charged_one_transient_when_graphs_warm_up_on_side_streams_in_the_profile_window(
    torch_rt, platform, h200
):
    """The plan leaves the forward's transient once: after the cache and a second pass (and the graphs replayed,
    which reserves nothing), the footprint is within one block and the allocator's rounding of the request."""
    baseline = MemorySnapshot.measure(0, platform)
    torch_rt.malloc(4 * GiB)
    activations = [300 * MiB + 1, 2 * GiB + 5]
    with memory_profiling(baseline, weights_memory=4 * GiB, platform=platform) as profile:
        _forward(torch_rt, activations)
        _capture_on_side_streams(torch_rt, [200 * MiB, 90 * MiB], [400 * MiB, 10 * MiB + 7])
    plan = plan_kv_cache(
        total=baseline.total, utilization=0.1, page_size_bytes=2 * MiB, num_layers=1, **profile.plan_inputs()
    )
    torch_rt.malloc(plan.num_blocks * plan.block_bytes)
    _forward(torch_rt, activations)
    requested = -(-baseline.total // 10)
    footprint = h200.processes(0)[h200.own_driver_pid]
    assert footprint <= requested
    assert requested - footprint < 2 * MiB + plan.block_bytes


def test_without_the_allocator_history_the_transient_is_bounded_from_above(torch_rt, platform, monkeypatch):
    """A runtime without memory history: only what was reserved at the window's start and end is subtracted."""
    monkeypatch.delattr(torch_rt.cuda, "memory")
    baseline = MemorySnapshot.measure(0, platform)
    torch_rt.malloc(2 * GiB)
    with memory_profiling(baseline, weights_memory=2 * GiB, platform=platform) as profile:
        _forward(torch_rt, [3 * GiB])
        _capture(torch_rt, [GiB])
    assert profile.transient_rule == "bounded"
    assert profile.transient_peak_bytes == 3 * GiB


def test_history_that_does_not_replay_to_the_peak_is_not_trusted(torch_rt, platform):
    """A history missing events (a ring that wrapped) falls back to the bound."""
    baseline = MemorySnapshot.measure(0, platform)
    torch_rt.malloc(2 * GiB)
    with memory_profiling(baseline, platform=platform) as profile:
        _forward(torch_rt, [3 * GiB])
        torch_rt.allocators[0].trace.clear()
        _capture(torch_rt, [GiB])
    assert profile.transient_rule == "bounded"
    assert profile.transient_peak_bytes == 3 * GiB


def test_capture_in_a_window_of_its_own_is_charged_what_it_kept(torch_rt, platform):
    baseline = MemorySnapshot.measure(0, platform)
    torch_rt.malloc(2 * GiB)
    with memory_profiling(baseline, weights_memory=2 * GiB, platform=platform) as profile:
        _forward(torch_rt, [3 * GiB])
    with memory_profiling(baseline, weights_memory=2 * GiB, platform=platform) as graphs:
        _capture(torch_rt, [GiB, 6 * MiB])
    assert graphs.total_consumed - profile.total_consumed == GiB + 6 * MiB
    assert graphs.transient_peak_bytes == 0


def test_allocator_history_is_off_after_the_window(torch_rt, platform):
    baseline = MemorySnapshot.measure(0, platform)
    with memory_profiling(baseline, platform=platform):
        _forward(torch_rt, [GiB])
    assert torch_rt.allocators[0].recording is None


def test_weights_memory_written_as_text_is_refused_before_the_work_runs(torch_rt, platform):
    baseline = MemorySnapshot.measure(0, platform)
    ran = []
    window = memory_profiling(baseline, weights_memory="16GiB", platform=platform)
    with pytest.raises(DevmemError, match="weights_memory.*'16GiB'"), window:
        ran.append(True)
    assert ran == []


def test_baseline_of_another_platform_is_refused(platform, h200):
    other = WslPlatform(nvml=ScriptedNvml(wsl2_scenario()), files=h200.fs, environ=h200.environ)
    baseline = MemorySnapshot.measure(0, other).read_by(other)
    with pytest.raises(DevmemError, match="'wsl2'"), memory_profiling(baseline, platform=platform):
        pass


def test_snapshots_of_two_platforms_refuse_to_subtract(platform):
    sc = wsl2_scenario()
    other = WslPlatform(nvml=ScriptedNvml(sc), files=sc.fs, environ=sc.environ)
    with pytest.raises(DevmemError, match="platform"):
        MemorySnapshot.measure(0, platform).read_by(platform) - MemorySnapshot.measure(0, other).read_by(other)


def test_what_the_window_kept_counts_when_a_cotenant_frees_during_a_device_wide_window(monkeypatch):
    """No per-process figure; 4 GiB weights and a 2 GiB context before the window, 2 GiB kept by the profile run,
    and a co-tenant frees 10 GiB meanwhile: 8 GiB is consumed, not the 6 GiB torch saw."""
    sc = wsl2_scenario()
    sc.allocate(12 * GiB, pid=sc.other_pid)
    rt = ScriptedTorch(sc, "cuda")
    monkeypatch.setitem(sys.modules, "torch", rt)
    platform = WslPlatform(nvml=ScriptedNvml(sc), files=sc.fs, environ=sc.environ)
    baseline = MemorySnapshot.measure(0, platform)
    sc.allocate(2 * GiB)  # the device context, outside torch's allocator
    rt.malloc(4 * GiB)
    with memory_profiling(baseline, weights_memory=4 * GiB, platform=platform) as profile:
        rt.malloc(2 * GiB)
        sc.release(10 * GiB, pid=sc.other_pid)
    assert profile.total_consumed == 8 * GiB


def test_cache_left_by_work_before_the_window_is_not_its_transient(torch_rt, platform):
    """A 2 GiB compile-time spike before the window, then a 512 MiB pass in it: planned as the pass alone."""
    baseline = MemorySnapshot.measure(0, platform)
    weights = torch_rt.malloc(2 * GiB)

    def plan():
        with memory_profiling(baseline, weights_memory=2 * GiB, platform=platform) as profile:
            _forward(torch_rt, [512 * MiB])
        inputs = profile.plan_inputs()
        return inputs, plan_kv_cache(total=baseline.total, utilization=0.5, page_size_bytes=MiB, num_layers=2, **inputs)

    _, quiet = plan()
    _forward(torch_rt, [2 * GiB])  # the spike, left in the allocator's cache
    inputs, spiked = plan()
    assert inputs["transient_peak_bytes"] == 512 * MiB
    assert abs(spiked.kv_cache_bytes - quiet.kv_cache_bytes) <= 2 * MiB
    torch_rt.free(weights)


def test_plan_inputs_name_the_allocator_the_window_saw(torch_rt, platform, monkeypatch):
    baseline = MemorySnapshot.measure(0, platform)
    with memory_profiling(baseline, platform=platform) as default:
        _forward(torch_rt, [4 * MiB])
    monkeypatch.setenv("PYTORCH_CUDA_ALLOC_CONF", "expandable_segments:True")
    with memory_profiling(baseline, platform=platform) as expandable:
        _forward(torch_rt, [4 * MiB])
    assert (default.plan_inputs()["allocator"], expandable.plan_inputs()["allocator"]) == ("caching", "expandable")


def test_measured_snapshots_of_two_platforms_refuse_to_subtract(platform):
    sc = wsl2_scenario()
    other = WslPlatform(nvml=ScriptedNvml(sc), files=sc.fs, environ=sc.environ)
    mine = MemorySnapshot.measure(0, platform)
    assert mine.platform == platform.name
    with pytest.raises(DevmemError, match="platform"):
        mine - MemorySnapshot.measure(0, other)
