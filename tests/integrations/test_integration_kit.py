"""The adapter kit (devmem.integrations.kit): the switch, the feature checks, the import hook, the wrapped steps
that give a failed start's share back, and the starts of one engine in a process."""

from __future__ import annotations

import contextlib
import gc
import logging
import sys
import textwrap
import types

import pytest

from devmem import GiB, SizingError
from devmem.cpu import CpuPlatform
from devmem.engine.memory import EngineMemory
from devmem.integrations import kit
from devmem.testing.scenario import HostMemory, Scenario

log = logging.getLogger("engine.devmem")


@pytest.fixture
def host():
    return CpuPlatform(files=Scenario(host=HostMemory(total=64 * GiB, free=60 * GiB)).fs)


def _memory(host, utilization=0.3):
    return EngineMemory(0, platform=host, utilization=utilization)


class Worker:
    pass


@pytest.mark.parametrize("value", ["0", "false", "No", " off "])
def test_switch_values_that_turn_the_adapter_off(value, caplog):
    switch = kit.Switch("DEVMEM_ENGINE", "the engine", log)
    with caplog.at_level(logging.INFO, logger=log.name):
        assert not switch.on({"DEVMEM_ENGINE": value})
    assert [r.getMessage() for r in caplog.records] == [
        f"devmem: DEVMEM_ENGINE={value}, the engine sizes its KV cache itself"
    ]


@pytest.mark.parametrize("environ", [{}, {"DEVMEM_ENGINE": "1"}, {"DEVMEM_ENGINE": "on"}, {"DEVMEM_ENGINE": ""}])
def test_switch_is_on_unless_turned_off(environ, caplog):
    with caplog.at_level(logging.INFO, logger=log.name):
        assert kit.Switch("DEVMEM_ENGINE", "the engine", log).on(environ)
    assert caplog.records == []


def test_an_unknown_switch_value_is_named_in_one_warning_and_leaves_it_on(caplog):
    with caplog.at_level(logging.INFO, logger=log.name):
        assert kit.Switch("DEVMEM_ENGINE", "the engine", log).on({"DEVMEM_ENGINE": "disable"})
    assert [(r.levelno, r.getMessage()) for r in caplog.records] == [
        (
            logging.WARNING,
            "devmem: DEVMEM_ENGINE='disable' is none of 1, true, yes, on (on) or 0, false, no, off (off); the "
            "plugin stays on",
        )
    ]


@pytest.mark.parametrize(
    ("version", "expected"),
    [
        ("0.26.0", (0, 26, 0)),
        ("0.34.0rc1", (0, 34, 0)),
        ("0.5.15.post1", (0, 5, 15)),
        ("1.0+cu130", (1, 0)),
        ("dev", None),
    ],
)
def test_release_reads_the_numeric_part_of_a_version(version, expected):
    assert kit.release(version) == expected


def test_installed_version_is_none_for_an_engine_that_is_not_there():
    assert kit.installed_version("no-such-distribution-devmem", "no_such_module_devmem") is None


