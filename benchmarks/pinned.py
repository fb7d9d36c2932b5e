"""Pinned KV cache: what the allocator's cache holds when the KV cache is allocated, without and with the release.

With the KV size given (vLLM's ``kv_cache_memory_bytes``), engines skip the memory profile, so the profile
pass's activations stay in torch's allocator cache, unused, while the KV cache is allocated beside them. The
engine runs twice with the same ``--pinned`` size: once without releasing the cache (today's engines) and once
with ``devmem.engine.release_allocator_cache()`` right before the allocation. Goal: 0 bytes cached at the allocation
in segments that hold no live tensor with the release (the rest of what stays cached is free space inside
segments that do, which no release can give back), and the KV cache the same size both times.

GPU defaults: the llama-1b model of examples/engine.py, a warm-up prefill of 32768 tokens, 32 GiB pinned. On the cpu
platform torch keeps no allocator cache, so the cached bytes are not measured there.

Usage: python benchmarks/pinned.py [--pinned 32GiB] [--out DIR_OR_FILE.json]
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

from common import (
    GiB,
    MiB,
    engine_argv,
    failure_text,
    format_table,
    gib,
    machine,
    mib,
    on_accelerator,
    run_engines,
    settle,
    write_outputs,
)

import devmem

GPU = {"model": "llama-1b", "batch_tokens": 32768, "pinned": 32 * GiB, "slack": 256 * MiB, "settle": 20.0}
CPU = {"model": "tiny", "batch_tokens": 256, "pinned": 16 * MiB, "slack": 64 * MiB, "settle": 1.0}


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--device", type=int, default=0)
    p.add_argument("--model", default=None, help="the engine's model (GPU: llama-1b, CPU: tiny)")
    p.add_argument("--pinned", type=devmem.parse_size, default=None, help="the KV cache size both runs pin")
    p.add_argument("--out", default=None, help="a .json file, or a folder to write pinned.json/.txt into")
    return p.parse_args(argv)


def render(result: dict[str, Any]) -> str:
    m, cfg = result["machine"], result["config"]
    head = (
        f"# pinned KV cache of {gib(cfg['pinned'])} GiB on {m['device_name']} ({m['platform']}): model "
        f"{cfg['model']}, warm-up prefill of {cfg['batch_tokens']} tokens"
    )
    table = format_table(
        [
            "release",
            "cached before MiB",
            "released MiB",
            "cached at KV alloc MiB",
            "of it in idle segments MiB",
            "KV GiB",
            "blocks",
            "process after serving GiB",
            "failure",
        ],
        [
            [
                r["release"],
                mib(r["cache_before_release"]),
                mib(r["released"]),
                mib(r["cache_at_kv_alloc"]),
                mib(r["idle_segments_at_kv_alloc"]),
                gib(r["kv_allocated_bytes"]),
                r["num_blocks"],
                gib(r["process_after_serve"]),
                r["failure"],
            ]
            for r in result["rows"]
        ],
    )
    goal = result["goal_met"]
    verdict = (
        "devmem goal (with the release, 0 bytes cached in idle segments at the KV allocation: what stays "
        "cached is free space inside segments that hold live tensors, which no release can return; KV size "
        "unchanged): "
        + ("not measured here (no allocator cache on this platform)" if goal is None else "MET" if goal else "NOT MET")
    )
    return "\n\n".join([head, table, verdict])


def main(argv: list[str] | None = None) -> dict[str, Any]:
    args = parse_args(argv)
    platform = devmem.current_platform()
    d = GPU if on_accelerator(platform) else CPU
    start_info = platform.device_memory_info(args.device)
    cfg = {"model": args.model or d["model"], "batch_tokens": d["batch_tokens"], "pinned": args.pinned or d["pinned"]}
    rows = []
    for release in (False, True):
        settle(platform, args.device, start_info.free, d["slack"], d["settle"])
        (r,) = run_engines([engine_argv(device=args.device, decode_steps=1, no_release=not release, **cfg)])
        rows.append(
            {
                "release": release,
                "cache_before_release": r.get("allocator_cache_before_release"),
                "released": r.get("released_before_kv"),
                "cache_at_kv_alloc": r.get("allocator_cache_at_kv_alloc"),
                "idle_segments_at_kv_alloc": r.get("idle_segments_at_kv_alloc"),
                "kv_allocated_bytes": r.get("kv_allocated_bytes"),
                "num_blocks": r.get("num_blocks"),
                "process_after_serve": r.get("process_after_serve"),
                "failure": failure_text(r),
                "engine": r,
            }
        )
    without, with_release = rows
    measured = with_release["cache_at_kv_alloc"] is not None
    same_size = (
        with_release["kv_allocated_bytes"] is not None
        and without["kv_allocated_bytes"] == with_release["kv_allocated_bytes"]
    )
    result = {
        "benchmark": "pinned",
        "command": ["python", "benchmarks/pinned.py", *(argv if argv is not None else sys.argv[1:])],
        "machine": machine(platform, args.device),
        "config": cfg,
        "rows": rows,
        "same_kv_size": same_size,
        "goal_met": (same_size and with_release["idle_segments_at_kv_alloc"] == 0) if measured else None,
    }
    text = render(result)
    print(text)
    for path in write_outputs(args.out, "pinned", result, text):
        print(f"wrote {path}")
    return result


if __name__ == "__main__":
    main()
