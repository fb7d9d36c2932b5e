"""HIP device indices map to the right amdsmi GPU: ROCR_VISIBLE_DEVICES, then HIP_VISIBLE_DEVICES or
CUDA_VISIBLE_DEVICES, matched by PCI address and serial, never by amdsmi's own index."""

from __future__ import annotations

import logging

import pytest

from devmem.testing import ScriptedClock
from devmem.types import DevmemError, GiB
from devmem_rocm import RocmPlatform
from devmem_rocm.testing import ScriptedAmdsmi, asic_serial, mi300x_scenario, radeon_rx7900xtx

COUNT = 4


def machine(environ: dict[str, str], **amdsmi_options) -> tuple[RocmPlatform, list[str]]:
    """Four MI300X that amdsmi lists in reverse HIP order; physical GPU j holds j GiB more than idle."""
    sc = mi300x_scenario(COUNT, environ=environ)
    for j in range(COUNT):
        sc.devices[j].base_used += j * GiB
    amdsmi_options.setdefault("handle_order", [3, 2, 1, 0])
    clock = ScriptedClock()
    platform = RocmPlatform(
        amdsmi=ScriptedAmdsmi(sc, **amdsmi_options), environ=sc.environ, clock=clock, sleep=clock.sleep
    )
    return platform, [asic_serial(d) for d in sc.devices]


def physical(platform: RocmPlatform) -> list[int]:
    """Which physical GPU each HIP index is, read from its memory: GPU j holds j GiB above the idle figure."""
    out = []
    for i in range(platform.device_count()):
        free, total = platform.device_memory_info(i)
        out.append(round((total - free - 297611264) / GiB))
    return out


def test_without_variables_hip_order_is_used_not_amdsmi_order():
    platform, _ = machine({})
    assert physical(platform) == [0, 1, 2, 3]


def test_hip_visible_devices_picks_and_reorders():
    platform, _ = machine({"HIP_VISIBLE_DEVICES": "2,0"})
    assert physical(platform) == [2, 0]


def test_cuda_visible_devices_works_like_hip_visible_devices():
    platform, _ = machine({"CUDA_VISIBLE_DEVICES": "3"})
    assert physical(platform) == [3]


def test_rocr_visible_devices_picks_from_every_gpu():
    platform, _ = machine({"ROCR_VISIBLE_DEVICES": "1,3"})
    assert physical(platform) == [1, 3]


def test_hip_visible_devices_indexes_what_rocr_visible_devices_left():
    platform, _ = machine({"ROCR_VISIBLE_DEVICES": "1,2,3", "HIP_VISIBLE_DEVICES": "1"})
    assert physical(platform) == [2]


def test_a_gpu_uuid_names_a_gpu_by_its_serial():
    _, serials = machine({})
    platform, _ = machine({"ROCR_VISIBLE_DEVICES": f"GPU-{serials[2]}", "HIP_VISIBLE_DEVICES": "0"})
    assert physical(platform) == [2]


def test_a_unique_uuid_prefix_is_enough_for_rocr():
    _, serials = machine({})
    prefix = next(serials[3][:n] for n in range(1, 17) if sum(x.startswith(serials[3][:n]) for x in serials) == 1)
    platform, _ = machine({"ROCR_VISIBLE_DEVICES": f"gpu-{prefix}"})
    assert physical(platform) == [3]


def test_an_ambiguous_uuid_prefix_ends_the_rocr_list():
    _, serials = machine({})
    common = serials[0][:4]  # the MI300X preset serials share their leading digits
    assert all(s.startswith(common) for s in serials)
    platform, _ = machine({"ROCR_VISIBLE_DEVICES": f"1,GPU-{common},0"})
    assert physical(platform) == [1]


def test_hip_takes_the_first_gpu_whose_uuid_contains_the_entry():
    _, serials = machine({})
    platform, _ = machine({"HIP_VISIBLE_DEVICES": f"GPU-{serials[2]},GPU-{serials[0][:4]}"})
    assert physical(platform) == [2, 0]


def test_rocr_reads_indices_as_c_integers_and_trims_them():
    platform, _ = machine({"ROCR_VISIBLE_DEVICES": "0x2, 1"})
    assert physical(platform) == [2, 1]


def test_hip_reads_only_plain_decimal_indices():
    platform, _ = machine({"HIP_VISIBLE_DEVICES": "2, 1"})
    assert physical(platform) == [2]
    assert any("entry ' 1'" in n for n in platform.notes(0))


