"""Resolution of a platform from real entry points (devmem/resolution/plugins.py, devmem/resolution/discovery.py)."""

from __future__ import annotations

import logging
import os
import signal
import subprocess
import sys
import threading
import time

import pytest
from plugin_dists import memory_dist, platform_dist, write_dist

import devmem
from devmem.sdk.lazy import DriverGate, deferred, gated_detect
from devmem.types import MiB


def only(monkeypatch, *entries: str) -> None:
    monkeypatch.setenv("DEVMEM_LOAD_PLUGINS", ",".join(entries))


def test_highest_priority_detected_platform_wins(site, monkeypatch):
    low = platform_dist(site, "vendor-low", "low", priority=10)
    high = platform_dist(site, "vendor-high", "high", priority=20)
    only(monkeypatch, low, high)
    assert devmem.current_platform().name == "high"


def test_undetected_platform_is_not_chosen(site, monkeypatch):
    absent = platform_dist(site, "vendor-absent", "absent", priority=99, found=False, reason="no such card")
    only(monkeypatch, absent)
    assert devmem.current_platform().name == "cpu"


def test_tie_between_detected_platforms_names_both_providers(site, monkeypatch):
    a = platform_dist(site, "vendor-a", "alpha", priority=50)
    b = platform_dist(site, "vendor-b", "beta", priority=50)
    only(monkeypatch, a, b)
    with pytest.raises(devmem.PluginError) as err:
        devmem.current_platform()
    assert "vendor-a" in str(err.value) and "vendor-b" in str(err.value)
    assert "DEVMEM_PLATFORM" in str(err.value)


def test_devmem_platform_forces_a_lower_priority_platform(site, monkeypatch):
    high = platform_dist(site, "vendor-high", "high", priority=20)
    only(monkeypatch, high)
    monkeypatch.setenv("DEVMEM_PLATFORM", "cpu")
    assert devmem.current_platform().name == "cpu"


def test_unknown_forced_platform_lists_registered_names(monkeypatch):
    monkeypatch.setenv("DEVMEM_PLATFORM", "nope")
    with pytest.raises(devmem.PluginError) as err:
        devmem.current_platform()
    assert "'nope'" in str(err.value) and "(cpu, " in str(err.value) and "devmem plugins" in str(err.value)


def test_forced_platform_that_is_not_detected_says_why(site, monkeypatch):
    absent = platform_dist(site, "vendor-absent", "absent", priority=99, found=False, reason="no such card")
    only(monkeypatch, absent)
    monkeypatch.setenv("DEVMEM_PLATFORM", "absent")
    with pytest.raises(devmem.PluginError, match="not detected: no such card"):
        devmem.current_platform()


def test_forced_platform_whose_library_is_missing_says_what_to_install(site, monkeypatch):
    absent = platform_dist(
        site,
        "vendor-absent",
        "absent",
        priority=99,
        found=False,
        reason="the acme driver is loaded, but acmelib is not installed",
        action="pip install acmelib",
    )
    only(monkeypatch, absent)
    monkeypatch.setenv("DEVMEM_PLATFORM", "absent")
    with pytest.raises(devmem.PluginError, match="acmelib is not installed. To use it: pip install acmelib."):
        devmem.current_platform()


def test_candidates_carry_what_would_make_a_platform_usable(site, monkeypatch):
    absent = platform_dist(
        site,
        "vendor-absent",
        "absent",
        priority=99,
        found=False,
        reason="the acme driver is loaded, but acmelib is not installed",
        action="pip install acmelib",
    )
    only(monkeypatch, absent)
    (cand,) = [c for c in devmem.platform_candidates() if c.name == "absent"]
    assert (cand.detected, cand.action) == (False, "pip install acmelib")


def test_allow_list_excludes_other_plugins_but_keeps_cpu(site, monkeypatch):
    platform_dist(site, "vendor-high", "high", priority=20)
    monkeypatch.setenv("DEVMEM_LOAD_PLUGINS", "something-else")
    assert [c.name for c in devmem.platform_candidates()] == ["cpu"]


def _one_warning(caplog, *needles: str) -> None:
    records = [r for r in caplog.records if r.name.startswith("devmem") and r.levelno >= logging.WARNING]
    assert len(records) == 1, [r.getMessage() for r in records]
    for needle in needles:
        assert needle in records[0].getMessage()


