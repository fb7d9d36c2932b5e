"""The shared argument validators: each returns the checked value or a DevmemError naming the argument and value."""

from __future__ import annotations

from fractions import Fraction

import pytest

from devmem import DevmemError
from devmem.arguments import ArgumentError, byte_count, count, device_index, real, utilization
from devmem.cpu import CpuPlatform
from devmem.planner.sizing import SizingError
from devmem.resolution.plugins import platform_argument


def test_byte_count_returns_a_python_int():
    np = pytest.importorskip("numpy")
    value = byte_count("weights", np.int64(5))
    assert value == 5 and type(value) is int


@pytest.mark.parametrize("value", ["16GiB", 1.5, True, None, -1, 1 << 64])
def test_byte_count_refuses_what_is_no_byte_count(value):
    with pytest.raises(ArgumentError, match="weights_memory"):
        byte_count("weights_memory", value)


def test_byte_count_points_a_string_to_parse_size():
    with pytest.raises(DevmemError, match="parse_size"):
        byte_count("weights_memory", "16GiB")


def test_zero_is_refused_where_positive():
    with pytest.raises(ArgumentError, match="> 0"):
        byte_count("page_size_bytes", 0, positive=True)


def test_error_class_is_the_callers():
    with pytest.raises(SizingError):
        byte_count("total", -5, error=SizingError)


def test_utilization_is_exact():
    assert utilization(0.9) == Fraction(9, 10)


@pytest.mark.parametrize("value", [0, 1.5, float("nan"), "0.5"])
def test_utilization_outside_the_unit_interval_is_refused(value):
    with pytest.raises(ArgumentError, match="utilization"):
        utilization(value)


def test_real_refuses_infinity():
    with pytest.raises(ArgumentError, match="finite"):
        real("margin_fraction", float("inf"))


@pytest.mark.parametrize("value", [-1, 1.0, "0", True])
def test_device_index_refuses_what_is_no_index(value):
    with pytest.raises(ArgumentError, match="device"):
        device_index(value)


def test_device_index_names_a_torch_device_as_the_wrong_type():
    torch = pytest.importorskip("torch")
    with pytest.raises(ArgumentError, match="of type device"):
        device_index(torch.device("cpu"))


def test_count_refuses_zero():
    with pytest.raises(ArgumentError, match="num_layers must be an int > 0, got 0"):
        count("num_layers", 0)


def test_a_platform_class_in_place_of_a_platform_is_refused_naming_the_instance_to_pass():
    with pytest.raises(ArgumentError, match=r"got the class .*CpuPlatform.*pass an instance of it \(CpuPlatform\(\)\)"):
        platform_argument(CpuPlatform)
