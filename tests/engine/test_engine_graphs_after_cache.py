"""EngineMemory's graph step after the cache (devmem.engine.graphs): what the plan charges for graphs an engine
captures once its KV cache exists, and the window that checks and keeps what capture kept; on a scripted H200
whose torch runtime is scripted (devmem.testing.torch_runtime), and on a scripted WSL2 device without
per-process figures."""

from __future__ import annotations

import json
import logging
import sys

import pytest

from devmem import EngineMemory, GiB, KvLayout, MiB
from devmem.engine.graphs import GRAPHS_KIND, GraphsAfterCache
from devmem.engine.phases import Phase
from devmem.engine.profile_store import ProfileStore
from devmem.errors import EngineArgumentError, StepRefused
from devmem.testing.torch_runtime import ScriptedTorch
from devmem_nvidia.testing import ScriptedNvml, h200_scenario, wsl2_scenario
from devmem_nvidia.wsl2 import WslPlatform

PAGE = 3 * MiB + 4096
LAYERS = 22
ACTIVATIONS = [300 * MiB + 1, 2 * GiB + 5]
POOL = [400 * MiB + 3, 12 * MiB]  # what a capture keeps: two segments, 414 MiB reserved
KEY = {"model": "llama", "graph_sizes": [1, 2, 4, 8]}


@pytest.fixture
def store(tmp_path):
    return ProfileStore(tmp_path)


def _forward(rt, sizes):
    for handle in [rt.malloc(n) for n in sizes]:
        rt.free(handle)


def _capture(rt, sizes):
    pool = object()
    return [rt.malloc(n, pool=pool) for n in sizes]


def _profiled(scenario, rt, platform, **kwargs):
    """An engine created before its context, its weights loaded and its largest forward pass profiled."""
    memory = EngineMemory(0, utilization=0.1, platform=platform, reserve=False, **kwargs)
    scenario.allocate(545 * MiB)  # the device context
    rt.malloc(4 * GiB)  # the weights
    with memory.profile(weights_memory=4 * GiB):
        _forward(rt, ACTIVATIONS)
    return memory


def _planned(scenario, rt, platform, graphs, **kwargs):
    """... and its cache planned, a tensor per layer that the engine allocates."""
    memory = _profiled(scenario, rt, platform, **kwargs)
    memory.plan(page_size_bytes=PAGE, num_layers=LAYERS, graphs=graphs, layout=KvLayout.per_layer())
    return memory


def _captured_after_the_cache(memory, rt, sizes=POOL):
    """The engine allocates its cache, then captures its graphs in the window after the cache."""
    memory.release_allocator_cache()
    for _ in range(LAYERS):
        rt.malloc(memory.kv_plan.num_blocks * PAGE)
    with memory.graphs_after_cache():
        _capture(rt, sizes)


# ---- the charge -----------------------------------------------------------------------------------------------


def test_a_first_start_without_an_estimate_is_charged_the_profile_windows_transient(h200, torch_rt, platform):
    memory = _planned(h200, torch_rt, platform, GraphsAfterCache())
    assert memory.kv_plan.breakdown["graph_capture"] == memory.profile_result.transient_peak_bytes > 0
    assert memory.graph_charge.source == "first-start bound"


def test_a_first_start_that_captures_after_its_cache_stays_inside_its_share(h200, torch_rt, platform):
    memory = _planned(h200, torch_rt, platform, GraphsAfterCache())
    _captured_after_the_cache(memory, torch_rt)
    _forward(torch_rt, ACTIVATIONS)  # serving: the next pass beside the cache and the graphs' pool
    assert h200.processes(0)[h200.own_driver_pid] <= memory.requested


def test_the_engines_estimate_is_charged_where_nothing_was_measured(h200, torch_rt, platform):
    memory = _planned(h200, torch_rt, platform, GraphsAfterCache(estimate=12 * MiB))
    assert memory.kv_plan.breakdown["graph_capture"] == 12 * MiB
    assert memory.graph_charge.source == "estimate"


