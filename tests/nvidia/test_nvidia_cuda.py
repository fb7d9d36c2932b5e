"""The cuda platform: NVIDIA GPUs through the CUDA driver API where NVML cannot serve."""

from __future__ import annotations

import pytest

from devmem import DevmemError, GiB, MemoryInfo
from devmem.sdk import ReasonKind
from devmem.testing import Scenario
from devmem_nvidia import cuda_plugin, detect_cuda, detect_nvml, plugin
from devmem_nvidia.testing import (
    H200_CONTEXT,
    H200_RUNTIME_TOTAL,
    ScriptedLibcuda,
    ScriptedNvidiaDriver,
    ScriptedNvidiaGpu,
    ScriptedNvml,
    h200_scenario,
    scripted_cuda_platform,
)


def no_nvml_scenario(**kwargs):
    """An H200 in a container without libnvidia-ml: the CUDA driver library is there, NVML is not."""
    sc = h200_scenario(**kwargs)
    sc.driver(ScriptedNvidiaDriver).libraries.discard("nvml")
    return sc


def find_in(sc):
    return lambda name: "libcuda.so.1" if name in sc.driver(ScriptedNvidiaDriver).libraries else None


def test_cuda_ranks_below_nvml_and_above_cpu():
    nvml = next(s for s in plugin.devmem_platforms() if s.name == "nvml")
    (cuda,) = cuda_plugin.devmem_platforms()
    assert nvml.priority > cuda.priority > 0


def test_machine_without_nvml_detects_cuda_instead():
    sc = no_nvml_scenario()
    assert not detect_nvml(ScriptedNvml(sc), files=sc.fs).detected
    assert detect_cuda(sc.fs, find_in(sc), "linux").detected


def test_no_cuda_library_is_not_detected():
    sc = no_nvml_scenario()
    sc.driver(ScriptedNvidiaDriver).libraries.discard("cuda")
    assert "not installed" in detect_cuda(sc.fs, find_in(sc), "linux").reason


def test_no_driver_is_not_detected():
    assert not detect_cuda(Scenario(devices=[]).fs, lambda name: "libcuda.so.1", "linux").detected


def test_free_and_total_are_the_runtime_figures_with_a_context():
    info = scripted_cuda_platform(no_nvml_scenario(context=True)).device_memory_info(0)
    assert info == MemoryInfo(H200_RUNTIME_TOTAL - H200_CONTEXT, H200_RUNTIME_TOTAL)


def test_reading_creates_no_context():
    sc = no_nvml_scenario()
    library = ScriptedLibcuda(sc)
    scripted_cuda_platform(sc, library=library).memory(0)
    assert library.contexts_created == 0 and library.calls["cuMemGetInfo_v2"] == 0


def test_without_a_context_free_is_total_and_says_it_was_not_readable():
    memory = scripted_cuda_platform(no_nvml_scenario()).memory(0)
    assert memory.info == MemoryInfo(H200_RUNTIME_TOTAL, H200_RUNTIME_TOTAL)
    assert memory.sources["free"].startswith("not readable: this process has no CUDA context")


def test_the_context_is_left_as_it_was():
    sc = no_nvml_scenario(context=True)
    library = ScriptedLibcuda(sc)
    scripted_cuda_platform(sc, library=library).memory(0)
    assert library.calls["cuDevicePrimaryCtxRetain"] == library.calls["cuDevicePrimaryCtxRelease_v2"] == 1
    assert library.calls["cuCtxPushCurrent_v2"] == library.calls["cuCtxPopCurrent_v2"] == 1


def test_process_memory_is_none_with_no_source():
    reason = scripted_cuda_platform(no_nvml_scenario()).process_memory(0).reason
    assert reason.kind is ReasonKind.NO_SOURCE


def test_mps_limit_caps_the_cuda_figures():
    sc = no_nvml_scenario(context=True)
    sc.environ["CUDA_MPS_PINNED_DEVICE_MEM_LIMIT"] = "0=8G"
    assert scripted_cuda_platform(sc).device_memory_info(0).total == 8 * GiB


