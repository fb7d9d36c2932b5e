"""devmem.engine.black_box_sizing: an engine that builds its own cache sized from runs of it, on a scripted H200.

The engine is a formula standing in for an engine's runs (the callables are the engine's side of the API): its
cache holds ``KV`` bytes a block, its batch's static tensors ``STATIC`` a block beside ``BASE``.
"""

from __future__ import annotations

import dataclasses
import gc
import re

import pytest

from devmem import EngineMemory, MiB, NotEnoughMemoryError
from devmem.engine.black_box_sizing import (
    BatchFloor,
    BlackBoxEngine,
    CacheRun,
    SizedRuns,
    extra_problem,
    size_by_runs,
    stored_extra,
)
from devmem.engine.profile_store import ProfileStore
from devmem.planner.sizing import SizingError
from devmem_nvidia.nvml_platform import NvmlPlatform
from devmem_nvidia.testing import ScriptedNvml, h200_scenario

KV = 3 * MiB
STATIC = MiB
BASE = 4 * MiB
TOKENS = 16
BATCH = 64
KEY = {"model": "formula", "batch": BATCH}
torch = pytest.importorskip("torch")


@pytest.fixture
def platform():
    sc = h200_scenario()
    return NvmlPlatform(nvml=ScriptedNvml(sc), files=sc.fs, environ=sc.environ)


