"""``DEVMEM_PLATFORM=demo``: the command and the exporter on a scripted node of eight H200s with engines, never
chosen without being named."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from devmem import GiB
from devmem_nvidia.demo import ENGINES, GPUS, DemoPlatform, demo_pid


def devmem(*argv: str, platform: str | None = "demo", **env: str) -> subprocess.CompletedProcess:
    environ = {k: v for k, v in os.environ.items() if k != "DEVMEM_PLATFORM"}
    environ.update(env, **({"DEVMEM_PLATFORM": platform} if platform else {}))
    return subprocess.run(
        [sys.executable, "-m", "devmem", *argv], capture_output=True, text=True, env=environ, timeout=60
    )


def test_the_demo_is_eight_h200s_with_three_engines_each():
    done = devmem("--json")
    data = json.loads(done.stdout)
    assert done.returncode == 0 and data["platform"] == "demo" and data["device_count"] == GPUS
    for device in data["devices"]:
        held = {int(pid): used for pid, used in device["other_processes"].items()}
        assert device["name"] == "NVIDIA H200"
        assert held == {demo_pid(device["index"], engine): gib * GiB for engine, gib in ENGINES}


def test_the_demo_fits_an_80x24_screen():
    done = devmem(COLUMNS="80", LINES="24")
    lines = done.stdout.splitlines()
    assert done.returncode == 0 and len(lines) <= 23 and lines[0].startswith("devmem info on demo"), done.stdout


def test_the_demos_engines_are_named_by_their_pids_where_their_commands_are_unseen():
    done = devmem("-i", "2", COLUMNS="80", LINES="24")
    rows = [line.split() for line in done.stdout.splitlines() if line.split()[:1] == [str(demo_pid(2, 0))]]
    assert rows == [[str(demo_pid(2, 0)), "-", "40.00", "GiB", "-"]], done.stdout


def test_the_demo_answers_nvidia_smis_query():
    done = devmem("--query-gpu=index,memory.used", "--format=csv,noheader,nounits", "-i", "0")
    assert done.returncode == 0 and done.stdout == f"0, {95 * 1024}\n"


def test_doctor_on_the_demo_is_healthy_and_quiet():
    done = devmem("doctor", COLUMNS="80")
    assert done.returncode == 0 and len(done.stdout.splitlines()) <= 12, done.stdout


def test_the_demo_is_listed_but_never_chosen_without_being_named():
    done = devmem("plugins", "--json", platform=None)
    (demo,) = [c for c in json.loads(done.stdout) if c["name"] == "demo"]
    assert demo["detected"] and not demo["chosen"] and demo["priority"] < 0


def test_the_exporter_serves_the_demo(tmp_path):
    prometheus_client = pytest.importorskip("prometheus_client")
    from devmem.exporter.metrics import DevmemCollector
    from devmem.exporter.readings import NodeReader

    registry = prometheus_client.CollectorRegistry(auto_describe=False)
    registry.register(DevmemCollector(NodeReader(DemoPlatform(), tmp_path / "ledger", candidates=[])))
    text = prometheus_client.generate_latest(registry).decode()
    used = [line for line in text.splitlines() if line.startswith("devmem_device_used_bytes{")]
    assert len(used) == GPUS and all(float(line.rsplit(" ", 1)[1]) == 95 * GiB for line in used), used
