"""The rocm platform on scripted amdsmi: VRAM figures, this process's memory through both process-list APIs,
and every amdsmi failure becoming ``None`` with a reason or a DevmemError."""

from __future__ import annotations

import os

import pytest

from devmem.platform import device_report
from devmem.types import DevmemError, GiB, MiB
from devmem_rocm import RocmPlatform
from devmem_rocm.testing import (
    MI300X_IDLE_USED,
    MI300X_TOTAL,
    RX7900XTX_TOTAL,
    ScriptedAmdsmi,
    ScriptedClock,
    mi300x_scenario,
    radeon_scenario,
)


def platform_for(sc, **amdsmi_options) -> RocmPlatform:
    clock = amdsmi_options.setdefault("clock", ScriptedClock())
    return RocmPlatform(amdsmi=ScriptedAmdsmi(sc, **amdsmi_options), environ=sc.environ, clock=clock, sleep=clock.sleep)


# ---- device memory -----------------------------------------------------------------------------------
def test_memory_info_is_the_vram_total_and_total_minus_used():
    info = platform_for(mi300x_scenario()).device_memory_info(0)
    assert info.total == MI300X_TOTAL
    assert info.free == MI300X_TOTAL - MI300X_IDLE_USED


def test_memory_info_agrees_with_the_runtime_after_allocations():
    sc = radeon_scenario()
    platform = platform_for(sc)
    sc.allocate(6 * GiB)
    sc.allocate(3 * GiB, pid=sc.other_pid)
    assert tuple(platform.device_memory_info(0)) == sc.mem_get_info(0)
    assert platform.device_memory_info(0).total == RX7900XTX_TOTAL


def test_a_discrete_gpu_is_neither_integrated_nor_paging():
    platform = platform_for(mi300x_scenario())
    assert (platform.is_integrated_gpu(0), platform.pages_instead_of_failing(0)) == (False, False)


def test_device_name_is_the_market_name_and_notes_carry_the_gfx_target():
    platform = platform_for(mi300x_scenario())
    assert platform.device_name(0) == "AMD Instinct MI300X"
    assert platform.notes(0)[0].startswith("gfx target gfx942; HIP device 0 is 0000:05:00.0")


# ---- this process and the others ------------------------------------------------------------------------
@pytest.mark.parametrize("api", ["list", "handles"])
def test_process_usage_is_this_process_vram(api):
    sc = mi300x_scenario()
    platform = platform_for(sc, api=api)
    sc.allocate(5 * GiB + 14 * MiB)
    assert platform.get_process_memory_usage(0) == 5 * GiB + 14 * MiB
    assert platform.process_memory_reason(0) is None


@pytest.mark.parametrize("api", ["list", "handles"])
def test_other_processes_are_listed_and_not_counted_as_ours(api):
    sc = mi300x_scenario()
    platform = platform_for(sc, api=api)
    sc.allocate(2 * GiB)
    sc.allocate(40 * GiB, pid=sc.other_pid)
    assert platform.get_process_memory_usage(0) == 2 * GiB
    assert platform.other_processes_memory(0) == {sc.other_pid: 40 * GiB}


def test_sources_name_the_process_api_in_use():
    sc = mi300x_scenario()
    platform = platform_for(sc, api="handles")
    platform.get_process_memory_usage(0)
    assert "amdsmi_get_gpu_process_info" in platform.memory_sources(0)["process"]


def test_a_process_not_listed_holds_nothing_on_the_gpu():
    sc = mi300x_scenario()
    sc.allocate(8 * GiB, pid=sc.other_pid)
    assert platform_for(sc).get_process_memory_usage(0) == 0


def test_process_figures_wait_for_amdsmi_to_have_run_one_second():
    sc = mi300x_scenario()
    clock = ScriptedClock()
    platform = platform_for(sc, settle_s=1.0, clock=clock)
    sc.allocate(3 * GiB)
    assert platform.get_process_memory_usage(0) == 3 * GiB
    assert sum(clock.slept) == pytest.approx(1.0)


def test_no_wait_once_amdsmi_has_run_a_second():
    sc = mi300x_scenario()
    clock = ScriptedClock()
    platform = platform_for(sc, settle_s=1.0, clock=clock)
    clock.advance(1.5)
    platform.get_process_memory_usage(0)
    assert clock.slept == []


def test_an_odd_process_entry_does_not_break_the_list():
    sc = mi300x_scenario()
    fake = ScriptedAmdsmi(sc)
    listing = fake.amdsmi_get_gpu_process_list
    fake.amdsmi_get_gpu_process_list = lambda h: [{"name": "zombie"}, {"pid": "?", "memory_usage": {}}] + listing(h)
    platform = RocmPlatform(amdsmi=fake, environ={}, sleep=ScriptedClock().sleep)
    sc.allocate(GiB)
    sc.allocate(GiB, pid=sc.other_pid)
    assert platform.get_process_memory_usage(0) == GiB
    assert platform.other_processes_memory(0) == {sc.other_pid: GiB}


def test_this_process_without_a_vram_figure_is_unknown_with_a_reason():
    sc = mi300x_scenario()
    fake = ScriptedAmdsmi(sc)
    listing = fake.amdsmi_get_gpu_process_list

    def na(h):
        entries = listing(h)
        for e in entries:
            e["memory_usage"]["vram_mem"] = "N/A"
        return entries

    fake.amdsmi_get_gpu_process_list = na
    platform = RocmPlatform(amdsmi=fake, environ={}, sleep=ScriptedClock().sleep)
    sc.allocate(GiB)
    assert platform.get_process_memory_usage(0) is None
    assert "N/A" in platform.process_memory_reason(0)


