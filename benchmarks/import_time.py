"""How much `import devmem; devmem.current_platform()` adds to a bare interpreter start.

Median wall time over fresh processes, side by side with `python -c pass` in one run (the cases alternate round by
round, so machine noise hits them alike).

- default: in the current environment (an editable install, say).
- `--wheel`: the way users run it: builds devmem's wheel (`pip wheel --no-deps --no-build-isolation`), installs it
  with `--no-deps` into a throwaway `python -m venv` together with its runtime dependencies (psutil, pluggy,
  nvidia-ml-py, by name through pip's configured index), and times the cases with that venv's interpreter.

Usage: python benchmarks/import_time.py [--wheel] [--runs 30] [--out benchmarks/results/import_time.json]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
#: The distribution's name, as pyproject.toml declares it (its wheel is named after it).
DISTRIBUTION = re.search(r'^name\s*=\s*"([^"]+)"', (REPO / "pyproject.toml").read_text(), re.MULTILINE).group(1)
BASELINE = "python -c pass"
CASES = {
    BASELINE: "pass",
    "import devmem": "import devmem",
    "import devmem; current_platform()": "import devmem; devmem.current_platform()",
    "... and device_memory_info()": "import devmem; devmem.current_platform().device_memory_info()",
}
#: Installed next to the wheel in --wheel mode: devmem's runtime dependencies and the NVIDIA backend's library.
RUNTIME_DEPENDENCIES = ("psutil", "pluggy", "nvidia-ml-py")


def _quiet_env() -> dict[str, str]:
    return {
        k: v
        for k, v in os.environ.items()
        if k not in ("PYTHONPATH", "VIRTUAL_ENV", "DEVMEM_PLATFORM", "DEVMEM_LOAD_PLUGINS")
    }


def wheel_venv(root: Path) -> Path:
    """A fresh venv under ``root`` with devmem installed from its wheel (not editable); returns its python."""
    pip = [sys.executable, "-m", "pip", "--disable-pip-version-check", "-q"]
    wheels = root / "wheels"
    subprocess.run(
        pip + ["wheel", "--no-deps", "--no-build-isolation", "-w", str(wheels), str(REPO)],
        check=True,
        env=_quiet_env(),
        cwd=root,
    )
    (wheel,) = wheels.glob(f"{DISTRIBUTION.replace('-', '_')}-*.whl")
    venv = root / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    python = venv / "bin" / "python"
    subprocess.run(pip + ["--python", str(python), "install", "--no-deps", str(wheel)], check=True, env=_quiet_env())
    subprocess.run(pip + ["--python", str(python), "install", *RUNTIME_DEPENDENCIES], check=True, env=_quiet_env())
    return python


def elapsed_ms(python: str, code: str) -> tuple[float, float]:
    """Wall and CPU (user + system) milliseconds of one fresh ``python -c code``."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    subprocess.run([python, "-c", code], check=True, capture_output=True, env=_quiet_env(), cwd=tempfile.gettempdir())
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return wall * 1e3, (after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime) * 1e3


def measure(python: str, runs: int) -> tuple[dict[str, float], dict[str, float]]:
    """Median wall and CPU milliseconds of each case over ``runs`` rounds, the cases alternating within each round
    (CPU time is what a loaded machine's contention does not inflate)."""
    for _ in range(3):  # warm the file cache
        elapsed_ms(python, CASES["import devmem; current_platform()"])
    wall: dict[str, list[float]] = {name: [] for name in CASES}
    cpu: dict[str, list[float]] = {name: [] for name in CASES}
    for _ in range(runs):
        for name, code in CASES.items():
            w, c = elapsed_ms(python, code)
            wall[name].append(w)
            cpu[name].append(c)
    return (
        {name: statistics.median(v) for name, v in wall.items()},
        {name: statistics.median(v) for name, v in cpu.items()},
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=30)
    parser.add_argument("--wheel", action="store_true", help="time a clean wheel install in a throwaway venv")
    parser.add_argument("--out", default=None, help="write the results as JSON here")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="devmem-import-time-") as tmp:
        python = str(wheel_venv(Path(tmp))) if args.wheel else sys.executable
        load = os.getloadavg()[0]
        medians, cpu = measure(python, args.runs)
        chosen = subprocess.run(
            [python, "-c", "import devmem; print(devmem.current_platform().name)"],
            check=True,
            capture_output=True,
            text=True,
            env=_quiet_env(),
        ).stdout.strip()
    base, cpu_base = medians[BASELINE], cpu[BASELINE]
    print(f"{'case':<40}{'median ms':>10}{'added ms':>10}{'cpu ms':>10}{'added':>10}")
    for name, value in medians.items():
        print(f"{name:<40}{value:>10.1f}{value - base:>10.1f}{cpu[name]:>10.1f}{cpu[name] - cpu_base:>10.1f}")
    print(f"load average at the start: {load:.2f} on {os.cpu_count()} cores")
    result = {
        "install": "wheel, non-editable, throwaway venv" if args.wheel else "current environment",
        "runs": args.runs,
        "python": sys.version.split()[0],
        "machine": f"{platform.machine()}, {os.cpu_count()} cores",
        "platform": chosen,
        "median_ms": medians,
        "added_ms": {name: value - base for name, value in medians.items()},
        "cpu_median_ms": cpu,
        "cpu_added_ms": {name: value - cpu_base for name, value in cpu.items()},
        "load_average_at_start": load,
    }
    if args.out:
        with open(args.out, "w") as f:
            json.dump(result, f, indent=2)
            f.write("\n")


if __name__ == "__main__":
    main()
