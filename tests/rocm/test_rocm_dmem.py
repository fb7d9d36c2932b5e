"""The rocm platform under a cgroup v2 dmem limit on the GPU's VRAM region."""

from __future__ import annotations

from devmem import GiB, MemoryInfo
from devmem.testing import ScriptedClock
from devmem_rocm import RocmPlatform
from devmem_rocm.testing import MI300X_TOTAL, ScriptedAmdsmi, mi300x_scenario


def limited(limit: str, current: str = ""):
    sc = mi300x_scenario()
    slot = sc.devices[0].pci_bus_id.lower()[-12:]
    sc.files["/proc/self/cgroup"] = "0::/job\n"
    sc.files["/sys/fs/cgroup/cgroup.controllers"] = "cpu memory pids dmem\n"
    sc.files["/sys/fs/cgroup/job/dmem.max"] = limit.format(slot=slot)
    sc.files["/sys/fs/cgroup/job/dmem.current"] = current.format(slot=slot)
    clock = ScriptedClock()
    return RocmPlatform(
        amdsmi=ScriptedAmdsmi(sc, clock=clock), environ=sc.environ, clock=clock, sleep=clock.sleep, files=sc.fs
    )


def test_dmem_max_on_vram_caps_free_and_total():
    platform = limited("drm/{slot}/vram0 8589934592\n", f"drm/{{slot}}/vram0 {2 * GiB}\n")
    assert platform.device_memory_info(0) == MemoryInfo(6 * GiB, 8 * GiB)


def test_dmem_limit_is_named_in_the_notes():
    assert any(
        n.startswith("this process may use 8.00 GiB of this") and "cgroup dmem limit" in n
        for n in limited("drm/{slot}/vram0 8589934592\n").notes(0)
    )


def test_dmem_limit_on_another_region_leaves_vram():
    assert limited("drm/{slot}/gtt 8589934592\n").device_memory_info(0).total == MI300X_TOTAL
