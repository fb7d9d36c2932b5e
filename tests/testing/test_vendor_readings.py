"""The checked boundary where vendor readings enter (devmem.sdk's checks, and each backend's per-process rule):
impossible figures become an error naming the call, a clamp with a note, or ``None`` with a reason, never a
wrong number; nothing a vendor call raises escapes raw."""

from __future__ import annotations

import pytest

from devmem import DevmemError, GiB, MemoryInfo
from devmem.platform import DeviceMemory, PlatformBase, ProcessMemory
from devmem.sdk import ReasonKind, checked_memory
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


# ---- a full backend's hooks (devmem.sdk.PlatformBase): what they answer is checked where the contract hands it on
class HookedPlatform(PlatformBase):
    """A backend whose hooks answer ``answers`` (by hook name), else a sound 2 GiB device."""

    name = "hooked"

    def __init__(self, **answers):
        self.answers = answers

    def device_count(self):
        return self.answers.get("device_count", 1)

    def _memory(self, device):
        return self.answers.get("_memory", checked_memory(GiB, 2 * GiB, {}, "memory"))

    def _is_integrated(self, device):
        return self.answers.get("_is_integrated", False)

    def _pages_instead_of_failing(self, device):
        return self.answers.get("_pages_instead_of_failing", False)

    def _process_memory(self, device):
        return self.answers.get("_process_memory", ProcessMemory(0))

    def _device_name(self, device):
        return self.answers.get("_device_name", "hooked")

    def _other_processes_memory(self, device):
        return self.answers.get("_other_processes_memory")

    def _process_roles(self, device):
        return self.answers.get("_process_roles", {})

    def _notes(self, device):
        return self.answers.get("_notes", [])


WRONG_HOOKS = {
    "a count of None": ("device_count", None),
    "a count of text": ("device_count", "1"),
    "a negative count": ("device_count", -1),
    "a count of true": ("device_count", True),
    "memory as a pair": ("_memory", (GiB, 2 * GiB)),
    "memory as a MemoryInfo": ("_memory", MemoryInfo(free=GiB, total=2 * GiB)),
    "memory of None": ("_memory", None),
    "memory of a float": ("_memory", DeviceMemory(MemoryInfo(free=0.5, total=2 * GiB))),
    "free above total": ("_memory", DeviceMemory(MemoryInfo(free=3 * GiB, total=2 * GiB))),
    "a process figure of bytes, not a ProcessMemory": ("_process_memory", 5),
    "a process figure of None": ("_process_memory", None),
    "a process figure of a float": ("_process_memory", ProcessMemory(1.5)),
    "processes as a list": ("_other_processes_memory", [1, 2]),
    "processes of text bytes": ("_other_processes_memory", {1: "x"}),
    "processes named by text": ("_other_processes_memory", {"a": 1}),
    "a negative PID": ("_other_processes_memory", {-1: GiB}),
    "roles of None": ("_process_roles", None),
    "notes of None": ("_notes", None),
    "notes of numbers": ("_notes", [5]),
    "a flag of text": ("_is_integrated", "no"),
    "a name of None": ("_device_name", None),
}


@pytest.mark.parametrize("why", list(WRONG_HOOKS))
def test_a_full_backends_hook_answering_the_wrong_type_is_an_error_naming_the_platform_and_value(tmp_path, why):
    from devmem.engine.reservations import reserve

    hook, value = WRONG_HOOKS[why]
    platform = HookedPlatform(**{hook: value})
    for call in (lambda: platform.read(0), lambda: reserve(0, GiB, platform=platform, ledger_dir=tmp_path)):
        with pytest.raises(DevmemError, match=r"the platform hooked \(.*HookedPlatform\): .* gave .*fix the backend"):
            call()


def test_a_full_backends_whole_float_and_numpy_figures_of_processes_are_read_as_ints():
    import numpy as np

    reading = HookedPlatform(_other_processes_memory={np.int64(7): np.uint64(GiB), 8: float(GiB)}).read(0)
    assert reading.other_processes == {7: GiB, 8: GiB}
    assert all(type(k) is int and type(v) is int for k, v in reading.other_processes.items())
