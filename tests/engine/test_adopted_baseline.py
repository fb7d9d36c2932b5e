"""A baseline the engine took before its device context (``EngineMemory(baseline=...)``) is checked, in one place,
against a reading of the engine's device: of another device, platform or total, it is refused naming both."""

from __future__ import annotations

from dataclasses import replace

import pytest

from devmem.engine.memory import EngineMemory
from devmem.engine.profiling import MemorySnapshot
from devmem.errors import EngineMemoryError


def test_an_adopted_baseline_is_the_engines_baseline(host, tmp_path):
    baseline = MemorySnapshot.measure(0, host)
    with EngineMemory(0, platform=host, utilization=0.5, baseline=baseline, ledger_dir=tmp_path) as memory:
        assert (memory.baseline.free, memory.baseline.total) == (baseline.free, baseline.total)


def test_a_baseline_of_another_device_is_refused_naming_both(host, tmp_path):
    other = replace(MemorySnapshot.measure(0, host), device=1)
    with pytest.raises(EngineMemoryError, match=r"device=0 but the baseline was taken on device 1"):
        EngineMemory(0, platform=host, utilization=0.5, baseline=other, ledger_dir=tmp_path)


def test_a_baseline_with_another_total_is_refused_naming_both(host, tmp_path):
    baseline = MemorySnapshot.measure(0, host)
    elsewhere = replace(baseline, total=baseline.total // 2)
    with pytest.raises(EngineMemoryError, match=rf"total is {baseline.total // 2} bytes but 'cpu' device 0 has "):
        EngineMemory(0, platform=host, utilization=0.5, baseline=elsewhere, ledger_dir=tmp_path)
