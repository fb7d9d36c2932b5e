"""benchmarks/command_time.py and benchmarks/admission.py run end to end in small configurations, so neither rots
between recordings; what holds on any host is checked (every case timed beside its baseline, every engine
answered, nothing admitted past the device), never the timing goals."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

BENCHMARKS = Path(__file__).resolve().parents[2] / "benchmarks"


@pytest.mark.slow  # fresh interpreters, one round each: `pytest -m slow` and CI run it
def test_command_time_times_every_command_beside_python_and_measures_the_widest_line(tmp_path):
    done = subprocess.run(
        [sys.executable, str(BENCHMARKS / "command_time.py"), "--runs", "1", "--out", str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode in (0, 1), done.stderr
    result = json.loads((tmp_path / "command_time.json").read_text())
    assert set(result["added_ms"]) == {
        "python -c pass",
        "devmem",
        "devmem info --json",
        "devmem top -n 1",
        "devmem plan --model",
    }
    assert result["added_ms"]["python -c pass"] == 0 and all(ms > 0 for ms in result["median_ms"].values())
    written = result["written_to_a_file"]
    assert set(written) == {"devmem > file", "devmem top -n 1 > file"}
    assert result["met"]["every line <= 200 characters"] == all(w["widest"] <= 200 for w in written.values())


@pytest.mark.slow
def test_admission_answers_every_engine_and_admits_nothing_past_the_device(tmp_path):
    argv = ["--holders", "0,4", "--rounds", "2", "--engines", "12", "--out", str(tmp_path)]
    done = subprocess.run(
        [sys.executable, str(BENCHMARKS / "admission.py"), *argv], capture_output=True, text=True, timeout=300
    )
    assert done.returncode in (0, 1), done.stderr
    result = json.loads((tmp_path / "admission.json").read_text())
    assert [row["holders"] for row in result["reserve_release"]] == [0, 4]
    burst = result["burst"]
    assert burst["answered"] == 12 and burst["outcomes"] == {"admitted": 12} and burst["within_total"]


@pytest.mark.slow  # a fresh interpreter timing every case: `pytest -m slow` and CI run it
def test_bounded_reading_times_every_case_straight_and_bounded_and_counts_a_lifecycles_calls(tmp_path):
    done = subprocess.run(
        [sys.executable, str(BENCHMARKS / "bounded_reading.py"), "--rounds", "20", "--out", str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=300,
        env={
            **os.environ,
            "PYTHONPATH": os.pathsep.join(filter(None, [str(BENCHMARKS.parent), os.environ.get("PYTHONPATH")])),
            "DEVMEM_PLATFORM": "cpu",
            "DEVMEM_LEDGER_DIR": str(tmp_path),
        },
    )
    assert done.returncode == 0, done.stderr
    result = json.loads((tmp_path / "bounded_reading.json").read_text())
    cases = {"read", "device_memory_info", "get_process_memory_usage", "device_count", "snapshot"}
    assert set(result["cases"]) == cases
    assert all(c["straight_us"] > 0 and c["bounded_us"] > 0 for c in result["cases"].values())
    assert result["lifecycle"]["calls"] > 0


@pytest.mark.slow  # starts EngineMemory rounds beside raw torch: `pytest -m slow` and CI run it
def test_engine_overhead_times_a_start_beside_the_same_work_in_raw_torch(tmp_path):
    done = subprocess.run(
        [sys.executable, str(BENCHMARKS / "engine_overhead.py"), "--rounds", "2", "--out", str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode in (0, 1), done.stderr
    result = json.loads((tmp_path / "engine_overhead.json").read_text())
    assert set(result["medians_ms"]) == {"EngineMemory", "raw torch"} and result["cache_bytes"] > 0
    assert all(len(v) == 2 for v in result["rounds"].values())
