"""Shared fixtures: every test starts with no forced platform, no allow-list and no cached platform."""

from __future__ import annotations

import pytest

import devmem


@pytest.fixture(autouse=True)
def fresh_resolution(monkeypatch):
    monkeypatch.delenv("DEVMEM_PLATFORM", raising=False)
    monkeypatch.delenv("DEVMEM_LOAD_PLUGINS", raising=False)
    devmem.clear_cache()
    yield
    devmem.clear_cache()


@pytest.fixture
def site(tmp_path, monkeypatch):
    """A directory on sys.path where tests install throwaway distributions (see tests/plugin_dists.py)."""
    path = tmp_path / "site"
    path.mkdir()
    monkeypatch.syspath_prepend(str(path))
    return path
