"""How much `import devmem; devmem.current_platform()` adds to a bare interpreter start.

Median wall time over repeated fresh processes, side by side with `python -c pass` in one run.
Usage: python benchmarks/import_time.py [--runs 30] [--out benchmarks/results/import_time.json]
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import subprocess
import sys
import time

CASES = {
    "python -c pass": "pass",
    "import devmem": "import devmem",
    "import devmem; current_platform()": "import devmem; devmem.current_platform()",
    "... and device_memory_info()": "import devmem; devmem.current_platform().device_memory_info()",
}


def median_ms(code: str, runs: int) -> float:
    times = []
    for _ in range(runs):
        start = time.perf_counter()
        subprocess.run([sys.executable, "-c", code], check=True, capture_output=True)
        times.append((time.perf_counter() - start) * 1e3)
    return statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--runs", type=int, default=30)
    parser.add_argument("--out", default=None, help="write the results as JSON here")
    args = parser.parse_args()
    median_ms("import devmem; devmem.current_platform()", 3)  # warm the file cache
    # Interleave the cases round by round so machine noise hits them alike.
    samples: dict[str, list[float]] = {name: [] for name in CASES}
    for _ in range(args.runs):
        for name, code in CASES.items():
            samples[name].append(median_ms(code, 1))
    medians = {name: statistics.median(v) for name, v in samples.items()}
    base = medians["python -c pass"]
    print(f"{'case':<40}{'median ms':>10}{'added ms':>10}")
    for name, value in medians.items():
        print(f"{name:<40}{value:>10.1f}{value - base:>10.1f}")
    import devmem

    result = {
        "runs": args.runs,
        "python": sys.version.split()[0],
        "machine": f"{platform.machine()}, {__import__('os').cpu_count()} cores",
        "platform": devmem.current_platform().name,
        "median_ms": medians,
        "added_ms": {name: value - base for name, value in medians.items()},
    }
    if args.out:
        with open(args.out, "w") as f:
            json.dump(result, f, indent=2)


if __name__ == "__main__":
    main()
