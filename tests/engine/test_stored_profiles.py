"""Stored profiles are checked when read (shape, types, ranges, what this device can hold): a bad one is named in
one warning, set aside as ``<name>.bad-<seconds>`` and measured again, never a traceback nor an implausible plan
(devmem/engine/profile_store.py, devmem/engine/memory.py, the transformers integration's extra)."""

from __future__ import annotations

import json
import logging
import os
import time

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from devmem import EngineMemory, EngineMemoryError, MiB
from devmem.engine.black_box_sizing import extra_accepted
from devmem.engine.block_cost import BlockRun
from devmem.engine.profile_store import BLOCK_COST_KIND, ProfileStore
from devmem.integrations.transformers import EngineRun
from devmem_nvidia.nvml_platform import NvmlPlatform
from devmem_nvidia.testing import ScriptedNvml, h200_scenario

BLOCK = 3 * MiB + 4096
FIXED = 200 * MiB
KEY = {"model": "black-box", "blocks": 16}


@pytest.fixture
def platform():
    sc = h200_scenario()
    return NvmlPlatform(nvml=ScriptedNvml(sc), files=sc.fs, environ=sc.environ)


def _engine(calls):
    def run(n):
        calls.append(n)
        return BlockRun(n, held_bytes=n * BLOCK, peak_bytes=n * BLOCK + FIXED, reserved_peak_bytes=n * BLOCK + FIXED)

    return run


def _profiled(platform):
    memory = EngineMemory(0, utilization=0.5, platform=platform, reserve=False)
    with memory.profile(weights_memory=0):
        pass
    return memory


@pytest.fixture(scope="module")
def measured(tmp_path_factory):
    """The figures of a whole start measured on a scripted H200 (once: each run collects garbage)."""
    sc = h200_scenario()
    store = ProfileStore(tmp_path_factory.mktemp("measured"))
    platform = NvmlPlatform(nvml=ScriptedNvml(sc), files=sc.fs, environ=sc.environ)
    _profiled(platform).measure_block_cost(_engine([]), [64, 128], store=store, key=KEY)
    return store.load(BLOCK_COST_KIND, KEY).figures


@pytest.fixture
def stored(measured, tmp_path):
    """A store in ``tmp_path`` holding the measured start, and the path of its file."""
    store = ProfileStore(tmp_path)
    return store, store.save(BLOCK_COST_KIND, KEY, measured, time.time())


def _edit(path, change):
    body = json.loads(path.read_text())
    change(body)
    path.write_text(json.dumps(body))


def _warnings(caplog):
    return [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]


def _set(where, name, value):
    def change(body):
        target = body
        for part in where:
            target = target[part]
        target[name] = value

    return change


TOTAL = 150109880320  # the scripted H200's total

HOSTILE = {
    "a block cost of one byte": _set(["figures"], "block_bytes", 1),
    "a block cost above the total": _set(["figures"], "block_bytes", 2 * TOTAL),
    "a block cost of text": _set(["figures"], "block_bytes", "3 MiB"),
    "a block cost of a float": _set(["figures"], "block_bytes", 3.5 * MiB),
    "a block cost of true": _set(["figures"], "block_bytes", True),
    "a block cost past 2**64": _set(["figures"], "block_bytes", 2**70),
    "a transient above the total": _set(["figures", "windows"], "transient_peak_bytes", TOTAL + 1),
    "a negative consumed": _set(["figures", "windows"], "consumed", -1),
    "a consumed of null": _set(["figures", "windows"], "consumed", None),
    "windows that are a list": _set(["figures"], "windows", [1, 2]),
    "a window figure that may be unknown left out": lambda b: b["figures"]["windows"].pop("other_processes"),
    "every window figure left out": _set(["figures"], "windows", {}),
    "no runs": _set(["figures"], "runs", []),
    "one run": lambda b: b["figures"].__setitem__("runs", b["figures"]["runs"][:1]),
    "runs that are numbers": _set(["figures"], "runs", [1, 2]),
    "a run of more blocks than the device holds": lambda b: b["figures"]["runs"][-1].__setitem__("num_blocks", 10**12),
    "a run with an unknown field": lambda b: b["figures"]["runs"][0].__setitem__("colour", "red"),
    "a run of 2**70 blocks": lambda b: b["figures"]["runs"][-1].__setitem__("num_blocks", 2**70),
    "a linear flag of text": _set(["figures"], "linear", "no"),
    "an expandable flag of text": _set(["figures"], "expandable_segments", "no"),
    "notes that are text": _set(["figures"], "notes", "abc"),
    "figures that are a list": _set([], "figures", [1]),
    "a created time in the far future": _set([], "created", 1e300),
    "a created time a year ahead": _set([], "created", time.time() + 365 * 86400),
    "a negative created time": _set([], "created", -1e300),
    "a created time of text": _set([], "created", "yesterday"),
    "a created time that is not a number": _set([], "created", float("nan")),
}