def test_installed_version_reads_a_copy_without_metadata(tmp_path, monkeypatch):
    (tmp_path / "bare_engine_devmem.py").write_text("__version__ = '0.7.1'\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    assert kit.installed_version("bare-engine-devmem", "bare_engine_devmem") == "0.7.1"


def test_parameters_of_an_uninspectable_callable_is_none():
    assert kit.parameters(object()) is None
    assert kit.parameters(type("Odd", (), {"__signature__": "not a signature", "__call__": lambda self: 0})()) is None


def test_a_method_taking_more_parameters_with_defaults_accepts_the_call():
    class Runner:
        def profile_run(self, randomize_inputs: bool = False): ...

    assert kit.shape_mismatches(Runner, {"profile_run": ("self",)}) == []


def test_shape_mismatches_name_a_missing_method_and_a_required_extra_parameter():
    class Runner:
        def profile_run(self, inputs): ...

    assert kit.shape_mismatches(Runner, {"profile_run": ("self",), "capture_model": ("self",)}) == [
        "Runner.profile_run('self', 'inputs') does not take profile_run(self)",
        "Runner.capture_model is missing",
    ]


def test_when_imported_patches_the_module_right_after_its_import(tmp_path, monkeypatch):
    (tmp_path / "later_engine_devmem.py").write_text("VALUE = 1\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    seen = []
    hooks = list(sys.meta_path)
    try:
        kit.when_imported("later_engine_devmem", lambda module: seen.append(module.VALUE))
        kit.when_imported("later_engine_devmem", lambda module: seen.append(module.VALUE))  # another patch
        assert seen == []
        import later_engine_devmem  # noqa: F401

        assert seen == [1, 1]
    finally:
        sys.meta_path[:] = hooks
        sys.modules.pop("later_engine_devmem", None)


def test_when_imported_installs_one_hook_per_module_and_patch(tmp_path):
    def patch(module):
        pass

    hooks = list(sys.meta_path)
    try:
        kit.when_imported("never_imported_devmem", patch)
        kit.when_imported("never_imported_devmem", patch)
        assert len(sys.meta_path) == len(hooks) + 1
    finally:
        sys.meta_path[:] = hooks


def test_when_imported_patches_at_once_a_module_already_imported():
    seen = []
    kit.when_imported("logging", seen.append)
    assert seen == [logging]


def test_a_wrapped_step_runs_around_the_original():
    class Engine:
        def start(self, size):
            return size * 2

    kit.wrap(Engine, "start", lambda original, self, size: original(self, size) + 1, lambda engine: None)
    assert Engine().start(5) == 11


def test_wrapping_a_wrapped_method_again_is_a_no_op():
    class Engine:
        def start(self):
            return 1

    kit.wrap(Engine, "start", lambda original, self: original(self) + 1, lambda engine: None)
    kit.wrap(Engine, "start", lambda original, self: original(self) + 1, lambda engine: None)
    assert Engine().start() == 2


@pytest.mark.parametrize("failure", [RuntimeError("load failed"), KeyboardInterrupt()])
def test_a_step_that_raises_gives_the_share_back(host, failure):
    class Engine:
        def load(self):
            raise failure

    engine = Engine()
    engine.memory = _memory(host)
    kit.wrap(Engine, "load", lambda original, self: original(self), lambda e: getattr(e, "memory", None))
    with pytest.raises(type(failure)):
        engine.load()
    assert engine.memory.closed and engine.memory.reservation.released


def test_a_start_begun_again_on_the_same_owner_closes_the_first(host):
    starts, worker = kit.Starts(log), Worker()
    first = starts.begin(worker, "memory", 0, lambda: _memory(host))
    second = starts.begin(worker, "memory", 0, lambda: _memory(host))
    assert first.closed and not second.closed and worker.memory is second


def test_a_start_whose_engine_was_dropped_in_a_cycle_gives_its_share_back_to_the_retry(host):
    starts, failed = kit.Starts(log), Worker()
    failed.cycle = failed  # only the garbage collector frees it
    abandoned = starts.begin(failed, "memory", 0, lambda: _memory(host, 0.6))
    del failed
    retry = Worker()
    retried = starts.begin(retry, "memory", 0, lambda: _memory(host, 0.6))  # 0.6 twice would be refused
    assert abandoned.closed and not retried.closed


def test_a_live_engine_still_starting_keeps_its_share(host):
    starts, first, second = kit.Starts(log), Worker(), Worker()
    starting = starts.begin(first, "memory", 0, lambda: _memory(host))
    other = starts.begin(second, "memory", 0, lambda: _memory(host))
    assert not starting.closed and not other.closed


def test_an_owner_collected_without_shutdown_gives_its_share_back(host):
    starts, worker = kit.Starts(log), Worker()
    memory = starts.begin(worker, "memory", 0, lambda: _memory(host))
    del worker
    gc.collect()
    assert memory.closed and memory.reservation.released


def test_an_owner_without_weak_references_still_starts(host):
    class Slotted:
        __slots__ = ("memory",)

    owner = Slotted()
    memory = kit.Starts(log).begin(owner, "memory", 0, lambda: _memory(host))
    assert owner.memory is memory and not memory.closed


def test_the_kit_module_imports_no_engine():
    code = textwrap.dedent(
        """
        import sys
        import devmem.integrations.kit
        print(sorted(m for m in ("vllm", "sglang", "transformers", "torch") if m in sys.modules))
        """
    )
    import subprocess

    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


# A sizing call's request (begin_sizing) and what the kit reads of a model and its engine.


@pytest.fixture
def linear():
    """A model as the kit reads one: a torch module that says where it is (``device``, as transformers' models do)."""
    torch = pytest.importorskip("torch")
    model = torch.nn.Linear(64, 64)
    model.device = torch.device("cpu")
    return model


def _begin(model, host, **given):
    request = dict(
        utilization=None,
        pinned_bytes=None,
        device=None,
        baseline=None,
        weights_memory=None,
        platform=host,
        store=False,
        reservation=True,
        memory=None,
        limit_allocator_to_share=True,
        began=0.0,
        log=log,
    )
    return kit.begin_sizing(model, **{**request, **given})


def test_a_sizing_without_memory_creates_one_at_the_share_charging_the_models_weights(linear, host):
    sizing = _begin(linear, host, utilization=0.3)
    assert sizing.owned and sizing.memory.utilization == 0.3 and sizing.weights == (64 * 64 + 64) * 4
    assert (sizing.platform, sizing.device, sizing.store) == (host, 0, None)


def test_a_sizing_without_a_baseline_warns_and_notes_that_the_process_counts_as_consumed(linear, host, caplog):
    with caplog.at_level(logging.WARNING, logger=log.name):
        sizing = _begin(linear, host)
    assert "take MemorySnapshot.measure() before creating the model" in caplog.text
    assert sizing.notes and "no baseline" in sizing.notes[0]


def test_a_failed_sizing_closes_the_memory_it_created(linear, host):
    sizing = _begin(linear, host)
    with pytest.raises(RuntimeError), sizing.closed_on_failure():
        raise RuntimeError("the engine failed")
    assert sizing.memory.closed


def test_a_failed_sizing_leaves_the_engines_own_memory_open(linear, host):
    memory = _memory(host)
    sizing = _begin(linear, None, memory=memory)
    with pytest.raises(RuntimeError), sizing.closed_on_failure():
        raise RuntimeError("the engine failed")
    assert not sizing.owned and not memory.closed


def test_a_request_given_beside_the_engines_memory_is_refused_naming_it(linear, host):
    with pytest.raises(SizingError, match="give utilization to the EngineMemory, not beside it"):
        _begin(linear, None, memory=_memory(host), utilization=0.5)


def test_a_share_and_pinned_bytes_together_are_refused():
    with pytest.raises(SizingError, match="give utilization or pinned_bytes, not both"):
        kit.share_request(0.5, 1 << 20)


def test_the_share_is_nine_tenths_where_none_is_given():
    assert kit.share_request(None, None) == 0.9 and kit.share_request(None, 1 << 20) is None


def test_a_model_on_the_meta_device_is_refused():
    torch = pytest.importorskip("torch")
    with torch.device("meta"):
        model = torch.nn.Linear(4, 4)
    with pytest.raises(SizingError, match=r"weights are on the meta device \(devices \['meta'\]\)"):
        kit.check_one_device(model, "the engine")


def test_storages_are_counted_once_however_many_views_reach_them():
    torch = pytest.importorskip("torch")
    tensor = torch.zeros(256)
    assert kit.storage_bytes([tensor, tensor[:8], {"again": [tensor]}], tensor.device, set()) == (1024, 1)


def test_objects_of_the_entered_package_are_walked_into():
    torch = pytest.importorskip("torch")
    holder = Worker()
    holder.tensor = torch.zeros(256)
    assert kit.storage_bytes([holder], holder.tensor.device, set()) == (0, 0)
    assert kit.storage_bytes([holder], holder.tensor.device, set(), __name__) == (1024, 1)


def test_a_model_compiled_by_torch_is_unwrapped(linear):
    torch = pytest.importorskip("torch")
    assert kit.unwrapped(torch.compile(linear)) is linear and kit.unwrapped(linear) is linear


def test_forward_tokens_are_the_last_dimension_of_each_forwards_input_ids():
    torch = pytest.importorskip("torch")
    model = torch.nn.Embedding(16, 4)
    with kit.forward_tokens(model) as tokens:
        model(torch.zeros(1, 5, dtype=torch.long))
        model(input=torch.zeros(1, 3, dtype=torch.long))
    model(torch.zeros(1, 7, dtype=torch.long))
    assert tokens == [5]


def test_logged_keeps_the_first_line_of_each_warning_with_the_phrase():
    engine_log = logging.getLogger("engine.under.test")
    with kit.logged(engine_log.name, "Failed to warm up") as found:
        engine_log.warning("Failed to warm up: out of memory\ntraceback ...")
        engine_log.warning("something else")
    engine_log.warning("Failed to warm up after the step")
    assert found == ["Failed to warm up: out of memory"]


def test_a_copy_with_values_leaves_the_original_alone():
    original = Worker()
    original.sizes = [1, 2]
    copy = kit.copied(original, blocks=3)
    copy.sizes.append(3)
    assert (copy.blocks, original.sizes, hasattr(original, "blocks")) == (3, [1, 2], False)


def test_a_parameter_and_a_source_are_read_and_never_raise():
    def step(model, *, kwargs):
        return model

    assert kit.parameter(step, "kwargs").kind.name == "KEYWORD_ONLY" and kit.parameter(step, "other") is None
    assert kit.parameter(object(), "x") is None  # no signature to read: no parameter, no exception
    assert "def step" in kit.source(step) and kit.source(len) == ""


def test_a_step_is_ordered_after_the_current_stream_and_the_current_stream_after_it():
    torch = pytest.importorskip("torch")
    waited = []

    class Stream:  # the engine's compute stream, as torch's stream API (wait_stream) sees it
        device = torch.device("cpu")

        def wait_stream(self, other):
            waited.append("stream waits")

    owner = Worker()
    owner.compute = lambda x: waited.append(f"computes {x}") or x
    kit.after_current_stream(owner, "compute", Stream())
    assert owner.compute(2) == 2 and waited == ["stream waits", "computes 2"]


def test_a_gate_switched_off_reads_no_version(monkeypatch):
    monkeypatch.setenv("DEVMEM_ENGINE", "0")
    monkeypatch.setattr(kit.switch, "installed_version", lambda *names: pytest.fail("the version was read"))
    assert kit.Switch("DEVMEM_ENGINE", "Engine", log).admits("engine", "engine", (0, 1), [(0, 1)]) == (False, None)


def test_a_release_older_than_the_first_known_is_declined_in_one_warning(monkeypatch, caplog):
    monkeypatch.setattr(kit.switch, "installed_version", lambda *names: "0.1.0")
    with caplog.at_level(logging.INFO, logger=log.name):
        go, _ = kit.Switch("DEVMEM_ENGINE", "Engine", log).admits("engine", "engine", (0, 2), [(0, 2)])
    assert not go
    assert [r.getMessage() for r in caplog.records] == [
        "devmem: Engine 0.1.0 is older than 0.2, the first release this plugin knows; Engine sizes its KV cache itself"
    ]


def test_a_class_of_another_shape_is_not_patched_and_said_in_one_warning(caplog):
    class Engine:
        def start(self, size):
            return size

    switch = kit.Switch("DEVMEM_ENGINE", "Engine", log)
    with caplog.at_level(logging.INFO, logger=log.name):
        assert not kit.patch_class(
            Engine, {"start": lambda o, s: o(s)}, {"start": ("self",)}, kit.memory_of("m"), switch, "Engine's class"
        )
    assert kit.PATCHED not in Engine.__dict__ and not hasattr(Engine.start, kit.WRAPPED)
    assert [r.levelno for r in caplog.records] == [logging.WARNING]


def test_a_patch_that_raises_in_the_engines_import_is_one_warning(caplog):
    module = types.ModuleType("engine_module")
    module.Engine = type("Engine", (), {})

    def patch(cls, module):
        raise RuntimeError("broken")

    with caplog.at_level(logging.INFO, logger=log.name):
        kit.patch_in(module, "Engine", patch, kit.Switch("DEVMEM_ENGINE", "Engine", log), "note")
    assert [r.getMessage() for r in caplog.records] == [
        "devmem: patching engine_module failed (RuntimeError: broken); Engine sizes its KV cache itself"
    ]


def test_around_runs_each_call_inside_the_context_for_the_block_only():
    seen = []

    class Runner:
        def capture(self, **kwargs):
            seen.append("capture")

    @contextlib.contextmanager
    def window():
        seen.append("open")
        yield
        seen.append("close")

    runner = Runner()
    with kit.around(runner, "capture", lambda kwargs: None if kwargs.get("throwaway") else window()):
        runner.capture(throwaway=True)
        runner.capture()
    runner.capture()
    assert seen == ["capture", "open", "capture", "close", "capture"]


def test_current_is_the_memory_of_the_step_under_way(host):
    worker = Worker()
    worker.memory = _memory(host)
    seen = []
    kit.guarded(lambda original, owner: seen.append(kit.current()), kit.memory_of("memory"))(None, worker)
    assert seen == [worker.memory] and kit.current() is None


def test_closing_gives_the_share_back_after_the_engines_shutdown(host):
    worker, order = Worker(), []
    worker.memory = _memory(host)
    kit.closing(kit.memory_of("memory"))(lambda owner: order.append(owner.memory.closed), worker)
    assert order == [False] and worker.memory.closed


def test_weights_that_cannot_be_counted_reserve_nothing_with_one_warning(caplog):
    with caplog.at_level(logging.INFO, logger=log.name):
        assert kit.weights_per_rank("no-such-model", lambda: {"model_type": "unknown"}, "bfloat16", 1, log) == 0
    assert [r.levelno for r in caplog.records] == [logging.WARNING]


def test_the_sizing_line_names_what_the_profile_window_held(host, caplog):
    memory = _memory(host)
    with memory.profile(), memory.hold("the sampler", 1 << 20, "penalties over 8 requests"):
        pass
    plan = memory.plan(page_size_bytes=1 << 20, num_layers=1)
    with caplog.at_level(logging.INFO, logger=log.name):
        kit.log_sizing(log, memory, plan.num_blocks * plan.block_bytes, plan.block_bytes)
    (line,) = [r.getMessage() for r in caplog.records if r.levelno == logging.INFO]
    assert line.endswith("; the profile window: 1.00 MiB held for the sampler (penalties over 8 requests)")
