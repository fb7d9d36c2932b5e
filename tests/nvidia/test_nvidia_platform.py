"""The nvml platform against scripted pynvml readings recorded on an H200 (driver 580.159.04)."""

from __future__ import annotations

import contextlib

import pytest

import devmem
from devmem import DevmemError, GiB, MemoryInfo, MiB
from devmem_nvidia import NvmlPlatform
from devmem_nvidia.testing import (
    H200_CHILD_1GIB,
    H200_CONTEXT,
    H200_CONTEXT_PLUS_512MIB,
    H200_RUNTIME_TOTAL,
    ScriptedNvidiaDriver,
    ScriptedNvml,
    h200_scenario,
    mig_scenario,
    scripted_platform,
    wsl2_scenario,
)

CHILD = 5151


nvml_platform = scripted_platform


# ---- device memory -------------------------------------------------------------------------------
def test_total_is_the_runtime_total_from_nvml_v2():
    assert nvml_platform(h200_scenario()).device_memory_info(0).total == 150109880320 == H200_RUNTIME_TOTAL


def test_free_is_nvml_v2_free_on_an_idle_h200():
    assert nvml_platform(h200_scenario()).device_memory_info(0) == MemoryInfo(150109880320, 150109880320)


def test_free_drops_by_this_process_context():
    info = nvml_platform(h200_scenario(context=True)).device_memory_info(0)
    assert info.free == 150109880320 - H200_CONTEXT


def test_v1_is_used_where_the_driver_lacks_v2():
    sc = h200_scenario(failures={"nvmlDeviceGetMemoryInfo_v2": "FunctionNotFound"})
    assert nvml_platform(sc).device_memory_info(0) == MemoryInfo(150109880320, 150754820096)


def test_v1_fallback_is_named_in_the_sources():
    sc = h200_scenario(failures={"nvmlDeviceGetMemoryInfo_v2": "FunctionNotFound"})
    assert "v1" in nvml_platform(sc).memory_sources(0)["total"]


def test_memory_info_makes_one_nvml_call_once_warm():
    sc = h200_scenario()
    nvml = ScriptedNvml(sc)
    platform = NvmlPlatform(nvml=nvml, files=sc.fs, environ=sc.environ)
    platform.device_memory_info(0)
    nvml.calls.clear()
    platform.device_memory_info(0)
    assert sum(nvml.calls.values()) == 1


# ---- this process --------------------------------------------------------------------------------
def test_process_usage_is_the_context_after_cuda_init():
    assert nvml_platform(h200_scenario(context=True)).get_process_memory_usage(0) == H200_CONTEXT


def test_process_usage_rises_by_a_512_mib_tensor():
    sc = h200_scenario(context=True)
    platform = nvml_platform(sc)
    sc.allocate(512 * MiB)
    assert platform.get_process_memory_usage(0) == H200_CONTEXT_PLUS_512MIB


def test_child_holding_1_gib_is_not_counted():
    sc = h200_scenario(context=True)
    platform = nvml_platform(sc)
    sc.allocate(H200_CHILD_1GIB, pid=CHILD)
    assert platform.get_process_memory_usage(0) == H200_CONTEXT


def test_child_is_listed_among_other_processes():
    sc = h200_scenario(context=True)
    sc.allocate(H200_CHILD_1GIB, pid=CHILD)
    assert nvml_platform(sc).other_processes_memory(0) == {CHILD: H200_CHILD_1GIB}


def test_process_without_a_context_holds_nothing():
    assert nvml_platform(h200_scenario()).get_process_memory_usage(0) == 0


def test_process_usage_takes_one_nvml_call_once_warm():
    sc = h200_scenario(context=True)
    nvml = ScriptedNvml(sc)
    platform = NvmlPlatform(nvml=nvml, files=sc.fs, environ=sc.environ)
    platform.get_process_memory_usage(0)
    nvml.calls.clear()
    platform.get_process_memory_usage(0)
    assert dict(nvml.calls) == {"nvmlDeviceGetComputeRunningProcesses_v3": 1}


def test_graphics_only_process_is_found_in_the_graphics_list():
    sc = h200_scenario(context=True)
    sc.driver(ScriptedNvidiaDriver).process_kinds[sc.pid] = "G"
    assert nvml_platform(sc).get_process_memory_usage(0) == H200_CONTEXT


def test_process_in_both_lists_is_counted_once():
    sc = h200_scenario(context=True)
    sc.driver(ScriptedNvidiaDriver).process_kinds[sc.pid] = "C+G"
    assert nvml_platform(sc).get_process_memory_usage(0) == H200_CONTEXT


def test_other_process_in_both_lists_is_counted_once():
    sc = h200_scenario(context=True)
    sc.allocate(GiB, pid=CHILD)
    sc.driver(ScriptedNvidiaDriver).process_kinds[CHILD] = "C+G"
    assert nvml_platform(sc).other_processes_memory(0) == {CHILD: GiB}


def test_mps_client_is_found_in_the_mps_list():
    sc = h200_scenario(context=True)
    sc.driver(ScriptedNvidiaDriver).process_kinds[sc.pid] = "M"
    assert nvml_platform(sc).get_process_memory_usage(0) == H200_CONTEXT


def test_old_driver_without_v3_process_calls_falls_back_to_v2():
    sc = h200_scenario(context=True, failures={"nvmlDeviceGetComputeRunningProcesses_v3": "FunctionNotFound"})
    assert nvml_platform(sc).get_process_memory_usage(0) == H200_CONTEXT