def test_plugin_whose_import_raises_is_skipped_with_one_log_line(site, monkeypatch, caplog):
    broken = write_dist(site, "vendor-broken", "raise RuntimeError('vendor library exploded')\n")
    only(monkeypatch, broken)
    assert devmem.current_platform().name == "cpu"
    _one_warning(caplog, repr(broken), "'vendor-broken'", "vendor library exploded")


def test_plugin_whose_detect_raises_is_skipped_with_one_log_line(site, monkeypatch, caplog):
    body = """
    import devmem
    def boom():
        raise OSError("driver not loaded")
    @devmem.hookimpl
    def devmem_platforms():
        yield devmem.PlatformSpec(name="flaky", priority=50, detect=boom, factory=object)
    """
    flaky = write_dist(site, "vendor-flaky", body)
    only(monkeypatch, flaky)
    assert devmem.current_platform().name == "cpu"
    _one_warning(caplog, "'flaky'", "'vendor-flaky'", "driver not loaded")
    flaky_candidate = next(c for c in devmem.platform_candidates() if c.name == "flaky")
    assert not flaky_candidate.detected and "driver not loaded" in flaky_candidate.reason


@pytest.mark.parametrize("stage", ["detect", "factory"])
def test_a_plugin_raising_an_exception_whose_text_cannot_be_read_is_skipped_with_one_log_line(
    site, monkeypatch, caplog, stage
):
    body = f"""
    import devmem
    class Unreadable(Exception):
        def __str__(self):
            raise RuntimeError("no text")
    def boom():
        raise Unreadable()
    @devmem.hookimpl
    def devmem_platforms():
        yield devmem.PlatformSpec(name="mute", priority=50,
                                  detect={"boom" if stage == "detect" else 'lambda: devmem.Detection(True, "present")'},
                                  factory={"boom" if stage == "factory" else "object"})
    """
    only(monkeypatch, write_dist(site, "vendor-mute", body))
    assert devmem.current_platform().name == "cpu"
    _one_warning(caplog, "'mute'", "Unreadable: (its text could not be read: RuntimeError)")


def test_plugin_yielding_a_wrong_type_is_skipped_with_one_log_line(site, monkeypatch, caplog):
    body = """
    import devmem
    @devmem.hookimpl
    def devmem_platforms():
        yield {"name": "dicty", "priority": 50}
    """
    dicty = write_dist(site, "vendor-dicty", body)
    only(monkeypatch, dicty)
    assert devmem.current_platform().name == "cpu"
    _one_warning(caplog, repr(dicty), "'vendor-dicty'", "not a devmem.PlatformSpec")


def test_platform_whose_factory_raises_falls_back_to_the_next(site, monkeypatch, caplog):
    body = """
    import devmem
    def build():
        raise RuntimeError("cannot open device")
    @devmem.hookimpl
    def devmem_platforms():
        yield devmem.PlatformSpec(name="fragile", priority=50,
                                  detect=lambda: devmem.Detection(True, "present"), factory=build)
    """
    fragile = write_dist(site, "vendor-fragile", body)
    only(monkeypatch, fragile)
    assert devmem.current_platform().name == "cpu"
    _one_warning(caplog, "'fragile'", "cannot open device")


def test_candidates_report_distribution_version_and_choice(site, monkeypatch):
    high = platform_dist(site, "vendor-high", "high", priority=20)
    only(monkeypatch, high)
    cands = {c.name: c for c in devmem.platform_candidates()}
    assert cands["high"].distribution == "vendor-high" and cands["high"].version == "1.0"
    assert cands["high"].chosen and not cands["cpu"].chosen
    assert cands["cpu"].detected and cands["cpu"].reason


def test_current_platform_is_cached(site, monkeypatch):
    first = devmem.current_platform()
    assert devmem.current_platform() is first


