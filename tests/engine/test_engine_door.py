"""EngineMemory's door: the phases and the one refusal of a step (StepRefused: the step asked for and the phase), each
argument checked once and refused with its name and value (EngineArgumentError), and a backend's reading outside the
platform contract refused as device_report refuses it; on a scripted H200 whose torch runtime is scripted, on the
cpu platform with the real torch, and on host backends whose answers break the contract."""

from __future__ import annotations

import collections
import functools
import gc
import os
import sys
import threading

import pytest

import devmem
import devmem.arguments
from devmem import DevmemError, EngineMemory, GiB, KvLayout, MemoryInfo, MiB, device_report
from devmem.cpu import CpuPlatform
from devmem.engine.block_cost import BlockRun
from devmem.engine.graphs import GraphsAfterCache
from devmem.engine.phases import TRANSITIONS, Phase
from devmem.engine.profile_store import ProfileStore
from devmem.errors import EngineArgumentError, StepRefused
from devmem.platform import DeviceMemory, ProcessMemory

PAGE = 3 * MiB + 4096
LAYERS = 22


def _created(platform, **kwargs):
    return EngineMemory(0, utilization=0.1, platform=platform, reserve=False, **kwargs)


def _profiled(platform, **kwargs):
    memory = _created(platform, **kwargs)
    with memory.profile():
        pass
    return memory


def _planned(platform, **kwargs):
    memory = _profiled(platform)
    memory.plan(page_size_bytes=PAGE, num_layers=LAYERS, **kwargs)
    return memory


def _engine_run(n):
    return BlockRun(n, held_bytes=n * PAGE, peak_bytes=n * PAGE + 200 * MiB, reserved_peak_bytes=n * PAGE + 200 * MiB)


def _costed(platform):
    memory = _profiled(platform)
    memory.measure_block_cost(_engine_run, [64, 128])
    return memory


def _stored(platform, tmp_path):
    store, key = ProfileStore(tmp_path), {"model": "black-box"}
    _costed(platform).save_profile(store, key)
    memory = _created(platform)
    assert memory.load_profile(store, key) is not None
    return memory


def _closed(platform):
    memory = _profiled(platform)
    memory.close()
    return memory


def _profile_failed(platform):
    memory = _created(platform)
    with pytest.raises(RuntimeError), memory.profile():
        raise RuntimeError("out of memory")
    return memory


def _plan(memory):
    memory.plan(page_size_bytes=PAGE, num_layers=LAYERS)


def _open(window):
    with window:
        pass


#: (how the object got there, the step taken, the step refused, the phase it is in)
REFUSED_STEPS = [
    (_profiled, lambda m: _open(m.profile()), "profile", Phase.PROFILED),
    (_created, lambda m: _open(m.graphs()), "graphs", Phase.CREATED),
    (_created, _plan, "plan", Phase.CREATED),
    (_created, lambda m: m.allocate(), "allocate", Phase.CREATED),
    (_created, lambda m: m.measure_block_cost(_engine_run, [64, 128]), "measure_block_cost", Phase.CREATED),
    (_created, lambda m: m.window_figures(), "window_figures", Phase.CREATED),
    (_costed, lambda m: m.measure_block_cost(_engine_run, [64, 128]), "measure_block_cost", Phase.COSTED),
    (_costed, lambda m: _open(m.graphs()), "graphs", Phase.COSTED),
    (_profiled, lambda m: m.save_profile(ProfileStore("/nonexistent"), {"k": 1}), "save_profile", Phase.PROFILED),
    (_profiled, lambda m: m.load_profile(ProfileStore("/nonexistent"), {"k": 1}), "load_profile", Phase.PROFILED),
    (_profile_failed, _plan, "plan", Phase.PROFILE_FAILED),
    (_planned, _plan, "plan", Phase.PLANNED),
    (_planned, lambda m: _open(m.graphs_after_cache()), "graphs_after_cache", Phase.PLANNED),
    (
        functools.partial(_planned, layout=KvLayout.per_layer()),
        lambda m: m.allocate(),
        "allocate",
        Phase.PLANNED,
    ),
    (
        functools.partial(_planned, graphs=GraphsAfterCache()),
        lambda m: _open(m.graphs_after_cache()),  # devmem's one allocation: not allocated yet
        "graphs_after_cache",
        Phase.PLANNED,
    ),
    (_closed, _plan, "plan", Phase.CLOSED),
    (_closed, lambda m: _open(m), "enter a `with` block", Phase.CLOSED),
]


