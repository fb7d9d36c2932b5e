"""Fit check: the planner's tokens against the real engine's, and ``devmem fit`` at the edge of what fits.

For one model (a folder holding ``config.json``, or one of examples/engine.py's shapes by name) on this machine's
device at ``--utilization``:

1. with ``--engine``, examples/engine.py serves the model (transformers, random weights) with a devmem-sized
   KV cache; the planner converts the engine's KV bytes into blocks (``devmem plan --model --pinned``, with the
   engine's dtype, block size and allocation granularity): its tokens must equal the blocks the engine
   allocated x the block size. The engine's non-KV memory beyond the weights the planner counts is then
   passed to ``devmem fit`` as the activation peak, so both budgets are the same bytes;
2. the planner works out the sequences (``--sequences``, or the fewest whose longest context stays within the
   model's ``max_position_embeddings`` with one block to spare) and the longest context each can have, and the
   ``devmem`` command runs for that (context, sequences) and for one block more per sequence. Goal: exit 0, then
   exit 1 with the KV budget short as the only reason.

Usage: python benchmarks/fit_check.py --engine [--model DIR_OR_SHAPE] [--utilization 0.9] [--out DIR_OR_FILE.json]
       python benchmarks/fit_check.py --quick [--engine]       # CPU-sized: the tiny shape at utilization 0.01
"""

from __future__ import annotations

import argparse
import json
import math
import os
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

from common import engine_argv, engine_shapes, format_table, machine, on_accelerator, run_engines, write_outputs

import devmem
from devmem.engine.kvcache import ALLOCATOR_GRANULARITY
from devmem.planner.capacity import DEFAULT_BLOCK_SIZE, longest_context, plan_for_model, tokens_in_pool
from devmem.planner.models import load_model

#: transformers config classes of the engine's shapes, by the model_type a config.json names them with.
_MODEL_TYPES = {"LlamaConfig": "llama", "MixtralConfig": "mixtral"}
_DTYPES = {"bfloat16": "bf16", "float16": "fp16", "float32": "fp32"}


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument(
        "--model",
        default=None,
        help="a model folder (config.json), or a shape of examples/engine.py (llama-1b, moe, tiny, "
        "tiny-moe; default llama-1b on a GPU, tiny on the CPU)",
    )
    p.add_argument("--engine", action="store_true", help="also serve the model with examples/engine.py")
    p.add_argument("--quick", action="store_true", help="CPU-sized: utilization 0.01 unless given")
    p.add_argument("--utilization", type=float, default=None, help="default 0.9 (0.01 with --quick)")
    p.add_argument(
        "--sequences",
        type=int,
        default=None,
        help="sequences at once (default: the fewest whose longest context fits the model's maximum)",
    )
    p.add_argument("--device", type=int, default=0)
    p.add_argument("--block-size", type=int, default=DEFAULT_BLOCK_SIZE)
    p.add_argument(
        "--activation-peak",
        type=devmem.parse_size,
        default=0,
        help="bytes of activations (without --engine; with it, the engine's own figures are used)",
    )
    p.add_argument("--out", default=None, help="a .json file, or a folder to write fit_check.json/.txt into")
    return p.parse_args(argv)


def model_folder(name: str, scratch: Path, dtype: str) -> Path:
    """``name`` when it is a folder; else a folder holding the config.json of the engine's shape ``name``."""
    if Path(name).is_dir():
        return Path(name)
    shapes = engine_shapes()
    if name not in shapes:
        raise SystemExit(
            f"--model {name!r} is neither a folder nor a shape of examples/engine.py ({', '.join(sorted(shapes))})"
        )
    class_name, kwargs = shapes[name]
    folder = scratch / name
    folder.mkdir()
    config = {"model_type": _MODEL_TYPES[class_name], "torch_dtype": dtype, **kwargs}
    (folder / "config.json").write_text(json.dumps(config))
    return folder


