"""The conformance kit against the nvml and wsl2 platforms, driven by scripted pynvml readings."""

from __future__ import annotations

from devmem.testing import PlatformConformance, scripted_fixtures
from devmem_nvidia import WslPlatform
from devmem_nvidia.testing import (
    ScriptedNvidiaDriver,
    ScriptedNvml,
    h200_scenario,
    mig_scenario,
    scripted_cuda_platform,
    scripted_platform,
    wsl2_scenario,
)


def nvml(sc):
    return scripted_platform(sc)


def contained_h200():
    """An H200 seen from a container whose PID namespace hides this process's host PID."""
    return h200_scenario(context=True, driver_pid=81234, nspid_visible=False)


class TestNvmlConformance(
    PlatformConformance,
    scripted_fixtures(lambda: h200_scenario(context=True), nvml, integrated=False, pages_instead_of_failing=False),
):
    pass


class TestNvmlInContainerConformance(
    PlatformConformance, scripted_fixtures(contained_h200, nvml, integrated=False, pages_instead_of_failing=False)
):
    pass


class TestNvmlMigConformance(
    PlatformConformance,
    scripted_fixtures(
        mig_scenario,
        nvml,
        integrated=False,
        pages_instead_of_failing=False,
        can_allocate=False,
        other_process_allocation=False,
        free_tracks_allocations=False,
        reasons={"can_allocate": "Scenario.allocate charges whole devices; MIG instances are scripted directly"},
    ),
):
    pass


class TestWsl2Conformance(
    PlatformConformance,
    scripted_fixtures(
        wsl2_scenario,
        lambda sc: WslPlatform(nvml=ScriptedNvml(sc), files=sc.fs, environ=sc.environ),
        integrated=False,
        pages_instead_of_failing=True,
        process_memory=False,
        reasons={"process_memory": "WDDM does not report per-process memory"},
    ),
):
    pass


def no_nvml_h200():
    """An H200 in a container without libnvidia-ml, this process holding its CUDA context."""
    sc = h200_scenario(context=True)
    sc.driver(ScriptedNvidiaDriver).libraries.discard("nvml")
    return sc


class TestCudaConformance(
    PlatformConformance,
    scripted_fixtures(
        no_nvml_h200,
        scripted_cuda_platform,
        integrated=False,
        pages_instead_of_failing=False,
        process_memory=False,
        reasons={"process_memory": "without NVML nothing attributes device memory to processes"},
    ),
):
    pass
