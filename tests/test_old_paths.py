"""Modules that moved into subpackages keep their old import paths: the same module object, with a warning."""

from __future__ import annotations

import importlib
import subprocess
import sys

import pytest

from devmem._old_paths import MOVED


@pytest.mark.parametrize(("old", "new"), sorted(MOVED.items()))
def test_old_path_is_the_module_of_its_new_home(old, new):
    sys.modules.pop(old, None)
    with pytest.warns(DeprecationWarning, match=new.replace(".", r"\.")):
        module = importlib.import_module(old)
    assert module is importlib.import_module(new)


def test_an_old_path_in_a_from_import_works_in_a_fresh_interpreter():
    code = (
        "from devmem.cli import main; "
        "from devmem.sizing import plan_kv_cache; import devmem.host as h; print(h.__name__)"
    )
    done = subprocess.run([sys.executable, "-W", "ignore", "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "devmem.cpu"


def test_a_path_that_never_existed_is_still_an_import_error():
    with pytest.raises(ModuleNotFoundError):
        importlib.import_module("devmem.no_such_module")


@pytest.mark.parametrize("path", ["devmem.sessions", "devmem.readings", "devmem.parsing", "devmem.engine_memory"])
def test_a_module_added_after_0_1_0_has_no_old_path(path):
    sys.modules.pop(path, None)
    with pytest.raises(ModuleNotFoundError):
        importlib.import_module(path)