def devmem_command(*args: str) -> dict[str, Any]:
    """``python -m devmem ARGS --json`` in a fresh process: its exit code and its JSON output."""
    argv = [sys.executable, "-m", "devmem", *args, "--json"]
    done = subprocess.run(argv, capture_output=True, text=True, env=dict(os.environ), timeout=120, check=False)
    try:
        output = json.loads(done.stdout)
    except json.JSONDecodeError:
        output = None
    return {
        "argv": ["devmem", *args, "--json"],
        "exit_code": done.returncode,
        "output": output,
        "stderr": done.stderr[-2000:],
    }


def fewest_sequences(model: Any, kv_bytes: int, block_size: int) -> int:
    """The fewest sequences whose longest context, and one block more, are within the model's
    max_position_embeddings (1 without one), so that one block more can fail on memory alone."""
    if model.max_context is None:
        return 1
    limit = model.max_context - block_size
    sequences = max(1, math.ceil(tokens_in_pool(model, kv_bytes, block_size) / limit))
    while (longest_context(model, kv_bytes, sequences, block_size) or math.inf) > limit:
        sequences += 1
    return sequences


def serve(folder: Path, args: argparse.Namespace, utilization: float) -> dict[str, Any]:
    """examples/engine.py on ``folder/config.json``; what it allocated and served, beside the planner's blocks."""
    (run,) = run_engines(
        [
            engine_argv(
                config=folder / "config.json", utilization=utilization, device=args.device, block_size=args.block_size
            )
        ]
    )
    if not run.get("ok"):
        raise SystemExit(f"the engine failed: {run.get('failure')}")
    model = load_model(folder, dtype=_DTYPES[run["dtype"]])
    planned = devmem_command(
        "plan",
        "--model",
        str(folder),
        "--dtype",
        _DTYPES[run["dtype"]],
        "--pinned",
        str(run["kv_cache_bytes"]),
        "--block-size",
        str(args.block_size),
        "--allocation-granularity",
        str(ALLOCATOR_GRANULARITY),
    )
    plan = (planned["output"] or {}).get("plan", {})
    beyond_weights = run["requested"] - run["kv_cache_bytes"] - model.weights_bytes_per_rank
    return {
        "dtype": _DTYPES[run["dtype"]],
        "kv_cache_bytes": run["kv_cache_bytes"],
        "engine_num_blocks": run["num_blocks"],
        "planner_num_blocks": plan.get("num_blocks"),
        "engine_tokens": run["kv_tokens"],
        "planner_tokens": (plan.get("num_blocks") or 0) * args.block_size,
        "engine_block_bytes": run["block_bytes"],
        "planner_block_bytes": plan.get("block_bytes"),
        "tokens_equal": plan.get("num_blocks") is not None and plan["num_blocks"] * args.block_size == run["kv_tokens"],
        "engine_weights": run["weights"],
        "planner_weights": model.weights_bytes,
        "non_kv_beyond_weights": max(0, beyond_weights),
        "served": {"prefill_tokens": run.get("prefill_tokens"), "generated_tokens": run.get("generated_tokens")},
        "devmem_plan": planned,
        "engine": run,
    }


