"""The planner's tokens against an engine built from the config: dense, sliding-window and hybrid.

For three of the published configs in examples/configs (Qwen3-8B dense, gpt-oss-20b with 128-token sliding windows,
Qwen3-Next-80B-A3B with gated-delta-net linear attention), with fewer layers and a smaller hidden size (what the
KV cache holds per layer is the published shape: heads, KV heads, head dims, windows, linear-attention dims):

1. the planner (``devmem.planner.models``, ``devmem.planner.capacity``) sizes a pinned KV budget (``--budget``)
   into blocks, and
   lays it out as vLLM does (``devmem.planner.engine_layout``): its tokens ("GPU KV cache size"), blocks and sequences;
2. the engine builds the model with random weights in bf16 (HF transformers, no download; fp32 on a CPU, its cache
   counted in bf16 elements), runs a prompt through it
   and reads every layer's cache tensors from the transformers cache: the K and V bytes per token of each attention
   layer (a sliding layer must hold at most its window) and the recurrent state of each linear-attention layer,
   kept as vLLM keeps it: the convolution state's ``kernel - 1`` columns (transformers keeps ``kernel``), in the
   model's dtype (transformers keeps the recurrent state in float32; both figures are recorded);
3. from those measured figures alone it lays the same budget out by vLLM's rules (one page size for every layer,
   the attention block raised to hold the recurrent state, layers grouped by kind with padding), allocates the
   ``group size`` tensors of ``num_blocks`` pages on the device, and serves ``--context``-token sequences: each
   takes its blocks from the one pool (every block of a full group, its window in a sliding group, one block in a
   recurrent group), written with the real K/V bytes of the prompt, until the pool is empty.

Goal, per architecture: the measured bytes per token and state per sequence equal the planner's; the engine's
blocks and the tokens it would log equal the planner's; the sequences it served equal the planner's count in that
layout; the allocation, read from the driver, is within the budget (plus the caching allocator's 2 MiB
rounding of each tensor). On the cpu platform (``--smoke``): smaller
shapes, a 64 MiB budget and 512-token sequences, host memory as the device.

Usage: python benchmarks/planner_vs_engine.py [--budget 16GiB] [--context 32768] [--prompt 1024] [--out DIR]
       python benchmarks/planner_vs_engine.py --smoke [--out DIR]
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from common import ROOT, format_table, machine, mib, on_accelerator, write_outputs

import devmem
from devmem.planner.capacity import DEFAULT_BLOCK_SIZE, capacity, plan_for_model
from devmem.planner.models import ModelMemory
from devmem.units import parse_size

CONFIGS = ROOT / "examples" / "configs"
#: The served dtype's bytes per element (bf16): cache tensors are counted in it (on a CPU the model runs in fp32).
SERVED_BYTES = 2
#: (architecture, published config, what is made smaller: layers, hidden size, experts, vocabulary).
ARCHITECTURES = (
    ("dense", "qwen3-8b.json", {"num_hidden_layers": 4, "intermediate_size": 1024}),
    (
        "sliding-window",
        "gpt-oss-20b.json",
        {
            "num_hidden_layers": 4,
            "layer_types": ["sliding_attention", "full_attention"] * 2,
            "intermediate_size": 512,
            "num_local_experts": 4,
        },
    ),
    (
        "hybrid",
        "qwen3-next-80b-a3b.json",
        {
            "num_hidden_layers": 8,
            "intermediate_size": 512,
            "moe_intermediate_size": 128,
            "shared_expert_intermediate_size": 128,
            "num_experts": 16,
        },
    ),
)


def small_config(name: str, overrides: dict[str, Any], hidden: int) -> dict[str, Any]:
    """The published config with fewer layers and a smaller hidden size; the cache's per-layer shape unchanged."""
    config = {**json.loads((CONFIGS / name).read_text()), **overrides, "hidden_size": hidden, "vocab_size": 4096}
    config.pop("quantization_config", None)  # random weights in bf16
    config.update({"pad_token_id": 0, "bos_token_id": 0, "eos_token_id": 0, "torch_dtype": "bfloat16"})
    return config


