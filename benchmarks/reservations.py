"""Reservations: processes racing for one device's ledger, a refusal, a SIGKILL reclaimed, and admission's cost.

1. ``--processes`` (32) real processes start, import devmem and wait; on one signal all reserve just under 1/32 of
   device ``--device``'s total at once (``devmem.reserve``; 2/65 of it, which leaves each process room for its own
   memory, counted on top of its request). Goal: all admitted, the ledger's sum within the total.
2. One more process asks for the same share: goal, refused (a ``NotEnoughMemoryError`` naming the holders).
3. One holder is killed with SIGKILL and a waiting newcomer asks for its share at once (asking again every 10 ms
   while refused, as the kill lands asynchronously): goal, admitted within 1 s of the kill (the dead holder's
   entry is reclaimed at the newcomer's admission); the attempts it took are reported.
4. Admission's cost, side by side in one run: an engine's start (the standard modules examples/engine.py
   imports, ``import devmem``, the platform, the init snapshot and ``check_startup_memory``, as
   examples/engine.py starts) timed in ``--repeats`` fresh processes without and with ``devmem.reserve``
   before the snapshot, alternating. Goal: the two medians differ by <= 5 ms. The processes' own start
   varies by more than 5 ms on a busy host, so the same goal is also read inside the engines that reserve: the
   admission step (importing devmem.engine.reservations and ``reserve()``, wall time, median) adds <= 5 ms. The
   host's load average is recorded beside it. Both sides run from compiled bytecode, as an installed package
   does (a cache outside the repository, written by one warm-up start).

The processes use a ledger directory of their own (a temporary one in /dev/shm, where the default ledger lives),
never the host's.

Usage: python benchmarks/reservations.py [--processes 32] [--repeats 21] [--out DIR_OR_FILE.json] [--quick]
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from common import ROOT, format_table, machine, write_outputs

import devmem
from devmem.units import format_size

#: A process that reserves ``bytes`` of the device once told ``go`` (retrying every 10 ms for ``retry`` seconds
#: while refused), says how it went (with the attempts it took), then holds until stdin closes.
HOLDER = """
import json, sys, time
import devmem
from devmem.engine.reservations import ReservationRefused, reserve
platform = devmem.current_platform()
platform.device_memory_info(int(sys.argv[2]))
print("ready", flush=True)
sys.stdin.readline()
started = time.perf_counter()
retry_until = started + float(sys.argv[4])
attempts = 0
while True:
    attempts += 1
    try:
        held = reserve(int(sys.argv[2]), int(sys.argv[3]), ledger_dir=sys.argv[1], platform=platform)
        answer = {"ok": True, "bytes": held.bytes}
        break
    except ReservationRefused as exc:
        answer = {"ok": False, "message": str(exc), "holders": [h.pid for h in exc.holders]}
        if time.perf_counter() >= retry_until:
            break
        time.sleep(0.01)
answer["admission_s"] = time.perf_counter() - started
answer["attempts"] = attempts
answer["done"] = time.time()
print(json.dumps(answer), flush=True)
sys.stdin.read()
"""

#: An engine's start, without (argv[3] == "0") or with a reservation of utilization argv[4]; prints its seconds,
#: and the wall and CPU seconds of the admission step (importing devmem.engine.reservations and reserve()).
START = """
import sys, time
started = time.perf_counter()
import argparse, inspect, json  # what examples/engine.py imports before devmem
import devmem
from devmem.engine.profiling import MemorySnapshot, check_startup_memory
from devmem.planner.sizing import requested_memory
platform = devmem.current_platform()
device, utilization = int(sys.argv[2]), float(sys.argv[4])
wall = cpu = 0.0
if sys.argv[3] == "1":
    wall, cpu = time.perf_counter(), time.process_time()
    from devmem.engine.reservations import reserve
    held = reserve(device, utilization=utilization, ledger_dir=sys.argv[1], platform=platform)
    wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
