"""Accuracy on a real model: the process's footprint, read from the driver after it served with its KV cache in
place, against what it requested.

For each (model, utilization u, allocator, CUDA graphs off/on, KV layout), one engine (examples/engine.py: a
transformers model with random weights) creates its ``devmem.EngineMemory`` before its device context exists,
profiles a prefill + decode step, captures decode CUDA graphs for batch 1..256 in one pool in the graph window
(graphs on), sizes its KV cache, allocates it, and runs the same step again ``--rounds`` times with the cache in
place. Its footprint is then read with raw NVML (``nvmlDeviceGetComputeRunningProcesses``), not computed. The
goal: ``footprint <= ceil(u * total)`` and ``requested - footprint <= max(64 MiB, 0.25 %)``.

Two KV layouts: ``devmem`` (``EngineMemory.allocate()``: one allocation, a view per layer: the object's path)
and ``per-layer`` (the engine allocates one tensor per layer itself, planned with ``KvLayout.per_layer()``: the
README snippet's path for such an engine). The budget the device-wide method (vLLM's) gives in the same run, and
the bytes graph capture kept, are shown beside it.

Usage: python benchmarks/accuracy.py [--models llama-1b,moe,qwen3-0.6b] [--utilizations 0.1,0.9]
                                     [--allocators default,expandable] [--graphs off,on]
                                     [--layouts devmem,per-layer] [--out DIR] [--quick]
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

from common import (
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
    utilization_for,
    write_outputs,
)

import devmem

GPU = {
    "models": "llama-1b,moe,qwen3-0.6b",
    "utilizations": "0.1,0.9",
    "allocators": "default,expandable",
    "graphs": "off,on",
    "layouts": "devmem,per-layer",
    "batch_tokens": 8192,
    "slack": 256 * MiB,
    "settle": 20.0,
}
CPU = {
    "models": "tiny,tiny-moe",
    "utilizations": "320MiB",
    "allocators": "default",
    "graphs": "off",
    "layouts": "devmem,per-layer",
    "batch_tokens": 256,
    "slack": 64 * MiB,
    "settle": 1.0,
}
#: The goal: the footprint never above the request, and under it by at most this (or 0.25 % of the request).
TOLERANCE = 64 * MiB
TOLERANCE_SHARE = 0.0025


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--device", type=int, default=0)
    p.add_argument("--models", default=None, help="engine model names, comma-separated")
    p.add_argument("--utilizations", default=None, help="shares of the total, or sizes to request (96MiB)")
    p.add_argument("--allocators", default=None, help="default,expandable")
    p.add_argument("--graphs", default=None, help="off,on: capture decode CUDA graphs (GPU only)")
    p.add_argument("--layouts", default=None, help="devmem,per-layer: who allocates the KV cache")
    p.add_argument("--batch-tokens", type=int, default=None)
    p.add_argument("--quick", action="store_true", help="the first configuration only (for CI)")
    p.add_argument("--out", default=None, help="a .json file, or a folder to write accuracy.json/.txt into")
    return p.parse_args(argv)


def share(text: str, total: int) -> float:
    """A utilization given as a share (``0.5``) or as the size it should request (``96MiB``)."""
    try:
        return float(text)
    except ValueError:
        return utilization_for(devmem.parse_size(text), total)


def tolerance(requested: int) -> int:
    return max(TOLERANCE, int(requested * TOLERANCE_SHARE))


def measure(r: dict[str, Any], model: str, allocator: str, graphs: str, layout: str) -> dict[str, Any]:
    """The accuracy figures of one engine's result."""
    requested, footprint = r.get("requested"), r.get("footprint")
    memory = r.get("memory") or {}
    profile = memory.get("profile") or {}
    row = {
        "model": model,
        "allocator": allocator,
        "graphs": graphs,
        "layout": layout,
        "utilization": r["utilization"],
        "requested": requested,
        "failure": failure_text(r),
        "weights": r.get("weights"),
        "kv_allocated_bytes": r.get("kv_allocated_bytes"),
        "num_blocks": r.get("num_blocks"),
        "transient": profile.get("transient_peak_bytes"),
        "transient_allocated": profile.get("transient_allocated_bytes"),
        "transient_rule": profile.get("transient_rule"),
        "graph_capture": memory.get("graph_capture_bytes"),
        "graph_sizes": (r.get("graphs") or {}).get("captured"),
        "footprint": footprint,
        "footprint_source": r.get("footprint_source"),
        "device_budget": r.get("budgets", {}).get("device", {}).get("kv_cache_bytes"),
        "process_budget": r.get("budgets", {}).get("process", {}).get("kv_cache_bytes"),
        "gap_bytes": None,
        "tolerance": tolerance(requested) if requested else None,
        "goal_met": False,
    }
    if r["ok"] and footprint is not None:
        row["gap_bytes"] = requested - footprint
        row["goal_met"] = 0 <= row["gap_bytes"] <= row["tolerance"]
    return row


