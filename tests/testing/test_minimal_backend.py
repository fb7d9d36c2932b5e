"""A backend written to the six-member protocol devmem started from resolves, is adapted with honest defaults, and
is tested by the conformance kit, which fails it by name where its numbers are wrong (devmem/_adapter.py)."""

from __future__ import annotations

import json
import threading

import pytest
from ledger_workers import no_hang
from plugin_dists import write_dist
from test_conformance_broken import failure, run_kit

import devmem
from devmem._adapter import MinimalPlatform, as_platform
from devmem.testing import Scenario, ScriptedDevice
from devmem.types import GiB, MemoryInfo, MiB

MINIMAL_DIST = """
import devmem

class ClassicPlatform:
    name = {name!r}

    def device_count(self):
        return 2

    def device_memory_info(self, device=0):
        return devmem.MemoryInfo(free=6 * 2**30, total=8 * 2**30)

    def get_process_memory_usage(self, device=0):
        return {usage}

    def is_integrated_gpu(self, device=0):
        return False

    def pages_instead_of_failing(self, device=0):
        return False

@devmem.hookimpl
def devmem_platforms():
    yield devmem.PlatformSpec(name={name!r}, priority={priority}, detect=lambda: devmem.Detection(True, "present"),
                              factory=ClassicPlatform)
"""


def minimal_dist(site, name: str, priority: int, usage: str = "None") -> str:
    return write_dist(site, f"vendor-{name}", MINIMAL_DIST.format(name=name, priority=priority, usage=usage))


def test_a_minimal_backend_resolves_by_priority(site, monkeypatch):
    low = minimal_dist(site, "classic-low", 10)
    high = minimal_dist(site, "classic-high", 20)
    monkeypatch.setenv("DEVMEM_LOAD_PLUGINS", f"{low},{high}")
    platform = devmem.current_platform()
    assert isinstance(platform, MinimalPlatform) and platform.name == "classic-high"


def test_a_minimal_backend_gives_its_own_figures(site, monkeypatch):
    monkeypatch.setenv("DEVMEM_LOAD_PLUGINS", minimal_dist(site, "classic", 10, usage="3 * 2**30"))
    platform = devmem.current_platform()
    assert platform.device_memory_info(1) == MemoryInfo(6 * GiB, 8 * GiB)
    assert platform.get_process_memory_usage(1) == 3 * GiB


def test_a_minimal_backend_without_a_figure_says_it_gives_no_reason(site, monkeypatch):
    monkeypatch.setenv("DEVMEM_LOAD_PLUGINS", minimal_dist(site, "classic", 10))
    report = devmem.device_report(devmem.current_platform(), 0)
    assert report.process is None
    assert report.process_reason_kind == "not-attributed"
    assert "classic gives no figure for this process and no reason" in report.process_reason


def test_a_minimal_backends_sources_say_who_reported_them(site, monkeypatch):
    monkeypatch.setenv("DEVMEM_LOAD_PLUGINS", minimal_dist(site, "classic", 10))
    sources = devmem.current_platform().memory_sources(0)
    assert set(sources) == {"free", "total"}
    assert all(text.startswith("reported by classic (") for text in sources.values())


def test_a_minimal_backend_declares_no_torch_device_or_roles(site, monkeypatch):
    monkeypatch.setenv("DEVMEM_LOAD_PLUGINS", minimal_dist(site, "classic", 10))
    platform = devmem.current_platform()
    assert (platform.torch_device, platform.dist_backend) == (None, None)
    assert platform.process_roles(0) == {}
    assert json.dumps(devmem.device_report(platform, 1).as_dict())


def test_a_minimal_backends_bad_index_is_a_devmem_error_naming_the_range(site, monkeypatch):
    monkeypatch.setenv("DEVMEM_LOAD_PLUGINS", minimal_dist(site, "classic", 10))
    with pytest.raises(devmem.DevmemError, match=r"valid indices: 0\.\.1"):
        devmem.current_platform().device_memory_info(2)