snapshot = MemorySnapshot.measure(device)
check_startup_memory(snapshot, requested_memory(snapshot.total, utilization), platform)
print(time.perf_counter() - started, wall, cpu, flush=True)
"""


class Holder:
    """One :data:`HOLDER` process."""

    def __init__(self, directory: str, device: int, nbytes: int, retry: float = 0.0):
        self.proc = subprocess.Popen(
            [sys.executable, "-c", HOLDER, directory, str(device), str(nbytes), str(retry)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
            cwd=ROOT,
        )

    def ready(self) -> None:
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline().strip()
        if line != "ready":
            raise RuntimeError(f"holder {self.proc.pid} did not start: {line!r}")

    def go(self) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write("go\n")
        self.proc.stdin.flush()

    def answer(self) -> dict[str, Any]:
        assert self.proc.stdout is not None
        return {"pid": self.proc.pid, **json.loads(self.proc.stdout.readline())}

    def close(self) -> None:
        if self.proc.poll() is None:
            assert self.proc.stdin is not None
            self.proc.stdin.close()
            self.proc.wait(timeout=60)


def ledger_sum(directory: str) -> tuple[int, int]:
    """(entries, bytes) over every ledger file in ``directory``."""
    entries = [e for path in Path(directory).glob("*.json") for e in json.loads(path.read_text())["entries"]]
    return len(entries), sum(e["bytes"] for e in entries)


def race(directory: str, device: int, processes: int, total: int) -> dict[str, Any]:
    share = total * 2 // (2 * processes + 1)  # room for each one's own memory; one more share does not fit
    holders = [Holder(directory, device, share) for _ in range(processes)]
    extra = newcomer = None
    try:
        for h in holders:
            h.ready()
        for h in holders:
            h.go()
        answers = [h.answer() for h in holders]
        entries, reserved = ledger_sum(directory)
        extra = Holder(directory, device, share)
        extra.ready()
        extra.go()
        refused = extra.answer()
        newcomer = Holder(directory, device, share, retry=2.0)
        newcomer.ready()
        victim = holders[0]
        killed = time.time()
        os.kill(victim.proc.pid, signal.SIGKILL)
        newcomer.go()
        reclaimed = newcomer.answer()
        victim.proc.wait()
    finally:
        for h in [*holders, *(x for x in (extra, newcomer) if x is not None)]:
            if h.proc.poll() is None:
                h.close()
    return {
        "processes": processes,
        "share": share,
        "total": total,
        "admitted": sum(a["ok"] for a in answers),
        "ledger_entries": entries,
        "ledger_bytes": reserved,
        "sum_within_total": reserved <= total,
        "race_admission_s": [a["admission_s"] for a in answers],
        "extra": refused,
        "extra_refused": not refused["ok"],
        "refusal_names_holders": sorted(refused.get("holders", [])) == sorted(a["pid"] for a in answers),
        "killed_pid": holders[0].proc.pid,
        "newcomer": reclaimed,
        "newcomer_admitted": reclaimed["ok"],
        "kill_to_admission_s": reclaimed["done"] - killed,
    }


def start_cost(directory: str, device: int, repeats: int, utilization: float) -> dict[str, Any]:
    runs: dict[str, list[float]] = {"without": [], "with": []}
    step_wall: list[float] = []
    step_cpu: list[float] = []
    # As an installed package runs: from compiled bytecode (pip compiles on install), kept out of the repository.
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    env["PYTHONPYCACHEPREFIX"] = os.path.join(directory, "pycache")

    def start(mode: str) -> list[str]:
        return subprocess.run(
            [sys.executable, "-c", START, directory, str(device), mode, str(utilization)],
            capture_output=True,
            text=True,
            cwd=ROOT,
            check=True,
            env=env,
        ).stdout.split()

    start("1")  # compiles the bytecode once, for both sides
    for _ in range(repeats):
        for mode in ("0", "1"):
            out = start(mode)
            runs["with" if mode == "1" else "without"].append(float(out[0]))
            if mode == "1":
                step_wall.append(float(out[1]))
                step_cpu.append(float(out[2]))
    without, with_ = statistics.median(runs["without"]), statistics.median(runs["with"])
    return {
        "repeats": repeats,
        "utilization": utilization,
        "start_without_s": runs["without"],
        "start_with_s": runs["with"],
        "median_without_ms": without * 1e3,
        "median_with_ms": with_ * 1e3,
        "added_ms": (with_ - without) * 1e3,
        "admission_step_wall_ms": [r * 1e3 for r in step_wall],
        "admission_step_cpu_ms": [r * 1e3 for r in step_cpu],
        "median_admission_step_wall_ms": statistics.median(step_wall) * 1e3,
        "median_admission_step_cpu_ms": statistics.median(step_cpu) * 1e3,
        "load_average": os.getloadavg(),
    }


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--device", type=int, default=0)
    parser.add_argument("--processes", type=int, default=32)
    parser.add_argument("--repeats", type=int, default=21, help="fresh processes per side of the start-cost race")
    parser.add_argument("--out", default=None, help="a folder (or a .json file) for the results")
    parser.add_argument("--quick", action="store_true", help="4 processes and 3 repeats (for CI)")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> dict[str, Any]:
    args = parse_args(argv)
    platform = devmem.current_platform()
    total = platform.device_memory_info(args.device).total
    processes, repeats = (4, 3) if args.quick else (args.processes, args.repeats)
    where = "/dev/shm" if os.path.isdir("/dev/shm") else None  # where the default ledger lives
    with tempfile.TemporaryDirectory(prefix="devmem-ledger-", dir=where) as directory:
        raced = race(directory, args.device, processes, total)
    with tempfile.TemporaryDirectory(prefix="devmem-ledger-", dir=where) as directory:
        cost = start_cost(directory, args.device, repeats, 0.05)
    goals = {
        "all_admitted": raced["admitted"] == processes and raced["sum_within_total"],
        "extra_refused_naming_holders": raced["extra_refused"] and raced["refusal_names_holders"],
        "killed_share_admitted_within_1s": raced["newcomer_admitted"] and raced["kill_to_admission_s"] <= 1.0,
        "side_by_side_medians_differ_by_at_most_5ms": cost["added_ms"] <= 5.0,
        "admission_step_at_most_5ms": cost["median_admission_step_wall_ms"] <= 5.0,
    }
    result = {
        "benchmark": "reservations",
        "machine": machine(platform, args.device),
        "race": raced,
        "start_cost": cost,
        "goals": goals,
        "goal_met": all(goals.values()),
    }
    rows = [
        ("processes racing", processes, f"{raced['admitted']} admitted"),
        ("reserved / total", f"{format_size(raced['ledger_bytes'])} / {format_size(total)}", raced["sum_within_total"]),
        ("one more", "refused" if raced["extra_refused"] else "ADMITTED", raced["refusal_names_holders"]),
        (
            "kill -9 -> newcomer admitted",
            f"{raced['kill_to_admission_s'] * 1e3:.1f} ms",
            f"{raced['newcomer_admitted']} ({raced['newcomer']['attempts']} attempt(s))",
        ),
        ("engine start, no reservation", f"{cost['median_without_ms']:.1f} ms", f"median of {repeats}"),
        ("engine start, with reservation", f"{cost['median_with_ms']:.1f} ms", f"median of {repeats}"),
        ("difference of the medians", f"{cost['added_ms']:+.1f} ms", "across processes: noisy"),
        (
            "admission step in the engine",
            f"{cost['median_admission_step_wall_ms']:.2f} ms wall",
            f"{cost['median_admission_step_cpu_ms']:.2f} ms CPU (goal <= 5 ms wall)",
        ),
    ]
    text = format_table(("what", "figure", "check"), rows)
    text += "\n\nthe refusal:\n" + raced["extra"].get("message", "(none: it was admitted)")
    text += f"\n\nload average during the start-cost runs: {cost['load_average']}"
    text += f"\ngoals: {json.dumps(goals)}; met: {result['goal_met']}"
    print(text)
    write_outputs(args.out, "reservations", result, text)
    return result


if __name__ == "__main__":
    sys.exit(0 if main()["goal_met"] else 1)