@pytest.mark.parametrize(("state", "act", "step", "phase"), REFUSED_STEPS)
def test_a_step_the_phase_does_not_allow_is_refused_naming_both(h200, torch_rt, platform, state, act, step, phase):
    memory = state(platform)
    with pytest.raises(StepRefused) as refused:
        act(memory)
    assert (refused.value.step, refused.value.phase) == (step, phase)
    assert memory.phase is phase  # a refusal changes nothing


@pytest.mark.parametrize(
    ("act", "step"),
    [(_plan, "plan"), (lambda m: _open(m.graphs()), "graphs"), (lambda m: _open(m.profile()), "profile")],
)
def test_a_step_inside_an_open_window_is_refused_naming_the_window(h200, torch_rt, platform, act, step):
    memory = _created(platform)
    with memory.profile(), pytest.raises(StepRefused) as refused:
        act(memory)
    assert (refused.value.step, refused.value.phase) == (step, Phase.PROFILING)


def test_steps_after_a_stored_profile_was_read_are_refused_but_the_plan(h200, torch_rt, platform, tmp_path):
    memory = _stored(platform, tmp_path)
    with pytest.raises(StepRefused) as refused:
        _open(memory.graphs())
    assert (refused.value.step, refused.value.phase) == ("graphs", Phase.STORED)
    assert memory.plan().num_blocks > 0


def test_a_step_refusal_says_the_step_the_phase_and_what_it_allows(platform):
    with pytest.raises(StepRefused) as refused:
        _plan(_created(platform))
    assert str(refused.value) == (
        "device 0: cannot plan in phase 'created' (nothing measured yet: the profile window (memory.profile, "
        "profile_forward, profile_blocks) or load_profile comes next); the steps allowed now: profile, "
        "profile_forward, profile_blocks, load_profile, plan"
    )


def test_a_step_refusal_is_no_value_error():
    assert not issubclass(StepRefused, ValueError) and issubclass(StepRefused, devmem.EngineMemoryError)


def test_every_phase_the_table_leads_to_is_a_phase_and_every_step_a_method():
    steps = {step for allowed in TRANSITIONS.values() for step in allowed}
    assert all(callable(getattr(EngineMemory, step)) for step in steps)
    assert {phase for allowed in TRANSITIONS.values() for phase in allowed.values()} <= set(Phase)


def test_the_object_still_explains_after_close(h200, torch_rt, platform):
    memory = _closed(platform)
    memory.close()
    assert "device 0" in memory.explain() and memory.as_dict()["phase"] == "closed"


def test_a_second_thread_cannot_open_the_window_another_thread_holds(platform):
    memory = _created(platform)
    inside, leave = threading.Event(), threading.Event()

    def forward():
        inside.set()
        leave.wait(10)

    worker = threading.Thread(target=memory.profile_forward, args=(forward,), kwargs={"passes": 1})
    worker.start()
    try:
        assert inside.wait(10)
        with pytest.raises(StepRefused) as refused, memory.profile():
            pass
    finally:
        leave.set()
        worker.join(10)
    assert (refused.value.step, refused.value.phase) == ("profile", Phase.PROFILING)
    assert memory.profile_result is not None and memory.profile_result.complete


def test_a_forked_child_cannot_use_its_parents_engine_memory(h200, torch_rt, platform):
    memory = _profiled(platform)
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: report what plan() raised, and leave at once
        try:
            _plan(memory)
            os.write(write, b"planned")
        except StepRefused as exc:
            os.write(write, f"{exc.step}|{exc.phase.value}|{exc}".encode()[:4000])
        finally:
            os._exit(0)
    os.close(write)
    os.waitpid(pid, 0)
    with os.fdopen(read, "rb") as pipe:
        step, phase, said = pipe.read().decode().split("|", 2)
    assert (step, phase) == ("plan", Phase.FORKED.value)
    assert f"this EngineMemory was created by process {os.getpid()}" in said
    assert memory.plan(page_size_bytes=PAGE, num_layers=LAYERS).num_blocks > 0  # the parent's is untouched


# ---- arguments: each refused at the door with its name and the value given -----------------------------------

RELEASED = object()  # stands for a released reservation of this device, made in the test


class _NoPlatform:
    pass