def test_older_amdsmi_without_hip_ids_falls_back_to_pci_order():
    platform, _ = machine({"HIP_VISIBLE_DEVICES": "1"}, missing={"amdsmi_get_gpu_enumeration_info"})
    assert physical(platform) == [1]
    assert "PCI bus order" in platform.notes(0)[0]


def test_disagreeing_hip_and_cuda_variables_follow_hip_and_say_so(caplog):
    with caplog.at_level(logging.WARNING, logger="devmem.rocm"):
        platform, _ = machine({"HIP_VISIBLE_DEVICES": "1", "CUDA_VISIBLE_DEVICES": "2"})
    assert physical(platform) == [1]
    conflict = "HIP_VISIBLE_DEVICES='1' and CUDA_VISIBLE_DEVICES='2' disagree"
    assert any(conflict in note for note in platform.notes(0))
    assert any(conflict in r.getMessage() for r in caplog.records)


def test_agreeing_hip_and_cuda_variables_are_not_a_conflict():
    platform, _ = machine({"HIP_VISIBLE_DEVICES": "1,2", "CUDA_VISIBLE_DEVICES": "1,2"})
    assert physical(platform) == [1, 2]
    assert not any("disagree" in note for note in platform.notes(0))


def test_an_index_beyond_what_rocr_left_ends_the_list_and_names_both_variables():
    platform, _ = machine({"ROCR_VISIBLE_DEVICES": "0,1", "HIP_VISIBLE_DEVICES": "1,2"})
    assert physical(platform) == [1]
    problem = [n for n in platform.notes(0) if "entry '2'" in n]
    assert problem and "ROCR_VISIBLE_DEVICES='0,1'" in problem[0] and "HIP_VISIBLE_DEVICES" in problem[0]


def test_hip_skips_a_repeated_entry():
    platform, _ = machine({"HIP_VISIBLE_DEVICES": "3,1,3,0"})
    assert physical(platform) == [3, 1, 0]


def test_rocr_ends_the_list_at_a_repeated_entry():
    platform, _ = machine({"ROCR_VISIBLE_DEVICES": "3,1,3,0"})
    assert physical(platform) == [3, 1]


def test_rocr_set_but_empty_hides_every_gpu():
    platform, _ = machine({"ROCR_VISIBLE_DEVICES": ""})
    assert platform.device_count() == 0
    with pytest.raises(DevmemError, match="no device is visible"):
        platform.device_memory_info(0)


def test_hip_set_but_empty_counts_as_unset():
    platform, _ = machine({"HIP_VISIBLE_DEVICES": ""})
    assert physical(platform) == [0, 1, 2, 3]


def test_cuda_applies_when_hip_is_set_but_empty():
    platform, _ = machine({"HIP_VISIBLE_DEVICES": "", "CUDA_VISIBLE_DEVICES": "2"})
    assert physical(platform) == [2]


def test_an_apu_beside_a_discrete_gpu_keeps_its_hip_index():
    sc = mi300x_scenario(1)
    radeon = radeon_rx7900xtx()
    radeon.pci_bus_id = "0000:c3:00.0"
    apu = radeon_rx7900xtx()
    apu.market_name, apu.gfx_target, apu.integrated = "AMD Radeon Graphics", "gfx1036", True
    apu.pci_bus_id, apu.uuid = "0000:10:00.0", "00ff164e-0000-1000-8000-0a1b2c3d4e5f"
    sc.devices = [sc.devices[0], apu, radeon]
    platform = RocmPlatform(amdsmi=ScriptedAmdsmi(sc), environ={"HIP_VISIBLE_DEVICES": "2,1"})
    assert [platform.device_name(i) for i in range(2)] == ["AMD Radeon RX 7900 XTX", "AMD Radeon Graphics"]
    assert [platform.is_integrated_gpu(i) for i in range(2)] == [False, True]


@pytest.mark.parametrize("raw", ["-", "+"])
def test_rocr_visible_devices_bare_sign_makes_no_gpu_visible(raw):
    assert physical(machine({"ROCR_VISIBLE_DEVICES": raw})[0]) == []


@pytest.mark.parametrize("entry", ["１", "1" * 5000, "0x" + "f" * 40])
def test_rocr_entry_of_full_width_or_unbounded_digits_names_no_gpu(entry):
    platform, _ = machine({"ROCR_VISIBLE_DEVICES": entry})
    assert platform.device_count() == 0


def test_rocr_hex_and_octal_indices_read_as_strtol_reads_them():
    platform, _ = machine({"ROCR_VISIBLE_DEVICES": "0x2,01"})
    assert physical(platform) == [2, 1]
