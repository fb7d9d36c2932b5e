"""Detection: the rocm platform claims discrete AMD GPUs and leaves APUs to the uma platform; its plugin
registers it cheaply and explains itself where ROCm is absent."""

from __future__ import annotations

import subprocess
import sys

import pytest

import devmem
from devmem.testing import Scenario
from devmem.types import GiB, MiB
from devmem_nvidia.testing import h200_scenario
from devmem_rocm import detect
from devmem_rocm.testing import ScriptedAmdGpu, ScriptedAmdgpuDriver, ScriptedAmdsmi, mi300x_scenario, radeon_scenario
from devmem_uma.testing import mi300a_scenario, strix_halo_scenario


def test_discrete_gpus_are_detected_by_name():
    found = detect(amdsmi=ScriptedAmdsmi(mi300x_scenario(8)), environ={})
    assert found.detected
    assert found.reason.startswith("amdsmi 7.0.2: 8 discrete AMD GPU(s): AMD Instinct MI300X")


def test_a_radeon_is_detected():
    assert detect(amdsmi=ScriptedAmdsmi(radeon_scenario()), environ={}).detected


def test_an_mi300a_is_refused_and_left_to_uma():
    found = detect(amdsmi=ScriptedAmdsmi(mi300a_scenario()), environ={})
    assert not found.detected
    assert "only APUs (AMD Instinct MI300A (gfx942" in found.reason and "left to the uma platform" in found.reason


def test_strix_halo_is_refused_by_its_gfx_target():
    found = detect(amdsmi=ScriptedAmdsmi(strix_halo_scenario()), environ={})
    assert not found.detected and "gfx1151" in found.reason


def test_a_carve_out_beside_a_large_gtt_pool_is_an_apu_whatever_its_name():
    apu = ScriptedAmdGpu(
        name="AMD Radeon Graphics",
        total=512 * MiB,
        reserved=0,
        integrated=True,
        market_name="AMD Radeon Graphics",
        gfx_target="gfx1199",
        gtt_total=60 * GiB,
        uuid="00ff0000-0000-1000-8000-00000000abcd",
        pci_bus_id="0000:65:00.0",
    )
    found = detect(
        amdsmi=ScriptedAmdsmi(Scenario(devices=[apu], drivers=[ScriptedAmdgpuDriver(libraries={"amdsmi"})])), environ={}
    )
    assert not found.detected and "only APUs" in found.reason


def test_an_apu_processor_type_is_refused():
    fake = ScriptedAmdsmi(radeon_scenario())
    fake.amdsmi_get_processor_type = lambda h: {"processor_type": "AMDSMI_PROCESSOR_TYPE_AMD_APU"}
    assert not detect(amdsmi=fake, environ={}).detected


def mi300a() -> ScriptedAmdGpu:
    return mi300a_scenario().devices[0]


def test_a_discrete_gpu_beside_an_apu_is_detected_and_the_apu_named():
    sc = mi300x_scenario(1)
    sc.devices.append(mi300a())
    found = detect(amdsmi=ScriptedAmdsmi(sc), environ={})
    assert found.detected and "the APU AMD Instinct MI300A is left to the uma platform" in found.reason


def test_only_visible_gpus_count():
    sc = mi300x_scenario(1)
    sc.devices.insert(0, mi300a())  # PCI 02:00.0, before the MI300X's 05:00.0
    assert not detect(amdsmi=ScriptedAmdsmi(sc), environ={"HIP_VISIBLE_DEVICES": "0"}).detected
    assert detect(amdsmi=ScriptedAmdsmi(sc), environ={"HIP_VISIBLE_DEVICES": "1"}).detected


def test_every_gpu_hidden_is_not_detected_and_says_by_what():
    found = detect(amdsmi=ScriptedAmdsmi(mi300x_scenario(2)), environ={"ROCR_VISIBLE_DEVICES": ""})
    assert not found.detected
    assert found.reason == "amdsmi reports 2 AMD GPU(s), none visible after ROCR_VISIBLE_DEVICES="


def test_no_amdgpu_driver_is_not_detected_with_amdsmis_status():
    found = detect(amdsmi=ScriptedAmdsmi(h200_scenario()), environ={})  # an NVIDIA machine with the amdsmi wheel
    assert not found.detected
    assert found.reason.startswith("amdsmi_init failed: AMDSMI_STATUS_DRIVER_NOT_LOADED")


def test_amdsmi_failing_to_list_processors_is_not_detected_with_the_reason():
    found = detect(amdsmi=ScriptedAmdsmi(mi300x_scenario(failures={"amdsmi_get_processor_handles": "IO"})), environ={})
    assert not found.detected and "amdsmi_get_processor_handles failed: AMDSMI_STATUS_IO" in found.reason


# ---- the plugin ---------------------------------------------------------------------------------------
def test_the_plugin_registers_rocm_at_priority_100(monkeypatch):
    monkeypatch.setenv("DEVMEM_LOAD_PLUGINS", "rocm")
    rocm = [c for c in devmem.platform_candidates() if c.name == "rocm"]
    assert len(rocm) == 1 and rocm[0].priority == 100 and rocm[0].distribution == "devmem-kv"


def test_importing_the_plugin_imports_no_vendor_library():
    code = "import sys, devmem_rocm.plugin; print('amdsmi' in sys.modules, 'torch' in sys.modules)"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True)
    assert done.stdout.strip() == "False False"


def test_forcing_rocm_where_it_is_not_detected_says_why(monkeypatch):
    here = detect()
    if here.detected:
        pytest.skip("amdsmi finds a discrete AMD GPU on this machine")
    monkeypatch.setenv("DEVMEM_PLATFORM", "rocm")
    with pytest.raises(devmem.PluginError, match="registered but not detected") as info:
        devmem.current_platform()
    assert here.reason in str(info.value)