def test_unattributed_memory_is_noted_with_the_reason():
    sc = mi300x_scenario()
    sc.devices[0].base_used += 12 * GiB  # another user's process, which amdsmi lists only to root
    notes = platform_for(sc).notes(0)
    assert any("not attributed to any listed process" in n and "as root" in n for n in notes)


def test_describe_reports_this_process_and_the_others():
    sc = mi300x_scenario()
    platform = platform_for(sc)
    sc.allocate(GiB)
    sc.allocate(2 * GiB, pid=sc.other_pid)
    report = device_report(platform, 0)
    assert (report.name, report.process, report.other_processes) == (
        "AMD Instinct MI300X",
        GiB,
        {sc.other_pid: 2 * GiB},
    )
    assert report.process_reason is None and report.sources["total"].startswith("amdsmi VRAM total")


# ---- amdsmi failures ------------------------------------------------------------------------------------
@pytest.mark.parametrize("call", ["amdsmi_get_gpu_memory_total", "amdsmi_get_gpu_memory_usage"])
@pytest.mark.parametrize("error", ["GpuIsLost", "NoPermission", "Unknown", "Busy"])
def test_a_failing_memory_call_is_a_devmem_error_naming_the_gpu(call, error):
    sc = mi300x_scenario()
    platform = platform_for(sc)
    sc.failures[call] = error
    with pytest.raises(DevmemError, match=rf"device 0, AMD Instinct MI300X \(gfx942, 0000:05:00.0\): {call} failed"):
        platform.device_memory_info(0)


@pytest.mark.parametrize(
    "api,call",
    [
        ("list", "amdsmi_get_gpu_process_list"),
        ("handles", "amdsmi_get_gpu_process_list"),
        ("handles", "amdsmi_get_gpu_process_info"),
    ],
)
@pytest.mark.parametrize("error", ["NotSupported", "Retry", "Timeout", "Unknown"])
def test_a_failing_process_call_gives_none_with_a_reason(api, call, error):
    sc = mi300x_scenario()
    platform = platform_for(sc, api=api)
    sc.allocate(GiB)
    sc.failures[call] = error
    assert platform.get_process_memory_usage(0) is None
    assert platform.other_processes_memory(0) is None
    assert f"{call} failed" in platform.process_memory_reason(0)
    del sc.failures[call]
    assert platform.get_process_memory_usage(0) == GiB
    assert platform.process_memory_reason(0) is None


def test_a_permission_error_says_how_to_see_the_processes():
    sc = mi300x_scenario(failures={"amdsmi_get_gpu_process_list": "NoPermission"})
    platform = platform_for(sc)
    assert platform.get_process_memory_usage(0) is None
    assert "AMDSMI_STATUS_NO_PERM" in platform.process_memory_reason(0)
    assert "run as root" in platform.process_memory_reason(0)


def test_process_info_failing_for_another_process_skips_only_that_one():
    sc = mi300x_scenario()
    fake = ScriptedAmdsmi(sc, api="handles")
    describe_process = fake.amdsmi_get_gpu_process_info

    def gone(handle, process):
        if process.value == sc.other_pid:
            raise fake.AmdSmiLibraryException(31)  # the process exited between the two calls
        return describe_process(handle, process)

    fake.amdsmi_get_gpu_process_info = gone
    platform = RocmPlatform(amdsmi=fake, environ={}, sleep=ScriptedClock().sleep)
    sc.allocate(GiB)
    sc.allocate(GiB, pid=sc.other_pid)
    assert platform.get_process_memory_usage(0) == GiB
    assert platform.other_processes_memory(0) == {}


@pytest.mark.parametrize("call", ["amdsmi_init", "amdsmi_get_processor_handles", "amdsmi_get_gpu_device_bdf"])
def test_amdsmi_failing_to_list_gpus_is_a_devmem_error_at_construction(call):
    sc = mi300x_scenario(failures={call: "DriverNotLoaded"})
    with pytest.raises(DevmemError, match=f"rocm: cannot list AMD GPUs through amdsmi: {call}"):
        platform_for(sc)


@pytest.mark.parametrize(
    "call",
    [
        "amdsmi_get_processor_type",
        "amdsmi_get_gpu_device_uuid",
        "amdsmi_get_gpu_asic_info",
        "amdsmi_get_gpu_enumeration_info",
    ],
)
def test_a_failing_identity_call_leaves_a_working_platform(call):
    sc = mi300x_scenario(2, failures={call: "NotSupported"})
    platform = platform_for(sc)
    assert platform.device_count() == 2
    assert platform.device_memory_info(1).total == MI300X_TOTAL
    expected = "AMD GPU" if call == "amdsmi_get_gpu_asic_info" else "AMD Instinct MI300X"
    assert platform.device_name(0) == expected


def test_no_public_method_lets_a_raw_amdsmi_exception_escape():
    sc = mi300x_scenario()
    platform = platform_for(sc)
    sc.failures["amdsmi_*"] = "Unknown"
    for method in ("device_memory_info", "notes"):
        try:
            getattr(platform, method)(0)
        except Exception as exc:
            assert isinstance(exc, DevmemError), f"{method} raised {type(exc).__name__}"
    assert platform.get_process_memory_usage(0) is None
    assert platform.other_processes_memory(0) is None


def test_own_pid_is_the_pid_amdsmi_lists():
    sc = mi300x_scenario()
    assert sc.pid == os.getpid()
    platform = platform_for(sc)
    sc.allocate(GiB)
    assert platform.get_process_memory_usage(0) == GiB
