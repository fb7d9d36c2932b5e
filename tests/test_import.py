"""``import devmem`` stays light: no torch, no vendor library."""

from __future__ import annotations

import json
import subprocess
import sys

HEAVY = ("torch", "pynvml", "amdsmi")


def _modules_after(code: str) -> list[str]:
    probe = f"import sys, json\n{code}\nprint(json.dumps([m for m in {HEAVY!r} if m in sys.modules]))"
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True).stdout
    return json.loads(out.strip().splitlines()[-1])


def test_import_devmem_imports_no_torch_or_vendor_library():
    assert _modules_after("import devmem") == []


def test_import_devmem_prints_nothing():
    result = subprocess.run([sys.executable, "-c", "import devmem"], capture_output=True, text=True, check=True)
    assert result.stdout == "" and result.stderr == ""


def test_import_devmem_loads_none_of_the_command_line_modules():
    cli = ("devmem.command.main", "devmem.command.format", "devmem._processes", "devmem.findings", "psutil")
    probe = f"import sys, devmem; print([m for m in {cli!r} if m in sys.modules])"
    assert subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True).stdout == "[]\n"


def test_every_name_in_every_packages_all_resolves():
    code = (
        "import importlib\n"
        "for name in ('devmem', 'devmem.testing', 'devmem_nvidia', 'devmem_rocm', 'devmem_uma'):\n"
        "    package = importlib.import_module(name)\n"
        "    missing = [n for n in package.__all__ if not hasattr(package, n)]\n"
        "    assert not missing, (name, missing)\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
