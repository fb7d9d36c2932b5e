"""Co-tenants: N engines start at the same moment on one device, each at utilization share / N.

For N = 1, 2, 4, 8 and both accounting methods, in one run: each engine's KV budget against the budget the
same method gives an engine started alone at the same utilization. devmem's goal (``--accounting process``):
every ratio 1.000 (within 2 MiB; 8 MiB of RSS on the cpu platform) and no failure. The device-wide method
(vLLM's) runs the same way beside it. The alone runs report both methods' budgets from one profile window
(nothing else is on the device then).

Each engine serves a real transformer (examples/engine.py). GPU defaults: share 0.9, the llama-1b model
(1.1B parameters, bf16), prefills of 8192 tokens. On the cpu platform: the tiny model, and the share requests
about 640 MiB of host memory.

Usage: python benchmarks/cotenants.py [--counts 1,2,4,8] [--out DIR_OR_FILE.json] [--quick]
"""

from __future__ import annotations

import argparse
import sys
import time
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
    same_budget,
    settle,
    utilization_for,
    write_outputs,
)

import devmem

GPU = {
    "share": 0.9,
    "model": "llama-1b",
    "batch_tokens": 8192,
    "decode_steps": 3,
    "hold": 2.0,
    "slack": 256 * MiB,
    "settle": 20.0,
}
CPU = {
    "request": 640 * MiB,
    "model": "tiny",
    "batch_tokens": 256,
    "decode_steps": 1,
    "hold": 0.3,
    "slack": 64 * MiB,
    "settle": 1.0,
}
METHODS = ("process", "device")


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--device", type=int, default=0)
    p.add_argument("--counts", default="1,2,4,8", help="engine counts, comma-separated")
    p.add_argument("--methods", default=",".join(METHODS), help="accounting methods, comma-separated")
    p.add_argument("--share", type=float, default=None, help="utilization shared by the N engines (GPU: 0.9)")
    p.add_argument("--model", default=None, help="the engine's model (GPU: llama-1b, CPU: tiny)")
    p.add_argument("--hold", type=float, default=None, help="seconds each engine keeps its cache")
    p.add_argument("--quick", action="store_true", help="N = 2 only (for CI)")
    p.add_argument("--out", default=None, help="a .json file, or a folder to write cotenants.json/.txt into")
    return p.parse_args(argv)


def _alone_budget(alone: dict[str, Any], method: str) -> int | None:
    return alone.get("budgets", {}).get(method, {}).get("kv_cache_bytes")


def _rows(group: dict[str, Any], alone: dict[str, Any]) -> list[dict[str, Any]]:
    reference = _alone_budget(alone, group["method"])
    rows = []
    for i, r in enumerate(group["engines"]):
        kv = r.get("kv_cache_bytes") if r["ok"] else None
        rows.append(
            {
                "method": group["method"],
                "n": group["n"],
                "utilization": group["utilization"],
                "engine": i,
                "kv_cache_bytes": kv,
                "alone_bytes": reference,
                "ratio": kv / reference if kv is not None and reference else None,
                "diff_bytes": kv - reference if kv is not None and reference is not None else None,
                "late_s": r.get("late_s"),
                "failure": failure_text(r),
            }
        )
    return rows


def _summary(rows: list[dict[str, Any]], method: str, n: int, tolerance: int) -> dict[str, Any]:
    mine = [r for r in rows if r["method"] == method and r["n"] == n]
    ratios = [r["ratio"] for r in mine if r["ratio"] is not None]
    diffs = [abs(r["diff_bytes"]) for r in mine if r["diff_bytes"] is not None]
    failures = [r["failure"] for r in mine if r["failure"]]
    return {
        "method": method,
        "n": n,
        "engines": len(mine),
        "failures": len(failures),
        "failure_kinds": sorted(set(failures)),
        "min_ratio": min(ratios, default=None),
        "max_ratio": max(ratios, default=None),
        "max_abs_diff_bytes": max(diffs, default=None),
        "goal_met": not failures and len(diffs) == len(mine) and max(diffs, default=0) <= tolerance,
    }


def _ratio(value: float | None) -> str:
    return "-" if value is None else f"{value:.4f}"


