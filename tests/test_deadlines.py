"""Calls into a plugin that never return are given up on (devmem/_deadline.py): a device reading in ``devmem info``,
``doctor`` and ``top`` after ``DEVMEM_READ_TIMEOUT`` seconds, a platform's factory after ``DEVMEM_DETECT_TIMEOUT``
seconds, each with a message naming what did not answer; nothing hangs."""

from __future__ import annotations

import json
import logging
import sys
import threading
import time

import pytest
from ledger_workers import no_hang
from model_configs import QWEN3_8B
from plugin_dists import write_dist

import devmem
from devmem._deadline import Backend, Worker, bounded
from devmem.command.main import main

HANGING_READING = """
import threading
import devmem
from devmem.cpu import CpuPlatform

RELEASE = threading.Event()

class Hanging(CpuPlatform):
    name = "hanging"

    def _memory(self, device):
        RELEASE.wait()  # a vendor call that never returns
        return super()._memory(device)

@devmem.hookimpl
def devmem_platforms():
    yield devmem.PlatformSpec(name="hanging", priority=10, detect=lambda: devmem.Detection(True, "present"),
                              factory=Hanging)
"""

HANGING_FACTORY = """
import threading
import devmem
from devmem.cpu import CpuPlatform

RELEASE = threading.Event()

def build():
    RELEASE.wait()  # a factory that never returns
    return CpuPlatform()

@devmem.hookimpl
def devmem_platforms():
    yield devmem.PlatformSpec(name="stuck", priority=10, detect=lambda: devmem.Detection(True, "present"),
                              factory=build)
"""


def _release_the_hung_calls():
    """Let every hung call of the test's plugins return, so that no thread outlives its test."""
    for name, module in sys.modules.copy().items():  # a copy made at once: hung threads may still import
        if name.startswith("devmem_testdist_") and hasattr(module, "RELEASE"):
            module.RELEASE.set()


@pytest.fixture
def hanging(site, monkeypatch):
    """A platform whose memory reading never returns (released when the test ends)."""
    monkeypatch.setenv("DEVMEM_LOAD_PLUGINS", write_dist(site, "vendor-hanging", HANGING_READING))
    monkeypatch.setenv("DEVMEM_PLATFORM", "hanging")
    monkeypatch.setenv("DEVMEM_READ_TIMEOUT", "0.3")
    yield devmem.current_platform()
    _release_the_hung_calls()


@pytest.mark.parametrize(
    "command",
    [
        ["info"],
        ["info", "--json"],
        ["doctor"],
        ["doctor", "--json"],
        ["top", "--count", "1"],
        ["plan", "--page-size", "65536", "--layers", "32"],
        ["plan", "--page-size", "65536", "--layers", "32", "--json"],
    ],
)
def test_a_reading_that_never_returns_is_one_error_line_naming_the_platform_and_the_variable(hanging, capsys, command):
    with no_hang(10):
        assert main(command) == 1
    out, err = capsys.readouterr()
    assert "Traceback" not in err
    assert "error: platform 'hanging': reading device 0 did not answer within 0.3 s (DEVMEM_READ_TIMEOUT)" in err
    if "--json" in command:
        assert json.loads(out)["kind"] == "error"


@pytest.fixture
def stuck(site, monkeypatch):
    """A platform whose factory never returns (released when the test ends)."""
    monkeypatch.setenv("DEVMEM_LOAD_PLUGINS", write_dist(site, "vendor-stuck", HANGING_FACTORY))
    monkeypatch.setenv("DEVMEM_DETECT_TIMEOUT", "0.3")
    yield
    _release_the_hung_calls()


def test_a_factory_that_never_returns_passes_the_choice_on_after_the_detect_timeout(stuck, caplog):
    with no_hang(10), caplog.at_level(logging.WARNING):
        assert devmem.current_platform().name == "cpu"
    assert "platform 'stuck'" in caplog.text
    assert "factory took longer than 0.3 s (DEVMEM_DETECT_TIMEOUT)" in caplog.text


def test_a_forced_factory_that_never_returns_is_a_plugin_error_naming_the_timeout(stuck, monkeypatch):
    monkeypatch.setenv("DEVMEM_PLATFORM", "stuck")
    with no_hang(10), pytest.raises(devmem.PluginError, match=r"'stuck'.*factory took longer than 0\.3 s"):
        devmem.current_platform()


def test_a_bounded_call_gives_its_value_or_raises_what_it_raised():
    assert bounded(lambda: 42, 5, "answer") == 42
    with pytest.raises(ZeroDivisionError):
        bounded(lambda: 1 / 0, 5, "division")


def test_a_backend_call_gives_its_value_or_raises_what_it_raised():
    calls = Backend("devmem-test")
    assert calls(lambda: 42, "answer") == 42
    with pytest.raises(ZeroDivisionError):
        calls(lambda: 1 / 0, "division")


def test_an_idle_workers_thread_ends_and_the_next_call_starts_it_again():
    worker = Worker("devmem-test", idle=0.05)
    first = worker.submit(threading.current_thread)
    assert first.done_by(time.monotonic() + 5)
    first.value.join(5)
    again = worker.submit(threading.current_thread)
    assert again.done_by(time.monotonic() + 5)
    assert not first.value.is_alive() and again.value is not first.value


def test_the_read_timeout_variable_is_checked(monkeypatch, capsys):
    monkeypatch.setenv("DEVMEM_READ_TIMEOUT", "forever")
    assert main(["info"]) == 1
    assert "DEVMEM_READ_TIMEOUT='forever' is not a positive number of seconds" in capsys.readouterr().err


def test_fit_on_a_reading_that_never_returns_is_one_error_line_naming_the_variable(hanging, capsys, tmp_path):
    (tmp_path / "config.json").write_text(json.dumps(QWEN3_8B))
    with no_hang(10):
        assert main(["fit", "--model", str(tmp_path), "--context", "128", "--sequences", "1", "--json"]) == 1
    out, err = capsys.readouterr()
    assert "Traceback" not in err and "did not answer within 0.3 s (DEVMEM_READ_TIMEOUT)" in err
    assert json.loads(out)["kind"] == "error"
