"""benchmarks/import_time.py runs and reports each case against the bare interpreter (CPU mode, one round)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[2] / "benchmarks" / "import_time.py"


@pytest.mark.slow  # a benchmark run end to end: `pytest -m slow` and CI run it
def test_import_time_reports_every_case_against_python_c_pass(tmp_path):
    out = tmp_path / "import_time.json"
    subprocess.run(
        [sys.executable, str(SCRIPT), "--runs", "1", "--out", str(out)], check=True, capture_output=True, timeout=300
    )
    result = json.loads(out.read_text())
    assert result["install"] == "current environment" and result["platform"]
    assert set(result["added_ms"]) == {
        "python -c pass",
        "import devmem",
        "import devmem; current_platform()",
        "... and device_memory_info()",
    }
    assert result["added_ms"]["python -c pass"] == 0 and result["cpu_added_ms"]["python -c pass"] == 0
    # one round each: the figures are timings of a loaded machine, so only that each case was timed is pinned
    assert all(ms > 0 for ms in result["median_ms"].values())