def render(result: dict[str, Any]) -> str:
    cfg = result["config"]
    head = (
        f"# co-tenants on {result['machine']['device_name']} ({result['machine']['platform']}), total "
        f"{gib(result['machine']['total'])} GiB; per engine: model {cfg['model']}, prefill "
        f"{cfg['batch_tokens']} tokens; "
        f"utilization {cfg['share']} / N"
    )
    engines = format_table(
        ["method", "N", "u", "engine", "KV GiB", "alone GiB", "ratio", "diff MiB", "late s", "failure"],
        [
            [
                r["method"],
                r["n"],
                r["utilization"],
                r["engine"],
                gib(r["kv_cache_bytes"]),
                gib(r["alone_bytes"]),
                _ratio(r["ratio"]),
                mib(r["diff_bytes"]),
                "-" if r["late_s"] is None else f"{r['late_s']:.3f}",
                r["failure"],
            ]
            for r in result["rows"]
        ],
    )
    by = {(s["method"], s["n"]): s for s in result["summary"]}
    side = []
    for n in cfg["counts"]:
        row: list[Any] = [n]
        for method in cfg["methods"]:
            s = by[(method, n)]
            row += [
                f"{_ratio(s['min_ratio'])}..{_ratio(s['max_ratio'])}",
                mib(s["max_abs_diff_bytes"]),
                f"{s['failures']}/{s['engines']}",
            ]
        side.append(row)
    headers = ["N"] + [f"{m} {h}" for m in cfg["methods"] for h in ("ratios", "max |diff| MiB", "failed")]
    verdict = f"devmem goal (process: every ratio 1.000, within {mib(cfg['tolerance'], 0)} MiB, no failure): " + (
        "MET" if result["goal_met"] else "NOT MET"
    )
    return "\n\n".join([head, engines, format_table(headers, side), verdict])


def main(argv: list[str] | None = None) -> dict[str, Any]:
    args = parse_args(argv)
    platform = devmem.current_platform()
    gpu = on_accelerator(platform)
    d = GPU if gpu else CPU
    start_info = platform.device_memory_info(args.device)
    share = args.share or d.get("share") or utilization_for(d["request"], start_info.total)
    counts = [2] if args.quick else [int(c) for c in args.counts.split(",")]
    methods = [m.strip() for m in args.methods.split(",")]
    cfg = {
        "share": share,
        "counts": counts,
        "methods": methods,
        "model": args.model or d["model"],
        "batch_tokens": d["batch_tokens"],
        "decode_steps": d["decode_steps"],
        "hold": args.hold if args.hold is not None else d["hold"],
        "tolerance": same_budget(platform),
    }
    common = {k: cfg[k] for k in ("model", "batch_tokens", "decode_steps")}
    common["device"] = args.device
    result: dict[str, Any] = {
        "benchmark": "cotenants",
        "command": ["python", "benchmarks/cotenants.py", *(argv if argv is not None else sys.argv[1:])],
        "machine": machine(platform, args.device),
        "config": cfg,
    }

    def quiet() -> None:
        settle(platform, args.device, start_info.free, d["slack"], d["settle"])

    alone: dict[int, dict[str, Any]] = {}
    ready = [0.0]
    for n in counts:
        quiet()
        (alone[n],) = run_engines([engine_argv(**common, utilization=round(share / n, 6))])
        ready.append(alone[n].get("timings_s", {}).get("ready_s", 0.0))
    groups = []
    for method in methods:
        for n in counts:
            quiet()
            lead = 0.5 + 2.0 * max(ready) * (1 + n / 8)
            start_at = time.time() + lead
            began = time.monotonic()
            argv_n = engine_argv(
                **common,
                utilization=round(share / n, 6),
                accounting=method,
                start_at=f"{start_at:.3f}",
                hold=cfg["hold"],
            )
            engines = run_engines([argv_n] * n)
            ready += [r.get("timings_s", {}).get("ready_s", 0.0) for r in engines]
            groups.append(
                {
                    "method": method,
                    "n": n,
                    "utilization": round(share / n, 6),
                    "start_at": start_at,
                    "lead_s": lead,
                    "wall_s": time.monotonic() - began,
                    "engines": engines,
                }
            )
    quiet()
    rows = [row for g in groups for row in _rows(g, alone[g["n"]])]
    summary = [_summary(rows, m, n, cfg["tolerance"]) for m in methods for n in counts]
    result.update(
        alone={str(n): r for n, r in alone.items()},
        groups=groups,
        rows=rows,
        summary=summary,
        goal_met=all(s["goal_met"] for s in summary if s["method"] == "process"),
    )
    text = render(result)
    print(text)
    for path in write_outputs(args.out, "cotenants", result, text):
        print(f"wrote {path}")
    return result


if __name__ == "__main__":
    main()
