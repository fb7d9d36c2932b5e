"""Caps only the CUDA runtime shows (an MPS daemon's default pinned limit, an interposed vGPU library), read
through a scripted libcuda next to the scripted NVML."""

from __future__ import annotations

import subprocess

import pytest

from devmem import GiB, MemoryInfo, MiB, device_report
from devmem_nvidia.mps_control import daemon_limits
from devmem_nvidia.runtime_caps import RuntimeView
from devmem_nvidia.testing import (
    H200_CONTEXT,
    H200_RUNTIME_TOTAL,
    ScriptedLibcuda,
    ScriptedMpsControl,
    h200_scenario,
    mps_scenario,
    scripted_cuda_platform,
    scripted_platform,
)


def daemon_limited(limit: int = 8 * GiB, **kwargs):
    sc = mps_scenario(**kwargs)
    return sc, scripted_platform(sc, cuda=ScriptedLibcuda(sc, mps_limits={0: limit}))


def test_mps_daemon_limit_caps_total_at_the_limit():
    _, platform = daemon_limited()
    assert platform.device_memory_info(0).total == 8 * GiB


def test_mps_daemon_limit_caps_free_at_what_the_runtime_reports():
    _, platform = daemon_limited()
    assert platform.device_memory_info(0).free == 8 * GiB - H200_CONTEXT


def test_mps_daemon_limit_is_named_as_the_source_of_both_figures():
    _, platform = daemon_limited()
    sources = platform.memory_sources(0)
    assert all(sources[k].startswith("per-process limit the CUDA runtime enforces") for k in ("free", "total"))


def test_mps_daemon_limit_note_says_where_it_was_read():
    _, platform = daemon_limited()
    note = next(n for n in device_report(platform, 0).notes if n.startswith("this process may use 8.00 GiB"))
    assert "cuMemGetInfo free" in note and "MPS pinned-memory limit set on the control daemon" in note


def test_runtime_is_not_asked_without_a_context():
    sc = h200_scenario()
    cuda = ScriptedLibcuda(sc, mps_limits={0: 8 * GiB})
    platform = scripted_platform(sc, cuda=cuda)
    assert platform.device_memory_info(0).total == H200_RUNTIME_TOTAL
    assert cuda.contexts_created == 0 and not cuda.calls


def test_runtime_equal_to_nvml_adds_no_limit():
    sc = h200_scenario(context=True)
    platform = scripted_platform(sc, cuda=ScriptedLibcuda(sc))
    assert not any(n.startswith("this process may use") for n in device_report(platform, 0).notes)


def test_runtime_gap_within_the_slack_adds_no_limit():
    sc = h200_scenario(context=True)
    near = H200_RUNTIME_TOTAL - 256 * MiB  # a limit 256 MiB under the device free: inside the 1 % slack
    platform = scripted_platform(sc, cuda=ScriptedLibcuda(sc, mps_limits={0: near}))
    assert platform.device_memory_info(0).total == H200_RUNTIME_TOTAL


def test_interposed_limit_caps_total_and_free():
    sc = h200_scenario(context=True)
    platform = scripted_platform(sc, cuda=ScriptedLibcuda(sc, interposed_limits={0: 16 * GiB}))
    assert platform.device_memory_info(0) == MemoryInfo(16 * GiB - H200_CONTEXT, 16 * GiB)


def test_interposed_limit_is_named_as_reported_by_the_runtime():
    sc = h200_scenario(context=True)
    platform = scripted_platform(sc, cuda=ScriptedLibcuda(sc, interposed_limits={0: 16 * GiB}))
    assert platform.memory_sources(0)["total"].startswith("device memory limit the CUDA runtime reports")


def test_limit_in_the_environment_explains_the_runtime_gap_once():
    sc, platform = daemon_limited(environ={"CUDA_MPS_PINNED_DEVICE_MEM_LIMIT": "0=8G"})
    notes = [n for n in device_report(platform, 0).notes if n.startswith("this process may use")]
    assert len(notes) == 1 and "CUDA_MPS_PINNED_DEVICE_MEM_LIMIT=0=8G" in notes[0]


class CotenantDuringTheRead(ScriptedLibcuda):
    """libcuda on a machine where a co-tenant allocates 40 GiB just before this process's runtime read."""

    def _mem_get_info(self, dev: int) -> tuple[int, int]:
        if not self.scenario.usage.get(4242):
            self.scenario.allocate(40 * GiB, dev, pid=4242)
        return super()._mem_get_info(dev)


def test_cotenant_allocating_between_the_reads_is_not_a_limit():
    sc = h200_scenario(context=True)
    platform = scripted_platform(sc, cuda=CotenantDuringTheRead(sc))
    assert platform.device_memory_info(0).total == H200_RUNTIME_TOTAL


def test_runtime_failure_leaves_the_nvml_reading():
    sc = h200_scenario(context=True)
    sc.failures["cuMemGetInfo_v2"] = "CUDA_ERROR_UNKNOWN"
    platform = scripted_platform(sc, cuda=ScriptedLibcuda(sc, mps_limits={0: 8 * GiB}))
    assert platform.device_memory_info(0).total == H200_RUNTIME_TOTAL


# ---- the MPS control daemon's default limit, asked of the daemon -------------------------------------
def with_daemon(control: ScriptedMpsControl, **kwargs):
    sc = mps_scenario(**kwargs)
    return sc, scripted_platform(sc, mps_control=control)


def test_mps_daemon_default_caps_total_without_a_context_or_variable():
    sc, platform = with_daemon(ScriptedMpsControl({0: "8G"}))
    sc.release(H200_CONTEXT)  # an operator's `devmem info`: no context, so the runtime cannot be asked
    assert platform.device_memory_info(0).total == 8 * GiB


