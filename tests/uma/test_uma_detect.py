"""Detection of unified-memory machines, and discrete GPUs never claimed by the uma platform."""

from __future__ import annotations

from devmem.testing import Scenario
from devmem.types import GiB
from devmem_nvidia import NvmlSession
from devmem_nvidia.plugin import devmem_platforms as nvidia_platforms
from devmem_nvidia.testing import ScriptedNvidiaGpu, ScriptedNvml, h200_scenario
from devmem_rocm.plugin import devmem_platforms as rocm_platforms
from devmem_rocm.testing import ScriptedAmdGpu
from devmem_uma import UmaPlatform, detect_uma
from devmem_uma.plugin import devmem_platforms as uma_platforms
from devmem_uma.survey import survey
from devmem_uma.testing import gb10_scenario, jetson_orin_scenario, strix_halo_scenario


def detect(sc: Scenario):
    return detect_uma(nvml=ScriptedNvml(sc), files=sc.fs, environ=sc.environ)


def test_gb10_is_detected_because_nvml_has_no_device_memory_for_it():
    assert detect(gb10_scenario()).reason == "NVIDIA GB10: unified memory (NVML's device memory query is NotSupported)"


def test_jetson_is_detected_without_nvml():
    assert detect(jetson_orin_scenario()).detected


def test_strix_halo_is_detected_from_sysfs():
    assert detect(strix_halo_scenario()).reason.startswith("AMD card1: APU (amdgpu reports a northbridge voltage)")


def test_a_discrete_nvidia_gpu_is_not_claimed():
    found = detect(h200_scenario())
    assert not found.detected
    assert "NVIDIA H200 (CUDA device 0, NVML reports its own device memory)" in found.reason


def test_an_apu_beside_a_discrete_rtx_card_is_left_to_the_rtx_platform():
    sc = strix_halo_scenario()
    sc.devices.append(
        ScriptedNvidiaGpu(
            name="NVIDIA GeForce RTX 4090",
            total=24 * GiB,
            reserved=0,
            pci_bus_id="00000000:01:00.0",
            compute_capability=(8, 9),
        )
    )
    found = detect(sc)
    assert not found.detected and "NVIDIA GeForce RTX 4090" in found.reason


def test_a_discrete_radeon_beside_an_apu_is_not_claimed():
    sc = strix_halo_scenario()
    sc.devices.append(
        ScriptedAmdGpu(
            name="AMD Radeon PRO W7900",
            total=48 * GiB,
            reserved=0,
            gtt_total=56 * GiB,
            card=2,
            pci_bus_id="00000000:03:00.0",
        )
    )
    found = detect(sc)
    assert not found.detected and "AMD card2 (discrete (its own 48.00 GiB of VRAM))" in found.reason


def test_the_cuda_integrated_attribute_wins_over_nvmls_answer():
    sc = gb10_scenario()
    found = survey(sc.fs, NvmlSession(ScriptedNvml(sc)), sc.environ, integrated_attr=lambda device: False)
    assert not found.detection().detected


def test_cuda_integrated_attribute_is_the_evidence_where_the_runtime_is_up():
    sc = gb10_scenario()
    platform = UmaPlatform(nvml=ScriptedNvml(sc), files=sc.fs, environ=sc.environ, cuda_integrated=lambda d: True)
    assert platform.notes()[0] == "unified memory: the CUDA runtime's integrated attribute is 1"


def test_no_accelerator_means_not_detected_and_no_device():
    sc = Scenario()
    assert not detect(sc).detected
    assert UmaPlatform(nvml=ScriptedNvml(sc), files=sc.fs, environ=sc.environ).device_count() == 0


def test_uma_outranks_every_vendor_platform():
    vendor = {spec.name: spec.priority for spec in [*nvidia_platforms(), *rocm_platforms()]}
    (spec,) = uma_platforms()
    assert {"nvml", "wsl2", "rocm"} <= vendor.keys()
    assert spec.name == "uma" and spec.priority > max(vendor.values())
