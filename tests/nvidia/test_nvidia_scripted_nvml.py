"""ScriptedNvml mirrors the real pynvml (nvidia-ml-py): names, signatures, errors, attribute names, readings."""

from __future__ import annotations

import inspect

import pynvml
import pytest

from devmem_nvidia.testing import ScriptedNvml, h200_scenario, nvml_error

PUBLIC = sorted(n for n in dir(ScriptedNvml) if n.startswith(("nvml", "NVML")))
FUNCTIONS = [n for n in PUBLIC if callable(getattr(ScriptedNvml, n)) and n.startswith("nvml") and n != "nvmlMemory_v2"]


def ready(sc=None):
    nvml = ScriptedNvml(sc or h200_scenario())
    nvml.nvmlInit()
    return nvml, nvml.nvmlDeviceGetHandleByIndex(0)


def fields(struct) -> set[str]:
    return {name for name, _ in struct._fields_}


@pytest.mark.parametrize("name", PUBLIC)
def test_every_public_name_exists_in_pynvml(name):
    assert hasattr(pynvml, name)


@pytest.mark.parametrize("name", FUNCTIONS)
def test_functions_take_pynvml_parameters(name):
    real = [p.name for p in inspect.signature(getattr(pynvml, name)).parameters.values()]
    fake = [p.name for p in inspect.signature(getattr(ScriptedNvml(h200_scenario()), name)).parameters.values()]
    assert len(fake) == len(real)


def test_every_pynvml_error_class_exists_with_its_code():
    real = {n: getattr(pynvml, n)().value for n in dir(pynvml) if n.startswith("NVMLError_")}
    assert {n: getattr(ScriptedNvml, n)().value for n in real} == real


def test_nvml_error_maps_a_code_to_its_subclass():
    assert type(ScriptedNvml.NVMLError(3)).__name__ == type(pynvml.NVMLError(3)).__name__ == "NVMLError_NotSupported"


def test_subclass_is_caught_as_nvml_error():
    with pytest.raises(ScriptedNvml.NVMLError):
        raise nvml_error("GpuIsLost")


def test_calls_before_init_raise_uninitialized():
    with pytest.raises(ScriptedNvml.NVMLError_Uninitialized):
        ScriptedNvml(h200_scenario()).nvmlDeviceGetCount()


def test_v1_memory_has_pynvml_fields_and_the_h200_reading():
    nvml, h = ready()
    m = nvml.nvmlDeviceGetMemoryInfo(h)
    assert {f: getattr(m, f) for f in fields(pynvml.c_nvmlMemory_t)} == {
        "total": 150754820096,
        "free": 150109880320,
        "used": 644939776,
    }


def test_v2_memory_has_pynvml_fields_and_the_h200_reading():
    nvml, h = ready()
    m = nvml.nvmlDeviceGetMemoryInfo(h, pynvml.nvmlMemory_v2)
    assert {f: getattr(m, f) for f in fields(pynvml.c_nvmlMemory_v2_t)} == {
        "version": pynvml.nvmlMemory_v2,
        "total": 150754820096,
        "reserved": 644939776,
        "free": 150109880320,
        "used": 0,
    }


def test_process_entries_have_pynvml_fields():
    nvml, h = ready(h200_scenario(context=True))
    entry = nvml.nvmlDeviceGetComputeRunningProcesses(h)[0]
    assert fields(pynvml.c_nvmlProcessInfo_t) <= set(vars(entry))


def test_unversioned_call_without_v3_raises_library_mismatch():
    nvml, h = ready(h200_scenario(failures={"nvmlDeviceGetComputeRunningProcesses_v3": "FunctionNotFound"}))
    with pytest.raises(ScriptedNvml.NVMLLibraryMismatchError):
        nvml.nvmlDeviceGetComputeRunningProcesses(h)


def test_handles_by_uuid_and_pci_bus_id_are_the_same_device():
    nvml, h = ready()
    sc = nvml.scenario
    assert nvml.nvmlDeviceGetHandleByUUID(sc.devices[0].uuid) == nvml.nvmlDeviceGetHandleByPciBusId("0000:19:00.0") == h


def test_pci_bus_id_is_bytes_as_in_pynvml():
    nvml, h = ready()
    assert nvml.nvmlDeviceGetPciInfo(h).busId == b"00000000:19:00.0"


def test_glob_failure_hits_every_matching_call():
    nvml, h = ready(h200_scenario(failures={"nvmlDeviceGetMemoryInfo*": "GpuIsLost"}))
    with pytest.raises(ScriptedNvml.NVMLError_GpuIsLost):
        nvml.nvmlDeviceGetMemoryInfo(h, pynvml.nvmlMemory_v2)
