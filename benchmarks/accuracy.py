"""Accuracy: after the KV allocation, what this process holds on the device against what it requested.

For a few (weights W, activation peak P, utilization u), an engine runs alone with devmem's accounting. After it
allocates its KV cache, ``platform.get_process_memory_usage`` says what the process holds; the budget promised
``u * total`` = what it grew by since the init snapshot + the activation headroom it must keep free. The
engine takes its init snapshot before it creates its CUDA context (devmem's snapshot creates none), so the
growth, and the budget, include the context (about 520 MiB on an H200) that vLLM-style accounting leaves
outside. The gap ``requested - (growth + headroom)`` is the accuracy: goal within 64 MiB and never negative
(never above the request).

Configurations are ``W:P:u``; ``u`` may also be a size (``64MiB``), turned into the utilization that requests it.

Usage: python benchmarks/accuracy.py [--configs 4GiB:1GiB:0.5,...] [--out DIR_OR_FILE.json] [--quick]
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

import devmem
from common import (
    KiB,
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

GPU = {"configs": "1GiB:256MiB:0.2,4GiB:1GiB:0.5,8GiB:8GiB:0.7,16GiB:4GiB:0.9", "non_torch": 512 * MiB,
       "page_size": 64 * KiB, "layers": 32, "slack": 256 * MiB, "settle": 20.0}
CPU = {"configs": "4MiB:2MiB:64MiB,8MiB:8MiB:96MiB", "non_torch": 1 * MiB, "page_size": 4 * KiB, "layers": 4,
       "slack": 64 * MiB, "settle": 1.0}
#: The goal: the process's memory within this of the request, and never above it.
TOLERANCE = 64 * MiB


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--device", type=int, default=0)
    p.add_argument("--configs", default=None, help="W:P:u,... (u a share or a size to request)")
    p.add_argument("--non-torch", type=devmem.parse_size, default=None)
    p.add_argument("--quick", action="store_true", help="the first configuration only (for CI)")
    p.add_argument("--out", default=None, help="a .json file, or a folder to write accuracy.json/.txt into")
    return p.parse_args(argv)


def parse_config(text: str, total: int) -> tuple[int, int, float]:
    """``W:P:u`` as (weights bytes, activation peak bytes, utilization)."""
    weights, peak, share = text.split(":")
    try:
        u = float(share)
    except ValueError:
        u = utilization_for(devmem.parse_size(share), total)
    return devmem.parse_size(weights), devmem.parse_size(peak), u


def measure(r: dict[str, Any]) -> dict[str, Any]:
    """The accuracy figures of one engine's result."""
    row = {"weights": r["weights"], "activation_peak_target": r["activation_peak_target"],
           "utilization": r["utilization"], "requested": r.get("requested"), "failure": failure_text(r),
           "init_process": r.get("init_process"), "context": r.get("context_bytes"), "kv_cache_bytes": r.get("kv_cache_bytes"),
           "kv_allocated_bytes": r.get("kv_allocated_bytes"), "process_after_kv": r.get("process_after_kv"),
           "headroom": r.get("activation_peak"), "device_budget": r.get("budgets", {}).get("device", {}).get(
               "kv_cache_bytes"), "gap_bytes": None, "goal_met": False}
    if r["ok"] and row["process_after_kv"] is not None and row["init_process"] is not None:
        held = row["process_after_kv"] - row["init_process"] + row["headroom"]
        row.update(held_bytes=held, gap_bytes=row["requested"] - held)
        row["goal_met"] = 0 <= row["gap_bytes"] <= TOLERANCE
    return row


def render(result: dict[str, Any]) -> str:
    m = result["machine"]
    head = (f"# accuracy on {m['device_name']} ({m['platform']}), total {gib(m['total'])} GiB: after the KV "
            "allocation, this process's growth since the init snapshot (CUDA context included) + the "
            "activation headroom, against u * total")
    table = format_table(
        ["W GiB", "P GiB", "u", "requested GiB", "KV GiB", "held GiB", "gap MiB", "context MiB",
         "device-wide KV GiB", "failure"],
        [[gib(r["weights"]), gib(r["activation_peak_target"]), r["utilization"], gib(r["requested"]),
          gib(r["kv_allocated_bytes"]), gib(r.get("held_bytes")), mib(r["gap_bytes"]), mib(r["context"]),
          gib(r["device_budget"]), r["failure"]] for r in result["rows"]])
    verdict = (f"devmem goal (0 <= gap <= {TOLERANCE // MiB} MiB in every configuration): "
               + ("MET" if result["goal_met"] else "NOT MET"))
    return "\n\n".join([head, table, verdict])


def main(argv: list[str] | None = None) -> dict[str, Any]:
    args = parse_args(argv)
    platform = devmem.current_platform()
    d = GPU if on_accelerator(platform) else CPU
    start_info = platform.device_memory_info(args.device)
    configs = [parse_config(c, start_info.total) for c in (args.configs or d["configs"]).split(",")]
    if args.quick:
        configs = configs[:1]
    non_torch = args.non_torch if args.non_torch is not None else d["non_torch"]
    rows = []
    for weights, peak, u in configs:
        settle(platform, args.device, start_info.free, d["slack"], d["settle"])
        (r,) = run_engines([engine_argv(device=args.device, weights=weights, activation_peak=peak,
                                        non_torch=non_torch, utilization=u, page_size=d["page_size"],
                                        layers=d["layers"], decode_steps=1)])
        rows.append({**measure(r), "engine": r})
    result = {"benchmark": "accuracy", "command": ["python", "benchmarks/accuracy.py",
                                                   *(argv if argv is not None else sys.argv[1:])],
              "machine": machine(platform, args.device),
              "config": {"non_torch": non_torch, "page_size": d["page_size"], "layers": d["layers"],
                         "tolerance": TOLERANCE},
              "rows": rows, "goal_met": all(r["goal_met"] for r in rows)}
    text = render(result)
    print(text)
    for path in write_outputs(args.out, "accuracy", result, text):
        print(f"wrote {path}")
    return result


if __name__ == "__main__":
    main()
