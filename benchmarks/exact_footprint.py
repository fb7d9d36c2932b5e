"""Exact footprints: every layout, both allocators, graphs anywhere, and the low-level plan without a layout.

For each allocator (torch's default, ``expandable_segments:True``), one child process runs every configuration in
turn: the shapes of ``--shapes``, built by HF transformers from configs with random bf16 weights (``tinyllama``:
TinyLlama-1.1B's shape, 22 layers, 4 KV heads; ``qwen2``: Qwen2-1.5B's, 28 layers, 2 KV heads, a 151,936-token
vocabulary; ``qwen3``: Qwen3-0.6B's, 28 layers, 8 KV heads of 128, per-head q/k norms, the same vocabulary), u in
``--utilizations``, and

- through ``devmem.EngineMemory``: the cache as devmem's one allocation (``one``) or the engine's own keys and
  values per layer (``kv``, planned with ``KvLayout.per_layer(2)``), decode CUDA graphs (batch 1, 4, 16, 64, 256 in
  one pool) ``off``, captured in ``memory.graphs()`` (``window``), inside the profile window after the forward
  (``profile``), or after the cache exists in ``memory.graphs_after_cache()``, the plan told of them with
  ``GraphsAfterCache``: ``after`` is a first start (no figure stored under its key, no estimate: the first-start
  bound is charged; what capture kept is stored), ``restart`` the next start with that key (charged what was
  stored);
- the low-level path (``low``): ``plan_kv_cache(**profile.plan_inputs(), ...)`` without a layout, then one tensor
  per layer allocated by the engine.

Each configuration creates its ``EngineMemory`` (the baseline) before its model exists, profiles two prefill
passes of ``--batch-tokens``, allocates the planned cache, runs the pass again (and replays a graph) with the cache
in place, and reads this process's device memory from raw NVML. Its footprint is that figure less the one at its
baseline (the first configuration of a process also creates the CUDA context inside its share). Goal:
``0 <= requested - footprint <= max(64 MiB, 0.25 % of requested)``. Beside it, the part of that gap the layout
could not use (``unusable``: the cache's budget less what its whole blocks take, below one more block's rounding:
n equal tensors of 2 MiB-rounded segments grow n x 2 MiB at a time) and whether the rest, what the plan charged
beyond what the engine took, is within the same tolerance (``charged``).
Each row's ``trace`` follows the bytes step by step (after the model, the profile, the graph window, the cache,
a capture after it, the pass with the cache, the replay): NVML's figure beside torch's reserved, allocated and
cached-free bytes per pool, so a footprint over its plan shows the step it grew at.

Usage: python benchmarks/exact_footprint.py [--utilizations 0.1125,0.5,0.9] [--modes low/off,kv/off] [--out DIR]
(an NVIDIA GPU)
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from common import engine_shapes

MiB = 1 << 20
TOLERANCE, TOLERANCE_SHARE = 64 * MiB, 0.0025
SHAPES = {
    "tinyllama": {
        "model_type": "llama",
        "hidden_size": 2048,
        "intermediate_size": 5632,
        "num_hidden_layers": 22,
        "num_attention_heads": 32,
        "num_key_value_heads": 4,
        "vocab_size": 32000,
        "max_position_embeddings": 2048,
    },
    "qwen2": {
        "model_type": "qwen2",
        "hidden_size": 1536,
        "intermediate_size": 8960,
        "num_hidden_layers": 28,
        "num_attention_heads": 12,
        "num_key_value_heads": 2,
        "vocab_size": 151936,
        "max_position_embeddings": 32768,
        "tie_word_embeddings": True,
    },
    "qwen3": {"model_type": "qwen3", **engine_shapes()["qwen3-0.6b"][1]},  # the example engine's Qwen3-0.6B
}
MODES = [
    ("one", "off"),
    ("one", "window"),
    ("one", "profile"),
    ("kv", "off"),
    ("kv", "window"),
    ("kv", "profile"),
    ("low", "off"),
    ("one", "after"),
    ("one", "restart"),
    ("kv", "after"),
    ("kv", "restart"),
]
GRAPH_BATCHES = (256, 64, 16, 4, 1)
_WARMUP_STREAMS: dict[Any, Any] = {}  # the stream graph warm-ups run on, created at the first capture
BLOCK_TOKENS = 16


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--utilizations", default="0.1125,0.5,0.9")
    p.add_argument("--shapes", default="tinyllama,qwen2")
    p.add_argument("--allocators", default="default,expandable")
    p.add_argument("--batch-tokens", type=int, default=8192)
    p.add_argument(
        "--modes",
        default=",".join(f"{layout}/{graphs}" for layout, graphs in MODES),
        help="layout/graphs pairs to run (default: all of them)",
    )
    p.add_argument("--out", default=None, help="a folder for exact_footprint.json/.txt")
    p.add_argument("--render", default=None, help="print the table of an exact_footprint.json")
    p.add_argument("--child", default=None, help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    known = {f"{layout}/{graphs}" for layout, graphs in MODES}
    args.modes = [tuple(m.split("/")) for m in args.modes.split(",")]
    unknown = [f"{layout}/{graphs}" for layout, graphs in args.modes if f"{layout}/{graphs}" not in known]
    if unknown:
        p.error(f"--modes: unknown {', '.join(unknown)}; allowed: {', '.join(sorted(known))}")
    return args


def allocator_state(torch: Any, pynvml: Any, base: int) -> dict[str, int]:
    """This process's memory beside torch's allocator's own figures: NVML's (less the configuration's baseline),
    reserved and allocated, and the cached free bytes per pool (what a pass can take without reserving)."""
    stats = torch.cuda.memory_stats(0)
    state = {"nvml": own_nvml_bytes(pynvml) - base}
    for key in ("reserved_bytes", "allocated_bytes", "inactive_split_bytes"):
        for pool in ("small_pool", "large_pool"):
            state[f"{key.removesuffix('_bytes')}_{pool.removesuffix('_pool')}"] = int(
                stats.get(f"{key}.{pool}.current", 0)
            )
    state["segments"] = int(stats.get("segment.all.current", 0))
    return state


def own_nvml_bytes(pynvml: Any) -> int:
    handle = pynvml.nvmlDeviceGetHandleByIndex(0)
    return sum(
        p.usedGpuMemory or 0 for p in pynvml.nvmlDeviceGetComputeRunningProcesses(handle) if p.pid == os.getpid()
    )


class Run:
    """One configuration in this process."""

    def __init__(self, torch: Any, transformers: Any, shape: str, u: float, layout: str, graphs: str, tokens: int):
        self.t, self.tf, self.shape, self.u, self.layout, self.graphs = torch, transformers, shape, u, layout, graphs
        self.tokens = tokens
        self.dev = torch.device("cuda", 0)

    def build(self) -> Any:
        spec = dict(SHAPES[self.shape])
        config = self.tf.AutoConfig.for_model(spec.pop("model_type"), **spec)
        with self.t.device(self.dev):
            model = self.tf.AutoModelForCausalLM.from_config(config, dtype=self.t.bfloat16)
        return model.eval()

    def forward(self, model: Any) -> None:
        ids = self.t.randint(0, model.config.vocab_size, (8, self.tokens // 8), device=self.dev)
        with self.t.inference_mode():
            model(input_ids=ids, use_cache=False, logits_to_keep=1)
        self.t.cuda.synchronize(self.dev)

    def capture(self, model: Any) -> list[Any]:
        t, graphs, pool = self.t, [], self.t.cuda.graph_pool_handle()
        # one warm-up stream for the process, as engines keep one: torch keeps a cuBLAS workspace per stream that
        # ran a matmul, so a new stream per capture would leave workspaces behind for the next configurations
        if self.dev not in _WARMUP_STREAMS:
            _WARMUP_STREAMS[self.dev] = t.cuda.Stream(self.dev)
        stream = _WARMUP_STREAMS[self.dev]
        with t.inference_mode():
            for bs in GRAPH_BATCHES:
                ids = t.zeros((bs, 1), dtype=t.long, device=self.dev)
                stream.wait_stream(t.cuda.current_stream(self.dev))
                with t.cuda.stream(stream):
                    model(input_ids=ids, use_cache=False, logits_to_keep=1)
                t.cuda.current_stream(self.dev).wait_stream(stream)
                graph = t.cuda.CUDAGraph()
                with t.cuda.graph(graph, pool=pool):
                    logits = model(input_ids=ids, use_cache=False, logits_to_keep=1).logits
                graphs.append((graph, ids, logits))
        t.cuda.synchronize(self.dev)
        return graphs

    def __call__(self, pynvml: Any) -> dict[str, Any]:
        from devmem import EngineMemory, KvLayout
        from devmem.engine.graphs import GRAPHS_KIND, GraphsAfterCache
        from devmem.engine.memory import PROFILE_PASSES
        from devmem.engine.profile_store import ProfileStore
        from devmem.planner import plan_kv_cache

        row: dict[str, Any] = {"shape": self.shape, "u": self.u, "layout": self.layout, "graphs": self.graphs}
        start = time.perf_counter()
        memory = EngineMemory(0, utilization=self.u, reserve=False)
        base = memory.baseline.process or 0
        self.t.empty(1, device=self.dev)
        model = self.build()
        weights = sum(p.numel() * p.element_size() for p in model.parameters())
        graphs: list[Any] = []
        trace = {"model": allocator_state(self.t, pynvml, base)}  # where the bytes went, step by step
        with memory.profile(weights_memory=weights):
            for _ in range(PROFILE_PASSES):
                self.forward(model)
            if self.graphs == "profile":
                graphs = self.capture(model)
        trace["profile"] = allocator_state(self.t, pynvml, base)
        if self.graphs == "window":
            with memory.graphs():
                graphs = self.capture(model)
            trace["graphs"] = allocator_state(self.t, pynvml, base)
        declared = None
        if self.graphs in ("after", "restart"):  # one key a shape, layout and allocator: its restart reads it
            store = ProfileStore(os.environ.get("DEVMEM_PROFILE_DIR") or Path.home() / ".cache/devmem-benchmark")
            key = {"shape": self.shape, "layout": self.layout, "allocator": os.environ.get("PYTORCH_CUDA_ALLOC_CONF")}
            if self.graphs == "after":  # a first start: nothing stored under the key
                store.path(GRAPHS_KIND, key).unlink(missing_ok=True)
            declared = GraphsAfterCache(store=store, key=key)
        cfg = model.config
        layers = cfg.num_hidden_layers
        head = getattr(cfg, "head_dim", None) or cfg.hidden_size // cfg.num_attention_heads
        page = BLOCK_TOKENS * cfg.num_key_value_heads * head * 2 * 2  # K and V, bf16
        if self.layout == "low":
            plan = plan_kv_cache(
                **memory.profile_result.plan_inputs(),
                page_size_bytes=page,
                num_layers=layers,
                total=memory.baseline.total,
                utilization=self.u,
            )
            memory.release_allocator_cache()
            cache = [self.t.zeros((plan.num_blocks, page), dtype=self.t.uint8, device=self.dev) for _ in range(layers)]
        elif self.layout == "kv":
            plan = memory.plan(page_size_bytes=page, num_layers=layers, layout=KvLayout.per_layer(2), graphs=declared)
            memory.release_allocator_cache()
            cache = [
                self.t.zeros((plan.num_blocks, page // 2), dtype=self.t.uint8, device=self.dev)
                for _ in range(2 * layers)
            ]
        else:
            plan = memory.plan(page_size_bytes=page, num_layers=layers, graphs=declared)
            cache = [memory.allocate().buffer]
        trace["cache"] = allocator_state(self.t, pynvml, base)
        if declared is not None:
            with memory.graphs_after_cache():
                graphs = self.capture(model)
            trace["graphs_after_cache"] = allocator_state(self.t, pynvml, base)
        self.forward(model)
        trace["forward"] = allocator_state(self.t, pynvml, base)
        if graphs:  # replayed through the list: a loop variable would keep the pool alive past this run
            graphs[-1][0].replay()
        self.t.cuda.synchronize(self.dev)
        trace["replay"] = allocator_state(self.t, pynvml, base)
        footprint = trace["replay"]["nvml"]
        requested = memory.requested
        profile = memory.profile_result
        row.update(
            requested=requested,
            footprint=footprint,
            gap=requested - footprint,
            tolerance=max(TOLERANCE, int(requested * TOLERANCE_SHARE)),
            num_blocks=plan.num_blocks,
            kv_cache_bytes=plan.kv_cache_bytes,
            kv_allocated=sum(c.numel() for c in cache),
            kv_reserved=cache_reserved(len(cache), sum(c.numel() for c in cache), profile.allocator),
            kv_reserved_one_more_block=cache_reserved(
                len(cache), sum(c.numel() for c in cache) + page * layers, profile.allocator
            ),
            layout_text=plan.layout,
            transient=plan.breakdown.get("transient_peak"),
            graph_capture=plan.breakdown.get("graph_capture"),
            graphs_after_cache=memory.as_dict()["graphs_after_cache"],
            transient_rule=profile.transient_rule,
            kept_after_peak=profile.kept_after_peak_bytes,
            transient_reach=profile.transient_reach_bytes,
            consumed=profile.total_consumed,
            non_torch=profile.non_torch_increase,
            transient_note=next((n for n in profile.notes if n.startswith("transient headroom")), ""),
            baseline_process=base,
            seconds=round(time.perf_counter() - start, 2),
            trace=trace,
        )
        # what the layout could not use: less than one more block's rounding (equal tensors grow together)
        row["unusable"] = row["kv_cache_bytes"] - row["kv_reserved"]
        row["step"] = row["kv_reserved_one_more_block"] - row["kv_reserved"]
        row["goal_met"] = 0 <= row["gap"] <= row["tolerance"]
        row["charge_met"] = row["gap"] >= 0 and row["gap"] - row["unusable"] <= row["tolerance"]
        del cache, graphs, model, memory, plan
        gc.collect()
        self.t.cuda.synchronize(self.dev)
        self.t.cuda.empty_cache()
        return row


def cache_reserved(tensors: int, nbytes: int, allocator: str | None) -> int:
    """What ``tensors`` equal tensors of ``nbytes`` in all take from torch's allocator (devmem's own model)."""
    from devmem.planner.rounding import Rounding

    return Rounding(tensors, allocator).reserved(nbytes)


def child(args: argparse.Namespace) -> None:
    if args.child == "expandable":
        os.environ["PYTORCH_CUDA_ALLOC_CONF"] = "expandable_segments:True"
    import pynvml
    import torch
    import transformers

    pynvml.nvmlInit()
    for u in (float(x) for x in args.utilizations.split(",")):
        for shape in args.shapes.split(","):
            for layout, graphs in args.modes:
                try:
                    row = Run(torch, transformers, shape, u, layout, graphs, args.batch_tokens)(pynvml)
                except Exception as exc:  # reported in the row, and the next configuration runs
                    row = {"shape": shape, "u": u, "layout": layout, "graphs": graphs, "failure": repr(exc)[:300]}
                    gc.collect()
                    torch.cuda.empty_cache()
                print(json.dumps({"allocator": args.child, **row}), flush=True)


def render(rows: list[dict[str, Any]]) -> str:
    head = (
        "allocator   shape      u       layout graphs   requested MiB  footprint MiB  requested-footprint MiB  "
        "unusable MiB  tolerance MiB  met  charged"
    )
    lines = [head, "-" * len(head)]
    for r in rows:
        if "failure" in r:
            lines.append(
                f"{r['allocator']:<11} {r['shape']:<10} {r['u']:<7} {r['layout']:<6} {r['graphs']:<8} "
                f"FAILED {r['failure']}"
            )
            continue
        lines.append(
            f"{r['allocator']:<11} {r['shape']:<10} {r['u']:<7} {r['layout']:<6} {r['graphs']:<8} "
            f"{r['requested'] / MiB:>13.1f}  {r['footprint'] / MiB:>13.1f}  {r['gap'] / MiB:>23.1f}  "
            f"{r.get('unusable', 0) / MiB:>12.1f}  {r['tolerance'] / MiB:>13.1f}  "
            f"{'yes' if r['goal_met'] else 'NO':<3}  {'yes' if r.get('charge_met', r['goal_met']) else 'NO'}"
        )
    ok = [r for r in rows if "failure" not in r]
    if ok:
        lines.append("")
        lines.append(
            f"{len(ok)} configurations measured, {len(rows) - len(ok)} failed; goal met in "
            f"{sum(r['goal_met'] for r in ok)}, the charge within tolerance in "
            f"{sum(r.get('charge_met', r['goal_met']) for r in ok)}; most over the request "
            f"{max(-r['gap'] for r in ok) / MiB:.1f} MiB (negative: never over), most under "
            f"{max(r['gap'] for r in ok) / MiB:.1f} MiB, most charged beyond the layout's unusable part "
            f"{max(r['gap'] - r.get('unusable', 0) for r in ok) / MiB:.1f} MiB"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    if args.render:  # the table again from a result's rows
        print(render(json.loads(Path(args.render).read_text())["rows"]))
        return
    if args.child:
        child(args)
        return
    rows: list[dict[str, Any]] = []
    out = Path(args.out) if args.out else None
    if out:
        out.mkdir(parents=True, exist_ok=True)
    passed = [a for a in (argv if argv is not None else sys.argv[1:])]
    for allocator in args.allocators.split(","):
        command = [
            sys.executable,
            __file__,
            *[a for a in passed if a != "--out" and a != args.out],
            "--child",
            allocator,
        ]
        proc = subprocess.Popen(command, stdout=subprocess.PIPE, text=True)
        for line in proc.stdout or ():
            if line.startswith("{"):
                rows.append(json.loads(line))
                if out:
                    (out / "exact_footprint.jsonl").open("a").write(line)
        proc.wait()
    text = render(rows)
    print(text)
    if out:
        result = {
            "benchmark": "exact_footprint",
            "command": ["python", "benchmarks/exact_footprint.py", *passed],
            "rows": rows,
            "goal_met": bool(rows) and all(r.get("goal_met") for r in rows),
        }
        (out / "exact_footprint.json").write_text(json.dumps(result, indent=1) + "\n")
        (out / "exact_footprint.txt").write_text(text + "\n")


if __name__ == "__main__":
    main()
