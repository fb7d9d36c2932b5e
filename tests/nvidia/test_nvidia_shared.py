"""Shared and restricted NVIDIA GPUs: a MIG container with the parent denied, MPS and vGPU limits, cgroup dmem."""

from __future__ import annotations

import pytest

from devmem import DevmemError, GiB, MemoryInfo, MiB, device_report
from devmem_nvidia import detect_nvml
from devmem_nvidia.limits import mps_limits, parse_cuda_limit_size
from devmem_nvidia.testing import (
    H200_CONTEXT,
    H200_RUNTIME_TOTAL,
    MPS_SERVER_BYTES,
    MPS_SERVER_PID,
    ScriptedNvml,
    h200_scenario,
    mig_container_scenario,
    mps_scenario,
    scripted_platform,
)

SLOT = "0000:19:00.0"  # the scripted H200's PCI slot in the kernel's form


# ---- a MIG container: the parent GPU denied, the instances readable ----------------------------------
def test_mig_container_with_denied_parent_is_detected():
    sc = mig_container_scenario()
    assert detect_nvml(ScriptedNvml(sc), files=sc.fs).detected


def test_mig_container_detection_says_the_parent_is_denied():
    sc = mig_container_scenario()
    assert "not readable (NoPermission)" in detect_nvml(ScriptedNvml(sc), files=sc.fs).reason


def test_mig_container_sizes_the_instance_from_its_reading():
    assert scripted_platform(mig_container_scenario()).device_memory_info(0) == MemoryInfo(71 * GiB, 71 * GiB)


def test_mig_container_note_explains_the_denied_parent():
    notes = scripted_platform(mig_container_scenario()).notes(0)
    assert any("parent GPU's memory is not readable here (NoPermission" in n for n in notes)


def test_denied_gpu_without_mig_is_not_detected():
    sc = h200_scenario(failures={"nvmlDeviceGetMemoryInfo*": "NoPermission"})
    detection = detect_nvml(ScriptedNvml(sc), files=sc.fs)
    assert not detection.detected and "NoPermission" in detection.reason


# ---- sizes in the environment -------------------------------------------------------------------------
@pytest.mark.parametrize(
    "text, expected",
    [
        ("8G", 8 * GiB),
        ("8192m", 8 * GiB),
        ("8GB", 8 * GiB),
        ("8GiB", 8 * GiB),
        ("512K", 512 << 10),
        ("1073741824", GiB),
    ],
)
def test_limit_sizes_are_binary(text, expected):
    assert parse_cuda_limit_size(text, "X") == expected


@pytest.mark.parametrize("text", ["8.5G", "-1G", "8X", "", "G"])
def test_bad_limit_size_names_the_variable_and_value(text):
    with pytest.raises(DevmemError, match=rf"X: {text!r} is not a size"):
        parse_cuda_limit_size(text, "X")


def test_mps_limit_pairs_are_per_ordinal():
    assert mps_limits({"CUDA_MPS_PINNED_DEVICE_MEM_LIMIT": "0=8G,1=4G"}) == {0: 8 * GiB, 1: 4 * GiB}


def test_mps_bare_limit_is_for_every_device():
    assert mps_limits({"CUDA_MPS_PINNED_DEVICE_MEM_LIMIT": "8G"}) == {None: 8 * GiB}


def test_mps_limit_with_a_bad_ordinal_is_an_error():
    with pytest.raises(DevmemError, match="'x' is not a device ordinal"):
        mps_limits({"CUDA_MPS_PINNED_DEVICE_MEM_LIMIT": "x=8G"})


# ---- limits cap free and total and are named as their source -----------------------------------------
def limited(env: dict[str, str], context: bool = True):
    sc = h200_scenario(context=context)
    sc.environ.update(env)
    return scripted_platform(sc)


def test_mps_limit_caps_total():
    assert limited({"CUDA_MPS_PINNED_DEVICE_MEM_LIMIT": "0=8G"}).device_memory_info(0).total == 8 * GiB


def test_mps_limit_caps_free_less_this_process_usage():
    assert limited({"CUDA_MPS_PINNED_DEVICE_MEM_LIMIT": "0=8G"}).device_memory_info(0).free == 8 * GiB - H200_CONTEXT


def test_mps_limit_is_the_source_of_both_figures():
    sources = limited({"CUDA_MPS_PINNED_DEVICE_MEM_LIMIT": "0=8G"}).memory_sources(0)
    assert all(
        sources[k].startswith("MPS pinned device memory limit (CUDA_MPS_PINNED_DEVICE_MEM_LIMIT=0=8G)")
        for k in ("free", "total")
    )


