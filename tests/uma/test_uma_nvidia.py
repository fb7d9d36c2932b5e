"""NVIDIA unified memory (DGX Spark GB10, Jetson) on the uma platform, against scripted NVML, /proc and runtime."""

from __future__ import annotations

from devmem.types import GiB, MiB
from devmem_nvidia.testing import ScriptedNvml
from devmem_uma import UmaPlatform
from devmem_uma.testing import (
    GB10_CONTEXT,
    GB10_CONTEXT_PLUS_512MIB,
    GB10_PAGE_CACHE,
    GB10_RAW_FREE,
    GB10_TOTAL,
    gb10_scenario,
    jetson_orin_scenario,
)


def gb10(sc=None, *, runtime: bool = True, **kwargs) -> tuple[UmaPlatform, ScriptedNvml]:
    sc = sc or gb10_scenario()
    nvml = ScriptedNvml(sc)
    mem_get_info = sc.mem_get_info if runtime else (lambda device: None)
    return UmaPlatform(nvml=nvml, files=sc.fs, environ=sc.environ, mem_get_info=mem_get_info, **kwargs), nvml


def test_gb10_free_is_memavailable_not_the_raw_runtime_figure():
    sc = gb10_scenario()
    platform, _ = gb10(sc)
    assert sc.mem_get_info(0)[0] == GB10_RAW_FREE
    assert platform.device_memory_info().free == GB10_RAW_FREE + GB10_PAGE_CACHE


def test_gb10_total_is_the_runtimes_when_cuda_is_initialised():
    sc = gb10_scenario()
    runtime_total = GB10_TOTAL - GiB  # a runtime that keeps a GiB for itself: its total wins over MemTotal
    platform = UmaPlatform(
        nvml=ScriptedNvml(sc),
        files=sc.fs,
        environ=sc.environ,
        mem_get_info=lambda device: (GB10_RAW_FREE, runtime_total),
    )
    assert platform.device_memory_info().total == runtime_total
    assert platform.memory_sources()["total"] == "the CUDA runtime's total (cudaMemGetInfo)"


def test_gb10_total_is_memtotal_without_the_runtime():
    sc = gb10_scenario()
    platform, _ = gb10(sc, runtime=False)
    assert platform.device_memory_info().total == sc.host.total
    assert platform.memory_sources()["total"].startswith("MemTotal")


def test_sources_say_free_includes_the_page_cache_and_name_the_raw_figure():
    platform, _ = gb10()
    assert platform.memory_sources()["free"] == (
        "MemAvailable, includes 56.40 GiB reclaimable page cache; the CUDA runtime's own figure, 59.20 GiB, "
        "leaves the page cache out and is not used"
    )


def test_gb10_process_memory_comes_from_nvmls_per_process_list():
    sc = gb10_scenario()
    platform, _ = gb10(sc)
    assert platform.get_process_memory_usage() == GB10_CONTEXT
    sc.allocate(512 * MiB)
    assert platform.get_process_memory_usage() == GB10_CONTEXT_PLUS_512MIB


def test_nvml_device_memory_query_is_used_only_to_detect():
    platform, nvml = gb10()
    platform.device_count()
    asked = nvml.calls["nvmlDeviceGetMemoryInfo"] + nvml.calls["nvmlDeviceGetMemoryInfo_v2"]
    for _ in range(3):
        platform.device_memory_info()
        platform.get_process_memory_usage()
        platform.memory_sources()
    assert nvml.calls["nvmlDeviceGetMemoryInfo"] + nvml.calls["nvmlDeviceGetMemoryInfo_v2"] == asked


def test_other_processes_come_from_the_per_process_list():
    sc = gb10_scenario()
    sc.allocate(3 * GiB, pid=sc.other_pid)
    platform, _ = gb10(sc)
    assert platform.other_processes_memory() == {sc.other_pid: 3 * GiB}


def test_nvml_process_list_errors_become_none_with_a_reason():
    sc = gb10_scenario(failures={"nvmlDevice*RunningProcesses*": "Unknown"})
    platform, _ = gb10(sc)
    assert platform.get_process_memory_usage() is None
    assert "NVML could not list the processes" in platform.process_memory_reason()


def gb10_in_a_cgroup():
    """A GB10 in a cgroup limited to 32 GiB, 12 GiB of it in use."""
    sc = gb10_scenario()
    sc.files.update(
        {
            "/proc/self/cgroup": "0::/job\n",
            "/sys/fs/cgroup/job/memory.max": f"{32 * GiB}\n",
            "/sys/fs/cgroup/job/memory.current": f"{12 * GiB}\n",
            "/sys/fs/cgroup/job/memory.stat": "inactive_file 0\n",
        }
    )
    return gb10(sc)[0]


def test_cgroup_limit_caps_free():
    platform = gb10_in_a_cgroup()
    assert platform.device_memory_info().free == 20 * GiB
    assert platform.memory_sources()["free"].startswith(
        "MemAvailable, includes 56.40 GiB reclaimable page cache, capped by the cgroup limit"
    )


def test_jetson_without_nvml_sizes_from_memavailable():
    sc = jetson_orin_scenario()
    platform = UmaPlatform(nvml=ScriptedNvml(sc), files=sc.fs, environ=sc.environ, mem_get_info=sc.mem_get_info)
    assert platform.device_memory_info().free == sc.host.available
    assert platform.device_name() == "NVIDIA Jetson AGX Orin Developer Kit"


def test_jetson_without_nvml_has_no_process_figure_and_says_why():
    sc = jetson_orin_scenario()
    platform = UmaPlatform(nvml=ScriptedNvml(sc), files=sc.fs, environ=sc.environ)
    assert platform.get_process_memory_usage() is None
    assert platform.process_memory_reason().startswith("no NVML on this Jetson (nvmlInit failed: LibraryNotFound")


def test_jetson_is_recognised_by_its_device_tree_alone():
    sc = jetson_orin_scenario()
    del sc.files["/etc/nv_tegra_release"]
    platform = UmaPlatform(nvml=ScriptedNvml(sc), files=sc.fs, environ=sc.environ)
    assert platform.device_count() == 1
    assert platform.notes()[0] == "unified memory: NVIDIA Jetson (the device tree is compatible with nvidia,tegra234)"


def test_cuda_visible_devices_can_hide_the_jetson_gpu():
    sc = jetson_orin_scenario(environ={"CUDA_VISIBLE_DEVICES": ""})
    assert UmaPlatform(nvml=ScriptedNvml(sc), files=sc.fs, environ=sc.environ).device_count() == 0


def test_a_failing_runtime_query_falls_back_to_memtotal():
    sc = gb10_scenario(failures={"cudaMemGetInfo": "Unknown"})
    platform, _ = gb10(sc)
    assert platform.device_memory_info() == (GB10_RAW_FREE + GB10_PAGE_CACHE, sc.host.total)


def test_gb10_total_is_capped_by_the_cgroup_limit():
    platform = gb10_in_a_cgroup()
    assert platform.device_memory_info().total == 32 * GiB
    assert "cgroup memory limit" in platform.memory_sources()["total"]
