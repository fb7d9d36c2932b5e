"""CUDA_VISIBLE_DEVICES and CUDA_DEVICE_ORDER map CUDA indices to the right NVML device."""

from __future__ import annotations

import pytest

from devmem import DevmemError, GiB
from devmem.testing import Scenario
from devmem_nvidia.testing import ScriptedNvidiaGpu, mig_scenario, scripted_platform

# NVML index 0 is the H200 at bus 0x41, NVML index 1 the A4000 at bus 0x19: NVML's order is not PCI order here,
# so a mapping that assumed equal indices, or NVML's order, would pick the wrong card.
H200 = ScriptedNvidiaGpu(uuid="GPU-aaaaaaaa-1111-4111-8111-111111111111", pci_bus_id="00000000:41:00.0")
A4000 = ScriptedNvidiaGpu(
    name="NVIDIA RTX A4000",
    total=16 * GiB,
    reserved=0,
    compute_capability=(8, 6),
    uuid="GPU-bbbbbbbb-2222-4222-8222-222222222222",
    pci_bus_id="0000:19:00.0",
)
H200_B = ScriptedNvidiaGpu(uuid="GPU-aaaaaaaa-3333-4333-8333-333333333333", pci_bus_id="00000000:c1:00.0")


def names(environ, devices=(H200, A4000)):
    sc = Scenario(devices=list(devices))
    platform = scripted_platform(sc, environ=environ)
    return [platform.device_memory_info(d).total for d in range(platform.device_count())]


H200_TOTAL = H200.total - H200.reserved
A4000_TOTAL = A4000.total


def test_unset_means_every_device_fastest_first():
    assert names({}) == [H200_TOTAL, A4000_TOTAL]


def test_pci_bus_id_order_puts_the_lower_bus_first():
    assert names({"CUDA_DEVICE_ORDER": "PCI_BUS_ID"}) == [A4000_TOTAL, H200_TOTAL]


def test_index_is_into_the_cuda_order():
    assert names({"CUDA_DEVICE_ORDER": "PCI_BUS_ID", "CUDA_VISIBLE_DEVICES": "1"}) == [H200_TOTAL]


def test_indices_reorder_devices():
    assert names({"CUDA_VISIBLE_DEVICES": "1,0"}) == [A4000_TOTAL, H200_TOTAL]


def test_empty_value_hides_every_device():
    assert names({"CUDA_VISIBLE_DEVICES": ""}) == []


def test_full_gpu_uuid_selects_that_device():
    assert names({"CUDA_VISIBLE_DEVICES": A4000.uuid}) == [A4000_TOTAL]


def test_unique_uuid_prefix_selects_that_device():
    assert names({"CUDA_VISIBLE_DEVICES": "GPU-bbbb"}) == [A4000_TOTAL]


def test_uuid_prefix_is_case_insensitive():
    assert names({"CUDA_VISIBLE_DEVICES": "gpu-BBBB"}) == [A4000_TOTAL]


def test_ambiguous_uuid_prefix_ends_the_list():
    assert names({"CUDA_VISIBLE_DEVICES": "2,GPU-aaaa"}, (H200, A4000, H200_B)) == [A4000_TOTAL]


def test_invalid_entry_keeps_the_entries_before_it():
    assert names({"CUDA_VISIBLE_DEVICES": "1,7,0"}) == [A4000_TOTAL]


def test_minus_one_hides_every_device():
    assert names({"CUDA_VISIBLE_DEVICES": "-1"}) == []


def test_repeated_device_ends_the_list():
    assert names({"CUDA_VISIBLE_DEVICES": f"0,{H200.uuid},1"}) == [H200_TOTAL]


def test_spaces_around_entries_are_ignored():
    assert names({"CUDA_VISIBLE_DEVICES": " 1 , 0 "}) == [A4000_TOTAL, H200_TOTAL]


def test_bad_index_after_filtering_names_the_range():
    sc = Scenario(devices=[H200, A4000])
    platform = scripted_platform(sc, environ={"CUDA_VISIBLE_DEVICES": "1"})
    with pytest.raises(DevmemError, match=r"valid indices: 0\.\.0"):
        platform.device_memory_info(1)


def test_no_visible_device_says_none_is_visible():
    sc = Scenario(devices=[H200])
    platform = scripted_platform(sc, environ={"CUDA_VISIBLE_DEVICES": ""})
    with pytest.raises(DevmemError, match="no device is visible"):
        platform.device_memory_info(0)


def test_remapped_device_is_named_in_the_notes():
    sc = Scenario(devices=[H200, A4000])
    platform = scripted_platform(sc, environ={"CUDA_VISIBLE_DEVICES": "1"})
    assert f"CUDA device 0 is {A4000.uuid} at PCI 00000000:19:00.0" in platform.notes(0)


# ---- MIG -------------------------------------------------------------------------------------------
def mig_totals(environ):
    sc = mig_scenario()
    platform = scripted_platform(sc, environ=environ)
    return [platform.device_memory_info(d).total for d in range(platform.device_count())]


MIG_3G, MIG_1G = mig_scenario().devices[0].mig


def test_mig_gpu_is_seen_as_its_instances():
    assert mig_totals({}) == [MIG_3G.total, MIG_1G.total]


def test_mig_uuid_selects_that_instance():
    assert mig_totals({"CUDA_VISIBLE_DEVICES": MIG_1G.uuid}) == [MIG_1G.total]


def test_mig_uuid_prefix_selects_that_instance():
    assert mig_totals({"CUDA_VISIBLE_DEVICES": MIG_1G.uuid[:12]}) == [MIG_1G.total]


def test_gpu_uuid_of_a_mig_gpu_gives_its_instances():
    assert mig_totals({"CUDA_VISIBLE_DEVICES": mig_scenario().devices[0].uuid}) == [MIG_3G.total, MIG_1G.total]
