"""The public surface: a narrow top level, and the steps under devmem.engine and devmem.planner (reached there, not
from the top level)."""

from __future__ import annotations

import importlib
import subprocess
import sys

import pytest

import devmem
import devmem.engine
import devmem.planner
import devmem.sdk


def test_the_top_level_holds_at_most_40_names():
    assert len(devmem.__all__) <= 40


@pytest.mark.parametrize("package", ["devmem.engine", "devmem.planner"])
def test_every_name_of_a_step_package_resolves(package):
    module = importlib.import_module(package)
    assert [n for n in module.__all__ if getattr(module, n, None) is None] == []


@pytest.mark.parametrize("name", ["plan_kv_cache", "MemorySnapshot", "DeviceMemory"])
def test_a_name_of_a_step_package_is_no_attribute_of_the_top_level(name):
    with pytest.raises(AttributeError, match=f"module 'devmem' has no attribute '{name}'"):
        getattr(devmem, name)


def test_a_public_name_warns_nothing():
    code = "import warnings; warnings.simplefilter('error')\nfrom devmem import EngineMemory, reserve, device_report\n"
    subprocess.run([sys.executable, "-c", code], check=True)


def test_the_step_packages_load_none_of_their_modules_on_import():
    code = (
        "import sys, devmem.engine, devmem.planner; "
        "print(sorted(m for m in sys.modules if m.startswith(('devmem.engine.', 'devmem.planner.'))))"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "[]"


def test_the_subpackages_are_attributes_of_devmem():
    assert (devmem.engine, devmem.planner, devmem.sdk) == (
        sys.modules["devmem.engine"],
        sys.modules["devmem.planner"],
        sys.modules["devmem.sdk"],
    )
