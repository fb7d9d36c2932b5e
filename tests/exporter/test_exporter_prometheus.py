"""``devmem exporter`` scraped by a real Prometheus server (Debian's ``prometheus`` package), and the example alert
rules checked by ``promtool``; each skipped with its reason where the binary is absent."""

from __future__ import annotations

import json
import os
import select
import shutil
import socket
import subprocess
import sys
import time
import urllib.parse
import urllib.request
from pathlib import Path

import pytest

import devmem
from devmem.cpu import CpuPlatform

ROOT = Path(__file__).resolve().parents[2]
RULES = ROOT / "examples" / "exporter" / "prometheus-rules.yml"

pytestmark = pytest.mark.slow


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_for_line(proc: subprocess.Popen, seconds: float) -> str:
    """The first line ``proc`` writes on stderr within ``seconds``."""
    assert proc.stderr is not None
    ready, _, _ = select.select([proc.stderr], [], [], seconds)
    assert ready, f"no line on stderr within {seconds} s"
    return proc.stderr.readline()


def get_json(url: str) -> dict:
    with urllib.request.urlopen(url, timeout=5) as response:
        return json.loads(response.read())


@pytest.fixture
def exporter(tmp_path):
    """``devmem exporter`` on the cpu platform, on a free port, reading the ledger in ``tmp_path/ledger``; yields
    (its address, the ledger directory)."""
    pytest.importorskip("prometheus_client")
    ledger = tmp_path / "ledger"
    env = {**os.environ, "DEVMEM_PLATFORM": "cpu", "DEVMEM_LEDGER_DIR": str(ledger), "PYTHONPATH": str(ROOT)}
    proc = subprocess.Popen(
        [sys.executable, "-m", "devmem", "exporter", "--listen", "127.0.0.1:0"],
        stderr=subprocess.PIPE,
        text=True,
        env=env,
        cwd=ROOT,
    )
    try:
        line = wait_for_line(proc, 30)
        address = line.rsplit("http://", 1)[1].split("/metrics")[0]
        yield address, ledger
    finally:
        proc.terminate()
        proc.wait(10)


@pytest.fixture
def prometheus(tmp_path, exporter):
    """A Prometheus server on 127.0.0.1 scraping the exporter every second; yields its base URL."""
    binary = shutil.which("prometheus")
    if binary is None:
        pytest.skip("no prometheus binary (Debian: apt-get install prometheus)")
    address, _ = exporter
    config = tmp_path / "prometheus.yml"
    config.write_text(
        "global:\n  scrape_interval: 1s\n  scrape_timeout: 1s\n  evaluation_interval: 1s\n"
        f"scrape_configs:\n  - job_name: devmem\n    static_configs:\n      - targets: ['{address}']\n"
        f"rule_files:\n  - {RULES}\n"
    )
    port = free_port()
    proc = subprocess.Popen(
        [
            binary,
            f"--config.file={config}",
            f"--storage.tsdb.path={tmp_path / 'data'}",
            f"--web.listen-address=127.0.0.1:{port}",
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            try:
                urllib.request.urlopen(f"{base}/-/ready", timeout=2)
                break
            except OSError:
                assert proc.poll() is None, "prometheus exited"
                time.sleep(0.2)
        yield base
    finally:
        proc.terminate()
        proc.wait(30)


def query(base: str, promql: str, seconds: float = 60) -> list[dict]:
    """The first non-empty result of ``promql`` within ``seconds`` (Prometheus scrapes every second)."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        answer = get_json(f"{base}/api/v1/query?" + urllib.parse.urlencode({"query": promql}))
        if answer["status"] == "success" and answer["data"]["result"]:
            return answer["data"]["result"]
        time.sleep(0.5)
    raise AssertionError(f"{promql} returned nothing within {seconds} s")


def test_prometheus_stores_a_live_reservations_holder_pid_and_bytes(exporter, prometheus):
    _, ledger = exporter
    with devmem.reserve(0, bytes=3 << 20, platform=CpuPlatform(), ledger_dir=ledger):
        (series,) = query(prometheus, 'devmem_reservation_reserved_bytes{job="devmem"}')
    assert series["metric"]["pid"] == str(os.getpid()) and series["metric"]["device"] == "0"
    assert float(series["value"][1]) == 3 << 20


def test_prometheus_loads_the_example_rules_and_evaluates_them(exporter, prometheus):
    query(prometheus, "devmem_device_total_bytes")
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        groups = get_json(f"{prometheus}/api/v1/rules")["data"]["groups"]
        rules = [r for g in groups for r in g["rules"]]
        if rules and all(r.get("health") == "ok" for r in rules):
            break
        time.sleep(0.5)
    assert {r["name"] for r in rules} >= {"DevmemOverCommitted", "DevmemAboveReservation", "DevmemStaleReservations"}
    assert all(r["health"] == "ok" for r in rules), [r for r in rules if r["health"] != "ok"]


def test_promtool_accepts_the_example_rules():
    promtool = shutil.which("promtool")
    if promtool is None:
        pytest.skip("no promtool binary (Debian: apt-get install prometheus)")
    done = subprocess.run([promtool, "check", "rules", str(RULES)], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stdout + done.stderr


def test_prometheus_accepts_every_query_of_the_example_dashboard(exporter, prometheus):
    from test_exporter_examples import dashboard_exprs

    query(prometheus, "devmem_device_total_bytes")
    for expr in dashboard_exprs():
        answer = get_json(
            f"{prometheus}/api/v1/query?" + urllib.parse.urlencode({"query": expr.replace("$instance", ".*")})
        )
        assert answer["status"] == "success", (expr, answer)
