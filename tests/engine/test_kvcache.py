"""The planned KV cache as one allocation: whole blocks that fit after the allocator's rounding, per-layer views."""

from __future__ import annotations

import pytest

import devmem
from devmem import DevmemError, GiB, MiB
from devmem.engine.kvcache import ALLOCATOR_GRANULARITY, allocate_kv_cache
from devmem.planner.sizing import SizingError, plan_kv_cache
from devmem.types import KiB

torch = pytest.importorskip("torch")


def test_granularity_drops_the_block_whose_rounded_allocation_would_overrun():
    budget = 9 * MiB + MiB // 2
    plain = plan_kv_cache(pinned_bytes=budget, page_size_bytes=3 * MiB, num_layers=1)
    rounded = plan_kv_cache(
        pinned_bytes=budget, page_size_bytes=3 * MiB, num_layers=1, allocation_granularity=ALLOCATOR_GRANULARITY
    )
    assert plain.num_blocks == 3 and rounded.num_blocks == 2


def test_granularity_keeps_blocks_whose_rounded_allocation_fits():
    plan = plan_kv_cache(
        total=1000 * MiB,
        utilization=0.5,
        consumed=100 * MiB,
        page_size_bytes=MiB,
        num_layers=4,
        allocation_granularity=ALLOCATOR_GRANULARITY,
    )
    assert plan.kv_cache_bytes == 400 * MiB and plan.num_blocks == 100
    assert plan.breakdown["granularity"] == ALLOCATOR_GRANULARITY


def test_utilization_plan_rounds_to_whole_allocation_units():
    plan = plan_kv_cache(
        total=1000 * MiB,
        utilization=0.5,
        consumed=99 * MiB,
        page_size_bytes=MiB // 4,
        num_layers=1,
        allocation_granularity=ALLOCATOR_GRANULARITY,
    )
    assert plan.kv_cache_bytes == 401 * MiB
    assert plan.num_blocks * plan.block_bytes == 400 * MiB


def test_granularity_must_be_a_positive_int():
    with pytest.raises(SizingError, match="allocation_granularity"):
        plan_kv_cache(pinned_bytes=MiB, page_size_bytes=1024, num_layers=1, allocation_granularity=0)


def test_pinned_size_below_one_rounded_block_names_the_size_to_pin():
    with pytest.raises(SizingError, match="pin at least 2097152 bytes"):
        plan_kv_cache(
            pinned_bytes=MiB + 1, page_size_bytes=MiB, num_layers=1, allocation_granularity=ALLOCATOR_GRANULARITY
        )


def test_cache_is_one_allocation_of_the_planned_blocks():
    plan = plan_kv_cache(pinned_bytes=MiB, page_size_bytes=4096, num_layers=4)
    cache = allocate_kv_cache(plan, 4, "cpu")
    assert cache.buffer.numel() == plan.num_blocks * plan.block_bytes == cache.nbytes
    assert all(
        layer.untyped_storage().data_ptr() == cache.buffer.untyped_storage().data_ptr() for layer in cache.layers
    )


def test_layer_views_hold_their_page_of_every_block_without_overlap():
    plan = plan_kv_cache(pinned_bytes=64 * 1024, page_size_bytes=1024, num_layers=2)
    cache = allocate_kv_cache(plan, 2, torch.device("cpu"))
    assert [tuple(layer.shape) for layer in cache.layers] == [(plan.num_blocks, 1024)] * 2
    cache.layers[0].fill_(7)
    assert int(cache.layers[1].sum()) == 0


def test_layer_count_that_does_not_split_a_block_is_refused():
    plan = plan_kv_cache(pinned_bytes=MiB, page_size_bytes=1000, num_layers=3)
    with pytest.raises(SizingError, match="does not split into 7"):
        allocate_kv_cache(plan, 7, "cpu")


def test_allocation_is_exported_from_the_package():
    assert devmem.engine.allocate_kv_cache is allocate_kv_cache


def test_device_index_is_mapped_to_the_platforms_torch_device(monkeypatch):
    """On the cpu platform device 0 is host memory: the cache lands on torch's CPU device, no torch error."""
    monkeypatch.setenv("DEVMEM_PLATFORM", "cpu")
    devmem.clear_cache()
    plan = plan_kv_cache(pinned_bytes=8 * MiB, page_size_bytes=64 * KiB, num_layers=4)
    cache = allocate_kv_cache(plan, 4, 0)
    assert cache.buffer.device.type == "cpu"
    devmem.clear_cache()


def test_device_index_out_of_range_is_a_devmem_error(monkeypatch):
    monkeypatch.setenv("DEVMEM_PLATFORM", "cpu")
    devmem.clear_cache()
    plan = plan_kv_cache(pinned_bytes=8 * MiB, page_size_bytes=64 * KiB, num_layers=4)
    with pytest.raises(DevmemError, match="device index 3 is out of range"):
        allocate_kv_cache(plan, 4, 3)
    devmem.clear_cache()


def test_one_tensor_per_layer_is_planned_with_each_rounded_up():
    """22 layers of 3 MiB + 1 KiB pages, budget 1 GiB: per-layer tensors, each rounded to 2 MiB, still fit."""
    page = 3 * MiB + KiB
    plan = plan_kv_cache(
        pinned_bytes=GiB,
        page_size_bytes=page,
        num_layers=22,
        allocation_granularity=ALLOCATOR_GRANULARITY,
        allocations=22,
    )
    per_tensor = -(-plan.num_blocks * page // ALLOCATOR_GRANULARITY) * ALLOCATOR_GRANULARITY
    assert 22 * per_tensor <= GiB
    assert 22 * -(-(plan.num_blocks + 1) * page // ALLOCATOR_GRANULARITY) * ALLOCATOR_GRANULARITY > GiB
    assert "22 equal tensors allocated separately" in plan.explain()


def test_allocations_that_do_not_split_a_block_are_refused():
    with pytest.raises(SizingError, match="allocations=3"):
        plan_kv_cache(pinned_bytes=GiB, page_size_bytes=MiB, num_layers=2, allocations=3)


def test_one_allocation_says_so_in_the_explanation():
    plan = plan_kv_cache(
        pinned_bytes=GiB, page_size_bytes=MiB, num_layers=2, allocation_granularity=ALLOCATOR_GRANULARITY
    )
    assert "layout: one allocation, rounded up once to 2.00 MiB" in plan.explain()


def test_pinned_cache_beside_weights_larger_than_the_total_is_refused():
    with pytest.raises(devmem.NotEnoughMemoryError, match="more than the total"):
        plan_kv_cache(pinned_bytes=60 * GiB, weights=30 * GiB, total=80 * GiB, page_size_bytes=MiB, num_layers=2)


@pytest.mark.parametrize("device", [None, 1.5])
def test_a_device_that_is_neither_an_index_nor_a_torch_device_is_refused(device):
    pytest.importorskip("torch")
    plan = plan_kv_cache(pinned_bytes=8 * MiB, page_size_bytes=64 * KiB, num_layers=4)
    with pytest.raises(SizingError, match=f"device must be devmem's device index .*got {device!r}"):
        allocate_kv_cache(plan, 4, device)


def test_a_platform_that_is_no_devmem_platform_is_refused_naming_it():
    plan = plan_kv_cache(pinned_bytes=8 * MiB, page_size_bytes=64 * KiB, num_layers=4)
    with pytest.raises(SizingError, match="platform must be a devmem Platform .*got 'cpu'"):
        allocate_kv_cache(plan, 4, 0, "cpu")  # type: ignore[arg-type]