def render(result: dict[str, Any]) -> str:
    m = result["machine"]
    head = (
        f"# accuracy on {m['device_name']} ({m['platform']}), total {gib(m['total'])} GiB: footprint read "
        "from the driver after serving with the KV cache in place, against requested = ceil(u * total)"
    )
    table = format_table(
        [
            "model",
            "allocator",
            "graphs",
            "layout",
            "u",
            "requested GiB",
            "KV GiB",
            "transient MiB (allocated)",
            "graphs kept MiB",
            "footprint GiB",
            "requested - footprint MiB",
            "device-wide KV GiB",
            "failure",
        ],
        [
            [
                r["model"],
                r["allocator"],
                r["graphs"],
                r["layout"],
                r["utilization"],
                gib(r["requested"]),
                gib(r["kv_allocated_bytes"]),
                f"{mib(r['transient'])} ({mib(r['transient_allocated'])})",
                mib(r["graph_capture"]),
                gib(r["footprint"]),
                mib(r["gap_bytes"]),
                gib(r["device_budget"]),
                r["failure"],
            ]
            for r in result["rows"]
        ],
    )
    if result["measured"]:
        verdict = (
            "devmem goal (0 <= requested - footprint <= max(64 MiB, 0.25 % of requested) in every "
            "configuration): " + ("MET" if result["goal_met"] else "NOT MET")
        )
    else:
        verdict = "devmem goal: not judged here (no driver figure for this process's footprint on this platform)"
    worst = "; ".join(
        f"{layout}: most over {mib(w['most_over'])} MiB, most under {mib(w['most_under'])} MiB"
        for layout, w in result.get("worst_by_layout", {}).items()
    )
    return "\n\n".join([head, table, verdict] + ([worst] if worst else []))


def main(argv: list[str] | None = None) -> dict[str, Any]:
    args = parse_args(argv)
    platform = devmem.current_platform()
    d = GPU if on_accelerator(platform) else CPU
    start_info = platform.device_memory_info(args.device)
    configs = [
        (model, share(u, start_info.total), alloc, graphs, layout)
        for model in (args.models or d["models"]).split(",")
        for alloc in (args.allocators or d["allocators"]).split(",")
        for graphs in (args.graphs or d["graphs"]).split(",")
        for u in (args.utilizations or d["utilizations"]).split(",")
        for layout in (args.layouts or d["layouts"]).split(",")
    ]
    if args.quick:
        configs = configs[:1]
    rows = []
    for model, u, allocator, graphs, layout in configs:
        settle(platform, args.device, start_info.free, d["slack"], d["settle"])
        (r,) = run_engines(
            [
                engine_argv(
                    device=args.device,
                    model=model,
                    utilization=u,
                    batch_tokens=args.batch_tokens or d["batch_tokens"],
                    expandable_segments=allocator == "expandable",
                    graphs=graphs == "on",
                    kv_layout=layout,
                )
            ]
        )
        rows.append({**measure(r, model, allocator, graphs, layout), "engine": r})
    measured = all(r["footprint"] is not None for r in rows)
    gaps: dict[str, list[int]] = {}
    for r in rows:
        if r["gap_bytes"] is not None:
            gaps.setdefault(r["layout"], []).append(r["gap_bytes"])
    worst = {layout: {"most_over": -min(g), "most_under": max(g)} for layout, g in gaps.items()}
    result = {
        "benchmark": "accuracy",
        "command": ["python", "benchmarks/accuracy.py", *(argv if argv is not None else sys.argv[1:])],
        "machine": machine(platform, args.device),
        "config": {
            "batch_tokens": args.batch_tokens or d["batch_tokens"],
            "tolerance": TOLERANCE,
            "tolerance_share": TOLERANCE_SHARE,
        },
        "rows": rows,
        "worst_by_layout": worst,
        "measured": measured,
        "goal_met": measured and all(r["goal_met"] for r in rows),
    }
    text = render(result)
    print(text)
    for path in write_outputs(args.out, "accuracy", result, text):
        print(f"wrote {path}")
    return result


if __name__ == "__main__":
    main()