def test_a_factory_returning_less_than_the_minimal_protocol_is_refused_naming_what_it_lacks(site, monkeypatch):
    body = """
    import devmem
    class Half:
        name = "half"
        def device_count(self):
            return 1
    @devmem.hookimpl
    def devmem_platforms():
        yield devmem.PlatformSpec(name="half", priority=10, detect=lambda: devmem.Detection(True, "here"),
                                  factory=Half)
    """
    monkeypatch.setenv("DEVMEM_LOAD_PLUGINS", write_dist(site, "vendor-half", body))
    monkeypatch.setenv("DEVMEM_PLATFORM", "half")
    with pytest.raises(devmem.PluginError, match="lacks device_memory_info, get_process_memory_usage"):
        devmem.current_platform()


def test_as_platform_returns_a_full_platform_itself():
    platform = devmem.current_platform()
    assert as_platform(platform) is platform


# ---- the kit on minimal backends -------------------------------------------------------------------


def minimal_scenario() -> Scenario:
    return Scenario(devices=[ScriptedDevice(name="Classic 16G", total=16 * GiB, reserved=0)])


class ScriptedClassic:
    """A minimal backend reading a Scenario as its vendor library; ``unit`` is the unit its figures are in."""

    name = "classic"

    def __init__(self, scenario: Scenario, unit: int = 1):
        self._sc, self._unit = scenario, unit

    def device_count(self):
        return len(self._sc.devices)

    def device_memory_info(self, device=0):
        free, total = self._sc.mem_get_info(device)
        return MemoryInfo(free // self._unit, total // self._unit)

    def get_process_memory_usage(self, device=0):
        return self._sc.held(device) // self._unit

    def is_integrated_gpu(self, device=0):
        return False

    def pages_instead_of_failing(self, device=0):
        return False


KIT_FILE = """
from devmem.testing import PlatformConformance, scripted_fixtures
from test_minimal_backend import ScriptedClassic, minimal_scenario
from devmem.types import MiB


class TestClassic(PlatformConformance, scripted_fixtures(minimal_scenario, ScriptedClassic)):
    pass


class TestClassicMib(PlatformConformance, scripted_fixtures(minimal_scenario, lambda sc: ScriptedClassic(sc, MiB))):
    pass
"""


@pytest.fixture(scope="module")
def kit_run(tmp_path_factory) -> tuple[int, dict[str, tuple[str, str]]]:
    return run_kit(tmp_path_factory.mktemp("minimal_kit"), KIT_FILE, "-k", "not fresh_process")


def test_the_kit_passes_a_right_minimal_backend(kit_run):
    outcomes = {test: outcome for test, (outcome, _) in kit_run[1].items() if test.startswith("TestClassic::")}
    assert outcomes and set(outcomes.values()) <= {"passed", "skipped"}, outcomes
    units = (
        "test_total_is_in_bytes",
        "test_process_usage_is_in_bytes",
        "test_figures_agree_with_an_independent_source",
    )
    assert {outcomes[f"TestClassic::{test}"] for test in units} == {"passed"}


def test_the_kit_fails_a_minimal_backend_reporting_mib_by_name(kit_run):
    assert "wrong units" in failure(kit_run, "test_total_is_in_bytes", "TestClassicMib")
    assert "wrong units" in failure(kit_run, "test_process_usage_is_in_bytes", "TestClassicMib")
    assert "wrong units" in failure(kit_run, "test_figures_agree_with_an_independent_source", "TestClassicMib")


def test_the_kit_raises_no_setup_error_on_a_minimal_backend(kit_run):
    errors = {test: message for test, (outcome, message) in kit_run[1].items() if outcome == "error"}
    assert not errors, errors


def test_mib_is_the_unit_the_wrong_backend_uses():
    sc = minimal_scenario()
    assert ScriptedClassic(sc, MiB).device_memory_info(0).total == 16 * 1024


# ---- what a minimal backend answers, checked at the boundary -------------------------------------------------

ANSWERING_DIST = """
import devmem

class Answering:
    name = "answering"

    def device_count(self):
        return {count}

    def device_memory_info(self, device=0):
        return {memory}

    def get_process_memory_usage(self, device=0):
        return None

    def is_integrated_gpu(self, device=0):
        return {integrated}

    def pages_instead_of_failing(self, device=0):
        return False

@devmem.hookimpl
def devmem_platforms():
    yield devmem.PlatformSpec(name="answering", priority=10, detect=lambda: devmem.Detection(True, "present"),
                              factory=Answering)
"""


def answering(site, monkeypatch, *, count="1", memory="(6 * 2**30, 8 * 2**30)", integrated="False"):
    """The platform resolved from a minimal backend answering the given Python expressions."""
    body = ANSWERING_DIST.format(count=count, memory=memory, integrated=integrated)
    monkeypatch.setenv("DEVMEM_LOAD_PLUGINS", write_dist(site, "vendor-answering", body))
    monkeypatch.setenv("DEVMEM_PLATFORM", "answering")
    return devmem.current_platform()


@pytest.mark.parametrize(
    "memory",
    [
        "(6.5, 8 * 2**30)",
        "(None, 8 * 2**30)",
        "('6 GiB', 8 * 2**30)",
        "(True, 8 * 2**30)",
        "(6 * 2**30, -1)",
        "(6 * 2**30, 2**70)",
        "(1, 2, 3)",
        "None",
        "'6/8'",
    ],
)
def test_a_minimal_backends_figure_that_is_no_whole_number_of_bytes_is_an_error_naming_backend_and_value(
    site, monkeypatch, memory
):
    platform = answering(site, monkeypatch, memory=memory)
    with pytest.raises(devmem.DevmemError, match=r"the minimal backend answering \(.*device_memory_info\(0\)"):
        devmem.device_report(platform, 0)


def test_a_minimal_backends_numpy_figures_are_taken_as_python_ints(site, monkeypatch):
    platform = answering(site, monkeypatch, memory="(__import__('numpy').int64(6 * 2**30), 8 * 2**30)")
    info = platform.device_memory_info(0)
    assert info == (6 * GiB, 8 * GiB) and type(info.free) is int
    assert json.dumps(devmem.device_report(platform, 0).as_dict())


def test_a_minimal_backends_free_above_total_is_taken_as_total_with_a_note(site, monkeypatch):
    platform = answering(site, monkeypatch, memory="(9 * 2**30, 8 * 2**30)")
    report = devmem.device_report(platform, 0)
    assert (report.free, report.total) == (8 * GiB, 8 * GiB)
    assert any("above its total" in note for note in report.notes)


@pytest.mark.parametrize("flag", ["'no'", "1", "None", "'False'"])
def test_a_minimal_backends_flag_that_is_not_a_bool_is_an_error_not_true(site, monkeypatch, flag):
    platform = answering(site, monkeypatch, integrated=flag)
    with pytest.raises(devmem.DevmemError, match=r"is_integrated_gpu\(0\) returned .*True or False"):
        platform.is_integrated_gpu(0)


@pytest.mark.parametrize("count", ["2.0", "-1", "'2'", "True", "2**40"])
def test_a_minimal_backends_device_count_that_is_no_count_is_an_error(site, monkeypatch, count):
    platform = answering(site, monkeypatch, count=count)
    with pytest.raises(devmem.DevmemError, match=r"device_count\(\) returned"):
        platform.device_count()


def test_a_minimal_backends_process_figure_that_is_no_number_is_unknown_with_a_reason_naming_it():
    class Backend(ScriptedClassic):
        def get_process_memory_usage(self, device=0):
            return -5

    platform = as_platform(Backend(minimal_scenario()))
    memory = platform.process_memory(0)
    assert memory.used is None and "returned -5" in memory.reason.text


@pytest.mark.parametrize("command", [["info"], ["info", "--json"], ["doctor"], ["doctor", "--json"]])
def test_the_cli_on_a_minimal_backend_answering_a_float_prints_one_error_line(site, monkeypatch, capsys, command):
    from devmem.command.main import main

    answering(site, monkeypatch, memory="(6.5, 8 * 2**30)")
    assert main(command) == 1
    out, err = capsys.readouterr()
    assert "Traceback" not in err and "devmem: error: the minimal backend answering" in err
    assert "6.5" in err
    if "--json" in command:
        assert json.loads(out)["kind"] == "error"


class Unreadable(Exception):
    """An exception whose text cannot be read."""

    def __str__(self):
        raise RuntimeError("no text")


class UnprintableValue:
    def __repr__(self):
        raise RuntimeError("no repr")


@pytest.mark.parametrize(
    "raised",
    [SystemExit(3), GeneratorExit(), BaseException("base"), Unreadable(), RecursionError("deep"), StopIteration()],
    ids=lambda e: type(e).__name__,
)
def test_whatever_a_minimal_backends_reading_raises_is_a_devmem_error_naming_the_backend_and_the_call(raised):
    class Backend(ScriptedClassic):
        def device_memory_info(self, device=0):
            raise raised

    platform = as_platform(Backend(minimal_scenario()))
    with pytest.raises(devmem.DevmemError, match=rf"device_memory_info\(0\) raised {type(raised).__name__}"):
        platform.device_memory_info(0)


def test_ctrl_c_in_a_minimal_backends_reading_stays_ctrl_c():
    class Backend(ScriptedClassic):
        def device_memory_info(self, device=0):
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        as_platform(Backend(minimal_scenario())).device_memory_info(0)


def test_a_minimal_backends_value_whose_repr_fails_is_an_error_naming_its_type():
    class Backend(ScriptedClassic):
        def device_memory_info(self, device=0):
            return (UnprintableValue(), 8 * GiB)

    platform = as_platform(Backend(minimal_scenario()))
    with pytest.raises(devmem.DevmemError, match=r"returned a tuple whose repr\(\) raised RuntimeError"):
        platform.device_memory_info(0)


@pytest.mark.parametrize("command", [["info", "--json"], ["doctor", "--json"], ["top", "--json", "-n", "1"]])
def test_the_cli_on_a_minimal_backend_raising_systemexit_prints_one_error_line(site, monkeypatch, capsys, command):
    from devmem.command.main import main

    answering(site, monkeypatch, memory="exec('raise SystemExit(3)')")
    assert main(command) == 1
    out, err = capsys.readouterr()
    assert "Traceback" not in err and "raised SystemExit: 3" in err and json.loads(out)["kind"] == "error"


# ---- a call that never returns ------------------------------------------------------------------------------
class NeverAnswers:
    """A minimal backend whose device_memory_info never returns (a vendor call blocked), until released."""

    name = "never"

    def __init__(self):
        self.release = threading.Event()

    def device_count(self):
        return 1

    def device_memory_info(self, device=0):
        self.release.wait()
        return MemoryInfo(free=6 * GiB, total=8 * GiB)

    def get_process_memory_usage(self, device=0):
        return None

    def is_integrated_gpu(self, device=0):
        return False

    def pages_instead_of_failing(self, device=0):
        return False


def test_an_engines_start_on_a_minimal_backend_that_never_answers_is_an_error_naming_the_call(monkeypatch):
    """Bounded by DEVMEM_READ_TIMEOUT as every reading of the command is: EngineMemory waited forever."""
    monkeypatch.setenv("DEVMEM_READ_TIMEOUT", "0.3")
    backend = NeverAnswers()
    try:
        with (
            no_hang(10),
            pytest.raises(
                devmem.DevmemError,
                match=r"never .*device_memory_info\(0\) did not answer within 0.3 s \(DEVMEM_READ_TIMEOUT\)",
            ),
        ):
            devmem.EngineMemory(0, utilization=0.5, platform=as_platform(backend), reserve=False)
    finally:
        backend.release.set()
