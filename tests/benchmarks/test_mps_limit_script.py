"""benchmarks/mps_limit.sh off an NVIDIA machine: a no-op that says why (its GPU run is the lead's)."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[2] / "benchmarks" / "mps_limit.sh"


@pytest.mark.skipif(shutil.which("nvidia-smi") is not None, reason="an NVIDIA machine runs the real thing")
def test_mps_limit_script_is_a_no_op_that_says_why_without_a_gpu(tmp_path):
    proc = subprocess.run(
        ["bash", str(SCRIPT), str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=60,
        env={"PATH": "/usr/bin:/bin", "PYTHON": sys.executable},
    )
    assert proc.returncode == 0
    assert json.loads((tmp_path / "mps_limit.json").read_text()) == {
        "skipped": "no nvidia-smi: not an NVIDIA GPU machine"
    }
