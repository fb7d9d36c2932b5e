"""Admission at scale: what ``reserve`` + ``release`` costs beside many live holders, and how engines arriving
together are answered.

1. ``reserve`` + ``release`` on the cpu platform's device 0, in this process, with ``--holders`` (0, 50, 200) live
   holders on the same device (forked children of this process, each holding a reservation of 1 MiB), median of
   ``--rounds``; beside it, in the same run, the raw floor of the same file work (the lock, reading the ledger
   file, opening, locking and reading each holder's owner file, writing the ledger file and an owner file, and at
   release the lock, the read and the write again) done by hand without devmem. Goal: <= 5 ms with 200 holders.
2. ``--engines`` (250) forked children of this process, each holding devmem already imported, wait on one pipe;
   when it closes, all call ``reserve`` at once for 1/200 of the device (so about 200 fit and the rest are
   refused), and keep what they get until every one has answered. Each answer's time is counted from the moment
   the pipe closed; the CPU time all the engines took (user and system) is reported beside it, since on a shared
   machine the answers wait for the CPU as much as for each other. Goals: every engine answered (admitted or
   refused) within 2 s, none by a lock timeout (``LedgerError``), and the reservations admitted never above the
   device's total.

Each part uses a ledger directory of its own (a temporary one in /dev/shm, where the default ledger lives).

    python benchmarks/admission.py --out benchmarks/results/cpu
"""

from __future__ import annotations

import argparse
import contextlib
import fcntl
import json
import os
import platform as host
import resource
import statistics
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import devmem  # noqa: E402
from devmem.cpu import CpuPlatform  # noqa: E402
from devmem.engine.reservations import LedgerError, ReservationRefused, device_key, reserve  # noqa: E402
from devmem.types import MiB  # noqa: E402

GOALS = {"reserve_release_ms_at_200": 5.0, "burst_slowest_s": 2.0}


def ledger_root() -> str:
    return "/dev/shm" if os.path.isdir("/dev/shm") else tempfile.gettempdir()


@contextlib.contextmanager
def holders(ledger: str, count: int, nbytes: int) -> Iterator[list[int]]:
    """``count`` forked children, each holding a reservation of ``nbytes`` on device 0 until the block ends."""
    children: list[tuple[int, int]] = []
    try:
        for n in range(count):
            ready_r, ready_w = os.pipe()
            stop_r, stop_w = os.pipe()
            pid = os.fork()
            if pid == 0:
                os.close(ready_r)
                os.close(stop_w)
                code = 0
                try:
                    reserve(0, bytes=nbytes, platform=CpuPlatform(), ledger_dir=ledger)
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
                raise RuntimeError(f"holder {n} was not admitted")
        yield [pid for pid, _ in children]
    finally:
        for _, stop_w in children:
            os.close(stop_w)
        for pid, _ in children:
            os.waitpid(pid, 0)


def raw_floor(ledger: str, key: str) -> None:
    """The file work of one reserve + release, by hand: what devmem's admission cannot do with less."""
    d = os.open(ledger, os.O_RDONLY | os.O_DIRECTORY)
    try:
        for step in ("reserve", "release"):
            lock = os.open(f"{key}.lock", os.O_RDONLY | os.O_CREAT, 0o666, dir_fd=d)
            fcntl.flock(lock, fcntl.LOCK_EX)
            fd = os.open(f"{key}.json", os.O_RDONLY, dir_fd=d)
            data = os.read(fd, 1 << 22)
            os.close(fd)
            ids = [e["id"] for e in json.loads(data)["entries"]] if data else []
            if step == "reserve":
                for entry_id in ids:
                    owner = os.open(f"{key}.{entry_id}.owner", os.O_RDONLY, dir_fd=d)
                    os.fstat(owner)
                    with contextlib.suppress(OSError):
                        fcntl.flock(owner, fcntl.LOCK_EX | fcntl.LOCK_NB)
                    os.read(owner, 16 << 10)
                    os.close(owner)
                mine = os.open(f"{key}.floor.owner", os.O_RDWR | os.O_CREAT, 0o644, dir_fd=d)
                fcntl.flock(mine, fcntl.LOCK_EX | fcntl.LOCK_NB)
                os.write(mine, b"{}")
            tmp = f".{key}.floor.tmp"
            out = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666, dir_fd=d)
            os.write(out, data)
            os.close(out)
            os.replace(tmp, f"{key}.json", src_dir_fd=d, dst_dir_fd=d)
            os.close(lock)
        os.unlink(f"{key}.floor.owner", dir_fd=d)
        os.close(mine)
    finally:
        os.close(d)