def _cdiv(a: int, b: int) -> int:
    return -(-a // b)


def measure_cache(config: dict[str, Any], device: str, prompt: int) -> dict[str, Any]:
    """Build the model (random weights, bf16), run ``prompt`` tokens through it and read its cache, layer by layer."""
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM

    hf_config = AutoConfig.for_model(config["model_type"], **{k: v for k, v in config.items() if k != "model_type"})
    dtype = torch.bfloat16 if device == "cuda" else torch.float32  # bf16 kernels are slow on a CPU
    model = AutoModelForCausalLM.from_config(hf_config, dtype=dtype).to(device).eval()
    ids = torch.randint(0, config["vocab_size"], (1, prompt), device=device)
    with torch.no_grad():
        cache = model(ids, use_cache=True).past_key_values
    layers = []
    for index, kind in enumerate(hf_config.layer_types):
        keys, values, conv, state = _layer_tensors(cache, index)
        if kind in ("full_attention", "sliding_attention"):
            held = keys.shape[-2]
            per_token = (keys.numel() + values.numel()) * SERVED_BYTES // held
            sample = keys[0, 0].to(torch.bfloat16)
            layers.append({"kind": kind, "tokens_held": held, "bytes_per_token": per_token, "sample": sample})
            continue
        elements = sum(t.numel() * (t.shape[-1] - 1) // t.shape[-1] for t in conv) + sum(t.numel() for t in state)
        layers.append(
            {
                "kind": kind,
                "state_bytes": elements * SERVED_BYTES,  # as vLLM keeps it (auto: the model's dtype)
                "transformers_state_bytes": sum(t.numel() * t.element_size() for t in [*conv, *state]),
            }
        )
    weights = sum(p.numel() * p.element_size() for p in model.parameters())
    del model
    return {"layers": layers, "weights_bytes": weights}


def _tensors(holder: Any) -> list[Any]:
    if holder is None or hasattr(holder, "numel"):
        return [] if holder is None or not holder.numel() else [holder]
    values = holder.values() if isinstance(holder, dict) else holder
    return [t for t in values if t is not None and hasattr(t, "numel") and t.numel()]


def _layer_tensors(cache: Any, index: int) -> tuple[Any, Any, list[Any], list[Any]]:
    """``(keys, values, conv states, recurrent states)`` of layer ``index`` in a transformers cache: the per-layer
    objects of transformers 5 (``cache.layers``), or the lists of the older hybrid caches (``key_cache``)."""
    if hasattr(cache, "layers"):
        layer = cache.layers[index]
        return (
            getattr(layer, "keys", None),
            getattr(layer, "values", None),
            _tensors(getattr(layer, "conv_states", None)),
            _tensors(getattr(layer, "recurrent_states", None)),
        )
    return (
        cache.key_cache[index],
        cache.value_cache[index],
        _tensors(cache.conv_states[index]),
        _tensors(cache.recurrent_states[index]),
    )


def engine_layout(layers: list[dict[str, Any]], budget: int, block_size: int) -> dict[str, Any]:
    """vLLM's rules on the measured figures: one page for every layer, kinds grouped, the pool's blocks."""
    per_token = max(layer["bytes_per_token"] for layer in layers if "bytes_per_token" in layer)
    state = max((layer["state_bytes"] for layer in layers if "state_bytes" in layer), default=0)
    if state:
        block_size = max(block_size, 16 * _cdiv(state, 16 * per_token))
    page = block_size * per_token
    counts: dict[str, int] = {}
    for layer in layers:
        counts[layer["kind"]] = counts.get(layer["kind"], 0) + 1
    fewest, most = min(counts.values()), max(counts.values())
    group_size = most if len(counts) == 1 or most < fewest * 1.25 else fewest
    groups = [(kind, _cdiv(n, group_size)) for kind, n in counts.items()]
    return {
        "block_size": block_size,
        "page_bytes": page,
        "group_size": group_size,
        "groups": groups,
        "num_blocks": budget // page // group_size,
    }


def serve(layout: dict[str, Any], measured: dict[str, Any], window: int | None, context: int, device: str) -> dict:
    """Allocate the pool and admit ``context``-token sequences until it is empty; the driver's footprint."""
    import torch

    sync = torch.cuda.synchronize if device == "cuda" else (lambda: None)
    free_before = torch.cuda.mem_get_info()[0] if device == "cuda" else None
    pool = [
        torch.empty((layout["num_blocks"], layout["page_bytes"]), dtype=torch.uint8, device=device)
        for _ in range(layout["group_size"])
    ]
    sync()
    footprint = None if free_before is None else free_before - torch.cuda.mem_get_info()[0]
    size = layout["block_size"]
    need = {
        "full_attention": _cdiv(context, size),
        "sliding_attention": min(_cdiv(context, size), _cdiv(window or 0, size) + 1),
        "linear_attention": 1,
    }
    sample = next(layer["sample"] for layer in measured["layers"] if "sample" in layer)
    payload = sample.reshape(-1).view(torch.uint8).repeat(_cdiv(layout["page_bytes"], sample.numel() * 2))
    payload = payload[: layout["page_bytes"]]
    free, served = layout["num_blocks"], 0
    per_sequence = sum(need[kind] * count for kind, count in layout["groups"])
    while free >= per_sequence:
        blocks = torch.arange(free - per_sequence, free, device=device)
        for tensor in pool:  # every layer slot of every group this sequence's blocks cover
            tensor.index_copy_(0, blocks, payload.expand(len(blocks), -1))
        free -= per_sequence
        served += 1
    sync()
    written = bool(served == 0 or torch.equal(pool[0][layout["num_blocks"] - 1], payload))
    del pool
    return {"served": served, "blocks_per_sequence": per_sequence, "footprint": footprint, "data_written": written}


def run_architecture(arch: str, name: str, overrides: dict, args: argparse.Namespace, device: str) -> dict:
    config = small_config(name, overrides, args.hidden)
    model = ModelMemory.from_config(config)
    plan = plan_for_model(model, pinned_bytes=args.budget, weights=0, block_size=DEFAULT_BLOCK_SIZE)
    planned = capacity(model, plan.kv_cache_bytes, context=args.context)
    vllm = planned.engine
    assert vllm is not None
    measured = measure_cache(config, device, args.prompt)
    layers = measured["layers"]
    attention = [layer for layer in layers if "bytes_per_token" in layer]
    recurrent = [layer for layer in layers if "state_bytes" in layer]
    layout = engine_layout(layers, plan.kv_cache_bytes, DEFAULT_BLOCK_SIZE)
    served = serve(layout, measured, model.sliding_window, args.context, device)
    engine_tokens = layout["num_blocks"] // sum(n for _, n in layout["groups"]) * layout["block_size"]
    planner_state = model.state_bytes_per_sequence // max(1, model.recurrent_layers)
    row = {
        "architecture": arch,
        "config": f"examples/configs/{name}",
        "layers": {kind: sum(1 for layer in layers if layer["kind"] == kind) for kind in {x["kind"] for x in layers}},
        "budget": plan.kv_cache_bytes,
        "planner_layer_bytes_per_token": model.kv_layer_bytes_per_token,
        "engine_layer_bytes_per_token": sorted({layer["bytes_per_token"] for layer in attention}),
        "planner_state_bytes_per_layer": planner_state,
        "engine_state_bytes_per_layer": sorted({layer["state_bytes"] for layer in recurrent}),
        "sliding_tokens_held": sorted({x["tokens_held"] for x in attention if x["kind"] == "sliding_attention"}),
        "window": model.sliding_window,
        "planner_block_size": vllm.block_size,
        "engine_block_size": layout["block_size"],
        "planner_blocks": vllm.num_blocks,
        "engine_blocks": layout["num_blocks"],
        "planner_tokens": vllm.tokens,
        "engine_tokens": engine_tokens,
        "devmem_tokens": planned.tokens,
        "context": args.context,
        "planner_sequences": vllm.sequences_at(model, args.context),
        "devmem_sequences": planned.sequences_at_context,
        "engine_served": served["served"],
        "data_written": served["data_written"],
        "footprint": served["footprint"],
        "weights_bytes": measured["weights_bytes"],
    }
    row["goal_met"] = bool(
        row["engine_layer_bytes_per_token"] == [row["planner_layer_bytes_per_token"]]
        and row["engine_state_bytes_per_layer"] in ([], [planner_state])
        and all(held <= (model.sliding_window or 0) for held in row["sliding_tokens_held"])
        and (row["planner_blocks"], row["planner_tokens"]) == (row["engine_blocks"], row["engine_tokens"])
        and row["planner_sequences"] == row["engine_served"]
        and row["data_written"]
        and (
            row["footprint"] is None or row["footprint"] <= plan.kv_cache_bytes + layout["group_size"] * 2 * 1024 * 1024
        )
    )
    return row


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--budget", type=parse_size, default=None, help="pinned KV budget (default 16GiB; smoke 64MiB)")
    parser.add_argument("--context", type=int, default=None, help="tokens per served sequence (32768; smoke 512)")
    parser.add_argument("--prompt", type=int, default=None, help="prompt tokens run through the model (1024; 136)")
    parser.add_argument("--hidden", type=int, default=None, help="hidden size of the smaller models (1024; 256)")
    parser.add_argument("--smoke", action="store_true", help="CPU-sized run")
    parser.add_argument("--out", default=None, help="folder (or .json file) for the results")
    args = parser.parse_args(argv)
    platform = devmem.current_platform()
    device = "cuda" if on_accelerator(platform) else "cpu"
    small = args.smoke or device == "cpu"
    args.budget = args.budget or (64 << 20 if small else 16 << 30)
    args.context = args.context or (512 if small else 32768)
    args.prompt = args.prompt or (136 if small else 1024)  # past gpt-oss's 128-token window
    args.hidden = args.hidden or (256 if small else 1024)
    rows = [run_architecture(arch, name, overrides, args, device) for arch, name, overrides in ARCHITECTURES]
    result = {
        "benchmark": "planner_vs_engine",
        "machine": machine(platform, 0),
        "budget": args.budget,
        "context": args.context,
        "rows": rows,
        "goal_met": all(r["goal_met"] for r in rows),
    }
    text = format_table(
        [
            "arch",
            "B/tok/layer",
            "state/layer",
            "blocks plan/eng",
            "tokens plan/eng",
            "seqs plan/served",
            "footprint",
            "goal",
        ],
        [
            (
                r["architecture"],
                f"{r['planner_layer_bytes_per_token']}/{','.join(map(str, r['engine_layer_bytes_per_token']))}",
                f"{r['planner_state_bytes_per_layer']}/{','.join(map(str, r['engine_state_bytes_per_layer'])) or '-'}",
                f"{r['planner_blocks']}/{r['engine_blocks']}",
                f"{r['planner_tokens']}/{r['engine_tokens']}",
                f"{r['planner_sequences']}/{r['engine_served']}",
                mib(r["footprint"]),
                "met" if r["goal_met"] else "NOT met",
            )
            for r in rows
        ],
    )
    print(text)
    write_outputs(args.out, "planner_vs_engine", result, text)
    return result


if __name__ == "__main__":
    sys.exit(0 if main()["goal_met"] else 1)
