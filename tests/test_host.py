"""The built-in ``cpu`` platform: against the real kernel, and against scripted /proc and cgroup files."""

from __future__ import annotations

import pytest

import devmem
from devmem.cpu import CpuPlatform
from devmem.sdk import cgroup_memory, parse_meminfo
from devmem.testing import HostMemory, Scenario
from devmem.types import GiB, MiB


def test_touching_one_gib_raises_process_usage_by_one_gib():
    platform = CpuPlatform()
    before = platform.get_process_memory_usage()
    block = bytearray(GiB)
    block[::4096] = b"\x01" * (GiB // 4096)  # touch every page
    grown = platform.get_process_memory_usage() - before
    del block
    assert grown == pytest.approx(GiB, rel=0.05)


def test_pages_of_a_mapped_file_are_not_this_process_s_usage(tmp_path):
    import mmap

    path = tmp_path / "weights.bin"
    path.write_bytes(b"\x01" * (64 * MiB))
    platform = CpuPlatform()
    with path.open("rb") as f, mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as mapped:
        before = platform.get_process_memory_usage()
        touched = sum(mapped[i] for i in range(0, len(mapped), 4096))  # read every page: page cache, not anon
        grown = platform.get_process_memory_usage() - before
    assert touched == 64 * MiB // 4096 and grown < 4 * MiB


def test_the_process_figure_is_anonymous_plus_shared_memory_from_status():
    sc = Scenario(status_memory_kib={"RssAnon": 2048, "RssFile": 9999, "RssShmem": 1024})
    assert CpuPlatform(files=sc.fs).get_process_memory_usage() == 3 * MiB


def test_without_those_status_lines_the_figure_is_statm_resident_less_shared():
    import os

    sc = Scenario()  # its status has no Rss lines; its statm says 1024 resident pages, 512 shared
    assert CpuPlatform(files=sc.fs).get_process_memory_usage() == 512 * os.sysconf("SC_PAGE_SIZE")


def test_free_never_exceeds_total_on_this_kernel():
    info = CpuPlatform().device_memory_info()
    assert isinstance(info.free, int) and isinstance(info.total, int)
    assert 0 < info.free <= info.total


@pytest.mark.parametrize("bad", [1, -1, "0", 0.0, True])
def test_bad_device_index_names_the_valid_range(bad):
    with pytest.raises(devmem.DevmemError, match=r"valid indices: 0\.\.0"):
        CpuPlatform().device_memory_info(bad)


def test_free_counts_reclaimable_page_cache():
    sc = Scenario(host=HostMemory(total=64 * GiB, free=4 * GiB, page_cache=40 * GiB))
    assert CpuPlatform(files=sc.fs).device_memory_info() == devmem.MemoryInfo(free=44 * GiB, total=64 * GiB)


def _cgroup_v2(sc: Scenario, limit: str, current: int, inactive_file: int) -> None:
    sc.files.update(
        {
            "/proc/self/cgroup": "0::/job\n",
            "/sys/fs/cgroup/job/memory.max": limit + "\n",
            "/sys/fs/cgroup/job/memory.current": f"{current}\n",
            "/sys/fs/cgroup/job/memory.stat": f"anon {current - inactive_file}\ninactive_file {inactive_file}\n",
        }
    )


def test_cgroup_limit_caps_total_and_free():
    sc = Scenario(host=HostMemory(total=64 * GiB, free=40 * GiB, page_cache=10 * GiB))
    _cgroup_v2(sc, str(16 * GiB), current=6 * GiB, inactive_file=2 * GiB)
    assert CpuPlatform(files=sc.fs).device_memory_info() == devmem.MemoryInfo(free=12 * GiB, total=16 * GiB)


def test_cgroup_without_a_limit_leaves_meminfo_figures():
    sc = Scenario(host=HostMemory(total=64 * GiB, free=40 * GiB, page_cache=10 * GiB))
    _cgroup_v2(sc, "max", current=6 * GiB, inactive_file=0)
    assert CpuPlatform(files=sc.fs).device_memory_info() == devmem.MemoryInfo(free=50 * GiB, total=64 * GiB)


def test_cgroup_v1_limit_is_read():
    sc = Scenario()
    sc.files.update(
        {
            "/proc/self/cgroup": "12:memory:/docker/abc\n",
            "/sys/fs/cgroup/memory/memory.limit_in_bytes": f"{8 * GiB}\n",
            "/sys/fs/cgroup/memory/memory.usage_in_bytes": f"{3 * GiB}\n",
            "/sys/fs/cgroup/memory/memory.stat": f"total_inactive_file {GiB}\n",
        }
    )
    assert cgroup_memory(sc.fs) == (8 * GiB, 2 * GiB)


def test_memory_sources_name_the_page_cache():
    sc = Scenario(host=HostMemory(total=64 * GiB, free=4 * GiB, page_cache=40 * GiB))
    assert CpuPlatform(files=sc.fs).memory_sources()["free"] == (
        "MemAvailable, includes 40.00 GiB reclaimable page cache"
    )


def test_meminfo_parses_kilobytes_into_bytes():
    assert parse_meminfo("MemTotal:       16384 kB\nHugePages_Total:       0\n") == {
        "MemTotal": 16 * MiB,
        "HugePages_Total": 0,
    }


@pytest.mark.parametrize("line", ["MemTotal: 16 MB", "MemTotal: 16384 kB extra", "MemTotal: 16384 KB"])
def test_a_meminfo_figure_in_another_unit_is_skipped_not_read_as_bytes(line):
    assert parse_meminfo(f"{line}\nMemFree: 8 kB\n") == {"MemFree": 8 * 1024}


def test_cpu_platform_is_integrated_and_pages_instead_of_failing():
    platform = CpuPlatform()
    assert platform.is_integrated_gpu() and platform.pages_instead_of_failing()
    assert isinstance(platform, devmem.Platform)


# ---- the process's high-water mark: a forward's transient where torch keeps no allocator statistics -------------


def _held_and_given_back(nbytes):
    """Touch every page of ``nbytes`` of anonymous memory, then free it: a forward's activations."""
    block = bytearray(nbytes)
    block[::4096] = b"\x01" * (nbytes // 4096)
    del block


@pytest.fixture
def resettable():
    platform = CpuPlatform()
    if not platform.reset_process_peak(0):
        pytest.skip("this kernel's /proc/self/clear_refs cannot reset the high-water mark")
    return platform


def test_a_window_charges_what_the_process_held_inside_it_and_gave_back(resettable):
    baseline = devmem.engine.MemorySnapshot.measure(0, resettable)
    with devmem.engine.memory_profiling(baseline, platform=resettable) as profile:
        _held_and_given_back(256 * MiB)
    assert 250 * MiB <= profile.transient_peak_bytes < 300 * MiB
    assert profile.transient_source == "process peak" and profile.plan_inputs()["transient_peak_bytes"] > 250 * MiB


def test_an_inner_window_does_not_erase_the_outer_window_s_peak(resettable):
    baseline = devmem.engine.MemorySnapshot.measure(0, resettable)
    with devmem.engine.memory_profiling(baseline, platform=resettable) as outer:
        _held_and_given_back(128 * MiB)
        with devmem.engine.memory_profiling(baseline, platform=resettable) as inner:
            pass
    assert outer.transient_peak_bytes >= 120 * MiB and inner.transient_peak_bytes < 16 * MiB


def _scripted_host(**memory_kib):
    return Scenario(status_memory_kib={"RssAnon": 100 * 1024, "RssFile": 50 * 1024, "RssShmem": 0, **memory_kib})


def test_the_peak_is_the_high_water_mark_less_the_file_pages_held_now():
    sc = _scripted_host(VmHWM=150 * 1024)
    platform = CpuPlatform(files=sc.fs)
    baseline = devmem.engine.MemorySnapshot.measure(0, platform)
    with devmem.engine.memory_profiling(baseline, platform=platform) as profile:
        sc.status_memory_kib.update(VmHWM=(150 + 64) * 1024, RssFile=60 * 1024)  # 64 MiB held and given back
    assert profile.process_peak == (150 + 64 - 60) * MiB and profile.transient_peak_bytes == 54 * MiB


def test_where_the_high_water_mark_cannot_be_reset_the_window_charges_no_peak_from_it():
    sc = Scenario(status_memory_kib={"RssAnon": 1024, "RssFile": 1024, "RssShmem": 0})  # no VmHWM: read-only
    platform = CpuPlatform(files=sc.fs)
    assert not platform.reset_process_peak(0) and platform.process_peak(0) is None
    with devmem.engine.memory_profiling(
        devmem.engine.MemorySnapshot.measure(0, platform), platform=platform
    ) as profile:
        pass
    assert profile.process_peak is None and profile.transient_source == "none"


def test_a_pinned_cache_in_host_memory_is_the_pinned_bytes_with_no_torch_allocator_rounding():
    """Host memory has no torch caching allocator: 8 MiB pinned holds 8 MiB of blocks, not the 1 MiB that fits
    where an 8 MiB tensor takes a 20 MiB segment."""
    sc = Scenario(host=HostMemory(total=64 * GiB, free=40 * GiB, page_cache=0))
    memory = devmem.EngineMemory(0, pinned_bytes=8 * MiB, platform=CpuPlatform(files=sc.fs), reserve=False)
    plan = memory.plan(page_size_bytes=4096, num_layers=2)
    assert plan.num_blocks * plan.block_bytes == 8 * MiB