#: (the constructor's arguments, the argument refused)
REFUSED_CONSTRUCTOR_ARGUMENTS = [
    ({"pinned_bytes": -1}, "pinned_bytes"),
    ({"pinned_bytes": 200 * GiB}, "pinned_bytes"),
    ({"reserve_bytes": 200 * GiB, "reserve": True}, "reserve_bytes"),
    ({"utilization": "0.9"}, "utilization"),
    ({"utilization": 0}, "utilization"),
    ({"device": -1}, "device"),
    ({"device": 0.0}, "device"),
    ({"platform": "cpu"}, "platform"),
    ({"platform": _NoPlatform()}, "platform"),
    ({"check_startup": "no"}, "check_startup"),
    ({"check_startup": None}, "check_startup"),
    ({"reserve": 1}, "reserve"),
    ({"reserve": RELEASED}, "reserve"),
    ({"late": 1}, "late"),
    ({"ledger_dir": 5}, "ledger_dir"),
    ({"allocation_granularity": 0}, "allocation_granularity"),
    ({"baseline": "before"}, "baseline"),
]


@pytest.mark.parametrize(("given", "argument"), REFUSED_CONSTRUCTOR_ARGUMENTS)
def test_a_bad_constructor_argument_is_refused_with_its_name_and_value(platform, given, argument):
    given = {"platform": platform, "reserve": False, "utilization": 0.1, **given}
    if given["reserve"] is RELEASED:
        given["reserve"] = devmem.reserve(0, bytes=GiB, platform=platform)
        given["reserve"].release()
    with pytest.raises(EngineArgumentError) as refused:
        EngineMemory(**given)
    assert (refused.value.argument, refused.value.value) == (argument, given[argument])


async def _async_forward():
    return None


def _generator_forward():
    yield None


def _other_plan(memory):
    return devmem.planner.plan_kv_cache(pinned_bytes=GiB, page_size_bytes=PAGE, num_layers=LAYERS)


#: (how the object got there, the step taken with a bad argument, the argument refused, the value given)
REFUSED_STEP_ARGUMENTS = [
    (_created, lambda m: _open(m.profile(weights_memory=-5)), "weights_memory", -5),
    (_created, lambda m: _open(m.profile(weights_memory=200 * GiB)), "weights_memory", 200 * GiB),
    (_created, lambda m: m.profile_forward("forward"), "forward", "forward"),
    (_created, lambda m: m.profile_forward(lambda: None, passes=0), "passes", 0),
    (_created, lambda m: m.profile_blocks("run", 16), "run", "run"),
    (_created, lambda m: m.profile_blocks(lambda n: n, 0), "num_blocks", 0),
    (_created, lambda m: m.load_profile("store", {"k": 1}), "store", "store"),
    (_profiled, lambda m: m.measure_block_cost(_engine_run, [64, 128], granularity=0), "granularity", 0),
    (_profiled, lambda m: m.measure_block_cost(_engine_run, [64, 128], layout="one"), "layout", "one"),
    (_profiled, lambda m: m.blocks_that_fit("x"), "cost", "x"),
    (_profiled, lambda m: m.plan(), "page_size_bytes", None),
    (_profiled, lambda m: m.plan(page_size_bytes=0, num_layers=LAYERS), "page_size_bytes", 0),
    (_profiled, lambda m: m.plan(page_size_bytes=PAGE, num_layers=0), "num_layers", 0),
    (_profiled, lambda m: m.plan(page_size_bytes=PAGE, num_layers=LAYERS, layout="one"), "layout", "one"),
    (_profiled, lambda m: m.plan(page_size_bytes=PAGE, num_layers=LAYERS, graphs=GiB), "graphs", GiB),
    (_planned, lambda m: m.allocate("plan"), "plan", "plan"),
]


@pytest.mark.parametrize(("state", "act", "argument", "value"), REFUSED_STEP_ARGUMENTS)
def test_a_bad_step_argument_is_refused_with_its_name_and_value(h200, torch_rt, platform, state, act, argument, value):
    memory = state(platform)
    phase = memory.phase
    with pytest.raises(EngineArgumentError) as refused:
        act(memory)
    assert (refused.value.argument, refused.value.value) == (argument, value)
    assert memory.phase is phase


def test_the_plan_of_another_engine_is_refused_as_the_allocations_argument(h200, torch_rt, platform):
    memory = _planned(platform)
    other = _other_plan(memory)
    with pytest.raises(EngineArgumentError) as refused:
        memory.allocate(other)
    assert (refused.value.argument, refused.value.value) == ("plan", other)


@pytest.mark.parametrize("forward", [_async_forward, _generator_forward])
def test_a_forward_that_returns_work_not_yet_run_fails_its_window(platform, forward):
    memory = _created(platform)
    with pytest.raises(EngineArgumentError) as refused:
        memory.profile_forward(forward)
    assert refused.value.argument == "forward"
    assert memory.phase is Phase.PROFILE_FAILED  # the window may be opened again


