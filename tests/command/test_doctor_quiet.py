"""``devmem doctor`` quiet when a node is healthy: a finding the same on several devices said once, info findings
that differ by device on one line, warnings in each device's own words; ``--json`` and exit codes unchanged.

The node is eight scripted H200s (devmem_nvidia.testing) with engines (PIDs the driver reports) on each."""

from __future__ import annotations

import json
import os
from unittest import mock

import pytest

from devmem.command.doctor import _devices, cmd_doctor
from devmem.command.main import build_parser
from devmem.testing import Scenario
from devmem.types import GiB
from devmem_nvidia.testing import ScriptedNvidiaGpu, scripted_platform


def node(engines=lambda device: [40, 30, 25]) -> Scenario:
    """Eight H200s; on device d, a process per GiB figure of ``engines(d)`` (PIDs of their own on each device)."""
    gpus = [
        ScriptedNvidiaGpu(uuid=f"GPU-00000000-0000-0000-0000-{i:012d}", pci_bus_id=f"00000000:{16 + i:02x}:00.0")
        for i in range(8)
    ]
    sc = Scenario(devices=gpus)
    for device in range(8):
        for n, gib in enumerate(engines(device)):
            sc.allocate(gib * GiB, device, pid=5000 + 10 * device + n)
    return sc


def doctor(capsys, sc: Scenario, *argv: str) -> tuple[int, list[str]]:
    with mock.patch.dict(os.environ, {"COLUMNS": "80"}):
        code = cmd_doctor(build_parser().parse_args(["doctor", *argv]), scripted_platform(sc))
    return code, capsys.readouterr().out.splitlines()


def test_a_healthy_8_gpu_node_is_at_most_12_lines_and_exit_0(capsys):
    code, lines = doctor(capsys, node())
    assert code == 0 and len(lines) <= 12 and all(len(line) <= 80 for line in lines), "\n".join(lines)


def test_a_finding_the_same_on_every_device_is_said_once_for_them(capsys):
    _, lines = doctor(capsys, node())
    assert [line for line in lines if "NVIDIA driver" in line] == ["[info] devices 0-7: NVIDIA driver 580.159.04"]


def test_co_tenants_on_every_device_are_one_line(capsys):
    _, lines = doctor(capsys, node())
    text = " ".join(" ".join(lines).split())
    assert "[info] devices 0-7: 3 other processes hold 95.00 GiB on each (`devmem info` lists them)" in text
    assert text.count("what to do: each engine's utilization") == 1


def test_co_tenants_that_differ_by_device_are_one_line_with_their_range(capsys):
    _, lines = doctor(capsys, node(lambda device: [40, 30, 25][: 1 + device % 3]))
    text = " ".join(" ".join(lines).split())
    assert "devices 0-7: 1 to 3 other processes hold 40.00 GiB to 95.00 GiB on each" in text, text


def test_warnings_keep_each_devices_own_words(capsys):
    code, lines = doctor(capsys, node(lambda device: [128 + device] if device in (2, 5) else [40]))
    warned = [line for line in lines if line.startswith("[WARN]")]
    assert code == 1 and [line.split(":")[0] for line in warned] == ["[WARN] device 2", "[WARN] device 5"], lines


def test_a_warning_the_same_on_several_devices_is_said_once_for_them(capsys):
    code, lines = doctor(capsys, node(lambda device: [130] if device in (2, 5) else [40]))
    assert code == 1 and [line for line in lines if line.startswith("[WARN]")] == [
        "[WARN] devices 2, 5: only 9.80 GiB of 139.80 GiB is free (7.0%)"
    ]


def test_json_keeps_one_finding_per_device(capsys):
    _, lines = doctor(capsys, node(), "--json")
    findings = json.loads("\n".join(lines))["findings"]
    assert sorted(f["device"] for f in findings if f["kind"] == "co-tenants") == list(range(8))
    assert all(len(f["figures"]["processes"]) == 3 for f in findings if f["kind"] == "co-tenants")


def test_one_device_keeps_its_pids(capsys):
    _, lines = doctor(capsys, node(), "-i", "3")
    assert any(line.startswith("[info] device 3: 3 other processes hold 95.00 GiB: pid 5030") for line in lines)


@pytest.mark.parametrize(
    ("indices", "said"),
    [([3], "device 3"), ([1, 2], "devices 1, 2"), ([0, 1, 2, 3, 6], "devices 0-3, 6"), ([0, 2, 4], "devices 0, 2, 4")],
)
def test_devices_are_named_in_runs(indices, said):
    assert _devices(indices) == said