def render(result: dict[str, Any]) -> str:
    m, plan = result["machine"], result["plan"]
    lines = [
        (
            f"# fit check on {m['device_name']} ({m['platform']}), total {m['total']} B, utilization "
            f"{result['utilization']}: {result['model']['model_type']}, {result['model']['kv_bytes_per_token']} B "
            f"per token, KV budget {plan['kv_cache_bytes']} B = {plan['num_blocks']} blocks = {plan['tokens']} "
            "tokens"
        )
    ]
    engine = result["engine"]
    if engine is not None:
        lines.append(
            format_table(
                ["", "KV bytes", "blocks", "tokens", "block bytes", "weights"],
                [
                    [
                        "engine",
                        engine["kv_cache_bytes"],
                        engine["engine_num_blocks"],
                        engine["engine_tokens"],
                        engine["engine_block_bytes"],
                        engine["engine_weights"],
                    ],
                    [
                        "planner",
                        engine["kv_cache_bytes"],
                        engine["planner_num_blocks"],
                        engine["planner_tokens"],
                        engine["planner_block_bytes"],
                        engine["planner_weights"],
                    ],
                ],
            )
        )
        lines.append(
            f"tokens equal: {engine['tokens_equal']}; the engine served {engine['served']['prefill_tokens']} "
            f"prefill and {engine['served']['generated_tokens']} generated tokens with the cache in place"
        )
    rows = [
        [
            r["what"],
            r["context"],
            r["sequences"],
            r["exit_code"],
            r["expected"],
            "; ".join((r["output"] or {}).get("fit", {}).get("reasons", ["no output"])) or "-",
        ]
        for r in result["runs"]
    ]
    lines.append(format_table(["devmem fit", "context", "sequences", "exit code", "expected", "why not"], rows))
    lines.append(f"goal met: {result['goal_met']}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> dict[str, Any]:
    args = parse_args(argv)
    utilization = args.utilization if args.utilization is not None else (0.01 if args.quick else 0.9)
    platform = devmem.current_platform()
    gpu = on_accelerator(platform)
    with tempfile.TemporaryDirectory(prefix="devmem-fit-check-") as scratch:
        folder = model_folder(
            args.model or ("llama-1b" if gpu else "tiny"), Path(scratch), "bfloat16" if gpu else "float32"
        )
        engine = serve(folder, args, utilization) if args.engine else None
        granularity = ALLOCATOR_GRANULARITY if args.engine else 1
        activation = engine["non_kv_beyond_weights"] if engine else args.activation_peak
        dtype = engine["dtype"] if engine else None
        model = load_model(folder, dtype=dtype)
        total = platform.device_memory_info(args.device).total
        plan = plan_for_model(
            model,
            block_size=args.block_size,
            total=total,
            utilization=utilization,
            transient_peak_bytes=activation,
            allocation_granularity=granularity,
        )
        usable = plan.kv_cache_bytes // granularity * granularity
        sequences = args.sequences or fewest_sequences(model, usable, args.block_size)
        context = longest_context(model, usable, sequences, args.block_size)
        if not context:
            raise SystemExit(f"the KV budget of {plan.kv_cache_bytes} B holds no block for {sequences} sequence(s)")
        common = [
            "--model",
            str(folder),
            "--utilization",
            str(utilization),
            "--device",
            str(args.device),
            "--block-size",
            str(args.block_size),
            "--transient-peak",
            str(activation),
            "--allocation-granularity",
            str(granularity),
            *(["--dtype", dtype] if dtype else []),
        ]
        runs = []
        targets = (("just fits", context, 0), ("one block more per sequence", context + args.block_size, 1))
        for what, ctx, expected in targets:
            run = devmem_command("fit", *common, "--context", str(ctx), "--sequences", str(sequences))
            runs.append({"what": what, "context": ctx, "sequences": sequences, "expected": expected, **run})
    reasons = [(r["output"] or {}).get("fit", {}).get("reasons") for r in runs]
    exits_ok = (
        [r["exit_code"] for r in runs] == [0, 1]
        and reasons[0] == []
        and len(reasons[1] or []) == 1
        and reasons[1][0].startswith("the KV budget is")
    )
    result = {
        "benchmark": "fit_check",
        "command": ["python", "benchmarks/fit_check.py", *(argv if argv is not None else sys.argv[1:])],
        "machine": machine(platform, args.device),
        "utilization": utilization,
        "model_arg": args.model,
        "model": model.as_dict(),
        "allocation_granularity": granularity,
        "activation_peak": activation,
        "plan": {
            "kv_cache_bytes": plan.kv_cache_bytes,
            "num_blocks": plan.num_blocks,
            "block_bytes": plan.block_bytes,
            "tokens": plan.num_blocks * args.block_size,
        },
        "engine": engine,
        "runs": runs,
        "goal_met": exits_ok
        and (engine is None or (engine["tokens_equal"] and engine["kv_cache_bytes"] == plan.kv_cache_bytes)),
    }
    text = render(result)
    print(text)
    for path in write_outputs(args.out, "fit_check", result, text):
        print(f"wrote {path}")
    return result


if __name__ == "__main__":
    main()
