"""Vendor figures that are not what they should be (a runtime's free above its total, an MPS daemon printing bytes
that are no text or answering slowly, amdsmi's ``True`` or negative VRAM, a process list that is ``None``, an
unreadable ``dmem.current``) give a correct number, ``None`` with a reason, or a note; never a traceback."""

from __future__ import annotations

import os
import stat
import threading

import pytest

from devmem import GiB, MemoryInfo
from devmem.sdk import ReasonKind
from devmem.testing import ScriptedClock
from devmem_nvidia.mps_control import daemon_limits, run_control
from devmem_nvidia.testing import (
    H200_CONTEXT,
    H200_RUNTIME_TOTAL,
    ScriptedLibcuda,
    ScriptedMpsControl,
    ScriptedNvml,
    h200_scenario,
    mps_scenario,
    scripted_cuda_platform,
    scripted_platform,
)
from devmem_rocm import RocmPlatform
from devmem_rocm.testing import ScriptedAmdsmi, mi300x_scenario
from devmem_uma import UmaPlatform
from devmem_uma.testing import GB10_TOTAL, gb10_scenario


# ---- the CUDA runtime's view -------------------------------------------------------------------------------
class FreeAboveTotalLibcuda(ScriptedLibcuda):
    """libcuda under a buggy interposer: an 8 GiB total and 9 GiB free."""

    def _mem_get_info(self, dev: int) -> tuple[int, int]:
        return 9 * GiB, 8 * GiB


def test_runtime_free_above_its_total_is_taken_as_the_total_with_a_note():
    sc = h200_scenario(context=True)
    platform = scripted_platform(sc, cuda=FreeAboveTotalLibcuda(sc))
    assert platform.device_memory_info(0).total == 8 * GiB
    assert any("above its total" in note and "cuMemGetInfo" in note for note in platform.notes(0))


@pytest.mark.parametrize("answer", [(float("nan"), GB10_TOTAL), ("x", "y"), (1, 2, 3), (True, GB10_TOTAL)])
def test_unified_memory_runtime_answer_that_is_no_pair_of_byte_counts_falls_back_to_memtotal(answer):
    sc = gb10_scenario()
    platform = UmaPlatform(nvml=ScriptedNvml(sc), files=sc.fs, environ=sc.environ, mem_get_info=lambda d: answer)
    assert platform.device_memory_info(0).total == sc.host.total


# ---- the MPS control daemon --------------------------------------------------------------------------------
@pytest.fixture
def control_program(tmp_path, monkeypatch):
    """Install a ``nvidia-cuda-mps-control`` that prints ``output`` (bytes, as printf writes them) on PATH."""

    def install(output: str) -> None:
        program = tmp_path / "nvidia-cuda-mps-control"
        program.write_text(f"#!/bin/sh\ncat > /dev/null\nprintf '{output}'\n")
        program.chmod(program.stat().st_mode | stat.S_IXUSR)
        monkeypatch.setenv("PATH", f"{tmp_path}{os.pathsep}{os.environ.get('PATH', '')}")

    return install


def test_mps_daemon_answer_is_read_from_its_program(control_program):
    control_program("8G\\n")
    assert scripted_platform(mps_scenario(), mps_control=run_control).device_memory_info(0).total == 8 * GiB


def test_mps_daemon_printing_bytes_that_are_no_text_sets_no_limit(control_program):
    control_program("\\377\\3768G\\n")
    platform = scripted_platform(mps_scenario(), mps_control=run_control)
    assert platform.device_memory_info(0).total == H200_RUNTIME_TOTAL


class TogetherMpsControl(ScriptedMpsControl):
    """A daemon that answers only once ``count`` queries wait on it together (asked one after another, the first
    waits 5 s and fails): proves the ordinals are asked at once."""

    def __init__(self, count: int, defaults: dict[int, str]):
        super().__init__(defaults)
        self.barrier = threading.Barrier(count, timeout=5)
        self.commands: list[str] = []

    def __call__(self, commands: str) -> str:
        self.commands.append(commands)
        self.barrier.wait()
        return super().__call__(commands)


def test_mps_daemon_is_asked_for_every_ordinal_at_once():
    control = TogetherMpsControl(8, {i: "8G" for i in range(8)})
    limits = daemon_limits(8, {}, mps_scenario().fs, control)
    assert {device: lim.limit for device, lim in limits.items()} == {i: 8 * GiB for i in range(8)}


def test_mps_daemon_gets_one_query_per_ordinal():
    control = TogetherMpsControl(4, {})
    daemon_limits(4, {}, mps_scenario().fs, control)
    assert sorted(control.commands) == [f"get_default_device_pinned_mem_limit {i}\n" for i in range(4)]


def test_mps_daemon_that_does_not_answer_in_time_sets_no_limit():
    released = threading.Event()

    class Silent(ScriptedMpsControl):
        def __call__(self, commands: str) -> str:
            released.wait(10)
            return super().__call__(commands)

    try:
        assert daemon_limits(2, {}, mps_scenario().fs, Silent({0: "8G", 1: "8G"}), timeout=0.1) == {}
    finally:
        released.set()


class BrokenMpsControl(ScriptedMpsControl):
    def __call__(self, commands: str):
        return None  # a runner that answers no text


def test_mps_daemon_answer_that_is_no_text_sets_no_limit():
    assert scripted_platform(mps_scenario(), mps_control=BrokenMpsControl()).device_memory_info(0).total == (
        H200_RUNTIME_TOTAL
    )