def test_mps_limit_note_says_what_this_process_may_use():
    notes = device_report(limited({"CUDA_MPS_PINNED_DEVICE_MEM_LIMIT": "8G"}), 0).notes
    assert (
        f"this process may use 8.00 GiB of this {H200_RUNTIME_TOTAL / GiB:.2f} GiB device: MPS pinned device "
        "memory limit (CUDA_MPS_PINNED_DEVICE_MEM_LIMIT=8G)" in notes
    )


def test_mps_limit_for_another_ordinal_leaves_this_device():
    assert limited({"CUDA_MPS_PINNED_DEVICE_MEM_LIMIT": "1=8G"}).device_memory_info(0).total == H200_RUNTIME_TOTAL


def test_limit_above_the_device_leaves_total():
    assert limited({"CUDA_MPS_PINNED_DEVICE_MEM_LIMIT": "0=1T"}).device_memory_info(0).total == H200_RUNTIME_TOTAL


def test_vgpu_limit_caps_free_and_total():
    info = limited({"CUDA_DEVICE_MEMORY_LIMIT": "8192m"}).device_memory_info(0)
    assert info == MemoryInfo(8 * GiB - H200_CONTEXT, 8 * GiB)


def test_vgpu_per_device_limit_wins_over_the_global_one():
    platform = limited({"CUDA_DEVICE_MEMORY_LIMIT": "8g", "CUDA_DEVICE_MEMORY_LIMIT_0": "4g"})
    assert platform.device_memory_info(0).total == 4 * GiB


def test_vgpu_limit_is_named_as_the_source():
    assert "CUDA_DEVICE_MEMORY_LIMIT_0=4g" in limited({"CUDA_DEVICE_MEMORY_LIMIT_0": "4g"}).memory_sources(0)["total"]


def test_tightest_of_two_limits_wins():
    platform = limited({"CUDA_MPS_PINNED_DEVICE_MEM_LIMIT": "0=8G", "CUDA_DEVICE_MEMORY_LIMIT": "6g"})
    assert platform.device_memory_info(0).total == 6 * GiB


def test_limit_without_a_process_figure_caps_free_at_the_limit_and_says_so():
    sc = h200_scenario(context=True, failures={"nvmlDeviceGet*RunningProcesses*": "Unknown"})
    sc.environ["CUDA_MPS_PINNED_DEVICE_MEM_LIMIT"] = "0=8G"
    platform = scripted_platform(sc)
    assert platform.device_memory_info(0).free == 8 * GiB
    assert "no per-process figure" in platform.memory_sources(0)["free"]


def test_device_free_below_the_limit_stays():
    sc = h200_scenario(context=True)
    sc.allocate(H200_RUNTIME_TOTAL - H200_CONTEXT - 2 * GiB, pid=sc.other_pid)
    sc.environ["CUDA_MPS_PINNED_DEVICE_MEM_LIMIT"] = "0=8G"
    assert scripted_platform(sc).device_memory_info(0).free == 2 * GiB


def test_bad_limit_in_the_environment_is_a_clear_error():
    with pytest.raises(DevmemError, match="CUDA_DEVICE_MEMORY_LIMIT: '8 gigs' is not a size"):
        limited({"CUDA_DEVICE_MEMORY_LIMIT": "8 gigs"}).device_memory_info(0)


# ---- cgroup dmem ----------------------------------------------------------------------------------
def dmem_scenario(limit: str, current: str = ""):
    sc = h200_scenario(context=True)
    sc.files["/proc/self/cgroup"] = "0::/kubepods/pod1/ctr\n"
    sc.files["/sys/fs/cgroup/cgroup.controllers"] = "cpuset cpu io memory pids dmem\n"
    sc.files["/sys/fs/cgroup/kubepods/pod1/dmem.max"] = limit
    sc.files["/sys/fs/cgroup/kubepods/pod1/dmem.current"] = current
    return sc


def test_dmem_max_caps_free_less_the_cgroup_current():
    sc = dmem_scenario(f"drm/{SLOT}/vram0 8589934592\n", f"drm/{SLOT}/vram0 {3 * GiB}\n")
    assert scripted_platform(sc).device_memory_info(0) == MemoryInfo(5 * GiB, 8 * GiB)


def test_dmem_max_is_named_as_the_source():
    sc = dmem_scenario(f"drm/{SLOT}/vram0 8589934592\n")
    assert (
        scripted_platform(sc)
        .memory_sources(0)["total"]
        .startswith(f"cgroup dmem limit (/sys/fs/cgroup/kubepods/pod1/dmem.max drm/{SLOT}/vram0)")
    )


