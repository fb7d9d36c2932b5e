"""End to end on a scripted DGX Spark: uma platform snapshots into the KV-cache planner.

The GB10 figures are recorded (119.7 GiB unified, 59.2 GiB raw free, 56.4 GiB page cache); the outcomes the
tests pin are the reported ones: a growable cache sized from the raw figure got 216 blocks (11.2 GiB) where
the classic path gives 1302 blocks (67.6 GiB), and a prefill/decode start (free 10.46 GiB raw, 0.73 GiB
committed, 7.28 GiB transient peak) got zero blocks. The model's size, the part of its file read into the
page cache and the block size are chosen to reproduce those outcomes.
"""

from __future__ import annotations

from devmem.engine.profiling import MemorySnapshot, check_startup_memory
from devmem.planner.sizing import blocks_for_bytes, growable_kv_cache_bytes, plan_kv_cache, requested_memory
from devmem.types import GiB, KiB
from devmem.units import format_size
from devmem_nvidia.testing import ScriptedNvml
from devmem_uma import UmaPlatform
from devmem_uma.testing import gb10_scenario

#: One block is 36 layers of 1512 KiB pages (53.16 MiB), as 1302 blocks in 67.6 GiB imply.
PAGE, LAYERS = 1512 * KiB, 36
UTILIZATION = 0.9


def _kib(gib: float) -> int:
    return round(gib * GiB / KiB) * KiB


def spark():
    sc = gb10_scenario()
    return sc, UmaPlatform(nvml=ScriptedNvml(sc), files=sc.fs, environ=sc.environ, mem_get_info=sc.mem_get_info)


def load_model(sc, weights: int, read_into_page_cache: int) -> None:
    """This process loads ``weights`` onto the device; reading its file grows the page cache."""
    sc.allocate(weights)
    sc.host.free -= read_into_page_cache
    sc.host.page_cache += read_into_page_cache


def test_gb10_growable_cache_gets_the_classic_paths_budget_not_a_sixth():
    sc, platform = spark()
    start, raw_start = MemorySnapshot.measure(platform=platform), sc.mem_get_info(0)[0]
    load_model(sc, weights=_kib(36.13), read_into_page_cache=_kib(4.85))
    end, raw_end = MemorySnapshot.measure(platform=platform), sc.mem_get_info(0)[0]
    peak = 4 * GiB
    common = {
        "page_size_bytes": PAGE,
        "num_layers": LAYERS,
        "total": start.total,
        "utilization": UTILIZATION,
        "transient_peak_bytes": peak,
    }

    growable = plan_kv_cache(init_free_memory=start.free, free_memory=end.free, **common)
    classic = plan_kv_cache(consumed=(end - start).process, **common)
    raw = plan_kv_cache(init_free_memory=raw_start, free_memory=raw_end, **common)

    assert (growable.num_blocks, format_size(growable.kv_cache_bytes)) == (1302, "67.60 GiB")
    assert growable.kv_cache_bytes == classic.kv_cache_bytes
    assert (raw.num_blocks, format_size(raw.kv_cache_bytes)) == (216, "11.22 GiB")


def test_prefill_decode_readings_no_longer_end_at_zero_blocks():
    sc, platform = spark()
    start, raw_start = platform.device_memory_info(), sc.mem_get_info(0)[0]
    committed, peak = _kib(0.73), _kib(7.28)
    sc.allocate(raw_start - _kib(10.46))  # weights, graphs and the committed cache: raw free falls to 10.46 GiB
    end, raw_end = platform.device_memory_info(), sc.mem_get_info(0)[0]
    requested = requested_memory(start.total, UTILIZATION)

    raw_kv = growable_kv_cache_bytes(
        requested_memory=requested,
        init_free_memory=raw_start,
        free_memory=raw_end,
        committed_bytes=committed,
        transient_peak_bytes=peak,
    )
    kv = growable_kv_cache_bytes(
        requested_memory=requested,
        init_free_memory=start.free,
        free_memory=end.free,
        committed_bytes=committed,
        transient_peak_bytes=peak,
    )

    assert raw_end == _kib(10.46) and raw_kv == 0
    assert (blocks_for_bytes(kv, PAGE, LAYERS), format_size(kv)) == (1010, "52.44 GiB")


def test_gb10_start_check_passes_where_the_raw_figure_would_refuse():
    sc, platform = spark()
    snapshot = MemorySnapshot.measure(platform=platform)
    requested = requested_memory(snapshot.total, UTILIZATION)
    assert sc.mem_get_info(0)[0] < requested
    check_startup_memory(snapshot, requested, platform)
