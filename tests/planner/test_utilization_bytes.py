"""One rounding of "utilization to bytes": ``requested_memory`` and ``reserve(utilization=)`` give the same bytes,
the ceiling of the exact product (a float is the decimal it prints as), and refuse a bad share with one error."""

from __future__ import annotations

from fractions import Fraction

import pytest
from hypothesis import given
from hypothesis import strategies as st

from devmem import GiB, SizingError
from devmem.cpu import CpuPlatform
from devmem.engine.reservations import reserve
from devmem.planner.sizing import requested_memory
from devmem.testing.scenario import HostMemory, Scenario

TOTAL = 80 * GiB


def host(total: int) -> CpuPlatform:
    """The cpu platform on a scripted host of ``total`` bytes, all of them free."""
    return CpuPlatform(files=Scenario(host=HostMemory(total=total, free=total)).fs)


def reserved(total: int, utilization: float, ledger_dir) -> int:
    # the share covers what this process holds (held_outside=0): the rounding alone decides, up to u = 1
    with reserve(0, utilization=utilization, platform=host(total), ledger_dir=ledger_dir, held_outside=0) as r:
        return r.bytes


@pytest.mark.parametrize(
    ("utilization", "expected"), [(0.9, 77_309_411_328), (0.1125, 9_663_676_416), (0.05, 4_294_967_296)]
)
def test_an_exact_product_is_not_bumped_by_one(utilization, expected):
    assert requested_memory(TOTAL, utilization) == expected


@pytest.mark.parametrize(
    ("utilization", "expected"), [(0.9, 77_309_411_328), (0.1125, 9_663_676_416), (0.05, 4_294_967_296)]
)
def test_a_reservation_by_utilization_asks_for_the_exact_product(tmp_path, utilization, expected):
    assert reserved(TOTAL, utilization, tmp_path) == expected


def test_a_product_with_a_fraction_of_a_byte_rounds_up():
    # 10 x 0.33 = 3.3 bytes: floor and round() give 3, the ceiling 4
    assert requested_memory(10, 0.33) == 4


def test_a_reservation_of_a_fraction_of_a_byte_rounds_up(tmp_path):
    # 3 GiB x 0.3301 = 1,063,326,528.31 bytes: floor and round() give ...528, the ceiling ...529
    assert reserved(3 * GiB, 0.3301, tmp_path) == 1_063_326_529


@pytest.mark.parametrize("utilization", [0, 1.5, 1.0000001, -0.1, float("nan"), True, "0.5"])
def test_a_bad_utilization_is_a_sizing_error_in_the_planner(utilization):
    with pytest.raises(SizingError, match="utilization must be"):
        requested_memory(TOTAL, utilization)


@pytest.mark.parametrize("utilization", [0, 1.5, 1.0000001, -0.1, float("nan"), True, "0.5"])
def test_a_bad_utilization_is_a_sizing_error_in_a_reservation(tmp_path, utilization):
    with pytest.raises(SizingError, match="utilization must be"):
        reserve(0, utilization=utilization, platform=host(TOTAL), ledger_dir=tmp_path)


#: A utilization written with up to 6 decimals (as people and engines write one), as a float.
decimals = st.integers(1, 10**6).map(lambda n: n / 10**6)


@given(total=st.integers(1, 1 << 50), utilization=decimals)
def test_the_bytes_are_the_least_whole_number_not_below_the_decimal_product(total, utilization):
    written = round(utilization * 10**6)  # the decimal as an integer number of millionths
    got = requested_memory(total, utilization)
    assert got * 10**6 >= total * written > (got - 1) * 10**6


@given(millionths=st.integers(1, 10**6), multiple=st.integers(1, 1 << 30))
def test_an_exact_product_is_exactly_the_bytes(millionths, multiple):
    denominator = Fraction(millionths, 10**6).denominator
    total = denominator * multiple  # so total x utilization is a whole number
    assert requested_memory(total, millionths / 10**6) == total * millionths // 10**6


@given(kib=st.integers(1 << 20, 1 << 38), utilization=decimals | st.floats(0, 0.99, exclude_min=True))
def test_a_reservation_asks_for_what_the_planner_requests(tmp_path_factory, kib, utilization):
    total = kib * 1024  # the host counts its memory in KiB
    assert reserved(total, utilization, tmp_path_factory.mktemp("ledger")) == requested_memory(total, utilization)
