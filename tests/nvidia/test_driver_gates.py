"""Detection reads the drivers' files before importing a vendor library: where no driver is loaded,
neither pynvml nor amdsmi is imported, and the reason says which files are missing."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from devmem.testing import Scenario
from devmem_nvidia import detect_nvml, detect_wsl2
from devmem_nvidia import driver as nvidia_driver
from devmem_nvidia.testing import h200_scenario, wsl2_scenario
from devmem_rocm import detect
from devmem_rocm import driver as amdgpu_driver
from devmem_rocm.testing import mi300x_scenario
from devmem_uma import detect_uma

NO_GPU = Scenario(devices=[])
HEAVY = ("pynvml", "amdsmi", "ctypes.util", "torch")


def imported_after(code: str) -> dict[str, bool]:
    """Run ``code`` in a fresh interpreter; which of :data:`HEAVY` it left in ``sys.modules``."""
    probe = f"import json, sys\n{code}\nprint(json.dumps({{m: m in sys.modules for m in {HEAVY!r}}}))"
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=60, check=True)
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_an_nvidia_scenario_serves_the_nvidia_driver_file():
    assert nvidia_driver.driver_loaded(h200_scenario().fs, "linux")


def test_an_amd_scenario_serves_no_nvidia_driver_file():
    assert not nvidia_driver.driver_loaded(mi300x_scenario(1).fs, "linux")


def test_wsl2_counts_as_an_nvidia_driver_through_dev_dxg():
    assert nvidia_driver.driver_loaded(wsl2_scenario().fs, "linux")


def test_windows_always_counts_as_an_nvidia_driver():
    assert nvidia_driver.driver_loaded(NO_GPU.fs, "win32")


def test_an_amd_scenario_serves_the_amdgpu_module():
    assert amdgpu_driver.driver_loaded(mi300x_scenario(1).fs)


def test_an_nvidia_scenario_has_no_amdgpu_module():
    assert not amdgpu_driver.driver_loaded(h200_scenario().fs)


def test_nvml_without_a_driver_says_which_files_are_missing():
    assert detect_nvml(files=NO_GPU.fs, system="linux").reason == nvidia_driver.NO_DRIVER


def test_wsl2_kernel_without_dev_dxg_says_no_driver():
    sc = Scenario(devices=[], files={"/proc/sys/kernel/osrelease": "5.15.167.4-microsoft-standard-WSL2\n"})
    found = detect_wsl2(files=sc.fs, system="linux")
    assert not found.detected and found.reason.endswith(nvidia_driver.NO_DRIVER)


def test_rocm_without_a_driver_says_which_files_are_missing():
    assert detect(files=h200_scenario().fs, environ={}).reason == amdgpu_driver.NO_DRIVER


def test_uma_without_any_driver_says_so():
    found = detect_uma(files=NO_GPU.fs, environ={})
    assert not found.detected and nvidia_driver.NO_DRIVER in found.reason


def test_uma_on_an_amd_machine_does_not_ask_nvml():
    from devmem_uma.testing import strix_halo_scenario

    sc = strix_halo_scenario()
    found = detect_uma(files=sc.fs, environ={})
    assert found.detected and "card" in found.reason


def test_detection_without_drivers_imports_no_vendor_library():
    code = (
        "from devmem.testing import Scenario\n"
        "from devmem_nvidia.nvml_platform import detect_nvml\n"
        "from devmem_rocm.platform import detect\n"
        "from devmem_uma.plugin import detect_uma\n"
        "fs = Scenario(devices=[]).fs\n"
        "detect_nvml(files=fs, system='linux'); detect(files=fs, environ={}); detect_uma(files=fs, environ={})"
    )
    assert not any(imported_after(code).values())


def test_resolving_on_a_machine_without_drivers_imports_no_vendor_library():
    if nvidia_driver.driver_loaded() or amdgpu_driver.driver_loaded():
        pytest.skip("a GPU driver is loaded here")
    assert not any(imported_after("import devmem; devmem.current_platform()").values())


def test_import_devmem_imports_no_sizing_profiling_or_distributed_module():
    code = (
        "import devmem\nprint(sorted(m for m in ('devmem.planner.sizing', 'devmem.engine.profiling', "
        "'devmem.engine.distributed', "
        "'fractions') if m in sys.modules))"
    )
    done = subprocess.run(
        [sys.executable, "-c", "import sys\n" + code], capture_output=True, text=True, timeout=60, check=True
    )
    assert done.stdout.strip() == "[]"


def test_lazy_names_resolve_to_their_modules_objects():
    import devmem
    from devmem.planner import sizing

    assert devmem.planner.plan_kv_cache is sizing.plan_kv_cache


def test_an_unknown_name_is_an_attribute_error():
    import devmem

    with pytest.raises(AttributeError):
        devmem.no_such_name  # noqa: B018
