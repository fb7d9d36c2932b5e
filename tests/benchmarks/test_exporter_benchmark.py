"""benchmarks/exporter_scrape.py runs small and reports what it measured (its timings are evidence, not a test)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.slow
def test_the_scrape_benchmark_reports_every_row_the_node_it_read_and_its_memory(tmp_path):
    pytest.importorskip("prometheus_client")
    argv = ["--processes", "12", "--reservations", "4", "--scrapes", "2", "--memory-scrapes", "100"]
    done = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / "exporter_scrape.py"), *argv, "--out", str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=ROOT,
    )
    assert done.returncode in (0, 1), done.stderr
    result = json.loads((tmp_path / "exporter_scrape.json").read_text())
    assert set(result["rows"]) == {
        "prometheus_client collectors",
        "exporter scrape",
        "devmem info --json",
        "device_report x 8",
    }
    assert result["node"] == {"gpus": 8, "processes": 12, "reservations": 4}
    assert result["process_series"] == 12 and result["reservation_series"] == 4
    assert result["memory"]["scrapes"] == 100 and result["memory"]["threads_started_per_scrape"] >= 0
    scrape = result["rows"]["exporter scrape"]
    assert result["met"]["scrape_median_ms"] == (scrape["median_ms"] <= 25)
