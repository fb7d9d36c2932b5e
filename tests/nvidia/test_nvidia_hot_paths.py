"""The nvml platform's hot paths: ``device_memory_info`` and ``get_process_memory_usage`` make only the vendor calls
their answer needs, and what the platform keeps between calls never makes an answer depend on earlier calls."""

from __future__ import annotations

from devmem import GiB
from devmem.sdk import REAL_FILES
from devmem_nvidia.pidns import AddressSpaceFiles, maps_nvidia_device
from devmem_nvidia.testing import (
    H200_CONTEXT,
    H200_RUNTIME_TOTAL,
    ScriptedLibcuda,
    ScriptedNvml,
    h200_scenario,
    mps_scenario,
    scripted_platform,
)

OTHER_PID = 4242


def platform_on(sc, **cuda_kwargs):
    nvml, cuda = ScriptedNvml(sc), ScriptedLibcuda(sc, **cuda_kwargs)
    return scripted_platform(sc, nvml=nvml, cuda=cuda), nvml, cuda


def second_call(platform, nvml, cuda, call):
    """``call(platform)`` after a first one, with the vendor calls of the second counted."""
    call(platform)
    nvml.calls.clear()
    cuda.calls.clear()
    return call(platform)


def memory_info(platform):
    return platform.device_memory_info(0)


def process_usage(platform):
    return platform.get_process_memory_usage(0)


def test_memory_info_without_a_context_is_one_nvml_call():
    platform, nvml, cuda = platform_on(h200_scenario())
    second_call(platform, nvml, cuda, memory_info)
    assert dict(nvml.calls) == {"nvmlDeviceGetMemoryInfo_v2": 1} and not cuda.calls


def test_memory_info_with_a_context_and_no_runtime_cap_asks_only_nvml():
    platform, nvml, cuda = platform_on(h200_scenario(context=True))
    info = second_call(platform, nvml, cuda, memory_info)
    assert dict(nvml.calls) == {"nvmlDeviceGetMemoryInfo_v2": 1} and cuda.calls["cuMemGetInfo_v2"] == 0
    assert info.total == H200_RUNTIME_TOTAL


def test_memory_info_under_mps_asks_the_runtime_on_every_call():
    platform, nvml, cuda = platform_on(mps_scenario(), mps_limits={0: 8 * GiB})
    info = second_call(platform, nvml, cuda, memory_info)
    assert cuda.calls["cuMemGetInfo_v2"] == 1 and info.total == 8 * GiB


def test_an_interposed_cap_is_applied_on_every_call():
    platform, nvml, cuda = platform_on(h200_scenario(context=True), interposed_limits={0: 16 * GiB})
    info = second_call(platform, nvml, cuda, memory_info)
    assert info.total == 16 * GiB


def test_an_mps_cap_that_shows_only_once_others_free_memory_is_seen_as_a_new_platform_sees_it():
    sc = mps_scenario()
    others = sc.device_free(0) - 4 * GiB  # the device nearly full: the 8 GiB cap is above NVML's free at first
    sc.allocate(others, pid=OTHER_PID)
    platform, _, _ = platform_on(sc, mps_limits={0: 8 * GiB})
    platform.device_memory_info(0)
    sc.release(others, pid=OTHER_PID)
    fresh, _, _ = platform_on(sc, mps_limits={0: 8 * GiB})
    assert platform.device_memory_info(0) == fresh.device_memory_info(0)
    assert platform.device_memory_info(0).total == 8 * GiB


def test_memory_info_is_the_same_through_the_hot_path_and_the_whole_reading():
    platform, _, _ = platform_on(h200_scenario(context=True))
    assert platform.device_memory_info(0) == platform.memory(0).info == platform.device_memory_info(0)


def test_an_environment_limit_set_after_the_first_reading_is_not_read():
    sc = h200_scenario()
    platform, _, _ = platform_on(sc)
    platform.device_memory_info(0)
    sc.environ["CUDA_MPS_PINNED_DEVICE_MEM_LIMIT"] = "8G"  # as the CUDA runtime, which reads it once at its start
    assert platform.device_memory_info(0).total == H200_RUNTIME_TOTAL
    assert platform_on(sc)[0].device_memory_info(0).total == 8 * GiB


def test_process_usage_without_a_context_asks_nvml_nothing():
    platform, nvml, cuda = platform_on(h200_scenario())
    assert second_call(platform, nvml, cuda, process_usage) == 0
    assert not nvml.calls and not cuda.calls


def test_process_usage_with_a_context_is_one_nvml_call():
    platform, nvml, cuda = platform_on(h200_scenario(context=True))
    assert second_call(platform, nvml, cuda, process_usage) == H200_CONTEXT
    assert dict(nvml.calls) == {"nvmlDeviceGetComputeRunningProcesses_v3": 1}


def test_an_mps_client_is_found_in_the_mps_list():
    platform, _, _ = platform_on(mps_scenario())
    assert platform.get_process_memory_usage(0) == H200_CONTEXT


def test_process_usage_follows_a_context_created_after_earlier_readings():
    sc = h200_scenario()
    platform, _, _ = platform_on(sc)
    assert platform.get_process_memory_usage(0) == 0
    sc.allocate(H200_CONTEXT)
    assert platform.get_process_memory_usage(0) == H200_CONTEXT


def test_process_usage_answers_as_process_memory_does():
    platform, _, _ = platform_on(mps_scenario())
    assert platform.get_process_memory_usage(0) == platform.process_memory(0).used


def test_kept_statm_answers_as_the_real_maps_do():
    assert AddressSpaceFiles(REAL_FILES).maps_nvidia_device(None) == maps_nvidia_device(REAL_FILES)


NO_DEVICE_MAPS = "00400000-00401000 r-xp 00000000 00:00 0 /usr/bin/python3\n"


def test_a_listed_pid_is_another_namespaces_process_where_this_one_maps_no_node_of_the_device():
    sc = h200_scenario(context=True)
    sc.files["/proc/self/maps"] = NO_DEVICE_MAPS
    platform, _, _ = platform_on(sc)
    assert platform.get_process_memory_usage(0) == 0


def test_a_device_node_a_container_names_by_another_number_does_not_hide_the_context():
    sc = h200_scenario(context=True)
    sc.files["/proc/self/maps"] = NO_DEVICE_MAPS + "7f0000000000-7f0000200000 rw-s 00000000 00:05 77 /dev/nvidia7\n"
    platform, _, _ = platform_on(sc)
    assert platform.get_process_memory_usage(0) == H200_CONTEXT


def test_process_usage_is_nvmls_figure_once_this_process_was_seen_mapping_the_device():
    sc = h200_scenario(context=True)
    platform, _, _ = platform_on(sc)
    platform.get_process_memory_usage(0)
    sc.files["/proc/self/maps"] = NO_DEVICE_MAPS  # a context, once made, stays mapped: the maps are not read again
    assert platform.get_process_memory_usage(0) == H200_CONTEXT