@pytest.mark.parametrize(
    ("fields", "argument", "value"),
    [
        ((True, 0), "KvLayout.count", 0),
        ((True, -3), "KvLayout.count", -3),
        ((True, 2.5), "KvLayout.count", 2.5),
        ((True, None, 0), "KvLayout.per_layer_count", 0),
        (("yes",), "KvLayout.by_engine", "yes"),
        ((False, 5), "KvLayout.count", 5),
    ],
)
def test_a_layout_with_bad_fields_is_refused_naming_the_field(fields, argument, value):
    with pytest.raises(EngineArgumentError) as refused:
        KvLayout(*fields)
    assert (refused.value.argument, refused.value.value) == (argument, value)


def test_a_layout_of_zero_tensors_a_layer_is_refused():
    with pytest.raises(EngineArgumentError) as refused:
        KvLayout.per_layer(0)
    assert refused.value.argument == "KvLayout.per_layer_count"


def test_an_argument_refusal_names_the_argument_the_value_and_what_is_allowed(platform):
    with pytest.raises(EngineArgumentError) as refused:
        EngineMemory(0, utilization=0, platform=platform, reserve=False)
    assert str(refused.value) == "utilization must be in (0, 1], got 0"


def test_an_argument_refusal_is_a_value_error_and_an_engine_memory_error():
    assert issubclass(EngineArgumentError, ValueError) and issubclass(EngineArgumentError, devmem.EngineMemoryError)


# ---- each argument checked once ------------------------------------------------------------------------------

VALIDATORS = ("byte_count", "integer", "count", "real", "utilization", "device_index", "flag")


@pytest.fixture
def validated(monkeypatch):
    """Every call of devmem.arguments' validators from the engine side and the planner beneath it (devmem.engine,
    devmem.platform, devmem.planner), by the argument's name: the planner trusts the inputs the door checked."""
    calls: collections.Counter[str] = collections.Counter()

    def counted(name, validator):
        @functools.wraps(validator)
        def wrapper(*args, **kwargs):
            caller = sys._getframe(1).f_globals.get("__name__", "")
            if caller.startswith(("devmem.engine", "devmem.platform", "devmem.planner")):
                calls[kwargs.get("name") or (args[0] if isinstance(args[0], str) else name)] += 1
            return validator(*args, **kwargs)

        return wrapper

    for name in VALIDATORS:
        monkeypatch.setattr(devmem.arguments, name, counted(name, getattr(devmem.arguments, name)))
    for module in [m for n, m in list(sys.modules.items()) if n.startswith(("devmem.engine", "devmem.platform"))]:
        if hasattr(module, "platform_argument"):  # the platform's check, imported by name where it is used
            monkeypatch.setattr(module, "platform_argument", counted("platform", module.platform_argument))
    return calls


def test_each_argument_of_a_lifecycle_is_checked_once(validated, monkeypatch, tmp_path):
    torch = pytest.importorskip("torch")
    monkeypatch.setenv("DEVMEM_PLATFORM", "cpu")
    monkeypatch.setenv("DEVMEM_LEDGER_DIR", str(tmp_path))
    devmem.clear_cache()
    try:
        total = devmem.current_platform().device_memory_info(0).total
        memory = EngineMemory(0, utilization=max(512 * MiB / total, 1e-6), check_startup=False)
        memory.profile_forward(lambda: torch.ones(1 << 20).sum(), weights_memory=0)
        with memory.graphs():
            pass
        layout, graphs = KvLayout.one_allocation(), GraphsAfterCache(estimate=MiB)
        memory.plan(page_size_bytes=64 * 1024, num_layers=4, layout=layout, graphs=graphs)
        memory.allocate()
        with memory.graphs_after_cache():
            pass
        memory.close()
    finally:
        devmem.clear_cache()
    assert validated and max(validated.values()) == 1, validated


def test_each_argument_of_a_black_box_lifecycle_is_checked_once(validated, monkeypatch):
    monkeypatch.setenv("DEVMEM_PLATFORM", "cpu")
    devmem.clear_cache()
    try:
        total = devmem.current_platform().device_memory_info(0).total
        memory = EngineMemory(0, utilization=max(512 * MiB / total, 1e-6), reserve=False, check_startup=False)
        memory.profile_blocks(lambda n: n * 4096, 16)
        memory.measure_block_cost(lambda n: n * 4096, [32, 64], granularity=2)
        memory.plan()
    finally:
        devmem.clear_cache()
    records = {name: n for name, n in validated.items() if name.startswith("BlockRun.")}  # a run's, not arguments
    arguments = {name: n for name, n in validated.items() if name not in records}
    assert arguments.pop("sizes") == 2 and arguments and max(arguments.values()) == 1, validated


# ---- one gc.collect() per window edge --------------------------------------------------------------------------


