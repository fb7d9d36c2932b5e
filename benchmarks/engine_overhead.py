"""What an ``EngineMemory`` start adds to the same work done in raw torch, on the cpu platform.

One round of each case, alternating round by round in one process (machine noise hits them alike), with torch
imported (and transformers with ``--transformers``, a heap four times larger):

- ``EngineMemory``: a start's whole lifecycle: ``EngineMemory(...)`` (the baseline and the admission on a ledger
  of its own, a share of ``--cache`` bytes beyond what the model and its pass hold), a small decoder-shaped model
  built (``--layers`` blocks of two linear layers), one forward pass of ``--tokens`` tokens in ``profile()``,
  ``plan()``, ``allocate()`` (the K/V cache the plan leaves), ``close()``;
- ``raw torch``: the same model, pass and cache (the bytes the warm-up round planned), without devmem.

Reported: the median milliseconds of each and what the start adds. Goal: at most 50 ms added.

    python benchmarks/engine_overhead.py --out benchmarks/results/cpu
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import platform as host
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import torch  # noqa: E402

import devmem  # noqa: E402
from devmem import EngineMemory, MiB  # noqa: E402
from devmem.cpu import CpuPlatform  # noqa: E402

GOAL_MS = 50.0


def model(layers: int, hidden: int) -> torch.nn.Module:
    return torch.nn.Sequential(
        *(
            torch.nn.Sequential(torch.nn.Linear(hidden, 4 * hidden), torch.nn.Linear(4 * hidden, hidden))
            for _ in range(layers)
        )
    )


def raw(args: argparse.Namespace, cache_bytes: int) -> int:
    net = model(args.layers, args.hidden)
    with torch.no_grad():
        net(torch.randn(args.tokens, args.hidden))
    cache = torch.zeros(cache_bytes, dtype=torch.uint8)
    del cache, net
    return cache_bytes


def with_devmem(args: argparse.Namespace, platform: CpuPlatform, ledger: str) -> int:
    """One start; the bytes of the cache it allocated."""
    total = platform.device_memory_info(0).total
    share = (args.cache + 4 * args.layers * args.hidden * args.hidden * 4 * 2 + 64 * MiB) / total
    with EngineMemory(0, utilization=share, platform=platform, ledger_dir=ledger) as memory:
        net = model(args.layers, args.hidden)
        with memory.profile(), torch.no_grad():
            net(torch.randn(args.tokens, args.hidden))
        plan = memory.plan(page_size_bytes=MiB, num_layers=1)
        cache = memory.allocate()
        del cache, net
    return plan.kv_cache_bytes


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=20, help="rounds of each case (default 20)")
    parser.add_argument("--layers", type=int, default=4, help="the model's blocks (default 4)")
    parser.add_argument("--hidden", type=int, default=256, help="its hidden size (default 256)")
    parser.add_argument("--tokens", type=int, default=256, help="tokens of the forward pass (default 256)")
    parser.add_argument("--cache", type=int, default=64 * MiB, help="the K/V cache's bytes (default 64 MiB)")
    parser.add_argument("--transformers", action="store_true", help="import transformers too (a larger heap)")
    parser.add_argument("--out", type=Path, default=None, help="write engine_overhead.json and .txt here")
    args = parser.parse_args()
    if args.transformers:
        import transformers  # noqa: F401
    platform = CpuPlatform()
    timed: dict[str, list[float]] = {"EngineMemory": [], "raw torch": []}
    with tempfile.TemporaryDirectory(prefix="devmem-bench-ledger-") as ledger:
        cache_bytes = with_devmem(args, platform, ledger)  # warm-up: the bytes raw torch allocates too
        for _ in range(args.rounds):
            for name, call in (
                ("EngineMemory", lambda: with_devmem(args, platform, ledger)),
                ("raw torch", lambda: raw(args, cache_bytes)),
            ):
                started = time.perf_counter()
                call()
                timed[name].append((time.perf_counter() - started) * 1e3)
    medians = {name: statistics.median(v) for name, v in timed.items()}
    added = medians["EngineMemory"] - medians["raw torch"]
    objects = len(gc.get_objects())
    lines = [
        f"{'case':<14}{'median ms':>11}{'min ms':>9}{'max ms':>9}",
        *(f"{name:<14}{medians[name]:>11.1f}{min(v):>9.1f}{max(v):>9.1f}" for name, v in timed.items()),
        "",
        f"added by EngineMemory: {added:.1f} ms (goal <= {GOAL_MS:g}); {args.rounds} rounds, a cache of "
        f"{cache_bytes / MiB:.0f} MiB; the heap "
        f"{objects} objects (transformers {'imported' if args.transformers else 'not imported'})",
        f"load average: {tuple(round(x, 2) for x in os.getloadavg())} on {os.cpu_count()} cores",
    ]
    print("\n".join(lines))
    result = {
        "medians_ms": medians,
        "added_ms": added,
        "goal_ms": GOAL_MS,
        "met": added <= GOAL_MS,
        "rounds": timed,
        "cache_bytes": cache_bytes,
        "heap_objects": objects,
        "transformers": args.transformers,
        "machine": {"python": sys.version.split()[0], "cpus": os.cpu_count(), "devmem": devmem.__version__},
        "host": host.platform(),
    }
    if args.out is not None:
        args.out.mkdir(parents=True, exist_ok=True)
        suffix = "_transformers" if args.transformers else ""
        (args.out / f"engine_overhead{suffix}.json").write_text(json.dumps(result, indent=2) + "\n")
        (args.out / f"engine_overhead{suffix}.txt").write_text("\n".join(lines) + "\n")
    return 0 if added <= GOAL_MS else 1


if __name__ == "__main__":
    sys.exit(main())
