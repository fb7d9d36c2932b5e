"""Resolution of a platform from real entry points (docs/design.md, "Resolution")."""

from __future__ import annotations

import logging
import threading

import pytest
from plugin_dists import platform_dist, write_dist

import devmem


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
    assert "'nope'" in str(err.value) and "cpu (from devmem-kv)" in str(err.value)


def test_forced_platform_that_is_not_detected_says_why(site, monkeypatch):
    absent = platform_dist(site, "vendor-absent", "absent", priority=99, found=False, reason="no such card")
    only(monkeypatch, absent)
    monkeypatch.setenv("DEVMEM_PLATFORM", "absent")
    with pytest.raises(devmem.PluginError, match="not detected: no such card"):
        devmem.current_platform()


def test_forced_platform_whose_library_is_missing_says_what_to_install(site, monkeypatch):
    absent = platform_dist(site, "vendor-absent", "absent", priority=99, found=False,
                           reason="the acme driver is loaded, but acmelib is not installed",
                           action="pip install acmelib")
    only(monkeypatch, absent)
    monkeypatch.setenv("DEVMEM_PLATFORM", "absent")
    with pytest.raises(devmem.PluginError, match="acmelib is not installed. To use it: pip install acmelib."):
        devmem.current_platform()


def test_candidates_carry_what_would_make_a_platform_usable(site, monkeypatch):
    absent = platform_dist(site, "vendor-absent", "absent", priority=99, found=False,
                           reason="the acme driver is loaded, but acmelib is not installed",
                           action="pip install acmelib")
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
