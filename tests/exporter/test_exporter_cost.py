"""What a scrape of ``devmem exporter`` reads, and what it starts: no thread (the readings run on threads that live
with the exporter), and who a process is (psutil) only for the processes it shows, once per process, however many
devices show it and however many scrapes follow.

Devices are scripted NVIDIA GPUs (devmem_nvidia.testing); the processes on them are real processes of this machine;
psutil, the vendor boundary for who a process is, is watched (not replaced) to count what is asked of it.
"""

from __future__ import annotations

import subprocess
import sys
import threading
from collections import Counter
from unittest import mock

import psutil
import pytest

prometheus_client = pytest.importorskip("prometheus_client")

import devmem  # noqa: E402
from devmem.exporter.metrics import DevmemCollector  # noqa: E402
from devmem.exporter.readings import NodeReader  # noqa: E402
from devmem.testing import Scenario  # noqa: E402
from devmem.types import GiB  # noqa: E402
from devmem_nvidia.testing import ScriptedNvidiaGpu, scripted_platform  # noqa: E402


@pytest.fixture(scope="module")
def sleepers():
    """Five real processes that sleep; yields their PIDs."""
    procs = [subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"]) for _ in range(5)]
    yield [p.pid for p in procs]
    for p in procs:
        p.kill()
        p.wait()


@pytest.fixture
def node(sleepers):
    """Two scripted H200s: every sleeper holds memory on both, the first the most, the last the least."""
    sc = Scenario(
        devices=[ScriptedNvidiaGpu(uuid=f"GPU-{i}", pci_bus_id=f"00000000:{16 + i:02x}:00.0") for i in (0, 1)]
    )
    for n, pid in enumerate(sleepers):
        for device in (0, 1):
            sc.allocate((5 - n) * GiB, device, pid=pid)
    return sc


def registry_for(platform, tmp_path, **kwargs) -> prometheus_client.CollectorRegistry:
    registry = prometheus_client.CollectorRegistry(auto_describe=False)
    registry.register(DevmemCollector(NodeReader(platform, tmp_path / "ledger", candidates=[], **kwargs)))
    return registry


def looked_up(registry, scrapes: int) -> Counter[int]:
    """The PIDs psutil was asked about (``psutil.Process(pid)``) over ``scrapes`` scrapes, and how often."""
    asked: Counter[int] = Counter()
    real = psutil.Process

    def process(pid=None):
        asked[pid] += 1
        return real(pid)

    with mock.patch("psutil.Process", side_effect=process):
        for _ in range(scrapes):
            prometheus_client.generate_latest(registry)
    return asked


def test_a_scrape_asks_psutil_only_about_the_processes_it_shows_once_each(node, sleepers, tmp_path):
    platform = scripted_platform(node)
    (tmp_path / "ledger").mkdir()
    with devmem.reserve(0, bytes=GiB, platform=platform, ledger_dir=tmp_path / "ledger"):  # the ledger counts all five
        asked = looked_up(registry_for(platform, tmp_path, max_processes=2), scrapes=1)
    assert set(asked) == set(sleepers[:2])  # the two largest, shown on both devices: the others only counted
    assert asked[sleepers[0]] <= 2 and asked[sleepers[1]] <= 2  # psutil.Process and nothing per device


def test_later_scrapes_ask_psutil_about_no_process_seen_before(node, tmp_path):
    registry = registry_for(scripted_platform(node), tmp_path, max_processes=2)
    prometheus_client.generate_latest(registry)
    assert looked_up(registry, scrapes=3) == Counter()


def test_a_process_shown_again_after_its_pid_was_reused_is_looked_up_anew(node, sleepers, tmp_path):
    registry = registry_for(scripted_platform(node), tmp_path, max_processes=2)
    prometheus_client.generate_latest(registry)
    reused = mock.patch("devmem.engine.reservations._owners._start_time", side_effect=lambda pid: 1)  # another start
    with reused, mock.patch("devmem.exporter.readings._start_time", side_effect=lambda pid: 1):
        assert set(looked_up(registry, scrapes=1)) == set(sleepers[:2])


def test_scrapes_start_no_thread_once_the_first_has_run(node, tmp_path):
    registry = registry_for(scripted_platform(node), tmp_path)
    prometheus_client.generate_latest(registry)
    started = []
    real = threading.Thread.start

    def start(thread):
        started.append(thread.name)
        real(thread)

    with mock.patch.object(threading.Thread, "start", start):
        for _ in range(3):
            prometheus_client.generate_latest(registry)
    assert started == []