def _thrown_away(memory, rt, sizes):
    """vLLM 0.24's graph profiling: capture into a throwaway pool, measure, free; the real capture comes later."""
    with memory.graphs():
        for handle in _capture(rt, sizes):
            rt.free(handle)
        rt.cuda.empty_cache()


def test_a_throwaway_capture_before_the_plan_is_charged_all_it_reached(h200, torch_rt, platform):
    memory = _profiled(h200, torch_rt, platform)
    _thrown_away(memory, torch_rt, POOL)
    plan = memory.plan(page_size_bytes=PAGE, num_layers=LAYERS, graphs=GraphsAfterCache())
    assert plan.breakdown["graph_capture"] == 414 * MiB  # the pool's two segments, freed before the plan
    assert plan.breakdown["transient_peak"] == memory.profile_result.transient_peak_bytes  # not the graphs' peak
    assert memory.graph_charge.source == "capture window"


def test_a_throwaway_window_that_captured_nothing_leaves_the_first_start_bound_charged(h200, torch_rt, platform):
    memory = _profiled(h200, torch_rt, platform)
    _thrown_away(memory, torch_rt, [])  # an engine's graph profiling that captures nothing (vLLM V2's returns 0)
    memory.plan(page_size_bytes=PAGE, num_layers=LAYERS, graphs=GraphsAfterCache())
    assert memory.graph_charge.source == "first-start bound"
    assert memory.kv_plan.breakdown["graph_capture"] == memory.profile_result.transient_peak_bytes


def test_a_stored_figure_of_nothing_is_charged_as_measured(h200, torch_rt, platform, store):
    store.save(GRAPHS_KIND, KEY, {"kept_bytes": 0}, 1.0)
    memory = _planned(h200, torch_rt, platform, GraphsAfterCache(store=store, key=KEY))
    assert (memory.graph_charge.bytes, memory.graph_charge.source) == (0, "stored")


def test_the_engines_estimate_above_what_the_throwaway_capture_reached_is_charged(h200, torch_rt, platform):
    memory = _profiled(h200, torch_rt, platform)
    _thrown_away(memory, torch_rt, [12 * MiB])
    plan = memory.plan(page_size_bytes=PAGE, num_layers=LAYERS, graphs=GraphsAfterCache(estimate=GiB))
    assert plan.breakdown["graph_capture"] == GiB
    assert memory.graph_charge.source == "estimate" and "capture window 12.00 MiB" in memory.graph_charge.detail


def test_the_next_start_with_the_key_is_charged_what_capture_kept_exactly(h200, torch_rt, platform, store):
    first = _planned(h200, torch_rt, platform, GraphsAfterCache(store=store, key=KEY))
    _captured_after_the_cache(first, torch_rt)
    assert store.load(GRAPHS_KIND, KEY).figures == {"kept_bytes": 414 * MiB}
    again = _profiled(h200_scenario(), ScriptedTorch(h200_scenario(), "cuda"), platform)
    plan = again.plan(page_size_bytes=PAGE, num_layers=LAYERS, graphs=GraphsAfterCache(store=store, key=KEY))
    assert plan.breakdown["graph_capture"] == 414 * MiB and again.graph_charge.source == "stored"


def test_an_estimate_above_the_stored_figure_is_charged(h200, torch_rt, platform, store):
    store.save(GRAPHS_KIND, KEY, {"kept_bytes": 100 * MiB}, 1.0)
    memory = _planned(h200, torch_rt, platform, GraphsAfterCache(estimate=GiB, store=store, key=KEY))
    assert memory.kv_plan.breakdown["graph_capture"] == GiB and memory.graph_charge.source == "estimate"


@pytest.mark.parametrize("figures", [{"kept_bytes": -1}, {"kept_bytes": 1 << 50}, {"kept_bytes": 1.5}, {"kept": 1}])
def test_a_broken_stored_figure_is_set_aside_and_the_first_start_bound_charged(
    h200, torch_rt, platform, store, figures
):
    path = store.save(GRAPHS_KIND, KEY, figures, 1.0)
    memory = _planned(h200, torch_rt, platform, GraphsAfterCache(store=store, key=KEY))
    assert memory.graph_charge.source == "first-start bound" and not path.exists()


