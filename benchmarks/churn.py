"""Churn: a co-tenant allocates and frees 8 GiB in a loop while an engine profiles.

First one engine runs alone on a quiet device (it reports both methods' budgets from one profile window).
Then a co-tenant starts allocating and freeing ``--churn`` bytes (random hold and gap times, 20-150 ms), and
for each accounting method ``--repetitions`` engines run one after another beside it. devmem's goal
(``--accounting process``): every budget identical to the quiet one (within 2 MiB; 8 MiB of RSS on the cpu
platform), and no failure. The device-wide method's spread and failures (vLLM's assertion when the co-tenant
frees memory inside the profile window) are reported beside it.

Each engine serves a real transformer (examples/engine.py). GPU defaults: utilization 0.5, the llama-1b model,
prefills of 8192 tokens, 8 GiB of churn,
5 repetitions. On the cpu platform: a few MiB, about 64 MiB requested and 128 MiB of churn.

Usage: python benchmarks/churn.py [--repetitions 5] [--churn 8GiB] [--out DIR_OR_FILE.json] [--quick]
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

from common import (
    Churner,
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
    same_budget,
    settle,
    utilization_for,
    write_outputs,
)

import devmem

GPU = {
    "utilization": 0.5,
    "model": "llama-1b",
    "batch_tokens": 8192,
    "churn": 8 * GiB,
    "repetitions": 5,
    "slack": 256 * MiB,
    "settle": 20.0,
}
CPU = {
    "request": 512 * MiB,
    "model": "tiny",
    "batch_tokens": 256,
    "churn": 128 * MiB,
    "repetitions": 3,
    "slack": 64 * MiB,
    "settle": 1.0,
}
METHODS = ("process", "device")


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--device", type=int, default=0)
    p.add_argument("--methods", default=",".join(METHODS))
    p.add_argument("--utilization", type=float, default=None)
    p.add_argument("--model", default=None, help="the engine's model (GPU: llama-1b, CPU: tiny)")
    p.add_argument("--churn", type=devmem.parse_size, default=None, help="bytes the co-tenant allocates and frees")
    p.add_argument("--repetitions", type=int, default=None, help="engines per method beside the churn")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--quick", action="store_true", help="one repetition (for CI)")
    p.add_argument("--out", default=None, help="a .json file, or a folder to write churn.json/.txt into")
    return p.parse_args(argv)


def _summary(rows: list[dict[str, Any]], method: str, tolerance: int) -> dict[str, Any]:
    mine = [r for r in rows if r["method"] == method]
    budgets = [r["kv_cache_bytes"] for r in mine if r["kv_cache_bytes"] is not None]
    diffs = [abs(r["diff_bytes"]) for r in mine if r["diff_bytes"] is not None]
    failures = [r["failure"] for r in mine if r["failure"]]
    return {
        "method": method,
        "runs": len(mine),
        "failures": len(failures),
        "failure_kinds": sorted(set(failures)),
        "min_bytes": min(budgets, default=None),
        "max_bytes": max(budgets, default=None),
        "spread_bytes": max(budgets) - min(budgets) if budgets else None,
        "max_abs_diff_bytes": max(diffs, default=None),
        "goal_met": not failures and len(diffs) == len(mine) and max(diffs, default=0) <= tolerance,
    }


def render(result: dict[str, Any]) -> str:
    cfg, m = result["config"], result["machine"]
    head = (
        f"# churn on {m['device_name']} ({m['platform']}), total {gib(m['total'])} GiB: a co-tenant allocates "
        f"and frees {mib(cfg['churn'])} MiB ({result['churn_cycles']} cycles) while engines profile; "
        f"utilization {cfg['utilization']}, model {cfg['model']}, prefill {cfg['batch_tokens']} tokens"
    )
    quiet = result["quiet"].get("budgets", {})
    quiet_line = "quiet run (no co-tenant): " + ", ".join(
        f"{name} {gib(b.get('kv_cache_bytes'))} GiB" for name, b in quiet.items()
    )
    runs = format_table(
        ["method", "run", "KV GiB", "quiet GiB", "diff MiB", "failure"],
        [
            [r["method"], r["run"], gib(r["kv_cache_bytes"]), gib(r["quiet_bytes"]), mib(r["diff_bytes"]), r["failure"]]
            for r in result["rows"]
        ],
    )
    summary = format_table(
        ["method", "runs", "failed", "min GiB", "max GiB", "spread MiB", "max |diff| MiB", "failures"],
        [
            [
                s["method"],
                s["runs"],
                s["failures"],
                gib(s["min_bytes"]),
                gib(s["max_bytes"]),
                mib(s["spread_bytes"]),
                mib(s["max_abs_diff_bytes"]),
                ", ".join(s["failure_kinds"]),
            ]
            for s in result["summary"]
        ],
    )
    verdict = (
        f"devmem goal (process: identical to the quiet run, within {mib(cfg['tolerance'], 0)} MiB, "
        "no failure): " + ("MET" if result["goal_met"] else "NOT MET")
    )
    return "\n\n".join([head, quiet_line, runs, summary, verdict])


def main(argv: list[str] | None = None) -> dict[str, Any]:
    args = parse_args(argv)
    platform = devmem.current_platform()
    gpu = on_accelerator(platform)
    d = GPU if gpu else CPU
    start_info = platform.device_memory_info(args.device)
    methods = [m.strip() for m in args.methods.split(",")]
    cfg = {
        "utilization": args.utilization or d.get("utilization") or utilization_for(d["request"], start_info.total),
        "model": args.model or d["model"],
        "batch_tokens": d["batch_tokens"],
        "churn": args.churn or d["churn"],
        "repetitions": 1 if args.quick else (args.repetitions or d["repetitions"]),
        "methods": methods,
        "tolerance": same_budget(platform),
    }
    common = engine_argv(
        device=args.device,
        utilization=cfg["utilization"],
        model=cfg["model"],
        batch_tokens=cfg["batch_tokens"],
        decode_steps=1,
    )
    settle(platform, args.device, start_info.free, d["slack"], d["settle"])
    (quiet,) = run_engines([common])
    rows = []
    with Churner(args.device if gpu else None, cfg["churn"], seed=args.seed) as churner:
        for method in methods:
            reference = quiet.get("budgets", {}).get(method, {}).get("kv_cache_bytes")
            for run in range(cfg["repetitions"]):
                (r,) = run_engines([common + ["--accounting", method]])
                kv = r.get("kv_cache_bytes") if r["ok"] else None
                rows.append(
                    {
                        "method": method,
                        "run": run,
                        "kv_cache_bytes": kv,
                        "quiet_bytes": reference,
                        "diff_bytes": kv - reference if kv is not None and reference is not None else None,
                        "failure": failure_text(r),
                        "engine": r,
                    }
                )
    settle(platform, args.device, start_info.free, d["slack"], d["settle"])
    summary = [_summary(rows, m, cfg["tolerance"]) for m in methods]
    result = {
        "benchmark": "churn",
        "command": ["python", "benchmarks/churn.py", *(argv if argv is not None else sys.argv[1:])],
        "machine": machine(platform, args.device),
        "config": cfg,
        "quiet": quiet,
        "churn_cycles": churner.cycles,
        "rows": rows,
        "summary": summary,
        "goal_met": all(s["goal_met"] for s in summary if s["method"] == "process"),
    }
    text = render(result)
    print(text)
    for path in write_outputs(args.out, "churn", result, text):
        print(f"wrote {path}")
    return result


if __name__ == "__main__":
    main()
