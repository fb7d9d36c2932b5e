"""One reading per device: Platform.read gives every figure from one set of vendor calls (each NVML query at most
once), and device_report, MemorySnapshot.measure and the CLI use it."""

from __future__ import annotations

import pytest

import devmem
from devmem.cpu import CpuPlatform
from devmem.engine.profiling import MemorySnapshot
from devmem_nvidia.testing import (
    MPS_SERVER_PID,
    ScriptedLibcuda,
    ScriptedNvml,
    h200_scenario,
    mig_scenario,
    mps_scenario,
    scripted_platform,
)

SCENARIOS = {
    "h200": h200_scenario,
    "h200-with-context": lambda: h200_scenario(context=True),
    "mps": mps_scenario,
}


def counted(make_scenario):
    sc = make_scenario()
    nvml, cuda = ScriptedNvml(sc), ScriptedLibcuda(sc)
    platform = scripted_platform(sc, nvml=nvml, cuda=cuda)
    platform.device_count()  # the device table, read once per platform
    nvml.calls.clear()
    return platform, nvml, cuda


@pytest.mark.parametrize("scenario", list(SCENARIOS))
def test_a_report_asks_each_nvml_query_at_most_once(scenario):
    platform, nvml, _ = counted(SCENARIOS[scenario])
    devmem.device_report(platform, 0)
    repeated = {name: n for name, n in nvml.calls.items() if n > 1}
    assert not repeated, f"NVML queries asked more than once for one report: {repeated}"


def test_a_mig_report_reads_the_instance_and_its_parent_once_each():
    platform, nvml, _ = counted(mig_scenario)
    devmem.device_report(platform, 0)
    assert nvml.calls["nvmlDeviceGetMemoryInfo_v2"] == 2  # the instance's figures, and the parent's for a note
    assert nvml.calls["nvmlDeviceGetComputeRunningProcesses_v3"] == 1


def test_a_report_reads_the_runtime_once():
    platform, _, cuda = counted(lambda: h200_scenario(context=True))
    devmem.device_report(platform, 0)
    assert cuda.calls["cuMemGetInfo_v2"] == 1


def test_a_snapshot_asks_each_nvml_query_at_most_once():
    platform, nvml, _ = counted(mps_scenario)
    MemorySnapshot.measure(0, platform)
    assert max(nvml.calls.values()) == 1, dict(nvml.calls)


def test_readings_outside_a_report_ask_nvml_again():
    platform, nvml, _ = counted(h200_scenario)
    platform.device_memory_info(0)
    platform.device_memory_info(0)
    assert nvml.calls["nvmlDeviceGetMemoryInfo_v2"] == 2


def test_a_reading_carries_every_figure_of_the_contract():
    platform, _, _ = counted(mps_scenario)
    reading = platform.read(0)
    assert reading.info == platform.device_memory_info(0)
    assert reading.process == platform.process_memory(0)
    assert reading.other_processes == platform.other_processes_memory(0)
    assert dict(reading.roles) == platform.process_roles(0) == {MPS_SERVER_PID: "MPS server"}
    assert list(reading.notes) == platform.notes(0)
    assert reading.name == platform.device_name(0)


def test_a_failed_process_list_is_asked_once_and_gives_its_reason():
    sc = mps_scenario()
    sc.failures["nvmlDeviceGetComputeRunningProcesses*"] = "NVML_ERROR_UNKNOWN"
    nvml = ScriptedNvml(sc)
    platform = scripted_platform(sc, nvml=nvml)
    platform.device_count()
    reading = platform.read(0)
    assert reading.process.used is None and reading.process.reason.kind is devmem.sdk.ReasonKind.QUERY_FAILED
    assert nvml.calls["nvmlDeviceGetComputeRunningProcesses_v3"] == 1


def test_the_default_reading_composes_the_hooks():
    platform = CpuPlatform()
    reading = platform.read(0)
    assert (reading.name, reading.integrated, reading.process.reason) == (
        platform.device_name(0),
        platform.is_integrated_gpu(0),
        platform.process_memory(0).reason,
    )


def test_read_checks_the_index():
    with pytest.raises(devmem.DevmemError, match="valid indices: 0..0"):
        CpuPlatform().read(1)


def test_read_device_composes_a_reading_for_a_platform_without_read():
    class Listed:  # every member of the Platform protocol but `read`, as platforms written before it have
        def __init__(self):
            self._inner = CpuPlatform()

        def __getattr__(self, name):
            if name == "read":
                raise AttributeError(name)
            return getattr(self._inner, name)

    reading = devmem.engine.read_device(Listed(), 0)
    assert reading.memory.sources == CpuPlatform().memory(0).sources


def test_an_engine_memory_created_before_the_context_asks_each_nvml_query_at_most_once(tmp_path):
    # prepare, the baseline and the admission share one reading; a process that holds a context already also
    # lists the device's processes in prepare (to learn its driver-side PID), before that reading
    platform, nvml, _ = counted(h200_scenario)
    memory = devmem.EngineMemory(0, utilization=0.1, platform=platform, ledger_dir=tmp_path)
    memory.close()
    repeated = {name: n for name, n in nvml.calls.items() if n > 1}
    assert not repeated, f"NVML queries asked more than once by one EngineMemory(): {repeated}"