def test_dmem_max_of_another_device_leaves_this_one():
    sc = dmem_scenario("drm/0000:1a:00.0/vram0 8589934592\n")
    assert scripted_platform(sc).device_memory_info(0).total == H200_RUNTIME_TOTAL


def test_dmem_max_unlimited_leaves_total():
    sc = dmem_scenario(f"drm/{SLOT}/vram0 max\n")
    assert scripted_platform(sc).device_memory_info(0).total == H200_RUNTIME_TOTAL


def test_dmem_limit_of_an_ancestor_binds():
    sc = dmem_scenario("")
    sc.files["/sys/fs/cgroup/kubepods/dmem.max"] = f"drm/{SLOT}/vram0 {4 * GiB}\n"
    assert scripted_platform(sc).device_memory_info(0).total == 4 * GiB


def test_dmem_is_not_read_on_a_kernel_without_the_controller():
    sc = dmem_scenario(f"drm/{SLOT}/vram0 {GiB}\n")
    sc.files["/sys/fs/cgroup/cgroup.controllers"] = "cpuset cpu io memory pids\n"
    assert scripted_platform(sc).device_memory_info(0).total == H200_RUNTIME_TOTAL


def test_dmem_over_the_limit_leaves_nothing_free():
    sc = dmem_scenario(f"drm/{SLOT}/vram0 {GiB}\n", f"drm/{SLOT}/vram0 {GiB + 4 * MiB}\n")
    assert scripted_platform(sc).device_memory_info(0).free == 0


# ---- MPS ----------------------------------------------------------------------------------------------
def test_mps_client_figure_is_its_mps_list_entry():
    assert scripted_platform(mps_scenario()).get_process_memory_usage(0) == H200_CONTEXT


def test_mps_server_is_another_process_with_its_memory():
    assert scripted_platform(mps_scenario()).other_processes_memory(0) == {MPS_SERVER_PID: MPS_SERVER_BYTES}


def test_mps_note_names_the_server_and_this_client():
    sc = mps_scenario()
    notes = scripted_platform(sc).notes(0)
    assert (
        f"MPS: 1 client(s) on this device (PIDs {sc.pid}), this process among them; PID {MPS_SERVER_PID} is the "
        "MPS server (69.00 MiB, shared by its clients)" in notes
    )


def test_compute_process_that_is_not_the_server_is_not_called_one():
    sc = mps_scenario()
    sc.files[f"/proc/{MPS_SERVER_PID}/comm"] = "python3\n"
    assert not any("MPS server" in n for n in scripted_platform(sc).notes(0))


def test_mps_server_has_the_mps_server_role():
    assert scripted_platform(mps_scenario()).process_roles(0) == {MPS_SERVER_PID: "MPS server"}


def test_mps_server_hidden_by_the_pid_namespace_is_the_compute_only_entry_beside_clients():
    sc = mps_scenario()
    del sc.files[f"/proc/{MPS_SERVER_PID}/comm"]
    assert scripted_platform(sc).process_roles(0) == {MPS_SERVER_PID: "MPS server"}


def test_compute_process_that_is_not_the_server_has_no_role():
    sc = mps_scenario()
    sc.files[f"/proc/{MPS_SERVER_PID}/comm"] = "python3\n"
    assert scripted_platform(sc).process_roles(0) == {}


def test_process_the_kernel_names_the_mps_server_has_its_role_without_clients():
    sc = h200_scenario()
    sc.allocate(32 * MiB, pid=4242)
    sc.files["/proc/4242/comm"] = "nvidia-cuda-mps\n"  # nvidia-cuda-mps-server, cut to 15 characters
    assert scripted_platform(sc).process_roles(0) == {4242: "MPS server"}


def test_hidden_compute_process_without_mps_clients_has_no_role():
    sc = h200_scenario()
    sc.allocate(32 * MiB, pid=4242)
    assert scripted_platform(sc).process_roles(0) == {}


def test_no_mps_note_without_clients():
    assert not any(n.startswith("MPS:") for n in scripted_platform(h200_scenario(context=True)).notes(0))


def test_mps_client_under_a_limit_gets_the_limit_less_its_context():
    sc = mps_scenario()
    sc.environ["CUDA_MPS_PINNED_DEVICE_MEM_LIMIT"] = "0=8G"
    assert scripted_platform(sc).device_memory_info(0) == MemoryInfo(8 * GiB - H200_CONTEXT, 8 * GiB)


def test_the_cuda_limit_grammar_differs_from_devmems_and_says_so():
    from devmem import parse_size

    assert (parse_cuda_limit_size("8GB", "X"), parse_size("8GB")) == (8 * GiB, 8 * 10**9)