def test_visible_devices_are_the_driver_s():
    sc = Scenario(
        devices=[ScriptedNvidiaGpu(), ScriptedNvidiaGpu(name="NVIDIA H100", pci_bus_id="00000000:1A:00.0")],
        drivers=[ScriptedNvidiaDriver(libraries={"cuda"})],
        environ={"CUDA_VISIBLE_DEVICES": "1"},
    )
    platform = scripted_cuda_platform(sc)
    assert (platform.device_count(), platform.device_name(0)) == (1, "NVIDIA H100")


def test_driver_that_fails_to_initialise_is_a_devmem_error():
    sc = no_nvml_scenario(failures={"cuInit": "CUDA_ERROR_UNKNOWN"})
    with pytest.raises(DevmemError, match="cuInit failed: CUDA_ERROR_UNKNOWN"):
        scripted_cuda_platform(sc)


def test_failing_memory_call_is_a_devmem_error_naming_it():
    sc = no_nvml_scenario(context=True, failures={"cuMemGetInfo_v2": "CUDA_ERROR_UNKNOWN"})
    with pytest.raises(DevmemError, match="cuMemGetInfo_v2 failed: CUDA_ERROR_UNKNOWN"):
        scripted_cuda_platform(sc).memory(0)


def test_device_name_is_the_driver_s():
    assert scripted_cuda_platform(no_nvml_scenario()).device_name(0) == "NVIDIA H200"


def test_current_context_on_the_device_answers_without_retaining_the_primary_one():
    from devmem_nvidia.cuda_driver import CudaDriver

    sc = h200_scenario(context=True)
    lib = ScriptedLibcuda(sc, current=0)
    assert CudaDriver(lib).mem_get_info(0) == sc.mem_get_info(0)
    assert lib.calls["cuDevicePrimaryCtxRetain"] == 0


def test_without_a_current_context_the_primary_one_is_retained_for_the_call():
    from devmem_nvidia.cuda_driver import CudaDriver

    sc = h200_scenario(context=True)
    lib = ScriptedLibcuda(sc)
    assert CudaDriver(lib).mem_get_info(0) == sc.mem_get_info(0)
    assert lib.calls["cuDevicePrimaryCtxRetain"] == lib.calls["cuDevicePrimaryCtxRelease_v2"] == 1


# ---- identity: the same UUID as NVML, so that both platforms share one reservation ledger per device -------------


def test_the_device_uuid_is_the_one_nvml_gives_the_same_device():
    from devmem_nvidia.nvml_platform import NvmlPlatform

    sc = h200_scenario()
    nvml = NvmlPlatform(nvml=ScriptedNvml(sc), files=sc.fs, environ=sc.environ)
    assert scripted_cuda_platform(sc).device_uuid(0) == nvml.device_uuid(0) == ScriptedNvidiaGpu().uuid


def test_both_platforms_key_the_device_alike_in_the_reservation_ledger():
    from devmem.engine.reservations import device_key
    from devmem_nvidia.nvml_platform import NvmlPlatform

    sc = h200_scenario()
    nvml = NvmlPlatform(nvml=ScriptedNvml(sc), files=sc.fs, environ=sc.environ)
    assert device_key(scripted_cuda_platform(sc), 0) == device_key(nvml, 0)


def test_a_mig_instance_is_named_by_its_own_uuid_where_the_v2_call_answers_it():
    instance = "MIG-0a1b2c3d-4e5f-6071-8293-a4b5c6d7e8f9"

    class MigLibcuda(ScriptedLibcuda):  # the driver of a MIG instance: v2 answers the instance, v1 its GPU
        def cuDeviceGetUuid_v2(self, raw, dev):
            raw[:] = bytes.fromhex(instance[4:].replace("-", ""))
            return 0

    sc = no_nvml_scenario()
    assert scripted_cuda_platform(sc, library=MigLibcuda(sc)).device_uuid(0) == instance


def test_a_driver_without_the_v2_call_still_names_the_gpu():
    sc = no_nvml_scenario()
    sc.failures["cuDeviceGetUuid_v2"] = "CUDA_ERROR_INVALID_VALUE"
    assert scripted_cuda_platform(sc).device_uuid(0) == ScriptedNvidiaGpu().uuid


def test_a_uuid_the_driver_cannot_answer_is_none():
    sc = no_nvml_scenario()
    sc.failures["cuDeviceGetUuid"] = "CUDA_ERROR_UNKNOWN"
    assert scripted_cuda_platform(sc).device_uuid(0) is None
