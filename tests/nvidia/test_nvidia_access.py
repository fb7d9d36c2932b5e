"""The shared NVML access layer: one initialisation, errors as DevmemError, newest call first."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import pytest

from devmem import DevmemError, GiB
from devmem_nvidia.nvml_access import (
    NvmlCallError,
    NvmlSession,
    NvmlUnavailable,
    find_process,
    normalise_bus_id,
    read_memory,
    running_processes,
)
from devmem_nvidia.testing import H200_CONTEXT, ScriptedNvidiaDriver, ScriptedNvml, h200_scenario


def test_nvml_is_initialised_once_across_threads():
    nvml = ScriptedNvml(h200_scenario())
    session = NvmlSession(nvml)
    with ThreadPoolExecutor(16) as pool:
        list(pool.map(lambda _: session.device_count(), range(64)))
    assert nvml.calls["nvmlInit"] == 1


def test_failed_init_is_not_retried_on_every_call():
    nvml = ScriptedNvml(h200_scenario(failures={"nvmlInit": "DriverNotLoaded"}))
    session = NvmlSession(nvml)
    for _ in range(3):
        with pytest.raises(NvmlUnavailable):
            session.device_count()
    assert nvml.calls["nvmlInit"] == 1


def test_probe_reports_failure_without_raising():
    ok, reason = NvmlSession(ScriptedNvml(h200_scenario(failures={"nvmlInit": "Unknown"}))).probe()
    assert (ok, "Unknown" in reason) == (False, True)


def test_nvml_errors_become_devmem_errors_with_the_error_name():
    session = NvmlSession(ScriptedNvml(h200_scenario(failures={"nvmlDeviceGetCount": "GpuIsLost"})))
    with pytest.raises(DevmemError) as info:
        session.device_count()
    assert isinstance(info.value, NvmlCallError) and info.value.error == "GpuIsLost"


def test_shared_session_is_one_per_process():
    assert NvmlSession.shared() is NvmlSession.shared()


def test_injected_module_gets_its_own_session():
    nvml = ScriptedNvml(h200_scenario())
    assert NvmlSession.for_module(nvml) is not NvmlSession.for_module(nvml)


def test_shutdown_undoes_the_initialisation():
    nvml = ScriptedNvml(h200_scenario())
    session = NvmlSession(nvml)
    session.device_count()
    session.shutdown()
    assert nvml.initialised == 0


def test_working_call_variant_is_remembered():
    nvml = ScriptedNvml(
        h200_scenario(context=True, failures={"nvmlDeviceGetComputeRunningProcesses_v3": "FunctionNotFound"})
    )
    session = NvmlSession(nvml)
    handle = session.handle_by_index(0)
    find_process(session, handle, [nvml.scenario.pid])
    nvml.calls.clear()
    find_process(session, handle, [nvml.scenario.pid])
    assert dict(nvml.calls) == {"nvmlDeviceGetComputeRunningProcesses_v2": 1}


def test_memory_reading_v2_separates_the_reservation():
    session = NvmlSession(ScriptedNvml(h200_scenario()))
    reading = read_memory(session, session.handle_by_index(0))
    assert (reading.version, reading.reserved, reading.runtime_total) == (2, 644939776, 150109880320)


def test_v1_is_remembered_once_v2_is_missing():
    nvml = ScriptedNvml(h200_scenario(failures={"nvmlDeviceGetMemoryInfo_v2": "FunctionNotFound"}))
    session = NvmlSession(nvml)
    handle = session.handle_by_index(0)
    read_memory(session, handle)
    nvml.calls.clear()
    read_memory(session, handle)
    assert dict(nvml.calls) == {"nvmlDeviceGetMemoryInfo": 1}


def test_running_processes_merge_both_lists_by_pid():
    sc = h200_scenario(context=True)
    sc.allocate(GiB, pid=77)
    sc.driver(ScriptedNvidiaDriver).process_kinds.update({sc.pid: "C+G", 77: "G"})
    session = NvmlSession(ScriptedNvml(sc))
    entries = running_processes(session, session.handle_by_index(0))
    assert {pid: (e.used, e.lists) for pid, e in entries.items()} == {
        sc.pid: (H200_CONTEXT, ("compute", "graphics")),
        77: (GiB, ("graphics",)),
    }


def test_one_odd_entry_does_not_break_the_list():
    sc = h200_scenario(context=True)

    class OddEntry(ScriptedNvml):
        def nvmlDeviceGetComputeRunningProcesses_v3(self, handle):
            return [object()] + super().nvmlDeviceGetComputeRunningProcesses_v3(handle)

    session = NvmlSession(OddEntry(sc))
    assert find_process(session, session.handle_by_index(0), [sc.pid]).used == H200_CONTEXT


def test_find_process_raises_when_no_list_can_be_read():
    session = NvmlSession(ScriptedNvml(h200_scenario(failures={"nvmlDeviceGet*RunningProcesses*": "NotSupported"})))
    with pytest.raises(NvmlCallError):
        find_process(session, session.handle_by_index(0), [1])


@pytest.mark.parametrize("raw", ["0000:19:00.0", "00000000:19:00.0", "0000:19:00.0\n", "00000000:19:00.0".lower()])
def test_bus_ids_normalise_to_nvml_form(raw):
    assert normalise_bus_id(raw) == "00000000:19:00.0"
