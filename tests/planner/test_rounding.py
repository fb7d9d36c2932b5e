"""What the plan charges a cache's tensors: torch's caching allocator's rounding for their known size."""

from __future__ import annotations

import pytest

from devmem import MiB, NotEnoughMemoryError, SizingError
from devmem.planner import plan_kv_cache
from devmem.planner.rounding import Rounding, caching_reserved, expandable_reserved, request_size

KiB = 1024


def test_every_request_is_rounded_up_to_512_bytes():
    assert (request_size(1), request_size(512), request_size(513)) == (512, 512, 1024)


def test_a_tensor_of_10_mib_or_more_gets_its_own_segment_rounded_up_to_2_mib():
    assert caching_reserved(10 * MiB + 1, 3) == 3 * 12 * MiB
    assert caching_reserved(10 * MiB, 1) == 10 * MiB


def test_tensors_between_1_and_10_mib_share_20_mib_segments():
    assert caching_reserved(7 * MiB, 56) == 28 * 20 * MiB  # two in each: more than 2 MiB rounding charges
    assert caching_reserved(MiB + 1, 1) == 20 * MiB


def test_tensors_of_at_most_1_mib_are_packed_into_2_mib_segments():
    assert caching_reserved(512 * KiB, 5) == 2 * 2 * MiB  # four in each
    assert caching_reserved(MiB, 1) == 2 * MiB


def test_expandable_segments_map_the_packed_total_in_20_mib_pages():
    assert expandable_reserved(3 * MiB, 22) == 80 * MiB  # 66 MiB of tensors
    assert expandable_reserved(3 * MiB + 1, 20) == 80 * MiB  # each request rounded to 512 B first: 60 MiB + 10 KiB


def test_the_most_blocks_are_those_whose_allocation_still_fits():
    rounding, block = Rounding(56, "caching"), 56 * 8 * KiB
    kv = 16 * 1024 * MiB + 83 * MiB
    n = rounding.blocks(kv, block)
    assert rounding.reserved(n * block) <= kv < rounding.reserved((n + 1) * block)


def _plan(**kwargs):
    return plan_kv_cache(total=141 * 1024 * MiB, utilization=0.1, page_size_bytes=8 * KiB, num_layers=28, **kwargs)


def test_plan_without_a_layout_takes_the_fewest_blocks_of_its_layouts():
    told = [_plan(allocator="caching", allocations=n).num_blocks for n in (1, 28, 56)]
    assert _plan(allocator="caching").num_blocks == min(told)
    assert "28 tensor(s), each charged what torch's caching allocator reserves" in _plan(allocator="caching").layout
    assert "not told the layout, it fits one allocation or 56 tensor(s) too" in _plan(allocator="caching").layout


def test_plan_for_tensors_between_1_and_10_mib_charges_their_shared_segments():
    # 28 tensors of a little under 7 MiB fill 14 segments of 20 MiB: more than 28 x 2 MiB rounding would charge
    plan = plan_kv_cache(
        pinned_bytes=280 * MiB, page_size_bytes=7 * MiB - 512, num_layers=28, allocator="caching", allocations=28
    )
    assert plan.num_blocks == 1
    with pytest.raises(SizingError, match="pin at least 293601280 bytes"):
        plan_kv_cache(
            pinned_bytes=279 * MiB, page_size_bytes=7 * MiB - 512, num_layers=28, allocator="caching", allocations=28
        )


def test_plan_refuses_an_allocator_it_does_not_model():
    with pytest.raises(SizingError, match="allocator must be one of 'caching', 'expandable'"):
        _plan(allocator="bump")


def test_plan_refuses_a_granularity_of_its_own_beside_a_modelled_allocator():
    with pytest.raises(SizingError, match="allocation_granularity=4096 with allocator='caching'"):
        _plan(allocator="caching", allocation_granularity=4096)


def _reserved(allocator, total, count):
    each = total // count
    return caching_reserved(each, count) if allocator == "caching" else expandable_reserved(each, count)


@pytest.mark.parametrize(
    ("allocator", "pinned", "page", "layers"),
    [
        ("caching", 1000 * MiB, 512, 128),  # 6.7 MiB tensors, 3 in 20 MiB; their 3.3 MiB halves only 5
        ("expandable", 5407355, 512, 36),  # 72 halves of 113.5 x 512 B, each rounded up to 114 x 512 B
    ],
)
def test_plan_without_a_layout_fits_keys_and_values_allocated_apart(allocator, pinned, page, layers):
    plan = plan_kv_cache(pinned_bytes=pinned, page_size_bytes=page, num_layers=layers, allocator=allocator)
    cache = plan.num_blocks * plan.block_bytes
    assert _reserved(allocator, cache, 2 * layers) <= plan.kv_cache_bytes


@pytest.mark.parametrize("allocator", ["caching", "expandable"])
def test_plan_without_a_layout_fits_one_allocation(allocator):
    # 36 small tensors pack into 2 MiB segments, but one allocation of the same bytes above 1 MiB takes 20 MiB
    plan = plan_kv_cache(pinned_bytes=5407355, page_size_bytes=3034, num_layers=36, allocator=allocator)
    cache = plan.num_blocks * plan.block_bytes
    assert _reserved(allocator, cache, 1) <= plan.kv_cache_bytes


def test_the_utilization_a_shortfall_advises_holds_one_block_as_the_allocator_rounds_it():
    figures = {"total": 8 * 1024 * MiB, "weights": 4 * 1024 * MiB - MiB, "page_size_bytes": 3 * MiB, "num_layers": 1}
    with pytest.raises(NotEnoughMemoryError) as info:  # a 3 MiB block takes a 20 MiB segment
        plan_kv_cache(utilization=0.5, allocator="caching", **figures)
    assert "less than one block (3.00 MiB, 20.00 MiB allocated)" in str(info.value)
    needed = info.value.breakdown["needed_utilization"]
    assert plan_kv_cache(utilization=needed, allocator="caching", **figures).num_blocks >= 1