def test_a_pinned_cache_is_charged_nothing_for_graphs_after_it(h200, torch_rt, platform):
    memory = _planned(h200, torch_rt, platform, GraphsAfterCache(estimate=GiB), pinned_bytes=8 * GiB)
    assert memory.graph_charge.bytes == 0 and memory.graph_charge.source == "pinned"


def test_explain_and_as_dict_name_the_charge_and_its_source(h200, torch_rt, platform):
    memory = _planned(h200, torch_rt, platform, GraphsAfterCache(estimate=12 * MiB))
    assert "graphs captured after the cache: charged 12.00 MiB as graph capture (estimate" in memory.explain()
    said = json.loads(json.dumps(memory.as_dict()))["graphs_after_cache"]
    assert (said["charged_bytes"], said["source"], said["check"]) == (12 * MiB, "estimate", None)


# ---- the window after the cache -------------------------------------------------------------------------------


def test_the_window_after_the_cache_measures_what_capture_kept_and_fits_the_charge(h200, torch_rt, platform):
    memory = _planned(h200, torch_rt, platform, GraphsAfterCache(estimate=GiB))
    _captured_after_the_cache(memory, torch_rt)
    check = memory.graph_check
    assert (check.kept_bytes, check.charged_bytes, check.source, check.fits) == (414 * MiB, GiB, "estimate", True)
    assert check.measured_by == "this process's memory"
    assert memory.as_dict()["graphs_after_cache"]["check"]["kept_bytes"] == 414 * MiB
    assert "graph capture after the cache kept 414.00 MiB" in memory.explain()


def test_capture_that_kept_more_than_was_charged_is_one_warning(h200, torch_rt, platform, caplog):
    memory = _planned(h200, torch_rt, platform, GraphsAfterCache(estimate=12 * MiB))
    with caplog.at_level(logging.INFO, logger="devmem.engine"):
        _captured_after_the_cache(memory, torch_rt)
    warnings = [r for r in caplog.records if r.levelno >= logging.WARNING]
    assert len(warnings) == 1 and "over by 402.00 MiB" in warnings[0].getMessage()
    assert memory.graph_check.fits is False


def test_capture_within_the_charge_logs_no_warning(h200, torch_rt, platform, caplog):
    memory = _planned(h200, torch_rt, platform, GraphsAfterCache(estimate=GiB))
    with caplog.at_level(logging.INFO, logger="devmem.engine"):
        _captured_after_the_cache(memory, torch_rt)
    assert [r for r in caplog.records if r.levelno >= logging.WARNING] == []


def test_without_per_process_figures_the_window_measures_torchs_reserved_growth(monkeypatch):
    scenario = wsl2_scenario()
    rt = ScriptedTorch(scenario, "cuda")
    monkeypatch.setitem(sys.modules, "torch", rt)
    wsl = WslPlatform(
        nvml=ScriptedNvml(scenario), files=scenario.fs, environ=scenario.environ, mem_get_info=scenario.mem_get_info
    )
    memory = EngineMemory(0, utilization=0.5, platform=wsl, reserve=False)
    with memory.profile():
        _forward(rt, [GiB])
    memory.plan(page_size_bytes=PAGE, num_layers=LAYERS, graphs=GraphsAfterCache(), layout=KvLayout.per_layer())
    scenario.allocate(3 * GiB, pid=scenario.other_pid)  # a co-tenant's growth meanwhile is not the graphs'
    with memory.graphs_after_cache():
        _capture(rt, POOL)
    assert memory.graph_check.kept_bytes == 414 * MiB and memory.graph_check.measured_by == "torch's reserved memory"


def test_a_window_that_raised_is_opened_again_and_stores_only_what_finished(h200, torch_rt, platform, store):
    memory = _planned(h200, torch_rt, platform, GraphsAfterCache(store=store, key=KEY))
    with pytest.raises(RuntimeError), memory.graphs_after_cache():
        raise RuntimeError("capture failed")
    assert memory.graph_check is None and store.load(GRAPHS_KIND, KEY) is None
    with memory.graphs_after_cache():
        _capture(torch_rt, [12 * MiB])
    assert store.load(GRAPHS_KIND, KEY).figures == {"kept_bytes": 12 * MiB}


