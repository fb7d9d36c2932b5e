"""How long the ``devmem`` command takes, beside a bare interpreter start, and how wide its lines are in a file.

1. Wall and CPU time of fresh processes, side by side in one run (the cases alternate round by round, so machine
   noise hits them alike): ``python -c pass``, then ``devmem``, ``devmem info --json``, ``devmem top -n 1`` and
   ``devmem plan --model examples/configs/qwen3-8b.json``, each the console script's code (``from
   devmem.command.main import main``) on the cpu platform with a ledger directory of its own. Goals:
   ``devmem``, ``info --json`` and ``top -n 1`` at most 60 ms over ``python -c pass``, ``plan --model`` at most 80.
2. ``devmem > file`` and ``devmem top -n 1 > file`` on a scripted 8-GPU node (devmem_nvidia.testing's NVML) on
   which 64 real processes of this machine with long command lines hold memory: the file's size and its widest
   line. Goal: every line at most 200 characters.

- default: in the current environment (an editable install, say).
- ``--wheel``: the way users run it: devmem built as a wheel and installed into a throwaway venv
  (``benchmarks/import_time.py``'s ``wheel_venv``), timed with that venv's interpreter.

Usage: python benchmarks/command_time.py [--wheel] [--runs 30] [--out benchmarks/results/cpu]
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import platform as host
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

from import_time import wheel_venv  # noqa: E402

BASELINE = "python -c pass"
COMMAND = "import sys; from devmem.command.main import main; sys.exit(main())"
MODEL = str(ROOT / "examples" / "configs" / "qwen3-8b.json")
CASES: dict[str, list[str]] = {
    BASELINE: ["-c", "pass"],
    "devmem": ["-c", COMMAND],
    "devmem info --json": ["-c", COMMAND, "info", "--json"],
    "devmem top -n 1": ["-c", COMMAND, "top", "-n", "1"],
    "devmem plan --model": ["-c", COMMAND, "plan", "--model", MODEL],
}
#: Milliseconds over ``python -c pass`` each case may add.
GOALS_MS = {"devmem": 60.0, "devmem info --json": 60.0, "devmem top -n 1": 60.0, "devmem plan --model": 80.0}
#: The widest line ``devmem > file`` may write.
GOAL_WIDTH = 200
GPUS, PROCESSES = 8, 64


def _env(tmp: str) -> dict[str, str]:
    """The cases' environment: the cpu platform, a ledger of their own, and compiled bytecode as an installed
    package has it (a cache under ``tmp``, written by the warm-up round)."""
    dropped = ("PYTHONPATH", "VIRTUAL_ENV", "COLUMNS", "DEVMEM_LOAD_PLUGINS", "PYTHONDONTWRITEBYTECODE")
    env = {k: v for k, v in os.environ.items() if k not in dropped}
    env.update(
        DEVMEM_PLATFORM="cpu",
        DEVMEM_LEDGER_DIR=os.path.join(tmp, "ledger"),
        PYTHONPYCACHEPREFIX=os.path.join(tmp, "pycache"),
    )
    return env


def elapsed_ms(python: str, argv: list[str], env: dict[str, str], cwd: str) -> tuple[float, float]:
    """Wall and CPU (user + system) milliseconds of one fresh ``python argv`` run in ``cwd``, its output to a
    pipe."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    subprocess.run([python, *argv], check=True, capture_output=True, env=env, cwd=cwd)
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return wall * 1e3, (after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime) * 1e3


def timings(python: str, runs: int, env: dict[str, str], cwd: str) -> tuple[dict[str, float], dict[str, float]]:
    """Median wall and CPU milliseconds of each case over ``runs`` rounds, the cases alternating in each round; run
    in ``cwd`` (the repository, whose devmem ``-c`` then imports; a folder without one for a wheel)."""
    for argv in CASES.values():  # warm the file cache, and write the bytecode
        elapsed_ms(python, argv, env, cwd)
    wall: dict[str, list[float]] = {name: [] for name in CASES}
    cpu: dict[str, list[float]] = {name: [] for name in CASES}
    for _ in range(runs):
        for name, argv in CASES.items():
            w, c = elapsed_ms(python, argv, env, cwd)
            wall[name].append(w)
            cpu[name].append(c)
    return {n: statistics.median(v) for n, v in wall.items()}, {n: statistics.median(v) for n, v in cpu.items()}