def engine(calls, *, batch=BATCH, floor=None):
    def run(blocks, all_layers):
        calls.append((blocks, all_layers))
        return CacheRun(blocks, blocks * KV, BASE + blocks * STATIC, 2, batch)

    return BlackBoxEngine(
        run=run,
        placement=lambda: (batch // TOKENS + 1, 1),
        read_back=lambda first: 0,
        batch_setting="config.max_batch_tokens",
        max_batch_tokens=batch,
        block_tokens=TOKENS,
        configure=lambda blocks: {"num_blocks": blocks},
        device=torch.device("cpu"),
        floor=floor,
    )


def size(memory, calls, store=None, **given):
    return size_by_runs(
        memory,
        engine(calls, **given),
        SizedRuns,
        weights=0,
        store=store,
        key=KEY,
        kind="formula",
        limit_to_share=False,
        notes=[],
        began=0.0,
    )


def test_an_engine_is_charged_what_its_tensors_grow_by_a_block(platform):
    calls = []
    sized = size(EngineMemory(0, utilization=0.5, platform=platform, reserve=False), calls)
    assert (sized.block_bytes, sized.kv_block_bytes, sized.static_block_bytes) == (KV + STATIC, KV, STATIC)
    assert sized.read_back_block_bytes == 0 and sized.config == {"num_blocks": sized.num_blocks}
    assert calls == [(5, True), (10, False)] and [r.num_blocks for r in sized.runs] == [5, 10]


def test_the_profile_window_is_the_first_run_with_every_layer(platform):
    calls = []
    size(EngineMemory(0, utilization=0.5, platform=platform, reserve=False), calls)
    assert calls[0] == (BATCH // TOKENS + 1, True)


def test_a_restart_with_the_same_key_plans_from_the_store_without_running(platform, tmp_path):
    store, first, again = ProfileStore(tmp_path), [], []
    measured = size(EngineMemory(0, utilization=0.5, platform=platform, reserve=False), first, store)
    restarted = size(EngineMemory(0, utilization=0.5, platform=platform, reserve=False), again, store)
    assert again == [] and restarted.stored and not measured.stored
    assert (restarted.num_blocks, restarted.runs) == (measured.num_blocks, measured.runs)


def floor(nbytes, growing=0):
    return BatchFloor("the batch's table", "its columns", "table", 2, nbytes, growing, "use a smaller batch")


def test_a_share_below_the_batchs_own_tensors_is_refused_before_any_run(platform):
    calls = []
    memory = EngineMemory(0, utilization=0.5, platform=platform, reserve=False)
    with pytest.raises(NotEnoughMemoryError, match=r"config.max_batch_tokens=64: .* the batch's table for it") as e:
        size(memory, calls, floor=floor(lambda tokens: tokens * memory.requested))
    assert calls == [] and e.value.breakdown["table"] == BATCH * memory.requested


def test_the_refusal_names_the_largest_batch_whose_tensors_fit(platform):
    memory = EngineMemory(0, utilization=0.5, platform=platform, reserve=False)
    fits = 1000
    with pytest.raises(NotEnoughMemoryError, match=rf"\(at {fits} the floor alone fills the share\)"):
        size(memory, [], floor=floor(lambda tokens: memory.requested * tokens // fits), batch=BATCH * fits)


def test_pinned_bytes_below_the_growing_part_of_the_batchs_tensors_are_refused(platform):
    memory = EngineMemory(0, pinned_bytes=MiB, platform=platform, reserve=False)
    with pytest.raises(SizingError, match=rf"pinned_bytes={MiB} .*smaller than its columns .*pin at least {2 * MiB}"):
        size(memory, [], floor=floor(lambda tokens: 0, growing=2 * MiB))


def test_a_cache_smaller_than_one_batch_is_refused(platform):
    memory = EngineMemory(0, pinned_bytes=3 * (KV + STATIC), platform=platform, reserve=False)
    with pytest.raises(SizingError, match=r"config.max_batch_tokens=64 is more than the sized cache holds \(3 blocks"):
        size(memory, [])


@dataclasses.dataclass(frozen=True, kw_only=True)
class OwnRun(CacheRun):
    attention: str
    graphs: tuple[bool, ...]


RUN = {"num_blocks": 5, "cache_bytes": 5 * KV, "static_bytes": BASE, "allocations": 2, "forward_tokens": BATCH}
OWN = {**RUN, "attention": "sdpa", "graphs": [True, False]}
EXTRA = {
    "runs": [OWN, {**OWN, "num_blocks": 10}],
    "costs": {"block_bytes": KV, "kv_block_bytes": KV, "static_block_bytes": 0},
    "notes": [],
}


def test_a_stored_extra_of_an_engines_own_record_is_read_back_with_its_tuples():
    assert extra_problem(EXTRA, 1 << 40, OwnRun) is None
    runs, costs, notes = stored_extra(EXTRA, OwnRun)
    assert runs[0] == OwnRun(**{**OWN, "graphs": (True, False)}) and costs == EXTRA["costs"] and notes == []


@pytest.mark.parametrize(
    ("field", "value", "named"),
    [
        ("attention", 3, r"extra.runs\[0\].attention is 3, not text"),
        ("graphs", "no", r"extra.runs\[0\].graphs is 'no', not a list"),
        ("graphs", [True, 1], r"extra.runs\[0\].graphs\[1\] is 1, not true or false"),
    ],
)
def test_a_stored_run_whose_own_field_is_of_another_type_is_named(field, value, named):
    bad = {**EXTRA, "runs": [{**OWN, field: value}, {**OWN, "num_blocks": 10}]}
    assert re.fullmatch(named, extra_problem(bad, 1 << 40, OwnRun) or "")


def test_a_stored_run_without_the_engines_own_fields_is_refused():
    assert "not those of an OwnRun" in extra_problem({**EXTRA, "runs": [RUN, RUN]}, 1 << 40, OwnRun)


def test_the_engine_runs_with_the_heap_from_before_the_start_frozen(platform):
    frozen = []
    sizing = engine([])
    run = sizing.run
    sized = dataclasses.replace(
        sizing, run=lambda blocks, all_layers: frozen.append(gc.get_freeze_count()) or run(blocks, all_layers)
    )
    size_by_runs(
        EngineMemory(0, utilization=0.5, platform=platform, reserve=False),
        sized,
        SizedRuns,
        weights=0,
        store=None,
        key=KEY,
        kind="formula",
        limit_to_share=False,
        notes=[],
        began=0.0,
    )
    assert frozen and min(frozen) > 0


def test_the_heap_is_unfrozen_once_the_engine_is_sized(platform):
    sized = size(EngineMemory(0, utilization=0.5, platform=platform, reserve=False), [])
    assert gc.get_freeze_count() == 0 and not sized.memory.closed  # the engine keeps its share
