"""The public surface: a narrow top level, the steps under devmem.engine and devmem.planner, and every name that
left the top level still working there with a warning naming its home."""

from __future__ import annotations

import importlib
import re
import subprocess
import sys

import pytest

import devmem
import devmem.engine
import devmem.planner
import devmem.sdk
from devmem import MOVED_NAMES


def test_the_top_level_holds_at_most_40_names():
    assert len(devmem.__all__) <= 40


@pytest.mark.parametrize("package", ["devmem.engine", "devmem.planner"])
def test_every_name_of_a_step_package_resolves(package):
    module = importlib.import_module(package)
    assert [n for n in module.__all__ if getattr(module, n, None) is None] == []


@pytest.mark.parametrize(("name", "home"), sorted(MOVED_NAMES.items()))
def test_a_name_that_left_the_top_level_warns_naming_its_home(name, home):
    with pytest.warns(DeprecationWarning, match=re.escape(f"devmem.{name} moved to {home}.{name}")):
        value = getattr(devmem, name)
    assert value is getattr(importlib.import_module(home), name)


@pytest.mark.parametrize(("name", "home"), sorted(MOVED_NAMES.items()))
def test_a_name_that_left_the_top_level_is_in_its_homes_all(name, home):
    assert name in importlib.import_module(home).__all__ and name not in devmem.__all__


def test_a_from_import_of_a_moved_name_warns_at_the_importing_line():
    code = "import warnings; warnings.simplefilter('always')\nfrom devmem import plan_kv_cache\n"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert "<string>:2: DeprecationWarning: devmem.plan_kv_cache moved to devmem.planner" in done.stderr


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