def widths() -> dict[str, dict[str, int]]:
    """The size and widest line of ``devmem`` and ``devmem top -n 1`` written to a file, on the scripted node."""
    from devmem.command.info import cmd_info
    from devmem.command.main import build_parser
    from devmem.testing import Scenario
    from devmem.types import GiB
    from devmem_nvidia.testing import ScriptedNvidiaGpu, scripted_platform

    long = "/opt/serving/venv/bin/python3 -m serving.api_server --model /models/" + "a-long-model-name/" * 12
    # `sleep 3600` whose argv[0] is a long command line: what psutil and /proc show as its command
    sleepers = [subprocess.Popen([f"{long}{n}", "3600"], executable="sleep") for n in range(PROCESSES)]
    try:
        gpus = [
            ScriptedNvidiaGpu(
                uuid=f"GPU-00000000-0000-0000-0000-00000000000{i}", pci_bus_id=f"00000000:{16 + i:02x}:00.0"
            )
            for i in range(GPUS)
        ]
        sc = Scenario(devices=gpus)
        for n, p in enumerate(sleepers):
            sc.allocate((1 + n % 4) * GiB, n % GPUS, pid=p.pid)
        platform = scripted_platform(sc)
        found = {}
        for name, argv in (("devmem > file", ["info"]), ("devmem top -n 1 > file", ["top", "-n", "1"])):
            args = build_parser().parse_args(argv)
            with tempfile.TemporaryFile("w+") as f, contextlib.redirect_stdout(f):
                cmd_info(args, platform)
                f.seek(0)
                lines = f.read().splitlines()
            found[name] = {
                "bytes": sum(len(line) + 1 for line in lines),
                "lines": len(lines),
                "widest": max(map(len, lines)),
            }
        return found
    finally:
        for p in sleepers:
            p.kill()
            p.wait()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=30, help="rounds of every case (default 30)")
    parser.add_argument("--wheel", action="store_true", help="time a clean wheel install in a throwaway venv")
    parser.add_argument("--out", type=Path, default=None, help="write command_time.json and .txt here")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="devmem-command-time-") as tmp:
        python = str(wheel_venv(Path(tmp))) if args.wheel else sys.executable
        env = _env(tmp)
        os.environ["DEVMEM_LEDGER_DIR"] = env["DEVMEM_LEDGER_DIR"]
        load = os.getloadavg()[0]
        wall, cpu = timings(python, args.runs, env, tmp if args.wheel else str(ROOT))
        written = widths()
    base, cpu_base = wall[BASELINE], cpu[BASELINE]
    added = {name: value - base for name, value in wall.items()}
    met = {name: added[name] <= goal for name, goal in GOALS_MS.items()}
    met["every line <= 200 characters"] = all(w["widest"] <= GOAL_WIDTH for w in written.values())
    lines = [f"{'case':<24}{'median ms':>10}{'added ms':>10}{'cpu ms':>10}{'added':>10}{'goal':>8}"]
    for name in CASES:
        goal = f"<= {GOALS_MS[name]:g}" if name in GOALS_MS else ""
        lines.append(
            f"{name:<24}{wall[name]:>10.1f}{added[name]:>10.1f}{cpu[name]:>10.1f}{cpu[name] - cpu_base:>10.1f}{goal:>8}"
        )
    lines.append("")
    for name, w in written.items():
        lines.append(f"{name:<24} {w['lines']} lines, {w['bytes']} bytes, widest {w['widest']} characters")
    lines += [
        "",
        f"install: {'wheel, non-editable, throwaway venv' if args.wheel else 'current environment'}; "
        f"{args.runs} rounds; load average at the start {load:.2f} on {os.cpu_count()} cores",
        f"goals met: {met}",
    ]
    print("\n".join(lines))
    result = {
        "install": "wheel, non-editable, throwaway venv" if args.wheel else "current environment",
        "runs": args.runs,
        "median_ms": wall,
        "added_ms": added,
        "cpu_median_ms": cpu,
        "cpu_added_ms": {name: value - cpu_base for name, value in cpu.items()},
        "written_to_a_file": written,
        "goals_ms_over_python": GOALS_MS,
        "met": met,
        "machine": {"python": sys.version.split()[0], "cpus": os.cpu_count(), "load_at_start": load},
        "host": host.platform(),
    }
    if args.out is not None:
        args.out.mkdir(parents=True, exist_ok=True)
        (args.out / "command_time.json").write_text(json.dumps(result, indent=2) + "\n")
        (args.out / "command_time.txt").write_text("\n".join(lines) + "\n")
    return 0 if all(met.values()) else 1


if __name__ == "__main__":
    sys.exit(main())
