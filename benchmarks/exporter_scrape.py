"""The cost of a `devmem exporter` scrape on a scripted 8-GPU node with many processes and reservations, beside its
baselines, and the exporter's memory over thousands of scrapes.

The node: eight scripted H200s (devmem_nvidia.testing's NVML) on which ``--processes`` real processes of this
machine hold memory, so each scrape names them through /proc and psutil as on a real node. ``--reservations`` of
them hold a reservation each in a private ledger (forked children of this process that reserve through
``devmem.reserve`` and wait); the rest are ``sleep`` processes. Side by side, in one run, each timed ``--scrapes``
times after one warm-up:

- ``prometheus_client collectors``: prometheus_client's own process, platform and GC collectors rendered in
  Prometheus' text format (what any Python exporter pays for a scrape);
- ``exporter scrape``: devmem's collector read and rendered the same way, as an HTTP request gets it;
- ``devmem info --json`` of the same node (written to memory);
- ``device_report x 8``: one ``device_report`` per device (the bare readings both start from).

Then ``--memory-scrapes`` scrapes through the exporter's HTTP server (``devmem.exporter.server.serve`` on a free
port of 127.0.0.1, fetched with urllib): this process's resident memory after 100 of them and after all, and the
threads alive at the end. Goals, at 500 processes and 250 reservations: a scrape's median <= 25 ms, its
p99 <= 60 ms; RSS after 5,000 scrapes within 2 MiB of RSS after 100.

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
import threading
import time
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import prometheus_client  # noqa: E402

import devmem  # noqa: E402
from devmem.command.info import cmd_info  # noqa: E402
from devmem.command.main import build_parser  # noqa: E402
from devmem.exporter.metrics import DevmemCollector  # noqa: E402
from devmem.exporter.readings import NodeReader  # noqa: E402
from devmem.exporter.server import serve  # noqa: E402
from devmem.testing import Scenario  # noqa: E402
from devmem.types import GiB, MiB  # noqa: E402
from devmem_nvidia.testing import ScriptedNvidiaGpu, scripted_platform  # noqa: E402

GPUS = 8
GOALS = {"scrape_median_ms": 25.0, "scrape_p99_ms": 60.0, "rss_growth_mib": 2.0}


def gpus() -> list[ScriptedNvidiaGpu]:
    return [
        ScriptedNvidiaGpu(uuid=f"GPU-00000000-0000-0000-0000-00000000000{i}", pci_bus_id=f"00000000:{16 + i:02x}:00.0")
        for i in range(GPUS)
    ]


@contextlib.contextmanager
def holders(platform: object, ledger: str, count: int) -> Iterator[list[int]]:
    """``count`` forked children, child ``n`` holding a reservation of 2 GiB on device ``n % 8`` until this block
    ends; yields their PIDs."""
    children: list[tuple[int, int]] = []
    try:
        for n in range(count):
            ready_r, ready_w = os.pipe()
            stop_r, stop_w = os.pipe()
            pid = os.fork()
            if pid == 0:  # the child: reserve, say so, wait for the parent to go
                os.close(ready_r)
                os.close(stop_w)
                code = 0
                try:
                    devmem.reserve(n % GPUS, bytes=2 * GiB, platform=platform, ledger_dir=ledger)
                    os.write(ready_w, b"ok")
                    os.read(stop_r, 1)
                except BaseException:
                    code = 1
                os._exit(code)
            os.close(ready_w)
            os.close(stop_r)
            answer = os.read(ready_r, 2)
            os.close(ready_r)
            children.append((pid, stop_w))
            if answer != b"ok":
                raise RuntimeError(f"reservation holder {n} failed")
        yield [pid for pid, _ in children]
    finally:
        for _, stop_w in children:
            os.close(stop_w)
        for pid, _ in children:
            os.waitpid(pid, 0)


def timed(call: Callable[[], object], times: int) -> dict[str, float]:
    call()  # warm-up: psutil's and the session's first use
    seconds = []
    for _ in range(times):
        started = time.perf_counter()
        call()
        seconds.append(time.perf_counter() - started)
    ms = sorted(s * 1e3 for s in seconds)
    return {
        "median_ms": statistics.median(ms),
        "p99_ms": ms[min(len(ms) - 1, round(0.99 * (len(ms) - 1)))],
        "min_ms": ms[0],
        "max_ms": ms[-1],
        "runs": times,
    }


def rss_bytes() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


class _Started:
    """Counts the threads this process starts while it is entered (``threading.Thread.start`` wrapped)."""

    def __enter__(self) -> _Started:
        self.count, self._start = 0, threading.Thread.start

        def start(thread: threading.Thread) -> None:
            self.count += 1
            self._start(thread)

        threading.Thread.start = start  # type: ignore[method-assign]
        return self

    def __exit__(self, *exc: object) -> None:
        threading.Thread.start = self._start  # type: ignore[method-assign]


def memory(collector: DevmemCollector, scrapes: int) -> dict[str, object]:
    """RSS after 100 HTTP scrapes and after ``scrapes``, the threads started per scrape (the HTTP server's own
    included) and the threads alive at the end."""
    server = serve(collector, "127.0.0.1", 0)
    url = f"http://127.0.0.1:{server.server_port}/metrics"
    threads_before = threading.active_count()
    after: dict[int, int] = {}
    try:
        with _Started() as started:
            for n in range(1, scrapes + 1):
                with urllib.request.urlopen(url, timeout=30) as response:
                    response.read()
                if n in (100, scrapes):
                    after[n] = rss_bytes()
    finally:
        server.shutdown()
        server.server_close()
    growth = (after[scrapes] - after[100]) / MiB
    return {
        "scrapes": scrapes,
        "rss_after_100_mib": after[100] / MiB,
        f"rss_after_{scrapes}_mib": after[scrapes] / MiB,
        "growth_mib": growth,
        "threads_started_per_scrape": started.count / scrapes,
        "threads_alive_before": threads_before,
        "threads_alive_after": threading.active_count(),
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--processes", type=int, default=500, help="processes holding memory (default 500)")
    parser.add_argument("--reservations", type=int, default=250, help="of them, holding a reservation (default 250)")
    parser.add_argument("--scrapes", type=int, default=200, help="timed runs of each (default 200)")
    parser.add_argument("--memory-scrapes", type=int, default=5000, help="HTTP scrapes for the RSS (0: none)")
    parser.add_argument("--out", type=Path, default=None, help="write exporter_scrape.json and .txt here")
    args = parser.parse_args()
    if not 0 <= args.reservations <= args.processes:
        parser.error("--reservations must be from 0 to --processes")
    sleeping = args.processes - args.reservations
    sleepers = [subprocess.Popen(["sleep", "3600"]) for _ in range(sleeping)]
    sc = Scenario(devices=gpus())
    platform = scripted_platform(sc)
    try:
        with (
            tempfile.TemporaryDirectory(prefix="devmem-bench-ledger-") as ledger,
            holders(platform, ledger, args.reservations) as engines,
        ):
            for n, pid in enumerate(engines):
                sc.allocate(1 * GiB, n % GPUS, pid=pid)
            for n, p in enumerate(sleepers):
                sc.allocate((256 + 256 * (n % 4)) * MiB, n % GPUS, pid=p.pid)
            os.environ["DEVMEM_LEDGER_DIR"] = ledger  # devmem info's ledger too
            registry = prometheus_client.CollectorRegistry(auto_describe=False)
            collector = DevmemCollector(NodeReader(platform, ledger, candidates=[]))
            registry.register(collector)
            text = prometheus_client.generate_latest(registry).decode()
            own = prometheus_client.CollectorRegistry(auto_describe=False)
            for make in (prometheus_client.ProcessCollector, prometheus_client.PlatformCollector):
                make(registry=own)
            prometheus_client.GCCollector(registry=own)
            info_args = build_parser().parse_args(["info", "--json"])

            def info() -> None:
                with contextlib.redirect_stdout(io.StringIO()):
                    cmd_info(info_args, platform)

            rows = {
                "prometheus_client collectors": timed(lambda: prometheus_client.generate_latest(own), args.scrapes),
                "exporter scrape": timed(lambda: prometheus_client.generate_latest(registry), args.scrapes),
                "devmem info --json": timed(info, args.scrapes),
                "device_report x 8": timed(
                    lambda: [devmem.device_report(platform, d) for d in range(GPUS)], args.scrapes
                ),
            }
            held = memory(collector, args.memory_scrapes) if args.memory_scrapes >= 100 else None
    finally:
        for p in sleepers:
            p.kill()
            p.wait()
    series = sum(1 for line in text.splitlines() if line and not line.startswith("#"))
    processes = sum(line.startswith("devmem_process_used_bytes{") for line in text.splitlines())
    holders_shown = sum(line.startswith("devmem_reservation_reserved_bytes{") for line in text.splitlines())
    scrape = rows["exporter scrape"]
    met = {
        "scrape_median_ms": scrape["median_ms"] <= GOALS["scrape_median_ms"],
        "scrape_p99_ms": scrape["p99_ms"] <= GOALS["scrape_p99_ms"],
    }
    if held is not None:
        met["rss_growth_mib"] = abs(held["growth_mib"]) <= GOALS["rss_growth_mib"]
    result = {
        "node": {"gpus": GPUS, "processes": args.processes, "reservations": args.reservations},
        "series_per_scrape": series,
        "process_series": processes,
        "reservation_series": holders_shown,
        "rows": rows,
        "memory": held,
        "goals": GOALS,
        "met": met,
        "machine": {"python": sys.version.split()[0], "cpus": os.cpu_count(), "load": os.getloadavg()},
        "host": host.platform(),
    }
    lines = [f"{'what':<30}  {'median':>9}  {'p99':>9}  {'min':>9}  {'max':>9}  runs"]
    for name, r in rows.items():
        lines.append(
            f"{name:<30}  {r['median_ms']:>6.2f} ms  {r['p99_ms']:>6.2f} ms  {r['min_ms']:>6.2f} ms  "
            f"{r['max_ms']:>6.2f} ms  {r['runs']}"
        )
    lines += [
        "",
        f"node: {GPUS} scripted H200s, {args.processes} real processes, {args.reservations} of them holding a "
        "reservation",
        f"a scrape: {series} series, {processes} of them processes, {holders_shown} reservation holders",
    ]
    if held is not None:
        last = held[f"rss_after_{held['scrapes']}_mib"]
        lines.append(
            f"memory: RSS {held['rss_after_100_mib']:.1f} MiB after 100 HTTP scrapes, {last:.1f} MiB after "
            f"{held['scrapes']} ({held['growth_mib']:+.2f} MiB); threads started per scrape "
            f"{held['threads_started_per_scrape']:.2f} (the HTTP server's included); alive "
            f"{held['threads_alive_before']} before, {held['threads_alive_after']} after"
        )
    lines += [
        f"load average: {tuple(round(x, 2) for x in os.getloadavg())}",
        f"goals: {json.dumps(GOALS)}; met: {json.dumps(met)}",
    ]
    print("\n".join(lines))
    if args.out is not None:
        args.out.mkdir(parents=True, exist_ok=True)
        (args.out / "exporter_scrape.json").write_text(json.dumps(result, indent=2) + "\n")
        (args.out / "exporter_scrape.txt").write_text("\n".join(lines) + "\n")
    return 0 if all(met.values()) else 1


if __name__ == "__main__":
    sys.exit(main())
