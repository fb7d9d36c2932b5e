"""The memory limits the driver enforces and reports (NVML memory limits, driver r615+), on the scripted NVML."""

from __future__ import annotations

import pytest

from devmem import GiB, MemoryInfo, MiB, NotEnoughMemoryError
from devmem.engine import check_startup_memory
from devmem.engine.profiling import MemorySnapshot
from devmem_nvidia.driver_limits import NO_HARD_LIMIT
from devmem_nvidia.nvml_platform import NvmlPlatform
from devmem_nvidia.testing import ScriptedNvml, h200_scenario


def _platform(limits):
    sc = h200_scenario()
    sc.devices[0].memory_limits = limits
    return sc, NvmlPlatform(nvml=ScriptedNvml(sc), files=sc.fs, environ=sc.environ)


def test_hard_limit_caps_total_and_free():
    _, platform = _platform((40 * GiB, 32 * GiB, 4 * GiB))
    assert platform.device_memory_info() == MemoryInfo(36 * GiB, 40 * GiB)


def test_no_limit_leaves_the_device_figures():
    _, limited = _platform((NO_HARD_LIMIT, 0, 0))
    _, older = _platform(None)
    assert limited.device_memory_info() == older.device_memory_info()
    assert older.device_memory_info().total > 139 * GiB


def test_a_device_that_does_not_support_the_call_sets_no_limit():
    sc, platform = _platform((40 * GiB, 32 * GiB, 4 * GiB))
    sc.failures["nvmlDeviceGetMemoryLimits_v1"] = "NotSupported"
    assert platform.device_memory_info().total > 139 * GiB


def test_the_limit_is_named_where_it_binds():
    _, platform = _platform((40 * GiB, 32 * GiB, 4 * GiB))
    assert "the driver's hard memory limit" in platform.memory_sources()["total"]
    assert any("soft limit 32.00 GiB" in note for note in platform.notes(0))


def test_startup_check_refuses_a_share_above_the_hard_limit():
    _, platform = _platform((40 * GiB, 32 * GiB, 0))
    snapshot = MemorySnapshot.measure(0, platform)
    with pytest.raises(NotEnoughMemoryError):
        check_startup_memory(snapshot, 40 * GiB + MiB, platform)


def test_a_hard_limit_of_zero_sets_no_limit():
    _, limited = _platform((0, 0, 0))
    _, older = _platform(None)
    assert limited.device_memory_info() == older.device_memory_info()


def test_the_hard_limit_read_before_still_caps_a_reading_whose_call_fails():
    sc, platform = _platform((40 * GiB, 32 * GiB, 4 * GiB))
    assert platform.device_memory_info().total == 40 * GiB
    sc.failures["nvmlDeviceGetMemoryLimits_v1"] = "Unknown"
    assert platform.device_memory_info().total == 40 * GiB


def test_a_limit_whose_first_read_failed_is_read_at_the_next_reading():
    sc, platform = _platform((40 * GiB, 32 * GiB, 4 * GiB))
    sc.failures["nvmlDeviceGetMemoryLimits_v1"] = "Unknown"
    platform.device_memory_info()
    del sc.failures["nvmlDeviceGetMemoryLimits_v1"]
    assert platform.device_memory_info() == MemoryInfo(36 * GiB, 40 * GiB)