def cost(counts: list[int], rounds: int) -> list[dict[str, Any]]:
    """Median milliseconds of reserve + release, and of the raw floor, beside each number of live holders."""
    platform = CpuPlatform()
    key, _ = device_key(platform, 0)
    rows = []
    for count in counts:
        with (
            tempfile.TemporaryDirectory(prefix="devmem-bench-ledger-", dir=ledger_root()) as ledger,
            holders(ledger, count, MiB),
        ):
            reading = platform.read(0)
            timed: dict[str, list[float]] = {"reserve + release": [], "raw floor": []}
            for n in range(rounds + 1):  # the first round warms up
                started = time.perf_counter()
                reserve(0, bytes=MiB, platform=platform, ledger_dir=ledger, reading=reading).release()
                middle = time.perf_counter()
                raw_floor(ledger, key)
                ended = time.perf_counter()
                if n:
                    timed["reserve + release"].append((middle - started) * 1e3)
                    timed["raw floor"].append((ended - middle) * 1e3)
        rows.append({"holders": count, **{name: statistics.median(v) for name, v in timed.items()}})
    return rows


def _engine(ledger: str, nbytes: int, go: int, answers: int, hold: int) -> None:
    """One engine of the burst (a forked child): wait for ``go`` to close, reserve, report, hold until ``hold``
    closes."""
    os.read(go, 1)  # returns at EOF: the parent closed the pipe
    started = time.monotonic()
    outcome: dict[str, Any] = {"pid": os.getpid()}
    held = None
    try:
        held = reserve(0, bytes=nbytes, platform=CpuPlatform(), ledger_dir=ledger)
        outcome["outcome"] = "admitted"
    except ReservationRefused:
        outcome["outcome"] = "refused"
    except LedgerError as exc:
        outcome["outcome"] = "lock timeout" if "waited" in str(exc) else "ledger error"
        outcome["error"] = str(exc)[:200]
    except BaseException as exc:
        outcome["outcome"] = "error"
        outcome["error"] = f"{type(exc).__name__}: {exc}"[:200]
    outcome["started"], outcome["answered"] = started, time.monotonic()
    os.write(answers, (json.dumps(outcome) + "\n").encode())
    os.read(hold, 1)
    if held is not None:
        held.release()