def test_a_lifecycle_collects_garbage_once_per_window_edge_and_allocation(monkeypatch):
    torch = pytest.importorskip("torch")
    monkeypatch.setenv("DEVMEM_PLATFORM", "cpu")
    devmem.clear_cache()
    collected = []
    monkeypatch.setattr(gc, "collect", lambda *a: collected.append(a) or 0)
    try:
        total = devmem.current_platform().device_memory_info(0).total
        memory = EngineMemory(0, utilization=max(512 * MiB / total, 1e-6), reserve=False, check_startup=False)
        memory.profile_blocks(lambda n: torch.zeros(n * 1024).numel(), 16)  # a window, then the run's leftovers
        memory.measure_block_cost(lambda n: n * 4096, [32, 64])  # a window a run
        windows = 1 + len(memory.block_cost.runs) - 1
        memory.plan()
    finally:
        devmem.clear_cache()
    assert len(collected) == 2 * windows


# ---- the platform contract ---------------------------------------------------------------------------------------


class _FreeAboveTotal(CpuPlatform):
    def _memory(self, device):
        return DeviceMemory(MemoryInfo(free=9 * GiB, total=8 * GiB))


class _NegativeProcess(CpuPlatform):
    def _process_memory(self, device):
        return ProcessMemory(-7)


@pytest.mark.parametrize("backend", [_FreeAboveTotal, _NegativeProcess])
def test_a_reading_outside_the_contract_is_refused_by_engine_memory_as_by_device_report(backend):
    with pytest.raises(DevmemError) as report:
        device_report(backend(), 0)
    with pytest.raises(DevmemError) as engine:
        EngineMemory(0, utilization=0.01, platform=backend(), reserve=False, check_startup=False)
    assert type(engine.value) is type(report.value) and str(engine.value) == str(report.value)


# ---- the heap frozen while a start collects (devmem.engine._heap) --------------------------------------------------


def test_a_starts_collections_never_scan_what_existed_before_it(platform, torch_rt):
    existing, scanned = [], []

    def record(phase, info):
        if phase == "start":
            scanned.append(any(o is existing for o in gc.get_objects()))  # gc.get_objects() leaves frozen ones out

    gc.callbacks.append(record)
    try:
        memory = _planned(platform, layout=KvLayout.per_layer())
        memory.release_allocator_cache()
    finally:
        gc.callbacks.remove(record)
    assert scanned and not any(scanned)


def test_the_heap_is_unfrozen_once_the_engine_allocates_its_cache(platform, torch_rt):
    memory = _planned(platform, layout=KvLayout.per_layer())
    assert gc.get_freeze_count() > 0
    memory.release_allocator_cache()  # right before the engine allocates its cache tensors
    assert gc.get_freeze_count() == 0


def test_the_heap_stays_frozen_until_graphs_after_the_cache_are_captured(platform, torch_rt):
    memory = _planned(platform, layout=KvLayout.per_layer(), graphs=GraphsAfterCache(estimate=GiB))
    memory.release_allocator_cache()
    assert gc.get_freeze_count() > 0
    with memory.graphs_after_cache():
        pass
    assert gc.get_freeze_count() == 0


def test_a_start_closed_early_unfreezes_the_heap(platform):
    memory = _created(platform)
    memory.close()
    assert gc.get_freeze_count() == 0 and memory.closed  # kept alive: its close let go, not its end


def test_a_start_dropped_without_close_unfreezes_the_heap(platform):
    _created(platform)
    assert gc.get_freeze_count() == 0


def test_two_starts_at_once_unfreeze_when_the_last_ends(platform):
    first, second = _created(platform), _created(platform)
    first.close()
    assert gc.get_freeze_count() > 0
    second.close()
    assert gc.get_freeze_count() == 0


def test_a_heap_the_application_froze_stays_frozen(platform):
    gc.freeze()
    try:
        _created(platform).close()
        assert gc.get_freeze_count() > 0
    finally:
        gc.unfreeze()


def test_a_cycle_made_in_the_profile_window_is_collected_before_its_end_is_measured(monkeypatch):
    """What the collection at a window's end protects: memory a reference cycle kept is not counted as kept."""
    monkeypatch.setenv("DEVMEM_PLATFORM", "cpu")
    devmem.clear_cache()
    total = devmem.current_platform().device_memory_info(0).total
    with EngineMemory(0, utilization=max(GiB / total, 1e-6), reserve=False, check_startup=False) as memory:
        with memory.profile() as result:
            cycle: list = [bytearray(b"\x01" * (256 * MiB))]
            cycle.append(cycle)
            del cycle
        assert result.total_consumed < 64 * MiB
