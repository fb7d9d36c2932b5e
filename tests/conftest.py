"""Shared fixtures: every test starts with no forced platform, no allow-list, no cached platform, a reservation
ledger of its own, and child processes that see the terminal size ``os.environ`` says."""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path

import pytest
from hypothesis import HealthCheck, settings

import devmem

# Property tests take their example counts from a profile: "ci" (the default) keeps the whole suite within about
# two minutes on two cores; "thorough" is for hunting
# (DEVMEM_HYPOTHESIS_PROFILE=thorough pytest tests/test_properties.py).
settings.register_profile(
    "ci", max_examples=60, deadline=None, derandomize=True, database=None, suppress_health_check=[HealthCheck.too_slow]
)
settings.register_profile("thorough", max_examples=2000, deadline=None, suppress_health_check=[HealthCheck.too_slow])
settings.load_profile(os.environ.get("DEVMEM_HYPOTHESIS_PROFILE", "ci"))


@pytest.fixture(autouse=True)
def fresh_resolution(monkeypatch, tmp_path):
    monkeypatch.delenv("DEVMEM_PLATFORM", raising=False)
    monkeypatch.setenv("DEVMEM_LEDGER_DIR", str(tmp_path / "ledger"))  # never the host's reservation ledger
    monkeypatch.delenv("DEVMEM_LOAD_PLUGINS", raising=False)
    devmem.clear_cache()
    yield
    devmem.clear_cache()


@pytest.fixture(autouse=True)
def terminal_size_as_os_environ_says():
    """GNU readline, once imported (pytest's debugger and IPython import it), exports ``COLUMNS`` and ``LINES`` into
    the process's C environment, which child processes inherit, behind ``os.environ``'s back: a ``devmem`` that a
    test runs would wrap its output to 80 columns under a terminal's ``TERM`` and not in CI. Children see what
    ``os.environ`` says."""
    for name in ("COLUMNS", "LINES"):
        if name not in os.environ:
            os.unsetenv(name)


@pytest.fixture
def site(tmp_path, monkeypatch):
    """A directory on sys.path where tests install throwaway distributions (see tests/plugin_dists.py)."""
    path = tmp_path / "site"
    path.mkdir()
    monkeypatch.syspath_prepend(str(path))
    return path


@pytest.fixture
def sticky():
    """A ledger directory as /dev/shm/devmem is: mode 1777, reachable by every user (pytest's are root's own)."""
    directory = Path(tempfile.mkdtemp(prefix="devmem-ledger-"))
    directory.chmod(0o1777)
    yield directory
    shutil.rmtree(directory)
