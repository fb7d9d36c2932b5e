"""Unified-memory machines as scenarios: DGX Spark (GB10), Jetson AGX Orin, Strix Halo, an MI300A-like APU.

Drive them with the scripted vendor boundaries like any scenario::

    sc = gb10_scenario()
    platform = UmaPlatform(nvml=devmem_nvidia.testing.ScriptedNvml(sc), files=sc.fs, mem_get_info=sc.mem_get_info)

The devices are the vendors' own (:class:`~devmem_nvidia.testing.ScriptedNvidiaGpu`,
:class:`~devmem_rocm.testing.ScriptedAmdGpu`) with ``integrated=True``. On them ``Scenario.mem_get_info`` answers
as ``cudaMemGetInfo`` does on unified memory (MemFree, not counting the page cache), and an allocation takes host
memory (reclaiming page cache when MemFree runs out), so a test can watch the raw figure and the real one part ways.
"""

from __future__ import annotations

from typing import Any

from devmem import GiB, MiB
from devmem.sdk import KiB
from devmem.testing import HostMemory, Scenario
from devmem_nvidia.testing import ScriptedNvidiaDriver, ScriptedNvidiaGpu
from devmem_rocm.testing import ScriptedAmdGpu, ScriptedAmdgpuDriver


def _kib(gib: float) -> int:
    """``gib`` GiB rounded to whole KiB, as /proc/meminfo can state it."""
    return round(gib * GiB / KiB) * KiB


# ---- DGX Spark (GB10), recorded ----------------------------------------------------------------------
#: Unified memory of a DGX Spark as the CUDA runtime and MemTotal report it (119.7 GiB).
GB10_TOTAL = _kib(119.7)
#: ``cudaMemGetInfo`` free on the idle GB10 (59.2 GiB): MemFree only.
GB10_RAW_FREE = _kib(59.2)
#: Reclaimable page cache at the same moment (56.4 GiB), which MemAvailable counts and cudaMemGetInfo does not.
GB10_PAGE_CACHE = _kib(56.4)
#: This process's ``usedGpuMemory`` in NVML's per-process list after creating its CUDA context ...
GB10_CONTEXT = 741326848
#: ... and after allocating 512 MiB more (the per-process list works on GB10; device memory info does not).
GB10_CONTEXT_PLUS_512MIB = 1278197760


def gb10_scenario(**kwargs: Any) -> Scenario:
    """A DGX Spark as recorded: GB10 (compute capability 12.1), 119.7 GiB unified, 59.2 GiB reported free by
    ``cudaMemGetInfo`` while MemAvailable said 115.6 GiB (56.4 GiB of page cache); NVML's device memory query
    answers NotSupported, its per-process list works, and this process holds its CUDA context (741326848 bytes).

    The PCI bus id is the one DGX Spark's ``nvidia-smi`` shows; the UUID is made up.
    """
    device = ScriptedNvidiaGpu(
        name="NVIDIA GB10",
        total=GB10_TOTAL,
        reserved=0,
        integrated=True,
        compute_capability=(12, 1),
        uuid="GPU-3f1c2b7e-9a64-4d0e-8c21-5be0a7d4c912",
        pci_bus_id="0000000F:01:00.0",
    )
    host = HostMemory(total=GB10_TOTAL, free=GB10_RAW_FREE, page_cache=GB10_PAGE_CACHE)
    sc = Scenario(devices=[device], host=host, **kwargs)
    sc.usage.setdefault(sc.own_driver_pid, {})[0] = GB10_CONTEXT  # already counted in the host figures
    return sc


# ---- Jetson AGX Orin ----------------------------------------------------------------------------------
#: ``/proc/device-tree/compatible`` of a Jetson AGX Orin 64GB Developer Kit (reported in NVIDIA/jetson-gpio#125).
ORIN_COMPATIBLE = "nvidia,p3737-0000+p3701-0005\0nvidia,p3701-0005\0nvidia,tegra234\0nvidia,tegra23x\0"