def test_mps_daemon_default_is_named_with_the_pipe_directory():
    _, platform = with_daemon(ScriptedMpsControl({0: "8G"}))
    assert platform.memory_sources(0)["total"] == (
        "MPS pinned device memory limit (the MPS control daemon's default (/tmp/nvidia-mps)): 8.00 GiB"
    )


def test_mps_daemon_is_asked_once_per_platform():
    control = ScriptedMpsControl({0: "8G"})
    _, platform = with_daemon(control)
    platform.device_memory_info(0)
    platform.device_memory_info(0)
    assert control.calls == 1


def test_mps_daemon_is_not_asked_without_its_pipe():
    control = ScriptedMpsControl({0: "8G"})
    sc = h200_scenario(context=True)
    assert scripted_platform(sc, mps_control=control).device_memory_info(0).total == H200_RUNTIME_TOTAL
    assert control.calls == 0


def test_mps_daemon_in_the_pipe_directory_of_the_environment_is_asked():
    sc = h200_scenario(context=True, environ={"CUDA_MPS_PIPE_DIRECTORY": "/run/mps"})
    sc.files["/run/mps/control"] = ""
    assert scripted_platform(sc, mps_control=ScriptedMpsControl({0: "4G"})).device_memory_info(0).total == 4 * GiB


def test_mps_daemon_without_a_default_limit_leaves_the_device():
    _, platform = with_daemon(ScriptedMpsControl({}))
    assert platform.device_memory_info(0).total == H200_RUNTIME_TOTAL


def test_client_variable_overrides_the_daemon_default():
    _, platform = with_daemon(ScriptedMpsControl({0: "8G"}), environ={"CUDA_MPS_PINNED_DEVICE_MEM_LIMIT": "0=16G"})
    assert platform.device_memory_info(0).total == 16 * GiB


@pytest.mark.parametrize(
    "failure",
    [OSError("nvidia-cuda-mps-control is not installed"), subprocess.TimeoutExpired("nvidia-cuda-mps-control", 2.0)],
)
def test_unanswered_mps_daemon_leaves_the_device(failure):
    _, platform = with_daemon(ScriptedMpsControl(failure=failure))
    assert platform.device_memory_info(0).total == H200_RUNTIME_TOTAL


def test_mps_daemon_defaults_apply_ordinal_by_ordinal_in_the_same_numbering():
    sc = mps_scenario()
    limits = daemon_limits(2, {}, sc.fs, ScriptedMpsControl({0: "8G", 1: "4G"}))
    assert {device: lim.limit for device, lim in limits.items()} == {0: 8 * GiB, 1: 4 * GiB}


def test_mps_daemon_defaults_that_differ_are_not_placed_on_renumbered_devices():
    sc = mps_scenario()
    assert daemon_limits(2, {"CUDA_VISIBLE_DEVICES": "1,0"}, sc.fs, ScriptedMpsControl({0: "8G", 1: "4G"})) == {}


class NvmlOnlyMaps:
    """``/proc`` of a process that read NVML and never used CUDA: NVML has loaded ``libcuda``, no device is mapped."""

    def read_text(self, path: str) -> str:
        if path != "/proc/self/maps":
            raise FileNotFoundError(path)
        return "7f1c40000000-7f1c40200000 r-xp 00000000 08:01 2048 /usr/lib/x86_64-linux-gnu/libcuda.so.580.159.04\n"

    def exists(self, path: str) -> bool:
        return path == "/proc/self/maps"

    def listdir(self, path: str) -> list[str]:
        raise FileNotFoundError(path)


def test_runtime_is_not_initialised_where_only_nvml_loaded_libcuda():
    cuda = ScriptedLibcuda(h200_scenario(context=True))
    assert RuntimeView(cuda, NvmlOnlyMaps(), real=False).reading(0) is None
    assert not cuda.calls


def test_mps_daemon_ordinal_without_a_limit_does_not_take_the_next_ones():
    sc = mps_scenario()
    limits = daemon_limits(2, {}, sc.fs, ScriptedMpsControl({1: "4G"}))
    assert {device: lim.limit for device, lim in limits.items()} == {1: 4 * GiB}


def test_runtime_estimate_of_a_limit_is_rounded_down_to_the_driver_page():
    sc = mps_scenario()  # NVML's figure for this process runs 1939312 bytes over what MPS counts, as on the H200
    platform = scripted_platform(sc, cuda=ScriptedLibcuda(sc, mps_limits={0: 8 * GiB}, mps_uncounted=1939312))
    assert platform.device_memory_info(0).total == 8 * GiB


class CountingMaps(NvmlOnlyMaps):
    """``/proc/self/maps`` of a process with a CUDA context, counting its reads."""

    reads = 0

    def read_text(self, path: str) -> str:
        self.reads += 1
        return super().read_text(path) + "7f1c60000000-7f1c60001000 rw-s 00000000 00:05 600 /dev/nvidia0\n"


def test_maps_are_read_once_cuda_is_known_to_be_in_use():
    files = CountingMaps()
    view = RuntimeView(ScriptedLibcuda(h200_scenario(context=True)), files, real=False)
    view.reading(0)
    view.reading(0)
    assert files.reads == 1


def test_cuda_platform_takes_the_mps_daemon_default_as_its_total():
    sc = mps_scenario()
    platform = scripted_cuda_platform(
        sc, library=ScriptedLibcuda(sc, mps_limits={0: 8 * GiB}), mps_control=ScriptedMpsControl({0: "8G"})
    )
    assert platform.device_memory_info(0) == MemoryInfo(8 * GiB - H200_CONTEXT, 8 * GiB)
