"""A device index is checked once per public entry: at the door, by devmem.arguments and the platform's
``check_device`` (which asks the platform how many devices it has); every later step trusts it."""

from __future__ import annotations

import collections

import pytest

from devmem import GiB, arguments, device_report
from devmem.cpu import CpuPlatform
from devmem.engine.memory import EngineMemory
from devmem.engine.profiling import MemorySnapshot
from devmem.engine.reservations import reserve
from devmem.platform import PlatformBase
from devmem.testing.scenario import HostMemory, Scenario


@pytest.fixture
def checks(monkeypatch):
    """How many times the device index was checked: by type (``arguments.device_index``) and against the
    platform (``check_device``)."""
    seen: collections.Counter[str] = collections.Counter()
    by_type, by_platform = arguments.device_index, PlatformBase.check_device

    def device_index(*args, **kwargs):
        seen["type"] += 1
        return by_type(*args, **kwargs)

    def check_device(self, device):
        seen["platform"] += 1
        return by_platform(self, device)

    monkeypatch.setattr(arguments, "device_index", device_index)
    monkeypatch.setattr(PlatformBase, "check_device", check_device)
    return seen


def test_a_snapshot_checks_its_device_index_once(host, checks):
    MemorySnapshot.measure(0, host)
    assert checks == {"type": 1, "platform": 1}


def test_a_device_report_checks_its_device_index_once(host, checks):
    device_report(host, 0)
    assert checks["platform"] == 1


def test_a_reading_checks_its_device_index_once(host, checks):
    host.read(0)
    assert checks["platform"] == 1


def test_an_engine_memory_without_a_reservation_checks_its_device_index_once(host, checks):
    EngineMemory(0, platform=host, utilization=0.5, reserve=False).close()
    assert checks == {"type": 1, "platform": 1}


def test_a_reservation_checks_its_device_index_once(host, checks, tmp_path):
    reserve(0, GiB, platform=host, ledger_dir=tmp_path).release()
    assert checks["platform"] == 1


def test_an_engine_memory_checks_its_device_index_once(host, checks, tmp_path):
    EngineMemory(0, platform=host, utilization=0.5, ledger_dir=tmp_path).close()
    assert checks == {"type": 1, "platform": 1}


def test_a_backend_overriding_prepare_itself_is_still_prepared_by_engine_memory(tmp_path):
    """A backend written before the ``_prepare`` hook overrides the public ``prepare``: an EngineMemory still calls it
    (checking the index again there is its own)."""
    prepared: list[int] = []

    class OldStyle(CpuPlatform):
        def prepare(self, device: int = 0) -> None:
            prepared.append(self.check_device(device))

    platform = OldStyle(files=Scenario(host=HostMemory(total=64 * GiB, free=60 * GiB)).fs)
    EngineMemory(0, platform=platform, utilization=0.5, ledger_dir=tmp_path).close()
    assert prepared == [0]
