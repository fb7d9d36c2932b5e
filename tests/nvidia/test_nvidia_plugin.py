"""Registration and detection of the NVIDIA platforms."""

from __future__ import annotations

import json
import subprocess
import sys

from devmem import GiB
from devmem.testing import Scenario
from devmem_nvidia import detect_nvml, plugin
from devmem_nvidia.testing import ScriptedNvidiaDriver, ScriptedNvidiaGpu, ScriptedNvml, h200_scenario
from devmem_rocm.testing import mi300x

GB10 = ScriptedNvidiaGpu(
    name="NVIDIA GB10",
    total=128 * GiB,
    reserved=0,
    integrated=True,
    compute_capability=(12, 1),
    uuid="GPU-0e1f2a3b-4c5d-4e6f-8a7b-9c0d1e2f3a4b",
    pci_bus_id="0000000F:01:00.0",
)


def specs():
    return {s.name: s for s in plugin.devmem_platforms()}


def test_nvml_has_priority_100():
    assert specs()["nvml"].priority == 100


def test_wsl2_outranks_nvml():
    assert specs()["wsl2"].priority == 150 > specs()["nvml"].priority


def test_discrete_h200_is_detected():
    assert detect_nvml(ScriptedNvml(h200_scenario())).detected


def test_detection_names_the_driver():
    assert "580.159.04" in detect_nvml(ScriptedNvml(h200_scenario())).reason


def test_missing_library_is_not_detected():
    sc = h200_scenario()
    sc.driver(ScriptedNvidiaDriver).libraries.discard("nvml")
    detection = detect_nvml(ScriptedNvml(sc))
    assert not detection.detected and "LibraryNotFound" in detection.reason


def test_no_nvidia_device_is_not_detected():
    assert not detect_nvml(ScriptedNvml(Scenario(devices=[mi300x()]))).detected


def test_integrated_gb10_is_left_to_uma():
    detection = detect_nvml(ScriptedNvml(Scenario(devices=[GB10])))
    assert not detection.detected and detection.reason.startswith("integrated: left to the uma platform")


def test_detection_creates_no_context_and_imports_nothing_heavy():
    code = (
        "import json, sys; from devmem_nvidia import plugin; "
        "[s.detect() for s in plugin.devmem_platforms()]; "
        "print(json.dumps({m: m in sys.modules for m in ('torch', 'pynvml')}))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert json.loads(out)["torch"] is False


def test_plugin_import_loads_no_vendor_library():
    code = "import sys; import devmem_nvidia.plugin; print('pynvml' in sys.modules, 'torch' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.split() == ["False", "False"]
