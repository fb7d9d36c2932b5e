"""Ranks: two ranks with different free memory agree on the smallest KV budget (``devmem.agree_on_minimum``).

With two or more GPUs: rank r runs on GPU r and the ranks talk through NCCL; a blocker process holds
``--blocker`` bytes (default 32 GiB) on GPU 0 first, so rank 0 sees less free memory. Each rank sizes a growable
KV cache from what is free on its device (``plan_kv_cache(init_free_memory=free, free_memory=free)``) and the
ranks agree on the minimum. Goal: every rank ends with the smallest budget.

On the cpu platform the ranks talk through gloo and share one host memory, so rank 1 requests twice rank 0's
share to give the ranks different budgets. On a machine with one GPU it is skipped, with the reason.

Usage: python benchmarks/ranks.py [--blocker 32GiB] [--out DIR_OR_FILE.json]
"""

from __future__ import annotations

import argparse
import os
import socket
import sys
from contextlib import nullcontext
from datetime import timedelta
from typing import Any

from common import GiB, MiB, format_table, gib, machine, on_accelerator, spawn, utilization_for, write_outputs

import devmem
from devmem.testing.allocations import allocate_torch_in_subprocess

WORLD = 2
PAGE_SIZE, LAYERS = 64 * 1024, 32


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--blocker", type=devmem.parse_size, default=32 * GiB, help="bytes held on GPU 0 by another process")
    p.add_argument("--utilization", type=float, default=0.9, help="each rank's utilization on a GPU")
    p.add_argument("--out", default=None, help="a .json file, or a folder to write ranks.json/.txt into")
    return p.parse_args(argv)


def _rank(conn: Any, rank: int, backend: str, init_method: str, utilization: float) -> None:
    """One rank: size from this device's free memory, then agree with the other ranks."""
    import torch
    import torch.distributed as dist

    os.environ.setdefault("NCCL_NVLS_ENABLE", "0")
    device = rank if backend == "nccl" else 0
    if backend == "nccl":
        torch.cuda.set_device(device)
        torch.empty(1, device=f"cuda:{device}")
    dist.init_process_group(
        backend, init_method=init_method, rank=rank, world_size=WORLD, timeout=timedelta(seconds=120)
    )
    try:
        platform = devmem.current_platform()
        snapshot = devmem.engine.MemorySnapshot.measure(device, platform)
        plan = devmem.planner.plan_kv_cache(
            page_size_bytes=PAGE_SIZE,
            num_layers=LAYERS,
            total=snapshot.total,
            utilization=utilization,
            init_free_memory=snapshot.free,
            free_memory=snapshot.free,
        )
        agreed = devmem.agree_on_minimum(plan.kv_cache_bytes)
    finally:
        dist.destroy_process_group()
    conn.send(
        {
            "rank": rank,
            "backend": backend,
            "device": device,
            "platform": platform.name,
            "device_name": getattr(platform, "device_name", lambda d: str(d))(device),
            "free": snapshot.free,
            "total": snapshot.total,
            "utilization": utilization,
            "budget": plan.kv_cache_bytes,
            "agreed": agreed,
        }
    )
    conn.close()


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def plan_run(platform: Any, args: argparse.Namespace) -> tuple[str | None, str, list[float], str]:
    """``(backend or None, why, per-rank utilizations, what the blocker does)``."""
    if not on_accelerator(platform):
        u = utilization_for(64 * MiB, platform.device_memory_info(0).total)
        return "gloo", "cpu platform: gloo, both ranks on host memory", [u, 2 * u], "none (one host memory)"
    count = platform.device_count()
    if count < WORLD:
        return None, f"needs {WORLD} GPUs for NCCL, this machine has {count}", [], "none"
    return (
        "nccl",
        f"{count} GPUs: NCCL, rank r on GPU r",
        [args.utilization] * WORLD,
        f"{gib(args.blocker)} GiB held on GPU 0 by another process",
    )


def render(result: dict[str, Any]) -> str:
    head = f"# ranks on {result['machine']['device_name']} ({result['machine']['platform']}): {result['how']}"
    if result.get("skipped"):
        return f"{head}\nskipped: {result['skipped']}"
    table = format_table(
        ["rank", "backend", "device", "u", "free GiB", "own budget GiB", "agreed GiB"],
        [
            [r["rank"], r["backend"], r["device"], r["utilization"], gib(r["free"]), gib(r["budget"]), gib(r["agreed"])]
            for r in result["ranks"]
        ],
    )
    verdict = "goal (every rank ends with the smallest budget): " + ("MET" if result["goal_met"] else "NOT MET")
    return "\n\n".join([head, f"blocker: {result['blocker']}", table, verdict])


def main(argv: list[str] | None = None) -> dict[str, Any]:
    args = parse_args(argv)
    platform = devmem.current_platform()
    backend, how, utilizations, blocker = plan_run(platform, args)
    result: dict[str, Any] = {
        "benchmark": "ranks",
        "command": ["python", "benchmarks/ranks.py", *(argv if argv is not None else sys.argv[1:])],
        "machine": machine(platform, 0),
        "how": how,
        "blocker": blocker,
    }
    if backend is None:
        result.update(skipped=how, goal_met=None)
    else:
        init_method = f"tcp://127.0.0.1:{_free_port()}"
        hold = allocate_torch_in_subprocess(args.blocker, 0, namespace="cuda") if backend == "nccl" else nullcontext()
        with hold:
            sent = spawn(_rank, [(r, backend, init_method, utilizations[r]) for r in range(WORLD)], timeout=300)
        ranks = [r for r, _ in sent if r is not None]
        failed = [
            f"rank {i} ended with exit code {code} without a result" for i, (r, code) in enumerate(sent) if r is None
        ]
        smallest = min((r["budget"] for r in ranks), default=None)
        result.update(ranks=ranks, failures=failed, goal_met=not failed and all(r["agreed"] == smallest for r in ranks))
    text = render(result)
    print(text)
    for path in write_outputs(args.out, "ranks", result, text):
        print(f"wrote {path}")
    return result


if __name__ == "__main__":
    main()
