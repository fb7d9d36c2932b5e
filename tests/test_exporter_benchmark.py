"""benchmarks/exporter_scrape.py runs small and reports what it measured (its timings are evidence, not a test)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.slow
def test_the_scrape_benchmark_reports_every_row_and_the_node_it_read(tmp_path):
    pytest.importorskip("prometheus_client")
    done = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / "exporter_scrape.py"), "--scrapes", "2", "--out", str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=ROOT,
    )
    assert done.returncode in (0, 1), done.stderr
    result = json.loads((tmp_path / "exporter_scrape.json").read_text())
    assert set(result["rows"]) == {"exporter scrape", "devmem info --json", "device_report x 8"}
    assert result["process_series"] == 64 and result["node"] == {"gpus": 8, "processes": 64, "reservations": 8}
    assert result["goal"]["met"] == (result["rows"]["exporter scrape"]["median_ms"] <= 50)