@pytest.mark.parametrize("why", list(HOSTILE))
def test_a_bad_stored_profile_is_named_in_one_warning_and_set_aside(platform, stored, tmp_path, caplog, why):
    store, path = stored
    _edit(path, HOSTILE[why])
    with caplog.at_level(logging.WARNING):
        assert EngineMemory(0, utilization=0.5, platform=platform, reserve=False).load_profile(store, KEY) is None
    warnings = _warnings(caplog)
    assert len(warnings) == 1 and str(path) in warnings[0] and "set aside" in warnings[0], warnings
    assert [p.name.startswith(f"{path.name}.bad-") for p in tmp_path.iterdir() if ".bad-" in p.name] == [True]


@pytest.mark.parametrize("field", ["kind", "version"])
def test_a_foreign_stored_files_long_field_is_cut_short_in_its_one_warning(platform, stored, caplog, field):
    store, path = stored
    _edit(path, _set([], field, "x" * 100_000))
    with caplog.at_level(logging.WARNING):
        assert EngineMemory(0, utilization=0.5, platform=platform, reserve=False).load_profile(store, KEY) is None
    warnings = _warnings(caplog)
    assert len(warnings) == 1 and str(path) in warnings[0] and len(warnings[0]) < 500, warnings


def test_a_bad_stored_block_cost_is_measured_again_and_stored_afresh(platform, stored, caplog):
    store, path = stored
    _edit(path, _set(["figures"], "block_bytes", 1))
    calls = []
    with caplog.at_level(logging.WARNING):
        cost = _profiled(platform).measure_block_cost(_engine(calls), [64, 128], store=store, key=KEY)
    assert calls and cost.block_bytes == BLOCK and len(_warnings(caplog)) == 1
    assert store.load(BLOCK_COST_KIND, KEY).figures["block_bytes"] == BLOCK