def burst(engines: int) -> dict[str, Any]:
    """``engines`` engines asking at the same moment for 1/200 of device 0 each."""
    total = CpuPlatform().device_memory_info(0).total
    nbytes = total // 200
    with tempfile.TemporaryDirectory(prefix="devmem-bench-ledger-", dir=ledger_root()) as ledger:
        go_r, go_w = os.pipe()
        answers_r, answers_w = os.pipe()
        hold_r, hold_w = os.pipe()
        pids = []
        for _ in range(engines):
            pid = os.fork()
            if pid == 0:
                os.close(go_w)
                os.close(answers_r)
                os.close(hold_w)
                try:
                    _engine(ledger, nbytes, go_r, answers_w, hold_r)
                finally:
                    os._exit(0)
            pids.append(pid)
        os.close(go_r)
        os.close(answers_w)
        os.close(hold_r)
        time.sleep(0.5)  # every engine waiting on the pipe
        opened = time.monotonic()
        os.close(go_w)
        lines: list[str] = []
        with os.fdopen(answers_r) as answers:
            while len(lines) < engines:
                line = answers.readline()
                if not line:
                    break
                lines.append(line)
        entries = [e for path in Path(ledger).glob("*.json") for e in json.loads(path.read_text())["entries"]]
        os.close(hold_w)
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        for pid in pids:
            os.waitpid(pid, 0)
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
    results = [json.loads(line) for line in lines]
    latency = sorted(r["answered"] - opened for r in results)
    outcomes: dict[str, int] = {}
    for r in results:
        outcomes[r["outcome"]] = outcomes.get(r["outcome"], 0) + 1
    reserved = sum(e["bytes"] for e in entries)
    return {
        "engines": engines,
        "answered": len(results),
        "outcomes": outcomes,
        "request_bytes": nbytes,
        "total_bytes": total,
        "reserved_bytes_at_the_end": reserved,
        "within_total": reserved <= total,
        # what the engines' work cost in all (user + system), however busy the machine was
        "cpu_s_all_engines": after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime,
        "median_s": statistics.median(latency) if latency else None,
        "slowest_s": latency[-1] if latency else None,
        "errors": sorted({r["error"] for r in results if "error" in r})[:5],
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--holders", default="0,50,200", help="live holders beside reserve + release (0,50,200)")
    parser.add_argument("--rounds", type=int, default=50, help="reserve + release rounds at each (default 50)")
    parser.add_argument("--engines", type=int, default=250, help="engines arriving together (default 250)")
    parser.add_argument("--out", type=Path, default=None, help="write admission.json and .txt here")
    args = parser.parse_args()
    counts = [int(c) for c in args.holders.split(",")]
    rows = cost(counts, args.rounds)
    arrived = burst(args.engines)
    at_200 = next((r["reserve + release"] for r in rows if r["holders"] == 200), None)
    met = {
        "reserve_release_ms_at_200": None if at_200 is None else at_200 <= GOALS["reserve_release_ms_at_200"],
        "burst_every_engine_answered": arrived["answered"] == args.engines,
        "burst_slowest_s": arrived["slowest_s"] is not None and arrived["slowest_s"] <= GOALS["burst_slowest_s"],
        "burst_no_lock_timeout": "lock timeout" not in arrived["outcomes"],
        "burst_within_total": arrived["within_total"],
    }
    lines = [f"{'live holders':>12}  {'reserve + release':>18}  {'raw floor':>10}"]
    for r in rows:
        lines.append(f"{r['holders']:>12}  {r['reserve + release']:>15.2f} ms  {r['raw floor']:>7.2f} ms")
    lines += [
        "",
        f"{arrived['engines']} engines at once, each asking 1/200 of the device: {arrived['answered']} answered "
        f"({', '.join(f'{n} {k}' for k, n in sorted(arrived['outcomes'].items()))}); median "
        f"{arrived['median_s']:.3f} s, slowest {arrived['slowest_s']:.3f} s after the start; reserved at the end "
        f"{arrived['reserved_bytes_at_the_end']} of {arrived['total_bytes']} bytes; the engines' CPU time in all "
        f"{arrived['cpu_s_all_engines']:.2f} s",
        *(f"  error: {e}" for e in arrived["errors"]),
        f"load average: {tuple(round(x, 2) for x in os.getloadavg())} on {os.cpu_count()} cores",
        f"goals: {json.dumps(GOALS)}; met: {json.dumps(met)}",
    ]
    print("\n".join(lines))
    result = {
        "reserve_release": rows,
        "burst": arrived,
        "goals": GOALS,
        "met": met,
        "machine": {"python": sys.version.split()[0], "cpus": os.cpu_count(), "devmem": devmem.__version__},
        "host": host.platform(),
    }
    if args.out is not None:
        args.out.mkdir(parents=True, exist_ok=True)
        (args.out / "admission.json").write_text(json.dumps(result, indent=2) + "\n")
        (args.out / "admission.txt").write_text("\n".join(lines) + "\n")
    return 0 if all(v is not False for v in met.values()) else 1


if __name__ == "__main__":
    sys.exit(main())
