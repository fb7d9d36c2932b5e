"""devmem.units: sizes as people write them, and bytes as people read them."""

from __future__ import annotations

import math
import re
from fractions import Fraction

import ledger_workers
import pytest
from hypothesis import given
from hypothesis import strategies as st

from devmem import GiB, MiB
from devmem.units import format_size, parse_size, read_size


@pytest.mark.parametrize(
    "text, expected",
    [
        ("4096", 4096),
        ("16GiB", 16 * GiB),
        ("512MiB", 512 * MiB),
        ("1.5GB", 1_500_000_000),
        ("64 KiB", 65536),
        ("2tib", 2 << 40),
        ("10B", 10),
        (".5GiB", GiB // 2),
        ("1.3GiB", int(1.3 * GiB)),
    ],
)
def test_sizes_with_binary_and_decimal_units_become_bytes(text, expected):
    assert parse_size(text) == expected


@pytest.mark.parametrize("text", ["", "GiB", "-1GiB", "1.5XB", "nan", "inf", "1e9", "16 Gi B", "1,5GB"])
def test_text_that_is_not_a_size_is_refused_with_the_accepted_forms(text):
    with pytest.raises(ValueError, match="KiB, MiB, GiB, TiB"):
        parse_size(text)


@pytest.mark.parametrize(
    "text",
    ["1" + " " * (1 << 17) + "!", " " * (1 << 17) + "1" + " " * (1 << 17) + "x!"],
    ids=["after a number", "around a number"],
)
def test_a_long_run_of_spaces_in_text_that_is_no_size_is_refused_at_once(text):
    """As long as one argument of a command line may be (128 KiB): refused within the bound, not after minutes."""
    with ledger_workers.no_hang(5), pytest.raises(ValueError, match="is not a size"):
        parse_size(text)


def test_a_long_text_that_is_no_size_is_named_cut_short():
    with pytest.raises(ValueError, match=r"\.\.\. \(100003 characters\) is not a size") as refused:
        parse_size("1" + "x" * 100_000)
    assert len(str(refused.value)) < 300


@pytest.mark.parametrize("text", ["1\u212a", "1\u212aiB", "1\u212aB", "2G\u0131B", "4\u00a0GiB"])
def test_a_look_alike_letter_in_a_unit_is_refused_not_read_as_its_ascii_twin(text):
    with pytest.raises(ValueError, match="is not a size"):
        parse_size(text)


@pytest.mark.parametrize(
    "nbytes, text",
    [
        (125 * GiB + GiB // 2, "125.50 GiB"),
        (GiB // 4, "256.00 MiB"),
        (2 * MiB + MiB // 4, "2.25 MiB"),
        (-1664342241, "-1.55 GiB"),
        (0, "0 B"),
        (512, "512 B"),
        (1023, "1023 B"),
        (1536, "1.50 KiB"),
        (3 * (1 << 40) // 2, "1.50 TiB"),
        (GiB - 1, "1024.00 MiB"),
    ],
)
def test_format_size_scales_from_bytes_to_tib(nbytes, text):
    assert format_size(nbytes) == text


@pytest.mark.parametrize(
    "text, expected",
    [
        ("80G", 80 * GiB),
        ("80g", 80 * 10**9),
        ("80GB", 80 * 10**9),
        ("80GiB", 80 * GiB),
        ("512M", 512 * MiB),
        ("512m", 512 * 10**6),
        ("4K", 4096),
        ("4k", 4000),
        ("1T", 1 << 40),
        ("1t", 10**12),
    ],
)
def test_vllms_one_letter_sizes_are_powers_of_2_in_upper_case_and_of_10_in_lower_case(text, expected):
    assert parse_size(text) == expected


@pytest.mark.parametrize(
    "text, how",
    [
        ("80G", "80 GiB = 85899345920 bytes"),
        ("80g", "80 GB = 80000000000 bytes"),
        ("1.5gb", "1.5 GB = 1500000000 bytes"),
        ("16gib", "16 GiB = 17179869184 bytes"),
        ("4096", "4096 bytes"),
    ],
)
def test_read_size_says_how_it_read_the_text(text, how):
    assert read_size(text)[1] == how


UNIT_BYTES = {"": 1, "KB": 10**3, "GB": 10**9, "TB": 10**12, "KiB": 1 << 10, "GiB": 1 << 30, "TiB": 1 << 40}


@given(
    whole=st.integers(0, 10**12),
    fraction=st.text("0123456789", max_size=60),
    zeros=st.tuples(st.integers(0, 60), st.integers(0, 60)),
    unit=st.sampled_from(sorted(UNIT_BYTES)),
)
def test_a_size_is_its_exact_bytes_whatever_zeros_pad_it(whole, fraction, zeros, unit):
    """Leading zeros, trailing zeros and long fractions are no size: the bytes are the exact value, rounded down."""
    number = f"{'0' * zeros[0]}{whole}.{fraction}{'0' * zeros[1]}"
    exact = Fraction(f"{whole}.{fraction or '0'}") * UNIT_BYTES[unit]
    if exact >= 1 << 64:
        with pytest.raises(ValueError, match="larger than any memory"):
            parse_size(number + unit)
    else:
        assert parse_size(number + unit) == math.floor(exact)


@pytest.mark.parametrize("value", [None, "1GiB", True, complex(1)])
def test_format_size_refuses_what_is_no_number_of_bytes_naming_it(value):
    with pytest.raises(ValueError, match=rf"format_size takes a number of bytes.*got {re.escape(repr(value))}"):
        format_size(value)


def test_format_size_reads_numpy_figures_as_the_floats_they_print_as():
    import numpy as np

    assert format_size(np.float32("inf")) == "inf B"
    assert format_size(np.uint64(3 << 30)) == "3.00 GiB"
