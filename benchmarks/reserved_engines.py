"""Five engines, one device, each asking for a quarter of it: with reservations four serve and the fifth is refused.

1. With reservations: ``--engines`` (5) example engines (examples/engine.py, a real transformers model with
   random weights) start together, each in a fresh process; each first reserves ``--share`` (0.25) of device
   ``--device`` with ``devmem.reserve`` (before the engine module is loaded, so before any weight), then runs
   the engine at that utilization and releases at its end. Goal: four admitted and serving; the fifth refused
   within 1 s of its process's start, with a message naming the four holders.
2. Without reservations, in the same run: the same five engines start together as they do today, and the
   outcome is reported (which started, which failed and how).

Each engine holds its cache ``--hold`` seconds after serving, so all of them overlap. The reservations go to a
ledger directory of this run's own (under /dev/shm), never the host's.

GPU defaults: the llama-1b model, prefills of 4096 tokens. On the cpu platform (``--quick``): the tiny model,
the engines sized at 1 GiB of host memory while each still reserves its share of the host.

Usage: python benchmarks/reserved_engines.py [--engines 5] [--share 0.25] [--out DIR_OR_FILE.json] [--quick]
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
import traceback
from typing import Any

from common import (
    GiB,
    _load_engine,
    engine_argv,
    failure_text,
    format_table,
    gib,
    machine,
    on_accelerator,
    run_engines,
    spawn,
    utilization_for,
    write_outputs,
)

import devmem


def _reserving_engine(conn: Any, argv: list[str], device: int, share: float, ledger: str, launched: float) -> None:
    """Reserve ``share`` of ``device``, then run the engine; send its result, or the refusal with its timing."""
    entered = time.time()
    result: dict[str, Any]
    try:
        from devmem.engine.reservations import ReservationRefused, reserve

        try:
            held = reserve(device, utilization=share, ledger_dir=ledger)
        except ReservationRefused as exc:
            now = time.time()
            result = {
                "ok": False,
                "refused": True,
                "message": str(exc),
                "holders": [h.pid for h in exc.holders if h.reserved],
                "breakdown": exc.breakdown,
                "refused_after_process_start_s": now - entered,
                "refused_after_launch_s": now - launched,
            }
        else:
            with held:
                admitted = time.time()
                result = _load_engine().run(argv)
                result.update(refused=False, reserved=held.bytes, admitted_after_process_start_s=admitted - entered)
    except BaseException:
        result = {"ok": False, "failure": {"stage": "engine", "kind": "crash", "message": traceback.format_exc()}}
    result["pid"] = os.getpid()
    conn.send(result)
    conn.close()


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--device", type=int, default=0)
    parser.add_argument("--engines", type=int, default=5)
    parser.add_argument("--share", type=float, default=0.25, help="share of the device each engine reserves")
    parser.add_argument("--model", default=None, help="examples/engine.py's --model (default llama-1b; tiny on cpu)")
    parser.add_argument("--hold", type=float, default=None, help="seconds each engine holds its cache (GPU 10)")
    parser.add_argument("--out", default=None, help="a folder (or a .json file) for the results")
    parser.add_argument("--quick", action="store_true", help="the cpu smoke configuration")
    return parser.parse_args(argv)


def _row(phase: str, r: dict[str, Any]) -> tuple[Any, ...]:
    if r.get("refused"):
        outcome = f"refused after {r['refused_after_process_start_s'] * 1e3:.0f} ms"
    elif r["ok"]:
        outcome = "served"
    else:
        outcome = f"FAILED: {failure_text(r)}"
    return (phase, r.get("pid", "-"), gib(r.get("reserved")), gib(r.get("kv_cache_bytes")), outcome)


def main(argv: list[str] | None = None) -> dict[str, Any]:
    args = parse_args(argv)
    platform = devmem.current_platform()
    gpu = on_accelerator(platform)
    total = platform.device_memory_info(args.device).total
    engine_utilization = args.share if gpu else utilization_for(GiB, total)
    hold = args.hold if args.hold is not None else (10.0 if gpu else 1.0)
    common = engine_argv(
        device=args.device,
        utilization=engine_utilization,
        model=args.model or ("llama-1b" if gpu and not args.quick else "tiny"),
        batch_tokens=4096 if gpu else 128,
        decode_steps=1,
        hold=hold,
    )
    run_engines([common])  # warms the page cache (run_engines' first call runs one engine alone first)
    where = "/dev/shm" if os.path.isdir("/dev/shm") else None
    with tempfile.TemporaryDirectory(prefix="devmem-ledger-", dir=where) as ledger:
        launched = time.time()
        sent = spawn(_reserving_engine, [(common, args.device, args.share, ledger, launched)] * args.engines)
    reserved = [r if r is not None else {"ok": False, "failure": {"kind": "died", "stage": "engine"}} for r, _ in sent]
    plain = run_engines([common] * args.engines)
    admitted = [r for r in reserved if not r.get("refused")]
    refused = [r for r in reserved if r.get("refused")]
    expected = int(1 // args.share) if args.share > 0 else 0
    goals = {
        "admitted_and_serving": len(admitted) == min(expected, args.engines) and all(r["ok"] for r in admitted),
        "rest_refused_within_1s": len(refused) == args.engines - len(admitted)
        and all(r["refused_after_process_start_s"] <= 1.0 for r in refused),
        "refusal_names_the_holders": all(sorted(r["holders"]) == sorted(a["pid"] for a in admitted) for r in refused),
    }
    result = {
        "benchmark": "reserved_engines",
        "machine": machine(platform, args.device),
        "config": {
            "engines": args.engines,
            "share": args.share,
            "engine_utilization": engine_utilization,
            "argv": common,
        },
        "with_reservations": reserved,
        "without_reservations": plain,
        "without_reservations_outcome": {
            "served": sum(bool(r["ok"]) for r in plain),
            "failed": [failure_text(r) for r in plain if not r["ok"]],
        },
        "goals": goals,
        "goal_met": all(goals.values()),
    }
    text = format_table(
        ("phase", "pid", "reserved GiB", "KV cache GiB", "outcome"),
        [*(_row("with reservations", r) for r in reserved), *(_row("without", r) for r in plain)],
    )
    if refused:
        text += "\n\nthe refusal:\n" + refused[0]["message"]
    outcome = result["without_reservations_outcome"]
    text += f"\n\nwithout reservations: {outcome['served']} of {args.engines} served; failures: {outcome['failed']}"
    text += f"\ngoals: {goals}; met: {result['goal_met']}"
    print(text)
    write_outputs(args.out, "reserved_engines", result, text)
    return result


if __name__ == "__main__":
    sys.exit(0 if main()["goal_met"] else 1)
