"""Fit check: ``devmem fit`` accepts the (context, sequences) that just fit this device and refuses one block more.

From a model folder (a ``config.json``, and its safetensors when present) the planner works out, on this machine's
device at ``--utilization``: the KV budget (``devmem plan --model``), the number of sequences (``--sequences``, or
the fewest whose longest context stays within the model's ``max_position_embeddings``) and the longest context
each can have. Then it runs the ``devmem`` command, as a user would, for that (context, sequences) and for one
block more per sequence, and records both exit codes. Goal: 0 for the first, 1 for the second.

``--kv-bytes N`` (a KV budget an engine allocated) also records the tokens the planner puts in those bytes, to
set beside the engine's own block count. Activation memory comes from profiling, not from the config: give the
engine's with ``--activation-peak``.

Usage: python benchmarks/fit_check.py --model DIR [--utilization 0.9] [--sequences N] [--out DIR_OR_FILE.json]
       python benchmarks/fit_check.py --quick      # a tiny Llama config, at utilization 0.01 (CPU-sized)
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

import devmem
from common import format_table, machine, write_outputs
from devmem.capacity import DEFAULT_BLOCK_SIZE, longest_context, plan_for_model, tokens_in_pool
from devmem.models import load_model

#: A Llama-architecture config small enough for any host: 2 layers x 2 x 2 KV heads x 16 x 4 B = 512 B per token.
TINY_LLAMA = {"architectures": ["LlamaForCausalLM"], "hidden_size": 64, "intermediate_size": 128,
              "max_position_embeddings": 4096, "model_type": "llama", "num_attention_heads": 4,
              "num_hidden_layers": 2, "num_key_value_heads": 2, "tie_word_embeddings": False,
              "torch_dtype": "float32", "vocab_size": 256}


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", default=None, help="model folder (config.json); --quick writes a tiny one")
    p.add_argument("--quick", action="store_true", help="a tiny Llama config at utilization 0.01")
    p.add_argument("--utilization", type=float, default=None, help="default 0.9 (0.01 with --quick)")
    p.add_argument("--sequences", type=int, default=None,
                   help="sequences at once (default: the fewest whose longest context fits the model's maximum)")
    p.add_argument("--device", type=int, default=0)
    p.add_argument("--block-size", type=int, default=DEFAULT_BLOCK_SIZE)
    p.add_argument("--activation-peak", type=devmem.parse_size, default=0, help="bytes, from the engine's profile")
    p.add_argument("--kv-bytes", type=devmem.parse_size, default=None, help="an engine's KV budget to convert")
    p.add_argument("--out", default=None, help="a .json file, or a folder to write fit_check.json/.txt into")
    args = p.parse_args(argv)
    if args.model is None and not args.quick:
        p.error("give --model DIR, or --quick for a tiny Llama config")
    return args


def devmem_command(*args: str) -> dict[str, Any]:
    """``python -m devmem ARGS --json`` in a fresh process: its exit code and its JSON output."""
    argv = [sys.executable, "-m", "devmem", *args, "--json"]
    done = subprocess.run(argv, capture_output=True, text=True, env=dict(os.environ), timeout=120)
    try:
        output = json.loads(done.stdout)
    except json.JSONDecodeError:
        output = None
    return {"argv": ["devmem", *args, "--json"], "exit_code": done.returncode, "output": output,
            "stderr": done.stderr[-2000:]}


def fewest_sequences(model: Any, kv_bytes: int, block_size: int) -> int:
    """The fewest sequences whose longest context is within the model's max_position_embeddings (1 without one)."""
    if model.max_context is None:
        return 1
    sequences = max(1, math.ceil(tokens_in_pool(model, kv_bytes, block_size) / model.max_context))
    while (longest_context(model, kv_bytes, sequences, block_size) or math.inf) > model.max_context:
        sequences += 1
    return sequences


def render(result: dict[str, Any]) -> str:
    m, plan = result["machine"], result["plan"]
    head = (f"# fit check on {m['device_name']} ({m['platform']}), total {m['total']} B, utilization "
            f"{result['utilization']}: {result['model']['model_type']}, {result['model']['kv_bytes_per_token']} B per "
            f"token, KV budget {plan['kv_cache_bytes']} B = {plan['num_blocks']} blocks = {plan['tokens']} tokens")
    rows = [[r["what"], r["context"], r["sequences"], r["exit_code"], r["expected"]] for r in result["runs"]]
    lines = [head, format_table(["target", "context", "sequences", "exit code", "expected"], rows)]
    if result.get("engine_kv_bytes") is not None:
        lines.append(f"engine KV budget {result['engine_kv_bytes']} B holds {result['planner_tokens_for_engine']} "
                     "tokens by the planner")
    lines.append(f"goal met: {result['goal_met']}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> dict[str, Any]:
    args = parse_args(argv)
    utilization = args.utilization if args.utilization is not None else (0.01 if args.quick else 0.9)
    with tempfile.TemporaryDirectory(prefix="devmem-fit-check-") as scratch:
        folder = args.model
        if folder is None:
            folder = Path(scratch) / "tiny-llama"
            folder.mkdir()
            (folder / "config.json").write_text(json.dumps(TINY_LLAMA))
        folder = str(folder)
        platform = devmem.current_platform()
        info = platform.device_memory_info(args.device)
        model = load_model(folder)
        plan = plan_for_model(model, block_size=args.block_size, total=info.total, utilization=utilization,
                              activation_peak=args.activation_peak)
        sequences = args.sequences or fewest_sequences(model, plan.kv_cache_bytes, args.block_size)
        context = longest_context(model, plan.kv_cache_bytes, sequences, args.block_size)
        if not context:
            raise SystemExit(f"the KV budget of {plan.kv_cache_bytes} B holds no block for {sequences} sequence(s)")
        common = ["--model", folder, "--utilization", str(utilization), "--device", str(args.device),
                  "--block-size", str(args.block_size), "--activation-peak", str(args.activation_peak)]
        runs = []
        targets = (("just fits", context, 0), ("one block more per sequence", context + args.block_size, 1))
        for what, ctx, expected in targets:
            run = devmem_command("fit", *common, "--context", str(ctx), "--sequences", str(sequences))
            runs.append({"what": what, "context": ctx, "sequences": sequences, "expected": expected, **run})
        planned = devmem_command("plan", "--model", folder, "--utilization", str(utilization), "--device",
                                 str(args.device), "--block-size", str(args.block_size), "--activation-peak",
                                 str(args.activation_peak))
    result = {
        "benchmark": "fit_check", "command": ["python", "benchmarks/fit_check.py",
                                              *(argv if argv is not None else sys.argv[1:])],
        "machine": machine(platform, args.device), "utilization": utilization, "model_dir": args.model,
        "model": model.as_dict(),
        "plan": {"kv_cache_bytes": plan.kv_cache_bytes, "num_blocks": plan.num_blocks, "block_bytes": plan.block_bytes,
                 "tokens": tokens_in_pool(model, plan.kv_cache_bytes, args.block_size)},
        "devmem_plan": planned, "runs": runs,
        "engine_kv_bytes": args.kv_bytes,
        "planner_tokens_for_engine": None if args.kv_bytes is None else tokens_in_pool(model, args.kv_bytes,
                                                                                        args.block_size),
        "goal_met": [r["exit_code"] for r in runs] == [0, 1],
    }
    text = render(result)
    print(text)
    for path in write_outputs(args.out, "fit_check", result, text):
        print(f"wrote {path}")
    return result


if __name__ == "__main__":
    main()