def jetson_orin_scenario(**kwargs: Any) -> Scenario:
    """A Jetson AGX Orin 64GB on L4T 36.4 (JetPack 6): no NVML, recognised by ``/etc/nv_tegra_release`` and
    its device tree. The device-tree strings are a real board's; the memory figures are nominal for a 64 GB
    module, not a recording."""
    device = ScriptedNvidiaGpu(
        name="Orin",
        total=_kib(61.4),
        reserved=0,
        integrated=True,
        compute_capability=(8, 7),
        uuid="GPU-0e5a7c3d-2b19-4f68-a0d4-7c3e9b5f1a26",
        pci_bus_id="00000000:00:00.0",
    )
    files = {
        "/etc/nv_tegra_release": "# R36 (release), REVISION: 4.4, BOARD: generic, EABI: aarch64\n",
        "/proc/device-tree/compatible": ORIN_COMPATIBLE,
        "/proc/device-tree/model": "NVIDIA Jetson AGX Orin Developer Kit\0",
    }
    kwargs.setdefault("drivers", [ScriptedNvidiaDriver(libraries={"cuda"})])
    sc = Scenario(devices=[device], host=HostMemory(total=_kib(61.4), free=_kib(40.0), page_cache=_kib(12.0)), **kwargs)
    for path, text in files.items():
        sc.files.setdefault(path, text)
    return sc


# ---- AMD Strix Halo -------------------------------------------------------------------------------------
#: ``mem_info_vram_total`` of a Ryzen AI MAX+ 395 (Strix Halo, gfx1151): the VRAM aperture HIP reports as total.
STRIX_HALO_VRAM = 16636528640
#: ``mem_info_gtt_total`` of the same machine: a 96 GiB GTT pool (ROCm/hip#3892).
STRIX_HALO_GTT = 103079215104
#: ``torch.cuda.mem_get_info()`` there: free 95.84 GiB, total 15.49 GiB, the aperture (vllm-project/vllm#40963).
STRIX_HALO_HIP_MEM_GET_INFO = (102891683840, 16631242752)


def strix_halo_scenario(**kwargs: Any) -> Scenario:
    """A 128 GiB Strix Halo with the recorded pools: a 15.49 GiB VRAM carve-out and a 96 GiB GTT pool (whose
    limit, ``ttm.pages_limit``, sits below what the OS could give). The GPU's sysfs figures and HIP's totals
    are from ROCm/hip#3892 and vllm-project/vllm#40963; the host figures (128 GiB less the carve-out,
    104 GiB available) are assumed."""
    device = ScriptedAmdGpu(
        name="AMD Radeon 8060S Graphics",
        total=STRIX_HALO_VRAM,
        reserved=0,
        base_used=512 * MiB,
        integrated=True,
        gtt_total=STRIX_HALO_GTT,
        gtt_used=96 * MiB,
        card=1,
        pci_bus_id="00000000:C6:00.0",
        market_name="AMD Radeon 8060S Graphics",
        gfx_target="gfx1151",
        uuid="GPU-2c4e6a8b0d1f3e5a",
    )
    host_total = 128 * GiB - STRIX_HALO_VRAM
    kwargs.setdefault("drivers", [ScriptedAmdgpuDriver(libraries={"amdsmi"})])
    sc = Scenario(devices=[device], host=HostMemory(total=host_total, free=_kib(92.0), page_cache=_kib(12.0)), **kwargs)
    sc.files.setdefault("/sys/class/drm/card1/device/hwmon/hwmon5/in1_label", "vddnb\n")
    sc.files.setdefault("/sys/class/drm/card1/device/hwmon/hwmon5/in0_label", "vddgfx\n")
    return sc


def mi300a_scenario(**kwargs: Any) -> Scenario:
    """An MI300A-like APU, illustrative (not a recording): no VRAM of its own (as ollama/ollama#13463 reports
    for MI300A), everything in a 120 GiB GTT pool out of 126 GiB of host memory, and no northbridge sensor,
    so only the carve-out rule recognises it as an APU."""
    device = ScriptedAmdGpu(
        name="AMD Instinct MI300A",
        total=0,
        reserved=0,
        integrated=True,
        gtt_total=120 * GiB,
        gtt_used=0,
        card=0,
        pci_bus_id="00000000:02:00.0",
        market_name="AMD Instinct MI300A",
        gfx_target="gfx942",
        uuid="GPU-4b1f0e9d8c7a6b5e",
    )
    host = HostMemory(total=126 * GiB, free=110 * GiB, page_cache=8 * GiB)
    kwargs.setdefault("drivers", [ScriptedAmdgpuDriver(libraries={"amdsmi"})])
    return Scenario(devices=[device], host=host, **kwargs)


__all__ = [
    "GB10_CONTEXT",
    "GB10_CONTEXT_PLUS_512MIB",
    "GB10_PAGE_CACHE",
    "GB10_RAW_FREE",
    "GB10_TOTAL",
    "ORIN_COMPATIBLE",
    "STRIX_HALO_GTT",
    "STRIX_HALO_HIP_MEM_GET_INFO",
    "STRIX_HALO_VRAM",
    "gb10_scenario",
    "jetson_orin_scenario",
    "mi300a_scenario",
    "strix_halo_scenario",
]
