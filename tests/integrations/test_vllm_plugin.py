"""devmem's vLLM plugin: on each vLLM release's real classes (tests/integrations/vllm_plugin_cases.py, run once per
release in a process of its own: tests/integrations/vllm_releases.py; a release not installed is skipped with the
reason), and what needs no vLLM: the switch, the version gate, the packaging."""

from __future__ import annotations

import logging
import sys
from pathlib import Path

import pytest
import tomllib
import vllm_releases

from devmem.integrations import kit
from devmem.integrations import vllm as plugin
from devmem.integrations.vllm import worker


@pytest.mark.slow  # a vLLM import per release, each in its own process: `pytest -m slow` and CI run them
@pytest.mark.parametrize("case", vllm_releases.case_names())
@pytest.mark.parametrize("release", vllm_releases.RELEASES)
def test_on_vllm(release, case):
    vllm_releases.check(release, case)


@pytest.fixture
def vllm_log(caplog):
    """vLLM's log (its logger does not propagate to the root, where caplog listens)."""
    logger = logging.getLogger("vllm")
    if logger.propagate:  # vLLM not imported (its logging config stops the propagation): caplog has it already
        yield caplog
        return
    logger.addHandler(caplog.handler)
    yield caplog
    logger.removeHandler(caplog.handler)


def _note(version):
    return kit.version_note("vLLM", version, worker.OLDEST, worker.VERIFIED)


def test_a_release_newer_than_the_newest_verified_is_tried_with_one_line_saying_so():
    go, note = _note("0.35.1")
    assert go and note.startswith("vLLM 0.35.1 is newer than 0.34, the newest release this plugin was verified on")


def test_a_release_older_than_the_first_the_plugin_knows_is_declined():
    assert _note("0.23.2") == (
        False,
        "vLLM 0.23.2 is older than 0.24, the first release this plugin knows",
    )


def test_a_version_that_is_no_release_is_declined():
    assert _note("main") == (False, "vLLM 'main' is not a release this plugin knows")


def test_a_release_between_the_verified_ones_is_patched_without_a_line():
    assert _note("0.31.0") == (True, None)


def test_a_release_the_plugin_declines_leaves_vllm_stock_with_one_warning(monkeypatch, vllm_log):
    monkeypatch.setattr(kit.switch, "installed_version", lambda *names: "0.23.0")
    hooks = list(sys.meta_path)
    with vllm_log.at_level(logging.WARNING, logger="vllm.devmem"):
        plugin.register()
    assert sys.meta_path == hooks
    assert [r.getMessage() for r in vllm_log.records] == [
        "devmem: vLLM 0.23.0 is older than 0.24, the first release this plugin knows; vLLM sizes its KV cache itself"
    ]


def test_environment_variable_turns_the_plugin_off(monkeypatch):
    monkeypatch.setenv(plugin.ENABLE_ENV, "0")
    hooks = list(sys.meta_path)
    plugin.register()
    assert sys.meta_path == hooks


def test_pyproject_registers_the_plugin_with_vllm():
    project = tomllib.loads((Path(__file__).parents[2] / "pyproject.toml").read_text())["project"]
    assert project["entry-points"]["vllm.general_plugins"] == {"devmem": "devmem.integrations.vllm:register"}


def test_the_vllm_extra_accepts_every_release_the_plugin_knows_and_never_asks_for_an_older_one():
    project = tomllib.loads((Path(__file__).parents[2] / "pyproject.toml").read_text())["project"]
    assert project["optional-dependencies"]["vllm"] == ["vllm>=0.24"]
