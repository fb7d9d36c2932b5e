"""``devmem > file`` and ``devmem | grep``: a screen written to a pipe or a file is fitted to ``COLUMNS``, else to 80
columns, never sized from an unbounded width (a bar a million characters wide on 4 devices or more).

The node is a scripted 8-GPU machine (devmem_nvidia.testing) on which real processes of this machine, with command
lines far longer than a line, hold memory; the command writes to a real file, as ``devmem > file`` does.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from unittest import mock

import pytest

from devmem.command.info import cmd_info
from devmem.command.main import build_parser
from devmem.testing import Scenario
from devmem.types import GiB
from devmem_nvidia.testing import ScriptedNvidiaGpu, scripted_platform

LONG = "import time; time.sleep(60)  # " + "a command line longer than any screen " * 8


@pytest.fixture(scope="module")
def node():
    """Eight scripted H200s; on each, two real processes with long command lines hold 20 GiB and 1 GiB."""
    procs = [subprocess.Popen([sys.executable, "-c", f"{LONG}{n}"]) for n in (1, 2)]
    gpus = [
        ScriptedNvidiaGpu(uuid=f"GPU-00000000-0000-0000-0000-00000000000{i}", pci_bus_id=f"00000000:{16 + i:02x}:00.0")
        for i in range(8)
    ]
    sc = Scenario(devices=gpus)
    for device in range(8):
        sc.allocate(20 * GiB, device, pid=procs[0].pid)
        sc.allocate(1 * GiB, device, pid=procs[1].pid)
    yield sc
    for p in procs:
        p.kill()
        p.wait()


def to_file(sc: Scenario, argv: list[str], environ: dict[str, str]) -> list[str]:
    """The lines ``devmem argv`` writes to a file on ``sc``, under ``environ`` (COLUMNS unset unless it says)."""
    args = build_parser().parse_args(argv)
    if getattr(args, "interval", None) is not None:
        args.watch = args.interval
    env = {k: v for k, v in os.environ.items() if k != "COLUMNS"} | environ
    with (
        tempfile.TemporaryFile("w+") as f,
        mock.patch.dict(os.environ, env, clear=True),
        mock.patch.object(sys, "stdout", f),
    ):
        assert cmd_info(args, scripted_platform(sc)) == 0
        f.seek(0)
        return f.read().splitlines()


@pytest.mark.parametrize("argv", [["info"], ["info", "--details"], ["top", "-n", "1"]])
def test_a_screen_written_to_a_file_is_at_most_80_columns_wide(node, argv):
    lines = to_file(node, argv, {})
    assert len(lines) > 8 and max(map(len, lines)) <= 80, max(lines, key=len)


def test_the_device_bars_in_a_file_are_sized_for_80_columns(node):
    bars = [line for line in to_file(node, ["info"], {}) if "[" in line and "]" in line and "#" in line]
    assert len(bars) == 8 and all(len(line) == 80 for line in bars), bars


def test_columns_sets_the_width_of_a_screen_written_to_a_file(node):
    lines = to_file(node, ["info"], {"COLUMNS": "150"})
    assert max(map(len, lines)) == 150
