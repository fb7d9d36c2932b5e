"""The kit checks a backend's hook implementations against devmem's specifications with pluggy
(devmem/testing/hooks.py), off the start-up path."""

from __future__ import annotations

import importlib
import subprocess
import sys
from types import SimpleNamespace

import pytest

import devmem
from devmem.testing import hook_problems


@pytest.mark.parametrize(
    "module",
    ["devmem.cpu", "devmem_nvidia.plugin", "devmem_nvidia.cuda_plugin", "devmem_rocm.plugin", "devmem_uma.plugin"],
)
def test_the_built_in_plugins_implement_devmems_hooks(module):
    assert hook_problems(importlib.import_module(module)) == []


def test_a_misspelled_hook_is_named():
    @devmem.hookimpl
    def devmem_platform():
        return []

    (problem,) = hook_problems(SimpleNamespace(devmem_platform=devmem_platform))
    assert "unknown hook 'devmem_platform'" in problem


def test_an_argument_the_spec_lacks_is_named():
    @devmem.hookimpl
    def devmem_platforms(config):
        return []

    (problem,) = hook_problems(SimpleNamespace(devmem_platforms=devmem_platforms))
    assert "config" in problem


def test_a_plugin_without_hooks_is_named():
    assert "implements no devmem hook" in hook_problems(SimpleNamespace(helper=lambda: None))[0]


def test_resolution_still_imports_no_pluggy():
    code = "import sys, devmem; devmem.current_platform(); print('pluggy' in sys.modules)"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "False"
