"""EngineMemory's door: a backend's reading outside the platform contract refused as device_report refuses it."""

from __future__ import annotations

import pytest

from devmem import DevmemError, EngineMemory, GiB, MemoryInfo, device_report
from devmem.cpu import CpuPlatform
from devmem.platform import DeviceMemory, ProcessMemory


class _FreeAboveTotal(CpuPlatform):
    def _memory(self, device):
        return DeviceMemory(MemoryInfo(free=9 * GiB, total=8 * GiB))


class _NegativeProcess(CpuPlatform):
    def _process_memory(self, device):
        return ProcessMemory(-7)


@pytest.mark.parametrize("backend", [_FreeAboveTotal, _NegativeProcess])
def test_a_reading_outside_the_contract_is_refused_by_engine_memory_as_by_device_report(backend):
    with pytest.raises(DevmemError) as report:
        device_report(backend(), 0)
    with pytest.raises(DevmemError) as engine:
        EngineMemory(0, utilization=0.01, platform=backend(), reserve=False, check_startup=False)
    assert type(engine.value) is type(report.value) and str(engine.value) == str(report.value)
