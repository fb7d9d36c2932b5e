"""The cost of one `devmem exporter` scrape on a scripted 8-GPU node with 64 processes, beside its baselines.

The node: eight scripted H200s (devmem_nvidia.testing's NVML) on which 64 real processes of this machine (`sleep`,
eight per GPU) hold memory, so each scrape names them through /proc and psutil as on a real node; this process
holds a reservation of 10 GiB on each GPU in a private ledger. Side by side, in one run, each timed `--scrapes`
times after one warm-up: the exporter's scrape (the collector read and rendered in Prometheus' text format, as an
HTTP request gets it), `devmem info --json` of the same node (written to memory), and one `device_report` per
device (the bare readings both start from). Goal: a scrape in at most 50 ms (median).

    python benchmarks/exporter_scrape.py --out benchmarks/results/cpu
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import os
import platform as host
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import prometheus_client  # noqa: E402

import devmem  # noqa: E402
from devmem.command.info import cmd_info  # noqa: E402
from devmem.command.main import build_parser  # noqa: E402
from devmem.exporter.metrics import DevmemCollector  # noqa: E402
from devmem.exporter.readings import NodeReader  # noqa: E402
from devmem.testing import Scenario  # noqa: E402
from devmem.types import GiB  # noqa: E402
from devmem_nvidia.testing import ScriptedNvidiaGpu, scripted_platform  # noqa: E402

GPUS, PROCESSES = 8, 64
GOAL_MS = 50.0


def node(pids: list[int]) -> Scenario:
    gpus = [
        ScriptedNvidiaGpu(uuid=f"GPU-00000000-0000-0000-0000-00000000000{i}", pci_bus_id=f"00000000:{16 + i:02x}:00.0")
        for i in range(GPUS)
    ]
    sc = Scenario(devices=gpus)
    for n, pid in enumerate(pids):
        sc.allocate((1 + n % 4) * GiB, n % GPUS, pid=pid)
    return sc


def timed(call: Callable[[], object], times: int) -> dict[str, float]:
    call()  # warm-up: psutil's and the session's first use
    seconds = []
    for _ in range(times):
        started = time.perf_counter()
        call()
        seconds.append(time.perf_counter() - started)
    return {
        "median_ms": statistics.median(seconds) * 1e3,
        "min_ms": min(seconds) * 1e3,
        "max_ms": max(seconds) * 1e3,
        "runs": times,
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--scrapes", type=int, default=50, help="timed runs of each (default 50)")
    parser.add_argument("--out", type=Path, default=None, help="write exporter_scrape.json and .txt here")
    args = parser.parse_args()
    sleepers = [subprocess.Popen(["sleep", "3600"]) for _ in range(PROCESSES)]
    try:
        platform = scripted_platform(node([p.pid for p in sleepers]))
        with tempfile.TemporaryDirectory(prefix="devmem-bench-ledger-") as ledger:
            os.environ["DEVMEM_LEDGER_DIR"] = ledger  # devmem info's ledger too
            held = [devmem.reserve(d, bytes=10 * GiB, platform=platform, ledger_dir=ledger) for d in range(GPUS)]
            registry = prometheus_client.CollectorRegistry(auto_describe=False)
            registry.register(DevmemCollector(NodeReader(platform, ledger, candidates=[])))
            text = prometheus_client.generate_latest(registry).decode()
            info_args = build_parser().parse_args(["info", "--json"])

            def info() -> None:
                with contextlib.redirect_stdout(io.StringIO()):
                    cmd_info(info_args, platform)

            rows = {
                "exporter scrape": timed(lambda: prometheus_client.generate_latest(registry), args.scrapes),
                "devmem info --json": timed(info, args.scrapes),
                "device_report x 8": timed(
                    lambda: [devmem.device_report(platform, d) for d in range(GPUS)], args.scrapes
                ),
            }
            for r in held:
                r.release()
    finally:
        for p in sleepers:
            p.kill()
            p.wait()
    series = sum(1 for line in text.splitlines() if line and not line.startswith("#"))
    processes = sum(line.startswith("devmem_process_used_bytes{") for line in text.splitlines())
    scrape = rows["exporter scrape"]["median_ms"]
    result = {
        "node": {"gpus": GPUS, "processes": PROCESSES, "reservations": GPUS},
        "series_per_scrape": series,
        "process_series": processes,
        "rows": rows,
        "goal": {"scrape_median_at_most_ms": GOAL_MS, "met": scrape <= GOAL_MS},
        "machine": {"python": sys.version.split()[0], "cpus": os.cpu_count(), "load": os.getloadavg()},
        "host": host.platform(),
    }
    lines = [f"{'what':<22}  {'median':>9}  {'min':>9}  {'max':>9}  runs"]
    for name, r in rows.items():
        lines.append(
            f"{name:<22}  {r['median_ms']:>6.2f} ms  {r['min_ms']:>6.2f} ms  {r['max_ms']:>6.2f} ms  {r['runs']}"
        )
    lines += [
        "",
        f"node: {GPUS} scripted H200s, {PROCESSES} real processes (8 per GPU), one reservation per GPU",
        f"a scrape: {series} series, {processes} of them processes",
        f"load average: {tuple(round(x, 2) for x in os.getloadavg())}",
        f"goal: a scrape <= {GOAL_MS:g} ms (median); met: {result['goal']['met']}",
    ]
    print("\n".join(lines))
    if args.out is not None:
        args.out.mkdir(parents=True, exist_ok=True)
        (args.out / "exporter_scrape.json").write_text(json.dumps(result, indent=2) + "\n")
        (args.out / "exporter_scrape.txt").write_text("\n".join(lines) + "\n")
    return 0 if result["goal"]["met"] else 1


if __name__ == "__main__":
    sys.exit(main())