def test_raw_not_available_sentinel_becomes_none():
    sc = wsl2_scenario()
    sc.allocate(GiB)
    platform = NvmlPlatform(nvml=ScriptedNvml(sc, convert_not_available=False), files=sc.fs, environ=sc.environ)
    assert platform.get_process_memory_usage(0) is None


def test_not_available_usage_has_a_reason():
    sc = wsl2_scenario()
    sc.allocate(GiB)
    platform = nvml_platform(sc)
    platform.get_process_memory_usage(0)
    assert "not available" in platform.process_memory_reason(0)


def test_unattributed_others_are_not_listed():
    sc = wsl2_scenario()
    sc.allocate(GiB, pid=CHILD)
    assert nvml_platform(sc).other_processes_memory(0) is None


# ---- NVML errors ---------------------------------------------------------------------------------
@pytest.mark.parametrize("error", ["NotSupported", "Unknown", "GpuIsLost", "NoPermission"])
def test_process_list_errors_give_none(error):
    sc = h200_scenario(context=True, failures={"nvmlDeviceGet*RunningProcesses*": error})
    assert nvml_platform(sc).get_process_memory_usage(0) is None


@pytest.mark.parametrize("error", ["NotSupported", "Unknown", "GpuIsLost"])
def test_process_list_errors_are_explained(error):
    sc = h200_scenario(context=True, failures={"nvmlDeviceGet*RunningProcesses*": error})
    platform = nvml_platform(sc)
    platform.get_process_memory_usage(0)
    assert error in platform.process_memory_reason(0)


@pytest.mark.parametrize("error", ["NotSupported", "Unknown", "GpuIsLost"])
def test_memory_info_errors_raise_devmem_error(error):
    sc = h200_scenario(failures={"nvmlDeviceGetMemoryInfo*": error})
    with pytest.raises(DevmemError, match="nvidia-smi"):
        nvml_platform(sc).device_memory_info(0)


@pytest.mark.parametrize("error", ["NotSupported", "Unknown", "GpuIsLost"])
def test_errors_on_every_call_never_escape_as_nvml_errors(error):
    sc = h200_scenario(context=True)
    platform = nvml_platform(sc)
    platform.device_count()
    sc.failures["nvml*"] = error
    for method in (
        "device_memory_info",
        "get_process_memory_usage",
        "other_processes_memory",
        "device_name",
        "memory_sources",
        "notes",
        "process_memory_reason",
        "is_integrated_gpu",
        "pages_instead_of_failing",
    ):
        with contextlib.suppress(DevmemError):
            getattr(platform, method)(0)


@pytest.mark.parametrize("error", ["Unknown", "GpuIsLost", "DriverNotLoaded"])
def test_failed_init_raises_devmem_error(error):
    with pytest.raises(DevmemError, match=error):
        nvml_platform(h200_scenario(failures={"nvmlInit": error})).device_count()


def test_other_processes_are_none_when_nvml_fails():
    sc = h200_scenario(context=True, failures={"nvmlDeviceGet*RunningProcesses*": "Unknown"})
    assert nvml_platform(sc).other_processes_memory(0) is None


# ---- MIG -----------------------------------------------------------------------------------------
def test_mig_instance_memory_is_the_instance():
    sc = mig_scenario()
    assert nvml_platform(sc).device_memory_info(0) == MemoryInfo(71 * GiB, 71 * GiB)


def test_mig_instance_process_usage_is_nvml_instance_figure():
    sc = mig_scenario()
    sc.devices[0].mig[0].processes[sc.pid] = 3 * GiB
    assert nvml_platform(sc).get_process_memory_usage(0) == 3 * GiB


def test_mig_instance_ignores_the_other_instance():
    sc = mig_scenario()
    sc.devices[0].mig[0].processes[sc.pid] = 3 * GiB
    sc.devices[0].mig[1].processes[CHILD] = 5 * GiB
    assert nvml_platform(sc).other_processes_memory(0) == {}


def test_mig_free_falls_by_the_instance_usage():
    sc = mig_scenario()
    sc.devices[0].mig[1].processes[CHILD] = 5 * GiB
    assert nvml_platform(sc).device_memory_info(1).free == 18 * GiB - 512 * MiB - 5 * GiB


def test_mig_unavailable_usage_is_none_with_reason():
    sc = mig_scenario(failures={"nvmlDeviceGet*RunningProcesses*": "NoPermission"})
    sc.devices[0].mig[0].processes[sc.pid] = 3 * GiB
    platform = nvml_platform(sc)
    assert platform.get_process_memory_usage(0) is None
    assert "NoPermission" in platform.process_memory_reason(0)


def test_mig_note_names_the_instance():
    sc = mig_scenario()
    assert any("MIG instance" in n for n in nvml_platform(sc).notes(0))


# ---- people and indices ----------------------------------------------------------------------------
def test_device_name_is_nvml_name():
    assert nvml_platform(h200_scenario()).device_name(0) == "NVIDIA H200"


def test_bad_index_names_the_valid_range():
    with pytest.raises(DevmemError, match=r"0\.\.0"):
        nvml_platform(h200_scenario()).get_process_memory_usage(1)


def test_device_report_of_the_h200():
    sc = h200_scenario(context=True)
    sc.allocate(H200_CHILD_1GIB, pid=CHILD)
    report = devmem.device_report(nvml_platform(sc), 0)
    assert (report.process, report.other_processes, report.total) == (
        H200_CONTEXT,
        {CHILD: H200_CHILD_1GIB},
        H200_RUNTIME_TOTAL,
    )


def test_integrated_and_paging_are_false():
    platform = nvml_platform(h200_scenario())
    assert (platform.is_integrated_gpu(0), platform.pages_instead_of_failing(0)) == (False, False)
