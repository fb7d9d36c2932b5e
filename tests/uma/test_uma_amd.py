"""AMD APUs on the uma platform, against scripted sysfs and fdinfo files (readings from real reports)."""

from __future__ import annotations

import pytest

from devmem.testing import HostMemory, Scenario
from devmem.types import GiB, MiB
from devmem_nvidia.testing import ScriptedNvml
from devmem_rocm.testing import ScriptedAmdGpu
from devmem_uma import UmaPlatform, amd_cards
from devmem_uma.amd import classify
from devmem_uma.testing import (
    STRIX_HALO_GTT,
    STRIX_HALO_HIP_MEM_GET_INFO,
    STRIX_HALO_VRAM,
    mi300a_scenario,
    strix_halo_scenario,
)


def uma(sc: Scenario, **kwargs) -> UmaPlatform:
    return UmaPlatform(nvml=ScriptedNvml(sc), files=sc.fs, environ=sc.environ, **kwargs)


def test_strix_halo_free_is_the_gtt_figure_when_the_gtt_limit_is_below_memavailable():
    sc = strix_halo_scenario()
    dev = sc.devices[0]
    assert dev.gtt_total - dev.gtt_used < sc.host.available
    assert uma(sc).device_memory_info().free == dev.gtt_total - dev.gtt_used


def test_strix_halo_free_is_memavailable_when_that_is_lower():
    sc = strix_halo_scenario()
    sc.host.free, sc.host.page_cache = 30 * GiB, 10 * GiB
    assert uma(sc).device_memory_info().free == 40 * GiB


def test_strix_halo_total_is_gtt_plus_carve_out_not_the_aperture_hip_reports():
    info = uma(strix_halo_scenario()).device_memory_info()
    assert info.total == STRIX_HALO_GTT + STRIX_HALO_VRAM
    assert info.total > 7 * STRIX_HALO_HIP_MEM_GET_INFO[1]


def test_sources_name_the_gtt_limit_when_it_binds():
    sources = uma(strix_halo_scenario()).memory_sources()
    assert "the GTT limit binds" in sources["free"]
    assert sources["total"] == "GTT 96.00 GiB + VRAM carve-out 15.49 GiB (sysfs card1)"


def test_allocation_moves_free_and_this_process_usage_by_its_size():
    sc = strix_halo_scenario()
    platform = uma(sc)
    free_before = platform.device_memory_info().free
    sc.allocate(8 * GiB)
    assert free_before - platform.device_memory_info().free == 8 * GiB
    assert platform.get_process_memory_usage() == 8 * GiB


def test_another_process_allocation_is_not_this_process_usage():
    sc = strix_halo_scenario()
    sc.allocate(4 * GiB, pid=sc.other_pid)
    assert uma(sc).get_process_memory_usage() == 0


def test_mi300a_without_northbridge_sensor_is_an_apu_by_its_carve_out():
    cards = amd_cards(mi300a_scenario().fs)
    assert [(c.apu, c.reason) for c in cards] == [(True, "APU (no VRAM of its own beside a 120.00 GiB GTT pool)")]


def test_discrete_radeon_is_not_an_apu():
    sc = Scenario(
        devices=[ScriptedAmdGpu(name="AMD Radeon RX 7900 XTX", total=24 * GiB, reserved=0, gtt_total=32 * GiB, card=0)]
    )
    apu, reason = classify(sc.fs, "/sys/class/drm/card0/device")
    assert not apu and reason == "discrete (its own 24.00 GiB of VRAM)"


def test_large_carve_out_serves_allocations_from_vram():
    sc = Scenario(
        devices=[
            ScriptedAmdGpu(
                name="Strix Halo, 96 GiB carve-out",
                total=96 * GiB,
                reserved=0,
                base_used=2 * GiB,
                integrated=True,
                gtt_total=15 * GiB,
                card=1,
            )
        ],
        host=HostMemory(total=31 * GiB, free=20 * GiB, page_cache=5 * GiB),
    )
    sc.files["/sys/class/drm/card1/device/hwmon/hwmon0/in1_label"] = "vddnb\n"
    assert uma(sc).device_memory_info() == (94 * GiB, 96 * GiB)


def _fdinfo(client: int, pdev: str, **sizes: str) -> str:
    rows = {"pos": "0", "flags": "02100002", "drm-driver": "amdgpu", "drm-client-id": str(client), "drm-pdev": pdev}
    rows.update({k.replace("_", "-"): v for k, v in sizes.items()})
    return "".join(f"{k}:\t{v}\n" for k, v in rows.items())


def test_a_duplicated_drm_descriptor_is_counted_once():
    sc = strix_halo_scenario()
    text = _fdinfo(7, "0000:c6:00.0", drm_memory_vram="1024 KiB", drm_memory_gtt="2097152 KiB")
    sc.files.update({"/proc/self/fdinfo/5": text, "/proc/self/fdinfo/9": text})
    assert uma(sc).get_process_memory_usage() == 2 * GiB + MiB


