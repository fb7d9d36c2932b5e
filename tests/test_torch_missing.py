"""An install without torch: the engine API that needs it says what to install, not only a module's name."""

from __future__ import annotations

import sys

import pytest

import devmem
from devmem.engine import allocate_kv_cache
from devmem.engine._torch_device import torch_device_for
from devmem.planner import plan_kv_cache


@pytest.fixture
def without_torch(monkeypatch):
    monkeypatch.setitem(sys.modules, "torch", None)  # as where torch is not installed: its import raises


def test_allocating_a_kv_cache_without_torch_says_to_pip_install_torch(without_torch):
    plan = plan_kv_cache(pinned_bytes=4 * devmem.MiB, page_size_bytes=devmem.MiB, num_layers=1)
    with pytest.raises(ModuleNotFoundError, match=r"allocate_kv_cache needs torch.*pip install torch") as raised:
        allocate_kv_cache(plan, num_layers=1, device="cpu")
    assert raised.value.name == "torch" and 'pip install -e ".[torch]"' in str(raised.value)


def test_a_torch_device_without_torch_says_to_pip_install_torch(without_torch, monkeypatch):
    monkeypatch.setenv("DEVMEM_PLATFORM", "cpu")
    with pytest.raises(ModuleNotFoundError, match="pip install torch"):
        torch_device_for(devmem.current_platform(), 0)