def test_a_block_cost_below_what_its_own_runs_grew_by_is_not_planned_from(platform, stored, caplog):
    store, path = stored
    _edit(path, _set(["figures"], "block_bytes", BLOCK // 2))
    with caplog.at_level(logging.WARNING):
        again = EngineMemory(0, utilization=0.5, platform=platform, reserve=False)
        assert again.load_profile(store, KEY) is None
    assert "below the" in _warnings(caplog)[0]


def test_a_folder_in_place_of_a_stored_profile_is_set_aside_and_the_profile_stored(platform, tmp_path, caplog):
    store = ProfileStore(tmp_path)
    path = store.path(BLOCK_COST_KIND, KEY)
    path.mkdir(parents=True)
    calls = []
    with caplog.at_level(logging.WARNING):
        _profiled(platform).measure_block_cost(_engine(calls), [64, 128], store=store, key=KEY)
    assert calls and path.is_file() and len(_warnings(caplog)) == 1
    assert "folder is set aside" in _warnings(caplog)[0]


def test_a_stored_profile_that_cannot_be_read_is_named_and_set_aside(platform, stored, caplog):
    if os.geteuid() == 0:
        pytest.skip("root reads a file of mode 000")
    store, path = stored
    path.chmod(0)
    with caplog.at_level(logging.WARNING):
        assert EngineMemory(0, utilization=0.5, platform=platform, reserve=False).load_profile(store, KEY) is None
    assert len(_warnings(caplog)) == 1 and str(path) in _warnings(caplog)[0] and not path.exists()


def _whole_start_with_extra(stored, extra):
    store, path = stored
    _edit(path, _set(["figures"], "extra", extra))
    return store, path


GOOD_RUN = {
    "num_blocks": 33,
    "cache_bytes": 33 * MiB,
    "static_bytes": MiB,
    "allocations": 4,
    "forward_tokens": 512,
    "attn_implementation": "sdpa",
    "cuda_graphs": [False],
    "async_batching": False,
}
GOOD_EXTRA = {
    "runs": [GOOD_RUN, {**GOOD_RUN, "num_blocks": 66, "cache_bytes": 66 * MiB}],
    "costs": {"block_bytes": BLOCK, "kv_block_bytes": MiB, "static_block_bytes": 0},
    "notes": [],
}


def test_the_transformers_extra_as_stored_is_read_back(platform, stored):
    store, _ = _whole_start_with_extra(stored, GOOD_EXTRA)
    memory = EngineMemory(0, utilization=0.5, platform=platform, reserve=False)
    assert memory.load_profile(store, KEY, accept=extra_accepted(memory.baseline.total, EngineRun)) == GOOD_EXTRA


@pytest.mark.parametrize(
    "extra",
    [
        {**GOOD_EXTRA, "costs": {"block_bytes": -1, "kv_block_bytes": 0, "static_block_bytes": 0}},
        {**GOOD_EXTRA, "costs": {"block_bytes": BLOCK, "kv_block_bytes": BLOCK, "static_block_bytes": BLOCK}},
        {**GOOD_EXTRA, "costs": {"block_bytes": "big", "kv_block_bytes": 0, "static_block_bytes": 0}},
        {**GOOD_EXTRA, "runs": [{**GOOD_RUN, "allocations": 0}, GOOD_RUN]},
        {**GOOD_EXTRA, "runs": [GOOD_RUN, {**GOOD_RUN, "cache_bytes": 2 * TOTAL}]},
        {**GOOD_EXTRA, "runs": [GOOD_RUN, {**GOOD_RUN, "cuda_graphs": "no"}]},
        {**GOOD_EXTRA, "runs": [GOOD_RUN]},
        {**GOOD_EXTRA, "runs": [GOOD_RUN, GOOD_RUN]},
        {**GOOD_EXTRA, "notes": "text"},
        {"runs": None},
    ],
)
def test_a_bad_transformers_extra_is_named_in_one_warning_and_set_aside(platform, stored, caplog, extra):
    store, path = _whole_start_with_extra(stored, extra)
    memory = EngineMemory(0, utilization=0.5, platform=platform, reserve=False)
    with caplog.at_level(logging.WARNING):
        assert memory.load_profile(store, KEY, accept=extra_accepted(memory.baseline.total, EngineRun)) is None
    warnings = _warnings(caplog)
    assert len(warnings) == 1 and str(path) in warnings[0] and "extra" in warnings[0], warnings
    assert not path.exists()


def _leaves(value, path=()):
    """Every path into ``value``'s dicts and lists (the root's own fields and below)."""
    if path:
        yield path
    children = value.items() if isinstance(value, dict) else enumerate(value) if isinstance(value, list) else ()
    for name, child in children:
        yield from _leaves(child, (*path, name))


HOSTILE_VALUES = st.one_of(
    st.sampled_from([None, True, False, -1, 0, 1, 2**63, 2**64, 2**70, -(2**64), 1.5, 1e308, "", "x", [], {}]),
    st.sampled_from([float("nan"), float("inf"), -float("inf"), [[[]]], {"a": {"b": [1]}}, "1" * 50]),
    st.integers(),
    st.floats(),
    st.text(max_size=20),
    st.lists(st.integers(), max_size=3),
    st.just("DELETE"),
)


@settings(suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(data=st.data())
def test_a_stored_start_with_any_field_hostile_is_set_aside_or_planned_from_never_a_traceback(
    platform, measured, tmp_path, data
):
    """One field anywhere in a stored whole start (the transformers extra included) replaced or left out: the
    start is refused with one warning naming the file, or read back and planned from; nothing raises."""
    good = {"format": "devmem-profile", "version": 1, "kind": BLOCK_COST_KIND, "created": time.time(), "key": KEY}
    good["figures"] = {**measured, "extra": GOOD_EXTRA}
    paths = sorted(p for p in _leaves(good) if p[0] in ("figures", "created"))
    path = data.draw(st.sampled_from(paths))
    value = data.draw(HOSTILE_VALUES)
    body = json.loads(json.dumps(good))
    parent = body
    for part in path[:-1]:
        parent = parent[part]
    if value == "DELETE":
        del parent[path[-1]]
    else:
        parent[path[-1]] = value
    store = ProfileStore(tmp_path / f"store-{time.monotonic_ns()}")
    stored_path = store.save(BLOCK_COST_KIND, KEY, {}, time.time())
    stored_path.write_text(json.dumps(body))
    memory = EngineMemory(0, utilization=0.5, platform=platform, reserve=False)
    records = []
    handler = logging.Handler()
    handler.emit = records.append
    logging.getLogger("devmem").addHandler(handler)
    try:
        extra = memory.load_profile(store, KEY, accept=extra_accepted(memory.baseline.total, EngineRun))
    finally:
        logging.getLogger("devmem").removeHandler(handler)
    warnings = [r.getMessage() for r in records if r.levelno >= logging.WARNING]
    if isinstance(body.get("figures"), dict) and body["figures"].get("windows") is None and not warnings:
        assert extra is None  # a block cost without windows: no whole start to read back
    elif extra is None:
        assert len(warnings) == 1 and str(stored_path) in warnings[0], warnings
    else:
        assert memory.plan().num_blocks > 0


@pytest.mark.parametrize(
    "step",
    [
        lambda memory, store: memory.graphs().__enter__(),
        lambda memory, store: memory.measure_block_cost(_engine([]), [64, 128]),
        lambda memory, store: memory.load_profile(store, KEY),
    ],
    ids=["graphs", "measure_block_cost", "load_profile"],
)
def test_a_window_step_after_a_loaded_profile_is_refused_pointing_to_the_plan(platform, stored, step):
    store, _ = stored
    memory = EngineMemory(0, utilization=0.5, platform=platform, reserve=False)
    assert memory.load_profile(store, KEY) is not None
    with pytest.raises(EngineMemoryError, match=r"figures were (already )?read from .*plan\(\) next"):
        step(memory, store)
    assert memory.plan().num_blocks > 0


@pytest.mark.parametrize("extra", ["engine", [("name", 1)]])
def test_an_extra_that_is_no_mapping_is_refused_naming_it(platform, tmp_path, extra):
    memory = _profiled(platform)
    memory.measure_block_cost(_engine([]), [64, 128])
    with pytest.raises(EngineMemoryError, match=r"extra must be a mapping .* of type (str|list)"):
        memory.save_profile(ProfileStore(tmp_path), KEY, extra)
    assert memory.save_profile(ProfileStore(tmp_path), KEY, {"name": 1}) == {"name": 1}


@pytest.mark.parametrize("step", ["load_profile", "save_profile"])
def test_an_accept_that_is_no_callable_is_refused_naming_it(platform, tmp_path, step):
    memory = _profiled(platform)
    memory.measure_block_cost(_engine([]), [64, 128])
    with pytest.raises(EngineMemoryError, match="accept must be a callable .* got 5 of type int"):
        getattr(memory, step)(ProfileStore(tmp_path), KEY, accept=5)


def test_an_engine_keeping_its_own_stored_profile_again_stores_its_extra_and_names_no_other_engine(platform, tmp_path):
    store, memory = ProfileStore(tmp_path), _profiled(platform)
    memory.measure_block_cost(_engine([]), [64, 128], store=store, key=KEY)  # stored here, without an extra
    assert memory.save_profile(store, KEY, {"engine": 1}) == {"engine": 1}
    assert store.load(BLOCK_COST_KIND, KEY).figures["extra"] == {"engine": 1}
    assert "another engine" not in memory.block_cost_source