# ---- process lists -------------------------------------------------------------------------------------------
class AnsweringNvml(ScriptedNvml):
    """pynvml whose compute process list answers ``answer`` instead of a list."""

    def __init__(self, sc, answer):
        super().__init__(sc)
        self.answer = answer

    def nvmlDeviceGetComputeRunningProcesses_v3(self, handle):
        self._enter("nvmlDeviceGetComputeRunningProcesses_v3")
        return self.answer


@pytest.mark.parametrize("answer", [None, 7, "processes", {"pid": 1}])
def test_nvml_process_list_that_is_no_list_gives_none_with_a_reason(answer):
    sc = h200_scenario(context=True)
    process = scripted_platform(sc, nvml=AnsweringNvml(sc, answer)).process_memory(0)
    assert process.used is None and process.reason.kind is ReasonKind.QUERY_FAILED
    assert "not a list of processes" in process.reason.text


@pytest.mark.parametrize("answer", [None, 7])
def test_nvml_process_list_that_is_no_list_leaves_other_processes_unknown(answer):
    sc = h200_scenario(context=True)
    assert scripted_platform(sc, nvml=AnsweringNvml(sc, answer)).other_processes_memory(0) is None


def rocm(sc, amdsmi: ScriptedAmdsmi, **kwargs) -> RocmPlatform:
    clock = ScriptedClock()
    return RocmPlatform(amdsmi=amdsmi, environ=sc.environ, clock=clock, sleep=clock.sleep, **kwargs)


class VramAmdsmi(ScriptedAmdsmi):
    """amdsmi listing every process with ``vram_mem`` set to ``vram``."""

    def __init__(self, sc, vram):
        super().__init__(sc)
        self.vram = vram

    def amdsmi_get_gpu_process_list(self, handle):
        entries = super().amdsmi_get_gpu_process_list(handle)
        for entry in entries:
            entry["memory_usage"]["vram_mem"] = self.vram
        return entries


@pytest.mark.parametrize("vram", [True, False, -1, -(2**40), 2**63, float("nan"), 1.5])
def test_amdsmi_vram_that_is_no_byte_count_is_unknown(vram):
    sc = mi300x_scenario()
    sc.allocate(GiB)
    process = rocm(sc, VramAmdsmi(sc, vram)).process_memory(0)
    assert process.used is None and process.reason.kind is ReasonKind.NOT_AVAILABLE


def test_amdsmi_vram_of_true_is_not_counted_for_other_processes():
    sc = mi300x_scenario()
    sc.allocate(GiB, pid=sc.other_pid)
    assert rocm(sc, VramAmdsmi(sc, True)).other_processes_memory(0) == {}


class ListAmdsmi(ScriptedAmdsmi):
    def __init__(self, sc, answer):
        super().__init__(sc)
        self.answer = answer

    def amdsmi_get_gpu_process_list(self, handle):
        self._enter("amdsmi_get_gpu_process_list")
        return self.answer


@pytest.mark.parametrize("answer", [None, 7, "pids", {"pid": 1}])
def test_amdsmi_process_list_that_is_no_list_gives_none_with_a_reason(answer):
    sc = mi300x_scenario()
    platform = rocm(sc, ListAmdsmi(sc, answer))
    process = platform.process_memory(0)
    assert process.used is None and process.reason.kind is ReasonKind.QUERY_FAILED
    assert platform.other_processes_memory(0) is None


def test_amdsmi_entry_whose_pid_is_no_process_id_is_skipped():
    sc = mi300x_scenario()
    sc.allocate(GiB)
    amdsmi = ScriptedAmdsmi(sc)
    listing = amdsmi.amdsmi_get_gpu_process_list
    odd = {"pid": True, "memory_usage": {"vram_mem": 5 * GiB}}
    amdsmi.amdsmi_get_gpu_process_list = lambda h: [odd, *listing(h)]
    platform = rocm(sc, amdsmi)
    assert platform.get_process_memory_usage(0) == GiB
    assert platform.other_processes_memory(0) == {}


# ---- cgroup dmem.current unreadable ---------------------------------------------------------------------------
def with_dmem(sc, slot: str, limit: int):
    sc.files["/proc/self/cgroup"] = "0::/job\n"
    sc.files["/sys/fs/cgroup/cgroup.controllers"] = "cpu memory dmem\n"
    sc.files["/sys/fs/cgroup/job/dmem.max"] = f"drm/{slot}/vram0 {limit}\n"
    return sc  # no dmem.current: unreadable


def test_unreadable_dmem_current_counts_this_process_on_nvml():
    sc = with_dmem(h200_scenario(context=True), "0000:19:00.0", 8 * GiB)
    assert scripted_platform(sc).device_memory_info(0) == MemoryInfo(8 * GiB - H200_CONTEXT, 8 * GiB)


def test_unreadable_dmem_current_counts_this_process_on_rocm():
    sc = mi300x_scenario()
    with_dmem(sc, sc.devices[0].pci_bus_id.lower()[-12:], 8 * GiB)
    sc.allocate(2 * GiB)
    assert rocm(sc, ScriptedAmdsmi(sc), files=sc.fs).device_memory_info(0) == MemoryInfo(6 * GiB, 8 * GiB)


def test_unreadable_dmem_current_without_a_process_figure_says_free_may_be_overstated():
    sc = with_dmem(h200_scenario(context=True), "0000:19:00.0", 8 * GiB)
    sources = scripted_cuda_platform(sc).memory_sources(0)
    assert "free may be overstated" in sources["free"]