def test_current_platform_resolves_once_under_concurrent_first_calls():
    results: list[object] = []
    barrier = threading.Barrier(8)

    def call():
        barrier.wait()
        results.append(devmem.current_platform())

    threads = [threading.Thread(target=call) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len({id(p) for p in results}) == 1


def test_detection_rejects_an_action_that_is_not_text():
    with pytest.raises(TypeError, match="Detection.action must be a string, got None"):
        devmem.Detection(False, "library missing", action=None)


def test_platform_spec_rejects_a_bad_name():
    with pytest.raises(ValueError, match="'Bad Name'"):
        devmem.PlatformSpec(name="Bad Name", priority=1, detect=lambda: None, factory=object)


# ---- two distributions providing the same platform name ---------------------------------------------------------


def test_same_platform_name_resolves_to_the_higher_priority_distribution_and_its_memory(site, monkeypatch):
    low, _ = memory_dist(site, "alpha-vendor", "dup", priority=10, total=1000 * MiB)  # first on sys.path
    high, _ = memory_dist(site, "zeta-vendor", "dup", priority=90, total=9000 * MiB)
    only(monkeypatch, low, high)
    platform = devmem.current_platform()
    assert platform.device_memory_info(0).total == 9000 * MiB
    assert platform.memory_sources(0) == {"total": "zeta-vendor"}


def test_lower_priority_duplicate_factory_is_never_called(site, monkeypatch):
    low, low_calls = memory_dist(site, "alpha-vendor", "dup", priority=10, total=1000 * MiB)
    high, high_calls = memory_dist(site, "zeta-vendor", "dup", priority=90, total=9000 * MiB)
    only(monkeypatch, low, high)
    devmem.current_platform()
    assert "factory" not in low_calls.read_text() and "factory" in high_calls.read_text()


def test_undetected_higher_priority_duplicate_leaves_the_name_to_the_detected_one(site, monkeypatch):
    low, _ = memory_dist(site, "alpha-vendor", "dup", priority=10, total=1000 * MiB)
    high, high_calls = memory_dist(site, "zeta-vendor", "dup", priority=90, total=9000 * MiB, found=False)
    only(monkeypatch, low, high)
    assert devmem.current_platform().device_memory_info(0).total == 1000 * MiB
    assert "factory" not in high_calls.read_text()


def test_forced_duplicate_name_builds_the_higher_priority_distribution(site, monkeypatch):
    low, _ = memory_dist(site, "alpha-vendor", "dup", priority=10, total=1000 * MiB)
    high, _ = memory_dist(site, "zeta-vendor", "dup", priority=90, total=9000 * MiB)
    only(monkeypatch, low, high)
    monkeypatch.setenv("DEVMEM_PLATFORM", "dup")
    assert devmem.current_platform().device_memory_info(0).total == 9000 * MiB


def test_same_platform_name_at_equal_priority_is_an_error_naming_both_distributions(site, monkeypatch):
    a, _ = memory_dist(site, "alpha-vendor", "dup", priority=50, total=1000 * MiB)
    b, _ = memory_dist(site, "zeta-vendor", "dup", priority=50, total=9000 * MiB)
    only(monkeypatch, a, b)
    with pytest.raises(
        devmem.PluginError, match="'dup' is provided with priority 50 by 'alpha-vendor' and 'zeta-vendor'"
    ):
        devmem.current_platform()


def test_candidates_list_both_providers_of_a_name_and_which_one_wins(site, monkeypatch):
    low, _ = memory_dist(site, "alpha-vendor", "dup", priority=10, total=1000 * MiB)
    high, _ = memory_dist(site, "zeta-vendor", "dup", priority=90, total=9000 * MiB)
    only(monkeypatch, low, high)
    dups = {c.distribution: c for c in devmem.platform_candidates() if c.name == "dup"}
    assert set(dups) == {"alpha-vendor", "zeta-vendor"}
    assert dups["zeta-vendor"].chosen and not dups["alpha-vendor"].chosen
    assert "alpha-vendor" in dups["zeta-vendor"].note and "this one wins" in dups["zeta-vendor"].note
    assert "zeta-vendor" in dups["alpha-vendor"].note and "priority 90" in dups["alpha-vendor"].note


# ---- the allow-list ---------------------------------------------------------------------------------------------


def test_allow_list_accepts_a_platform_name(site, monkeypatch):
    platform_dist(site, "vendor-high", "high", priority=20)
    monkeypatch.setenv("DEVMEM_LOAD_PLUGINS", "high")
    assert devmem.current_platform().name == "high"


def test_allow_list_naming_one_platform_leaves_out_its_plugins_other_platforms(site, monkeypatch):
    body = """
    import devmem
    from devmem.cpu import CpuPlatform
    class One(CpuPlatform):
        name = "one"
    @devmem.hookimpl
    def devmem_platforms():
        yield devmem.PlatformSpec(name="one", priority=10, detect=lambda: devmem.Detection(True, "here"), factory=One)
        yield devmem.PlatformSpec(name="two", priority=20, detect=lambda: devmem.Detection(True, "here"),
                                  factory=CpuPlatform)
    """
    write_dist(site, "vendor-pair", body)
    monkeypatch.setenv("DEVMEM_LOAD_PLUGINS", "one")
    assert [c.name for c in devmem.platform_candidates()] == ["one", "cpu"]
    assert devmem.current_platform().name == "one"


def test_allow_list_warns_about_a_name_it_does_not_know_with_the_known_names(site, monkeypatch, caplog):
    entry = platform_dist(site, "vendor-high", "high", priority=20)
    monkeypatch.setenv("DEVMEM_LOAD_PLUGINS", "nope")
    assert devmem.current_platform().name == "cpu"
    _one_warning(caplog, "'nope'", "neither a plugin nor a platform", entry, "high")


def test_forced_platform_excluded_by_the_allow_list_says_it_is_excluded(site, monkeypatch):
    entry = platform_dist(site, "vendor-high", "high", priority=20)
    monkeypatch.setenv("DEVMEM_LOAD_PLUGINS", "cpu")
    monkeypatch.setenv("DEVMEM_PLATFORM", "high")
    with pytest.raises(devmem.PluginError, match="DEVMEM_LOAD_PLUGINS='cpu' excludes") as err:
        devmem.current_platform()
    assert entry in str(err.value) and "Install the backend" not in str(err.value)


# ---- detection: once per process, bounded in time ---------------------------------------------------------------


def test_detection_runs_once_for_the_platform_and_the_candidate_list(site, monkeypatch):
    entry, calls = memory_dist(site, "vendor-counted", "counted", priority=20, total=1000 * MiB)
    only(monkeypatch, entry)
    devmem.current_platform()
    devmem.platform_candidates()
    devmem.platform_candidates()
    assert calls.read_text().splitlines().count("detect") == 1


SLOW_DETECT = """
import threading
import devmem
from devmem.cpu import CpuPlatform
RELEASE = threading.Event()
def detect():
    RELEASE.wait(10)
    return devmem.Detection(True, "slow but here")
@devmem.hookimpl
def devmem_platforms():
    yield devmem.PlatformSpec(name="slow", priority=50, detect=detect, factory=CpuPlatform)
"""


def test_slow_detect_counts_as_not_detected_after_the_timeout(site, monkeypatch):
    only(monkeypatch, write_dist(site, "vendor-slow", SLOW_DETECT))
    monkeypatch.setenv("DEVMEM_DETECT_TIMEOUT", "0.2")
    start = time.monotonic()
    try:
        cands = {c.name: c for c in devmem.platform_candidates()}
        elapsed = time.monotonic() - start
    finally:
        sys.modules[[m for m in sys.modules if m.startswith("devmem_testdist_")][-1]].RELEASE.set()
    assert elapsed < 5
    assert not cands["slow"].detected and cands["slow"].reason.startswith("detection took longer than 0.2 s")
    assert cands["cpu"].chosen


@pytest.mark.parametrize("value", ["soon", "0", "-1", "inf", "nan"])
def test_detect_timeout_that_is_not_a_positive_number_is_an_error_naming_it(monkeypatch, value):
    monkeypatch.setenv("DEVMEM_DETECT_TIMEOUT", value)
    with pytest.raises(devmem.PluginError, match=f"DEVMEM_DETECT_TIMEOUT='{value}' is not a positive number"):
        devmem.current_platform()


# ---- a plugin's BaseException -----------------------------------------------------------------------------------


def test_plugin_raising_system_exit_at_import_is_skipped_with_one_log_line(site, monkeypatch, caplog):
    only(monkeypatch, write_dist(site, "vendor-exit", "raise SystemExit(3)\n"))
    assert devmem.current_platform().name == "cpu"
    _one_warning(caplog, "'vendor-exit'", "SystemExit")


def test_plugin_raising_system_exit_in_detect_is_skipped_with_one_log_line(site, monkeypatch, caplog):
    body = """
    import sys
    import devmem
    @devmem.hookimpl
    def devmem_platforms():
        yield devmem.PlatformSpec(name="quitter", priority=50, detect=lambda: sys.exit(3), factory=object)
    """
    only(monkeypatch, write_dist(site, "vendor-quitter", body))
    cands = {c.name: c for c in devmem.platform_candidates()}
    assert not cands["quitter"].detected and "SystemExit" in cands["quitter"].reason
    _one_warning(caplog, "'quitter'", "'vendor-quitter'", "SystemExit")


def test_plugin_raising_system_exit_in_its_factory_passes_the_choice_on(site, monkeypatch, caplog):
    body = """
    import sys
    import devmem
    @devmem.hookimpl
    def devmem_platforms():
        yield devmem.PlatformSpec(name="quitter", priority=50, detect=lambda: devmem.Detection(True, "here"),
                                  factory=lambda: sys.exit(3))
    """
    only(monkeypatch, write_dist(site, "vendor-quitter", body))
    assert devmem.current_platform().name == "cpu"
    _one_warning(caplog, "'quitter'", "SystemExit")


def test_keyboard_interrupt_in_detect_reaches_the_caller(site, monkeypatch):
    body = """
    import devmem
    def detect():
        raise KeyboardInterrupt
    @devmem.hookimpl
    def devmem_platforms():
        yield devmem.PlatformSpec(name="interrupted", priority=50, detect=detect, factory=object)
    """
    only(monkeypatch, write_dist(site, "vendor-interrupted", body))
    with pytest.raises(KeyboardInterrupt):
        devmem.current_platform()


def test_misspelt_hook_is_reported_with_the_known_hooks(site, monkeypatch, caplog):
    body = """
    import devmem
    @devmem.hookimpl
    def devmem_platfroms():
        yield devmem.PlatformSpec(name="typo", priority=50, detect=lambda: devmem.Detection(True, "x"), factory=object)
    """
    only(monkeypatch, write_dist(site, "vendor-typo", body))
    assert devmem.current_platform().name == "cpu"
    _one_warning(caplog, "'devmem_platfroms'", "devmem_platforms")


# ---- fork -------------------------------------------------------------------------------------------------------

BLOCKING_DETECT = """
import threading
import devmem
from devmem.cpu import CpuPlatform
ENTERED = threading.Event()
RELEASE = threading.Event()
class Gate(CpuPlatform):
    name = "gate"
def detect():
    if not ENTERED.is_set():  # the parent's first detection blocks; the forked child's does not
        ENTERED.set()
        RELEASE.wait(30)
    return devmem.Detection(True, "here")
@devmem.hookimpl
def devmem_platforms():
    yield devmem.PlatformSpec(name="gate", priority=50, detect=detect, factory=Gate)
"""


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork()")
def test_child_forked_while_another_thread_resolves_resolves_on_its_own(site, monkeypatch):
    entry = write_dist(site, "vendor-gate", BLOCKING_DETECT)
    only(monkeypatch, entry)
    resolver = threading.Thread(target=devmem.current_platform, daemon=True)
    resolver.start()
    gate, reached_by = None, time.monotonic() + 30  # a loaded machine imports slowly: a bound, not a timing
    while time.monotonic() < reached_by:
        gate = next(
            (
                m
                for name, m in sys.modules.copy().items()  # a copy made at once: another thread imports
                if name.startswith("devmem_testdist_") and hasattr(m, "ENTERED") and m.ENTERED.is_set()
            ),
            None,
        )
        if gate is not None:
            break
        time.sleep(0.01)
    assert gate is not None, "the resolving thread never reached detection"
    pid = os.fork()
    if pid == 0:  # the child: resolve, report by exit status, never return into pytest
        code = 1
        try:
            code = 0 if devmem.current_platform().name == "gate" else 2
        finally:
            os._exit(code)
    try:
        deadline = time.monotonic() + 20
        status = None
        while time.monotonic() < deadline:
            done, status = os.waitpid(pid, os.WNOHANG)
            if done:
                break
            time.sleep(0.05)
        else:
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
            pytest.fail("the forked child did not resolve within 20 s: it waited on the parent's resolution lock")
        assert os.waitstatus_to_exitcode(status) == 0
    finally:
        gate.RELEASE.set()
        resolver.join(10)


# ---- cost ---------------------------------------------------------------------------------------------------------


def test_resolution_imports_no_plugin_framework():
    probe = "import sys, devmem; devmem.current_platform(); print('pluggy' in sys.modules)"
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "False"


# ---- registration helpers every backend's plugin module uses ----------------------------------------------------


def test_gated_detect_answers_the_absent_reason_without_importing_the_probe():
    detect = gated_detect(lambda: False, "no driver here", "devmem_no_such_module:probe")
    assert detect() == devmem.Detection(False, "no driver here")


def test_gated_detect_asks_the_probe_where_the_check_passes(site):
    (site / "devmem_gate_probe.py").write_text(
        "import devmem\ndef probe():\n    return devmem.Detection(True, 'card')\n"
    )
    assert gated_detect(lambda: True, "absent", "devmem_gate_probe:probe")() == devmem.Detection(True, "card")


def test_deferred_factory_imports_its_target_only_when_called(site):
    (site / "devmem_deferred_target.py").write_text("class Built:\n    pass\n")
    factory = deferred("devmem_deferred_target:Built")
    assert "devmem_deferred_target" not in sys.modules
    assert type(factory()).__name__ == "Built"


def test_a_platform_behind_a_driver_gate_imports_nothing_while_the_driver_is_absent():
    gate = DriverGate(lambda: False, "no acme driver", ("libacme",))
    spec = gate.spec("acme", 70, "devmem_no_such_module:probe", "devmem_no_such_module:Acme", "ACME cards")
    assert (spec.name, spec.priority, spec.description, spec.runtime_markers) == (
        "acme",
        70,
        "ACME cards",
        ("libacme",),
    )
    assert spec.detect() == devmem.Detection(False, "no acme driver")


def test_a_platform_behind_a_driver_gate_asks_its_probe_and_builds_where_the_driver_is_present(site):
    (site / "devmem_gated_acme.py").write_text(
        "import devmem\ndef probe():\n    return devmem.Detection(True, 'card')\nclass Acme:\n    pass\n"
    )
    spec = DriverGate(lambda: True, "absent").spec("acme", 70, "devmem_gated_acme:probe", "devmem_gated_acme:Acme", "")
    assert spec.detect() == devmem.Detection(True, "card")
    assert type(spec.factory()).__name__ == "Acme"


def test_plugin_marked_with_pluggys_own_marker_is_a_devmem_plugin(site, monkeypatch):
    """devmem's markers are pluggy's protocol under the project name ``devmem``: a plugin written for pluggy
    (``pluggy.HookimplMarker("devmem")``) is found and resolved like one using ``devmem.hookimpl``."""
    body = """
    import pluggy
    import devmem
    from devmem.cpu import CpuPlatform

    hookimpl = pluggy.HookimplMarker("devmem")

    class PluggyPlatform(CpuPlatform):
        name = "viapluggy"

    @hookimpl
    def devmem_platforms():
        yield devmem.PlatformSpec(name="viapluggy", priority=60, description="written for pluggy",
                                  detect=lambda: devmem.Detection(True, "always"), factory=PluggyPlatform)
    """
    only(monkeypatch, write_dist(site, "vendor-pluggy", body))
    assert devmem.current_platform().name == "viapluggy"


def test_devmem_hookspecs_validate_under_a_pluggy_plugin_manager():
    """The hook specs are a pluggy spec module: a PluginManager("devmem") accepts them and a devmem-marked
    implementation, and calls it."""
    import pluggy

    from devmem import _hookspecs as hookspecs

    pm = pluggy.PluginManager("devmem")
    pm.add_hookspecs(hookspecs)

    class Plugin:
        @devmem.hookimpl
        def devmem_platforms(self):
            return []

    pm.register(Plugin())
    assert pm.hook.devmem_platforms() == [[]]
