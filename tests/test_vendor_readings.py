"""The checked boundary where vendor readings enter (devmem.sdk.readings, and each backend's per-process rule):
impossible figures become an error naming the call, a clamp with a note, or ``None`` with a reason, never a
wrong number; nothing a vendor call raises escapes raw."""

from __future__ import annotations

import pytest

from devmem import DevmemError, GiB, MemoryInfo
from devmem.sdk import ReasonKind
from devmem.sdk.drm import client_memory
from devmem.testing import ScriptedClock
from devmem_nvidia.testing import (
    ScriptedAllocator,
    ScriptedNvml,
    c_nvmlMemory_v2_t,
    h200_scenario,
    nvmlMemory_v2,
    scripted_platform,
)
from devmem_rocm import RocmPlatform
from devmem_rocm.testing import MI300X_TOTAL, ScriptedAmdsmi, mi300x_scenario


class OddMemoryNvml(ScriptedNvml):
    """pynvml answering memory info v2 with the given figures."""

    def __init__(self, sc, *, total, free, reserved=0):
        super().__init__(sc)
        self.figures = (total, reserved, free)

    def nvmlDeviceGetMemoryInfo(self, handle, version=None):
        total, reserved, free = self.figures
        return c_nvmlMemory_v2_t(nvmlMemory_v2, total, reserved, free, 0)


class OddProcessNvml(ScriptedNvml):
    """pynvml listing this process with ``usedGpuMemory`` set to ``used``."""

    def __init__(self, sc, used):
        super().__init__(sc)
        self.used = used

    def _processes(self, name, handle, kind):
        out = super()._processes(name, handle, kind)
        for p in out:
            p.usedGpuMemory = self.used
        return out


class RaisingNvml(ScriptedNvml):
    """pynvml whose call ``name`` raises ``error`` (a broken binding, not an NVMLError)."""

    def __init__(self, sc, name, error):
        super().__init__(sc)
        setattr(self, name, lambda *args: (_ for _ in ()).throw(error))


def nvml_memory(**figures):
    sc = h200_scenario()
    return scripted_platform(sc, nvml=OddMemoryNvml(sc, **figures)).memory(0)


# ---- device memory -----------------------------------------------------------------------------------
def test_reserved_above_total_is_an_error_not_a_negative_total():
    with pytest.raises(DevmemError, match="total is -1073741824 bytes, below zero"):
        nvml_memory(total=GiB, reserved=2 * GiB, free=0)


def test_negative_free_is_zero_with_a_note():
    memory = nvml_memory(total=8 * GiB, free=-4096)
    assert memory.info == MemoryInfo(0, 8 * GiB) and "free = -4096 bytes (below zero)" in memory.notes[0]


def test_free_above_total_is_total_with_a_note():
    memory = nvml_memory(total=8 * GiB, free=9 * GiB)
    assert memory.info == MemoryInfo(8 * GiB, 8 * GiB) and "above its total" in memory.notes[0]


def test_whole_float_figures_are_taken_as_ints():
    info = nvml_memory(total=float(8 * GiB), free=float(GiB)).info
    assert info == MemoryInfo(GiB, 8 * GiB) and type(info.total) is int


def test_fractional_figure_is_an_error_naming_it():
    with pytest.raises(DevmemError, match=r"NVML memory info: free is 1.5, not a whole number of bytes"):
        nvml_memory(total=8 * GiB, free=1.5)


def test_runtime_error_from_nvml_is_a_devmem_error():
    sc = h200_scenario()
    platform = scripted_platform(sc, nvml=RaisingNvml(sc, "nvmlDeviceGetMemoryInfo", RuntimeError("binding broke")))
    with pytest.raises(DevmemError, match="RuntimeError"):
        platform.memory(0)


@pytest.mark.parametrize("error", [TypeError("bad argtypes"), ValueError("bad value")])
def test_odd_error_from_a_process_list_is_none_with_a_reason(error):
    sc = h200_scenario(context=True)
    nvml = RaisingNvml(sc, "nvmlDeviceGetComputeRunningProcesses_v3", error)
    process = scripted_platform(sc, nvml=nvml).process_memory(0)
    assert process.used is None and process.reason.kind is ReasonKind.QUERY_FAILED


# ---- per-process figures ---------------------------------------------------------------------------
@pytest.mark.parametrize("used", [1 << 63, (1 << 64) - 1, -1, 2.5, "N/A"])
def test_not_available_sentinels_are_none_with_a_reason(used):
    sc = h200_scenario(context=True)
    process = scripted_platform(sc, nvml=OddProcessNvml(sc, used)).process_memory(0)
    assert process.used is None and process.reason.kind is ReasonKind.NOT_AVAILABLE


# ---- amdsmi ---------------------------------------------------------------------------------------
class OddVramAmdsmi(ScriptedAmdsmi):
    def __init__(self, sc, used, **kwargs):
        super().__init__(sc, **kwargs)
        self.used = used

    def amdsmi_get_gpu_memory_usage(self, handle, mem_type):
        super().amdsmi_get_gpu_memory_usage(handle, mem_type)
        return self.used


def rocm_memory(used):
    sc = mi300x_scenario()
    clock = ScriptedClock()
    return RocmPlatform(amdsmi=OddVramAmdsmi(sc, used, clock=clock), environ={}, clock=clock, sleep=clock.sleep).memory(
        0
    )


def test_amdsmi_negative_vram_used_leaves_free_at_total_with_a_note():
    memory = rocm_memory(-GiB)
    assert memory.info == MemoryInfo(MI300X_TOTAL, MI300X_TOTAL) and "above its total" in memory.notes[0]


@pytest.mark.parametrize("used", ["N/A", 1.5, None])
def test_amdsmi_unusable_vram_used_is_an_error_naming_it(used):
    with pytest.raises(DevmemError, match="amdsmi VRAM used is"):
        rocm_memory(used)


# ---- DRM fdinfo ------------------------------------------------------------------------------------
def fdinfo_memory(vram: str):
    sc = mi300x_scenario()
    sc.files["/proc/self/fdinfo/7"] = (
        f"drm-driver:\tamdgpu\ndrm-pdev:\t0000:c6:00.0\ndrm-client-id:\t9\ndrm-memory-vram:\t{vram}\n"
    )
    return client_memory(sc.fs, "amdgpu", "0000:c6:00.0", ("vram",))


def test_unparseable_fdinfo_figure_is_none_not_zero():
    process = fdinfo_memory("lots KiB")
    assert process.used is None and "drm-memory-vram: lots KiB" in process.reason.text


def test_parseable_fdinfo_figure_is_counted():
    assert fdinfo_memory("2048 KiB").used == 2 * 1024 * 1024


# ---- PID namespaces -------------------------------------------------------------------------------
def test_inactive_primary_context_in_a_pid_namespace_is_none_not_zero():
    sc = h200_scenario(context=True, driver_pid=81234, nspid_visible=False)
    platform = scripted_platform(sc, allocator=ScriptedAllocator(sc, available=False))
    process = platform.process_memory(0)
    assert process.used is None and process.reason.kind is ReasonKind.PID_NAMESPACE


def test_process_that_maps_no_device_holds_nothing_even_beside_hidden_pids():
    sc = h200_scenario()
    sc.allocate(GiB, pid=81234)
    assert scripted_platform(sc, allocator=ScriptedAllocator(sc, available=False)).process_memory(0).used == 0