def test_newer_kernels_drm_total_keys_are_read():
    sc = strix_halo_scenario()
    sc.files["/proc/self/fdinfo/5"] = _fdinfo(
        7, "0000:c6:00.0", drm_total_gtt="3 MiB", drm_resident_gtt="3 MiB", drm_memory_gtt="3072 KiB"
    )
    assert uma(sc).get_process_memory_usage() == 3 * MiB


def test_clients_of_another_card_are_not_counted():
    sc = strix_halo_scenario()
    sc.files["/proc/self/fdinfo/5"] = _fdinfo(7, "0000:03:00.0", drm_memory_gtt="4096 KiB")
    assert uma(sc).get_process_memory_usage() == 0


def two_mi300a() -> Scenario:
    sc = mi300a_scenario()
    second = ScriptedAmdGpu(
        name="AMD Instinct MI300A",
        total=0,
        reserved=0,
        integrated=True,
        gtt_total=100 * GiB,
        card=1,
        pci_bus_id="00000000:01:00.0",
    )
    sc.devices.append(second)
    return sc


def test_apus_are_numbered_in_pci_order():
    platform = uma(two_mi300a())
    assert [platform.device_memory_info(d).total for d in range(platform.device_count())] == [100 * GiB, 120 * GiB]


@pytest.mark.parametrize(
    "environ, totals",
    [
        ({"HIP_VISIBLE_DEVICES": "1"}, [120 * GiB]),
        ({"ROCR_VISIBLE_DEVICES": "1,0", "HIP_VISIBLE_DEVICES": "1"}, [100 * GiB]),
        ({"CUDA_VISIBLE_DEVICES": "0"}, [100 * GiB]),
        ({"ROCR_VISIBLE_DEVICES": ""}, []),
        ({"HIP_VISIBLE_DEVICES": ""}, [100 * GiB, 120 * GiB]),  # the HIP runtime reads an empty value as unset
    ],
)
def test_visible_devices_variables_pick_the_apus(environ, totals):
    sc = two_mi300a()
    sc.environ.update(environ)
    platform = uma(sc)
    assert [platform.device_memory_info(d).total for d in range(platform.device_count())] == totals


def test_an_apu_can_be_named_by_its_serial():
    sc = two_mi300a()
    sc.files["/sys/class/drm/card0/device/unique_id"] = "4b1f0e9d8c7a6b5e\n"
    sc.environ["HIP_VISIBLE_DEVICES"] = "GPU-4b1f0e9d"
    platform = uma(sc)
    assert platform.device_count() == 1 and platform.device_memory_info().total == 120 * GiB


def test_disagreeing_visible_devices_variables_are_noted():
    sc = two_mi300a()
    sc.environ.update({"HIP_VISIBLE_DEVICES": "1", "CUDA_VISIBLE_DEVICES": "0"})
    assert any("disagree" in note for note in uma(sc).notes())


HOST_62_6_GIB = 62 * GiB + 614 * MiB  # a whole number of KiB, as /proc/meminfo states it


def _apu_above_its_host(**host) -> Scenario:
    """An APU whose GTT limit (100 GiB) is above its host's 62.6 GiB, with a 512 MiB carve-out."""
    device = ScriptedAmdGpu(
        name="AMD Radeon 890M",
        total=512 * MiB,
        reserved=0,
        integrated=True,
        gtt_total=100 * GiB,
        gtt_used=0,
        card=0,
        pci_bus_id="00000000:C4:00.0",
        gfx_target="gfx1150",
        uuid="GPU-0a1b2c3d4e5f6a7b",
    )
    return Scenario(devices=[device], host=HostMemory(**{"total": HOST_62_6_GIB, "free": 50 * GiB, **host}))


def test_apu_total_is_capped_by_the_hosts_memory():
    info = uma(_apu_above_its_host()).device_memory_info()
    assert info.total == HOST_62_6_GIB + 512 * MiB


def test_apu_total_is_capped_by_the_cgroup_limit():
    sc = _apu_above_its_host()
    sc.files.update(
        {
            "/proc/self/cgroup": "0::/job\n",
            "/sys/fs/cgroup/job/memory.max": f"{32 * GiB}\n",
            "/sys/fs/cgroup/job/memory.current": f"{GiB}\n",
            "/sys/fs/cgroup/job/memory.stat": "anon 1073741824\ninactive_file 0\n",
        }
    )
    assert uma(sc).device_memory_info().total == 32 * GiB + 512 * MiB


def test_apu_total_above_the_host_says_why_it_is_capped():
    platform = uma(_apu_above_its_host())
    assert "below the GTT limit 100.00 GiB" in platform.memory_sources()["total"]
    assert any("the total is capped at it" in note for note in platform.notes(0))
