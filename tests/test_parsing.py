"""Whole numbers from files and environment variables: one parser, ASCII digits of a bounded length, everywhere."""

from __future__ import annotations

import pytest

from devmem._text import MAX_DIGITS, parse_int, require_int
from devmem.cpu import CpuPlatform
from devmem.sdk import cgroup_memory, drm, parse_meminfo, read_int
from devmem.testing import Scenario
from devmem.types import DevmemError, GiB, KiB

HOSTILE = ["１６", "٣", "²", "1_0", "0x10", "1e3", "1.0", "", " ", "-1", "+1", "1" * 5000, "12abc", "\u00a012"]


@pytest.mark.parametrize("text", HOSTILE)
def test_parse_int_refuses_anything_but_ascii_digits(text):
    assert parse_int(text) is None


def test_parse_int_reads_ascii_digits_with_surrounding_whitespace():
    assert parse_int(" 4096\n") == 4096


def test_parse_int_bounds_the_number_of_digits():
    assert parse_int("9" * MAX_DIGITS) == 10**MAX_DIGITS - 1
    assert parse_int("9" * (MAX_DIGITS + 1)) is None


def test_parse_int_takes_a_sign_only_where_signed():
    assert parse_int("-12", signed=True) == -12 and parse_int("-12") is None


def test_require_int_names_the_source_and_the_value():
    with pytest.raises(DevmemError, match=r"HIP_VISIBLE_DEVICES: '１' is not a whole number"):
        require_int("１", "HIP_VISIBLE_DEVICES")


def test_require_int_shortens_a_huge_value_in_its_message():
    with pytest.raises(DevmemError, match=r"\.\.\. \(5002 characters\)") as caught:
        require_int("7" * 5000, "/sys/x")
    assert len(str(caught.value)) < 200


@pytest.mark.parametrize("figure", ["１６", "²", "1" * 5000, "1_0"])
def test_meminfo_line_with_a_non_ascii_or_huge_figure_is_skipped(figure):
    assert parse_meminfo(f"MemTotal: {figure} kB\nMemFree: 4 kB\n") == {"MemFree": 4 * KiB}


@pytest.mark.parametrize("figure", ["１６", "²", "1" * 5000])
def test_cgroup_file_with_a_non_ascii_or_huge_figure_reads_as_none(figure):
    sc = Scenario()
    sc.files["/sys/fs/cgroup/memory.max"] = figure + "\n"
    assert read_int(sc.fs, "/sys/fs/cgroup/memory.max") is None


def _cgroup_v2(sc: Scenario, stat: str) -> None:
    sc.files.update(
        {
            "/proc/self/cgroup": "0::/job\n",
            "/sys/fs/cgroup/job/memory.max": f"{16 * GiB}\n",
            "/sys/fs/cgroup/job/memory.current": f"{6 * GiB}\n",
            "/sys/fs/cgroup/job/memory.stat": stat,
        }
    )


@pytest.mark.parametrize("figure", ["²", "1" * 5000, "１"])
def test_memory_stat_with_a_bad_inactive_file_counts_no_reclaimable_cache(figure):
    sc = Scenario()
    _cgroup_v2(sc, f"anon 1\ninactive_file {figure}\n")
    assert cgroup_memory(sc.fs) == (16 * GiB, 6 * GiB)


@pytest.mark.parametrize("line", ["garbage", "1:memory", "", "::"])
def test_a_malformed_proc_self_cgroup_line_is_skipped(line):
    sc = Scenario()
    _cgroup_v2(sc, f"inactive_file {2 * GiB}\n")
    sc.files["/proc/self/cgroup"] = f"{line}\n0::/job\n"
    assert cgroup_memory(sc.fs) == (16 * GiB, 4 * GiB)


def test_cpu_platform_reads_through_a_malformed_proc_self_cgroup():
    sc = Scenario()
    sc.files["/proc/self/cgroup"] = "not a cgroup line\n"
    info = CpuPlatform(files=sc.fs).device_memory_info()
    assert info.total == sc.host.total


@pytest.mark.parametrize("value", ["１６ KiB", "² KiB", "1" * 5000, "12 KiB extra", "-4 KiB"])
def test_drm_size_refuses_non_ascii_huge_or_malformed_values(value):
    assert drm.size(value) is None


def test_drm_size_reads_a_unit():
    assert drm.size("1024 KiB") == 1024 * KiB


@pytest.mark.parametrize("token", ["１", "٠", "²", "1" * 5000, "-0", "+1", "1_0"])
def test_full_width_or_huge_entries_are_not_device_indices(token):
    from devmem.sdk.visible import index

    assert index(token) is None


@pytest.mark.parametrize("entry", ["１", "1" * 5000, "²"])
def test_cuda_visible_devices_full_width_or_huge_entry_hides_every_gpu(entry):
    from devmem_nvidia.testing import ScriptedNvidiaGpu, scripted_platform

    sc = Scenario(
        devices=[
            ScriptedNvidiaGpu(),
            ScriptedNvidiaGpu(pci_bus_id="0000:19:00.0", uuid="GPU-bbbbbbbb-2222-4222-8222-222222222222"),
        ]
    )
    assert scripted_platform(sc, environ={"CUDA_VISIBLE_DEVICES": entry}).device_count() == 0


@pytest.mark.parametrize("entry", ["１", "1" * 5000, "²"])
def test_hip_visible_devices_full_width_or_huge_entry_hides_every_gpu(entry):
    from devmem.testing import ScriptedClock
    from devmem_rocm import RocmPlatform
    from devmem_rocm.testing import ScriptedAmdsmi, mi300x_scenario

    sc = mi300x_scenario(2, environ={"HIP_VISIBLE_DEVICES": entry})
    clock = ScriptedClock()
    platform = RocmPlatform(amdsmi=ScriptedAmdsmi(sc), environ=sc.environ, clock=clock, sleep=clock.sleep)
    assert platform.device_count() == 0


@pytest.mark.parametrize("figure", ["１６", "²", "1" * 5000, "1_0"])
def test_dmem_line_with_a_non_ascii_or_huge_figure_is_skipped(figure):
    from devmem.sdk.dmem import parse_regions

    assert parse_regions(f"drm/0000:03:00.0/vram0 {figure}\ndrm/0000:03:00.0/gtt max\n") == {
        "drm/0000:03:00.0/gtt": None
    }