def test_a_pinned_cache_checks_capture_without_a_warning(h200, torch_rt, platform, caplog):
    memory = _planned(h200, torch_rt, platform, GraphsAfterCache(), pinned_bytes=8 * GiB)
    with caplog.at_level(logging.INFO, logger="devmem.engine"):
        _captured_after_the_cache(memory, torch_rt)
    assert memory.graph_check.fits and [r for r in caplog.records if r.levelno >= logging.WARNING] == []


# ---- refusals -------------------------------------------------------------------------------------------------


def _undeclared(h200, rt, platform):
    return _planned(h200, rt, platform, None)


def _not_allocated(h200, rt, platform):
    """devmem allocates this plan's cache (one allocation): the window waits for allocate()."""
    memory = _profiled(h200, rt, platform)
    memory.plan(page_size_bytes=PAGE, num_layers=LAYERS, graphs=GraphsAfterCache())
    return memory


def _opened_twice(h200, rt, platform):
    memory = _planned(h200, rt, platform, GraphsAfterCache())
    _captured_after_the_cache(memory, rt, [12 * MiB])
    return memory


@pytest.mark.parametrize(
    ("state", "phase"),
    [(_undeclared, Phase.PLANNED), (_not_allocated, Phase.PLANNED), (_opened_twice, Phase.CAPTURED)],
)
def test_the_window_after_the_cache_out_of_order_is_refused(h200, torch_rt, platform, state, phase):
    memory = state(h200, torch_rt, platform)
    ran = []
    with pytest.raises(StepRefused) as refused, memory.graphs_after_cache():
        ran.append(True)
    assert ran == [] and (refused.value.step, refused.value.phase) == ("graphs_after_cache", phase)


CIRCULAR: dict = {"a": 1}
CIRCULAR["self"] = CIRCULAR  # a key the store cannot write


@pytest.mark.parametrize(
    ("fields", "argument"),
    [
        ({"estimate": -1}, "GraphsAfterCache.estimate"),
        ({"estimate": 1.5}, "GraphsAfterCache.estimate"),
        ({"key": KEY}, "GraphsAfterCache.store"),
        ({"store": "/tmp", "key": KEY}, "GraphsAfterCache.store"),
        ({"key": {}, "store": ProfileStore("/tmp")}, "GraphsAfterCache.key"),
        ({"key": CIRCULAR, "store": ProfileStore("/tmp")}, "GraphsAfterCache.key"),
    ],
)
def test_a_declaration_with_bad_fields_is_refused_naming_them(fields, argument):
    with pytest.raises(EngineArgumentError) as refused:
        GraphsAfterCache(**fields)
    assert (refused.value.argument, refused.value.value) == (argument, fields.get(argument.split(".")[1]))


def test_the_window_opens_after_devmem_allocated_the_cache_on_the_cpu_platform(monkeypatch):
    """The whole path with the real torch on the cpu platform: allocate(), then the window after the cache."""
    import devmem

    torch = pytest.importorskip("torch")
    monkeypatch.setenv("DEVMEM_PLATFORM", "cpu")
    devmem.clear_cache()
    try:
        total = devmem.current_platform().device_memory_info(0).total
        memory = EngineMemory(0, utilization=max(512 * MiB / total, 1e-6), reserve=False)
        with memory.profile():
            torch.ones(8 * MiB // 4, device=memory.torch_device).mul_(2)
        memory.plan(page_size_bytes=64 * 1024, num_layers=4, graphs=GraphsAfterCache(estimate=64 * MiB))
        memory.allocate()
        with memory.graphs_after_cache():
            kept = torch.ones(4 * MiB // 4, device=memory.torch_device)  # noqa: F841 (what capture keeps)
        assert memory.graph_check is not None and memory.graph_check.charged_bytes == 64 * MiB
    finally:
        devmem.clear_cache()
