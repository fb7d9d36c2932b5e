"""A pinned cache's reservation: taken before the weights with the cache and what the engine said beside it, raised
at ``plan()`` to what the windows measured beside the cache (the context, the weights, the transient peak and the
graphs' charge), or refused there; on a scripted H200 whose torch runtime is scripted."""

from __future__ import annotations

import pytest

from devmem import EngineMemory, GiB, KvLayout, MiB, ReservationRefused
from devmem.engine.graphs import GraphsAfterCache
from devmem.engine.reservations import reserve

PAGE, LAYERS, PINNED = 3 * MiB + 4096, 22, 8 * GiB
ACTIVATIONS = [300 * MiB + 1, 2 * GiB + 5]


def _profiled(h200, rt, platform, ledger):
    """A pinned start created before its context, its weights loaded and its largest forward pass profiled."""
    memory = EngineMemory(0, pinned_bytes=PINNED, platform=platform, ledger_dir=ledger)
    h200.allocate(545 * MiB)  # the device context
    rt.malloc(4 * GiB)  # the weights
    with memory.profile(weights_memory=4 * GiB):
        for handle in [rt.malloc(n) for n in ACTIVATIONS]:
            rt.free(handle)
    return memory


def test_a_pinned_start_reserves_its_cache_before_its_weights(h200, torch_rt, platform, tmp_path):
    with EngineMemory(0, pinned_bytes=PINNED, platform=platform, ledger_dir=tmp_path) as memory:
        assert memory.reservation.bytes == PINNED


def test_a_pinned_plan_raises_the_reservation_to_what_the_windows_measured_beside_the_cache(
    h200, torch_rt, platform, tmp_path
):
    memory = _profiled(h200, torch_rt, platform, tmp_path)
    memory.plan(page_size_bytes=PAGE, num_layers=LAYERS, layout=KvLayout.per_layer())
    figures = memory.window_figures()
    assert figures["consumed"] >= 4 * GiB + 545 * MiB and figures["transient_peak_bytes"] > 2 * GiB
    assert memory.reservation.bytes == PINNED + figures["consumed"] + figures["transient_peak_bytes"]
    memory.close()


def test_a_pinned_plan_reserves_the_graphs_after_its_cache_as_a_shares_charge(h200, torch_rt, platform, tmp_path):
    memory = _profiled(h200, torch_rt, platform, tmp_path)
    memory.plan(page_size_bytes=PAGE, num_layers=LAYERS, layout=KvLayout.per_layer(), graphs=GraphsAfterCache(GiB))
    figures = memory.window_figures()
    assert memory.graph_charge.bytes == 0  # the pinned cache's size does not depend on them
    assert memory.reservation.bytes == PINNED + figures["consumed"] + figures["transient_peak_bytes"] + GiB
    memory.close()


def test_a_pinned_plan_whose_need_no_longer_fits_is_refused_naming_what_would_fit(h200, torch_rt, platform, tmp_path):
    memory = _profiled(h200, torch_rt, platform, tmp_path)
    other = reserve(0, memory.baseline.total - PINNED - 6 * GiB, platform=platform, ledger_dir=tmp_path)
    try:
        with pytest.raises(ReservationRefused, match="What would fit"):
            memory.plan(page_size_bytes=PAGE, num_layers=LAYERS, layout=KvLayout.per_layer())
        assert memory.reservation.bytes == PINNED
    finally:
        other.release()
        memory.close()
