"""A backend whose driver is loaded but whose Python library is missing says exactly what to install.

The library is made missing at the vendor boundary (``sys.modules[name] = None``, which makes its import fail as
an absent package's does) in a fresh interpreter, since each library is imported once per process. The driver is
present through scripted files, or, for the commands, through a real ``/sys/module/amdgpu`` or
``/proc/driver/nvidia`` made in a private mount namespace.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import textwrap

import pytest

from devmem_nvidia.nvml_access import INSTALL_PYNVML
from devmem_rocm.smi import ROCM_OWN_AMDSMI

AMDSMI_FIX = "pip install amdsmi"


def _env() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if k not in ("DEVMEM_PLATFORM", "DEVMEM_LOAD_PLUGINS")}


def _python(code: str, missing: str) -> str:
    """``code``'s stdout, run in a fresh interpreter where the module ``missing`` cannot be imported."""
    script = f"import sys; sys.modules[{missing!r}] = None\n" + textwrap.dedent(code)
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, env=_env(), timeout=120)
    assert done.returncode == 0, done.stderr
    return done.stdout


def _mount_namespaces_work() -> bool:
    if shutil.which("unshare") is None:
        return False
    return subprocess.run(["unshare", "-m", "true"], capture_output=True, timeout=30).returncode == 0


needs_mount_namespace = pytest.mark.skipif(
    not _mount_namespaces_work(), reason="needs `unshare -m` (root, or unprivileged user namespaces)"
)


def _command(args: list[str], driver_dir: str, missing: str, exit_code: int = 0) -> str:
    """``devmem ARGS``'s stdout where the directory ``driver_dir`` exists (a tmpfs mounted on its parent in a
    private mount namespace) and the module ``missing`` cannot be imported; it must exit with ``exit_code``."""
    parent = os.path.dirname(driver_dir)
    code = (
        f"import sys; sys.modules[{missing!r}] = None; from devmem.command.main import main; sys.exit(main({args!r}))"
    )
    shell = f'mount -t tmpfs devmem-test "{parent}" && mkdir "{driver_dir}" && exec "$0" -c "$1"'
    done = subprocess.run(
        ["unshare", "-m", "sh", "-c", shell, sys.executable, code],
        capture_output=True,
        text=True,
        env={**_env(), "COLUMNS": "1000"},
        timeout=120,
    )
    assert done.returncode == exit_code, done.stdout + done.stderr
    return done.stdout


def test_rocm_with_the_amdgpu_driver_and_no_amdsmi_says_what_to_install():
    found = json.loads(
        _python(
            """
        import json
        from devmem_rocm.testing import mi300x_scenario
        from devmem_rocm.platform import detect
        found = detect(files=mi300x_scenario(1).fs, environ={})
        print(json.dumps([found.detected, found.reason, found.action]))
    """,
            missing="amdsmi",
        )
    )
    assert found[:2] == [False, "the amdgpu driver is loaded, but the Python package amdsmi is not installed"]
    assert AMDSMI_FIX in found[2] and f"pip install {ROCM_OWN_AMDSMI}" in found[2]


def test_rocm_without_the_amdgpu_driver_never_asks_for_amdsmi():
    found = json.loads(
        _python(
            """
        import json
        from devmem.testing import Scenario
        from devmem_rocm.platform import detect
        found = detect(files=Scenario().fs, environ={})
        print(json.dumps([found.detected, found.action]))
    """,
            missing="amdsmi",
        )
    )
    assert found == [False, ""]


def test_nvml_with_the_nvidia_driver_and_no_pynvml_says_what_to_install():
    found = json.loads(
        _python(
            """
        import json
        from devmem_nvidia.testing import h200_scenario
        from devmem_nvidia.nvml_platform import detect_nvml
        found = detect_nvml(files=h200_scenario().fs, system="linux")
        print(json.dumps([found.detected, found.reason, found.action]))
    """,
            missing="pynvml",
        )
    )
    assert found == [
        False,
        "an NVIDIA driver is loaded, but the Python package nvidia-ml-py (module pynvml) is not installed",
        INSTALL_PYNVML,
    ]


@needs_mount_namespace
def test_plugins_command_says_what_to_install_where_amdgpu_is_loaded_without_amdsmi():
    rows = json.loads(_command(["plugins", "--json"], "/sys/module/amdgpu", missing="amdsmi"))
    (rocm,) = [row for row in rows if row["name"] == "rocm"]
    assert not rocm["detected"] and AMDSMI_FIX in rocm["action"]
    text = _command(["plugins"], "/sys/module/amdgpu", missing="amdsmi")
    assert f"amdsmi is not installed; to use it: pip install {ROCM_OWN_AMDSMI}" in text


@needs_mount_namespace
def test_doctor_warns_and_says_what_to_install_where_amdgpu_is_loaded_without_amdsmi():
    report = json.loads(_command(["doctor", "--json"], "/sys/module/amdgpu", missing="amdsmi", exit_code=1))
    (finding,) = [f for f in report["findings"] if f["kind"] == "platform-unusable"]
    assert finding["device"] is None and finding["severity"] == "warning"
    assert finding["summary"] == (
        "platform 'rocm' (from devmem-kv) cannot be used: the amdgpu driver is loaded, "
        "but the Python package amdsmi is not installed"
    )
    assert AMDSMI_FIX in finding["action"]


@needs_mount_namespace
def test_plugins_command_says_what_to_install_where_the_nvidia_driver_is_loaded_without_pynvml():
    rows = json.loads(_command(["plugins", "--json"], "/proc/driver/nvidia", missing="pynvml"))
    (nvml,) = [row for row in rows if row["name"] == "nvml"]
    assert not nvml["detected"] and nvml["action"] == INSTALL_PYNVML
