"""transformers' continuous batching, stock sizing against devmem sizing: N = 1, 2, 4 engines started together.

Every engine is a fresh process (a child of the benchmarks' forkserver) that waits for a shared start time, takes
its snapshot, creates the CUDA context and a Llama-architecture model with random weights from a config (no
download; on the GPU TinyLlama's shape, 22 layers, hidden 2048, 4 KV heads, 1.1B parameters in bf16), then serves
``--prompts`` prompts of ``--prompt-tokens`` tokens, ``--new-tokens`` new tokens each, with ``model.generate_batch``:

- ``stock``: ``ContinuousBatchingConfig()``, transformers sizes its cache from the device's free memory;
- ``devmem``: the config from ``devmem.integrations.transformers.size_continuous_batching`` at u = share / N.

Per engine: the blocks it got, whether it served every request (every request got all its new tokens), generated
tokens per second, and its footprint as raw NVML lists its PID (``nvmlDeviceGetComputeRunningProcesses``): the
peak sampled while it served and the figure once it served, its cache still alive (the manager is kept), against
``ceil(u * total)``. devmem's engines are also run alone at each u, the reference for their block counts, and
alone at share / 4 with CUDA graph warm-up on (the run alone at that u has it off, transformers' default with
sdpa). An engine that crashes (out of memory included) is recorded as crashed. Every process has a time limit
and no phase starts once ``--budget`` seconds have passed.

devmem's goal: every devmem engine serves every request, its block count within 0.1 % of the run alone at its u,
its peak footprint <= ceil(u * total). On the cpu platform (``--quick``): a tiny config, N = 2, host memory as the
device (footprints are RSS growth since the snapshot) and a small request; stock engines there get a
``max_memory_percent`` that requests the same bytes, as a full-size stock cache would fill the host.

Usage: python benchmarks/transformers_cb.py [--counts 1,2,4] [--share 0.9] [--out DIR] [--quick]
"""

from __future__ import annotations

import argparse
import importlib.metadata
import logging
import multiprocessing
import os
import sys
import threading
import time
import traceback
from typing import Any

from common import (
    MiB,
    failure_text,
    format_table,
    gib,
    machine,
    mib,
    on_accelerator,
    same_budget,
    settle,
    spawn,
    utilization_for,
    write_outputs,
)

import devmem

TINYLLAMA = {
    "hidden_size": 2048,
    "intermediate_size": 5632,
    "num_hidden_layers": 22,
    "num_attention_heads": 32,
    "num_key_value_heads": 4,
    "vocab_size": 32000,
    "max_position_embeddings": 4096,
}
TINY = {
    "hidden_size": 64,
    "intermediate_size": 128,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "vocab_size": 256,
    "max_position_embeddings": 512,
}
GPU = {
    "share": 0.9,
    "counts": "1,2,4",
    "model": TINYLLAMA,
    "dtype": "bfloat16",
    "prompts": 64,
    "prompt_tokens": 256,
    "new_tokens": 64,
    "cb": {},
    "hold": 3.0,
    "timeout": 150.0,
    "budget": 330.0,
    "slack": 1024 * MiB,
    "settle": 30.0,
}
CPU = {
    "request": 192 * MiB,
    "counts": "2",
    "model": TINY,
    "dtype": "float32",
    "prompts": 8,
    "prompt_tokens": 24,
    "new_tokens": 6,
    "cb": {"max_batch_tokens": 64, "block_tokens": 16},
    "hold": 0.3,
    "timeout": 90.0,
    "budget": 240.0,
    "slack": 256 * MiB,
    "settle": 1.0,
}
#: Block counts within this share of the run alone count as the same on a GPU (the issue's goal); on the cpu
#: platform, within ``same_budget`` bytes of blocks (RSS moves by a few MiB with glibc's arenas).
SAME_BLOCKS = 0.001
#: Seconds between footprint samples while an engine serves.
SAMPLE_S = 0.02

_PRELOAD = [
    "torch",
    "devmem",
    "transformers",
    "transformers.models.llama.modeling_llama",
    "transformers.generation.continuous_batching",
    "devmem.integrations.transformers",
    "pynvml",
]


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--device", type=int, default=0)
    p.add_argument("--counts", default=None, help="engine counts, comma-separated (GPU: 1,2,4)")
    p.add_argument("--share", type=float, default=None, help="utilization the N devmem engines share (GPU: 0.9)")
    p.add_argument("--prompts", type=int, default=None)
    p.add_argument("--prompt-tokens", type=int, default=None)
    p.add_argument("--new-tokens", type=int, default=None)
    p.add_argument("--no-graphs-run", action="store_true", help="skip the run with CUDA graph warm-up on")
    p.add_argument("--budget", type=float, default=None, help="seconds after which no phase starts (GPU: 330)")
    p.add_argument("--quick", action="store_true", help="cpu platform: a tiny config, N = 2 (for CI)")
    p.add_argument("--out", default=None, help="a .json file, or a folder to write transformers_cb.json/.txt into")
    args = p.parse_args(argv)
    if args.share is not None and not 0 < args.share <= 1:
        p.error(f"--share must be in (0, 1], got {args.share}")
    for name in ("prompts", "prompt_tokens", "new_tokens"):
        if getattr(args, name) is not None and getattr(args, name) <= 0:
            p.error(f"--{name.replace('_', '-')} must be > 0, got {getattr(args, name)}")
    return args


class Footprint:
    """This process's device memory as the driver lists it, sampled in a thread: raw NVML for its PID on a GPU,
    RSS on the cpu platform. ``peak`` is the largest sample, ``read()`` one reading now."""

    def __init__(self, gpu: bool):
        self.gpu, self.peak, self.source = gpu, None, "nvmlDeviceGetComputeRunningProcesses" if gpu else "RSS"
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        if gpu:
            import pynvml

            pynvml.nvmlInit()
            self._nvml = pynvml
            self._handles = [pynvml.nvmlDeviceGetHandleByIndex(i) for i in range(pynvml.nvmlDeviceGetCount())]

    def read(self) -> int | None:
        if not self.gpu:
            import psutil

            return psutil.Process().memory_info().rss
        pid = os.getpid()
        used = [
            p.usedGpuMemory
            for h in self._handles
            for p in self._nvml.nvmlDeviceGetComputeRunningProcesses(h)
            if p.pid == pid and p.usedGpuMemory is not None
        ]
        return sum(used) if used else None

    def _sample(self) -> None:
        while not self._stop.wait(SAMPLE_S):
            value = self.read()
            if value is not None and (self.peak is None or value > self.peak):
                self.peak = value

    def __enter__(self) -> Footprint:
        self._thread = threading.Thread(target=self._sample, daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()
        value = self.read()
        if value is not None and (self.peak is None or value > self.peak):
            self.peak = value

    def close(self) -> None:
        if self.gpu:
            self._nvml.nvmlShutdown()


def _is_oom(torch: Any, exc: BaseException) -> bool:
    return isinstance(exc, (torch.OutOfMemoryError, MemoryError)) or "out of memory" in str(exc).lower()


def _prompts(count: int, tokens: int, vocab: int) -> list[list[int]]:
    return [[(i * 7919 + j * 31) % (vocab - 2) + 1 for j in range(tokens)] for i in range(count)]


def _cb_config(transformers: Any, spec: dict[str, Any]) -> Any:
    fields = dict(spec["cb"])
    tokens = fields.pop("block_tokens", None)
    if tokens is not None:
        accepted = transformers.ContinuousBatchingConfig.__dataclass_fields__
        fields["page_size" if "page_size" in accepted else "block_size"] = tokens
    if spec["graphs"] is not None:
        fields["use_cuda_graph"] = spec["graphs"]
    if spec["stock_percent"] is not None:
        fields["max_memory_percent"] = spec["stock_percent"]
    return transformers.ContinuousBatchingConfig(**fields)


def serve(spec: dict[str, Any]) -> dict[str, Any]:
    """One engine: wait for the start, snapshot, context, model, (devmem sizing), serve, read the footprint."""
    import torch
    import transformers

    from devmem.integrations.transformers import cuda_graph_flags, size_continuous_batching

    logging.getLogger("ContinuousBatchingLogger").setLevel(logging.ERROR)
    out: dict[str, Any] = {
        **{k: spec[k] for k in ("mode", "n", "engine", "utilization", "graphs")},
        "pid": os.getpid(),
        "ok": False,
        "failure": None,
        "timings_s": {},
    }
    platform = devmem.current_platform()
    gpu = on_accelerator(platform)
    device = torch.device("cuda", spec["device"]) if gpu else torch.device("cpu")
    time.sleep(max(0.0, spec["start_at"] - time.time()))
    out["late_s"] = max(0.0, time.time() - spec["start_at"])
    stage, began = "startup", time.perf_counter()
    footprint = Footprint(gpu)
    model = None
    try:
        baseline = devmem.MemorySnapshot.measure(spec["device"], platform)
        out.update(total=baseline.total, free_at_start=baseline.free)
        if spec["utilization"] is not None:
            out["requested"] = devmem.requested_memory(baseline.total, spec["utilization"])
            devmem.check_startup_memory(baseline, out["requested"], platform)
        start_figure = 0 if gpu else footprint.read()  # no CUDA context yet: NVML lists nothing for this PID
        if gpu:
            torch.cuda.set_device(device)
            torch.empty(1, device=device)
        stage = "model"
        dtype = getattr(torch, spec["dtype"])
        torch.manual_seed(0)
        default = torch.get_default_dtype()
        torch.set_default_dtype(dtype)
        try:
            with torch.device(device):
                model = transformers.LlamaForCausalLM(transformers.LlamaConfig(**spec["model"])).eval()
        finally:
            torch.set_default_dtype(default)
        out["timings_s"]["model"] = time.perf_counter() - began
        generation = transformers.GenerationConfig(
            max_new_tokens=spec["new_tokens"], do_sample=False, eos_token_id=-1, pad_token_id=0
        )
        config = _cb_config(transformers, spec)
        if spec["mode"] == "devmem":
            stage, t = "size", time.perf_counter()
            sized = size_continuous_batching(
                model,
                utilization=spec["utilization"],
                config=config,
                generation_config=generation,
                baseline=baseline,
                platform=platform,
            )
            out["timings_s"]["size"] = time.perf_counter() - t
            out.update(sizing=sized.as_dict(), explain=sized.explain())
            config = sized.config
        stage, t = "serve", time.perf_counter()
        prompts = _prompts(spec["prompts"], spec["prompt_tokens"], spec["model"]["vocab_size"])
        with footprint:
            results = model.generate_batch(
                prompts, generation_config=generation, continuous_batching_config=config, persistent_manager=True
            )
            seconds = time.perf_counter() - t
            manager = getattr(model, "_cached_continuous_batching_manager", None)
            if manager is not None:
                resolved = manager.continuous_batching_config
                out.update(
                    blocks=resolved.num_blocks,
                    max_batch_tokens=resolved.max_batch_tokens,
                    cuda_graphs=list(cuda_graph_flags(resolved.use_cuda_graph)),
                )
            after = footprint.read()
            out["footprint_after"] = None if after is None else after - start_figure
            time.sleep(spec["hold"])
        out["footprint_peak"] = None if footprint.peak is None else footprint.peak - start_figure
        out["footprint_source"] = footprint.source
        out["timings_s"]["serve"] = seconds
        errors = [r.error for r in results.values() if r.error is not None]
        tokens = [len(r.generated_tokens) for r in results.values()]
        out.update(
            requests=len(prompts),
            finished=len(results),
            generated_tokens=sum(tokens),
            tokens_per_s=sum(tokens) / seconds if seconds > 0 else None,
            served=len(results) == len(prompts) and not errors and all(n == spec["new_tokens"] for n in tokens),
        )
        out["ok"] = out["served"]
        if not out["served"]:
            out["failure"] = {
                "stage": "serve",
                "kind": "not_served",
                "message": (
                    errors[0]
                    if errors
                    else f"{len(results)}/{len(prompts)} requests finished, new tokens {sorted(set(tokens))}"
                )[:2000],
            }
    except devmem.NotEnoughMemoryError as exc:
        out["failure"] = {"stage": stage, "kind": "not_enough_memory", "message": str(exc)[:2000]}
    except Exception as exc:  # an engine that crashes is a result of the benchmark, not its failure
        kind = "out_of_memory" if _is_oom(torch, exc) else "crash"
        out["failure"] = {"stage": stage, "kind": kind, "message": traceback.format_exc()[-3000:]}
    finally:
        if model is not None and getattr(model, "_cached_continuous_batching_manager", None) is not None:
            model.destroy_cached_continuous_batching_manager()
        footprint.close()
    out["timings_s"]["total"] = time.perf_counter() - began
    return out


def _engine(conn: Any, spec: dict[str, Any]) -> None:
    try:
        result = serve(spec)
    except BaseException:  # reported to the parent, which records it as this engine's failure
        result = {
            **{k: spec[k] for k in ("mode", "n", "engine", "utilization", "graphs")},
            "ok": False,
            "failure": {"stage": "engine", "kind": "crash", "message": traceback.format_exc()[-3000:]},
        }
    conn.send(result)
    conn.close()


def _phase(
    name: str,
    mode: str,
    n: int,
    u: float | None,
    graphs: bool | None,
    common: dict[str, Any],
    timeout: float,
    lead: float,
) -> dict[str, Any]:
    start_at = time.time() + lead
    specs = [
        {**common, "mode": mode, "n": n, "engine": i, "utilization": u, "graphs": graphs, "start_at": start_at}
        for i in range(n)
    ]
    began = time.monotonic()
    engines = []
    for spec, (result, code) in zip(specs, spawn(_engine, [(s,) for s in specs], timeout), strict=True):
        if result is None:
            result = {
                **{k: spec[k] for k in ("mode", "n", "engine", "utilization", "graphs")},
                "ok": False,
                "failure": {
                    "stage": "engine",
                    "kind": "died",
                    "message": f"the engine process ended with "
                    f"exit code {code} without a result (time limit {timeout:.0f} s)",
                },
            }
        engines.append(result)
    return {
        "phase": name,
        "mode": mode,
        "n": n,
        "utilization": u,
        "graphs": graphs,
        "start_at": start_at,
        "wall_s": time.monotonic() - began,
        "engines": engines,
    }


def _phases(counts: list[int], share: float, graphs_run: bool) -> list[tuple[str, str, int, Any, Any]]:
    """(name, mode, N, u, graphs) in the order they run: the largest N first, its run alone with CUDA graphs on
    right after its run alone with them off, in case the budget runs out."""
    order: list[tuple[str, str, int, Any, Any]] = []
    for n in sorted(counts, reverse=True):
        u = round(share / n, 6)
        if n > 1:
            order.append(("devmem alone", "devmem", 1, u, None))
        if graphs_run and n == max(counts):
            order.append(("devmem alone, CUDA graphs on", "devmem", 1, u, True))
        order += [("devmem together", "devmem", n, u, None), ("stock together", "stock", n, None, None)]
    return order


def _same_blocks(blocks: int | None, ref: int | None, block_bytes: int | None, gpu: bool, slack: int) -> bool | None:
    if not blocks or not ref:
        return None
    if gpu or not block_bytes:
        return abs(blocks / ref - 1) <= SAME_BLOCKS
    return abs(blocks - ref) * block_bytes <= slack


def _rows(phases: list[dict[str, Any]], alone: dict[float, int | None], gpu: bool, slack: int) -> list[dict[str, Any]]:
    """One row per engine; on the cpu platform footprints (RSS) and block counts are judged within ``slack``."""
    noise = 0 if gpu else slack
    rows = []
    for phase in phases:
        for r in phase["engines"]:
            u, blocks = r.get("utilization"), r.get("blocks")
            ref = alone.get(u) if r["mode"] == "devmem" else None
            block_bytes = r.get("sizing", {}).get("block_bytes")
            requested = r.get("requested")
            peak = r.get("footprint_peak")
            rows.append(
                {
                    "phase": phase["phase"],
                    "mode": r["mode"],
                    "n": r["n"],
                    "engine": r["engine"],
                    "utilization": u,
                    "graphs": r.get("graphs"),
                    "blocks": blocks,
                    "alone_blocks": ref,
                    "block_ratio": blocks / ref if blocks and ref else None,
                    "same_blocks": _same_blocks(blocks, ref, block_bytes, gpu, slack),
                    "served": r.get("served", False),
                    "tokens_per_s": r.get("tokens_per_s"),
                    "footprint_peak": peak,
                    "footprint_after": r.get("footprint_after"),
                    "requested": requested,
                    "within_request": None if peak is None or requested is None else peak <= requested + noise,
                    "late_s": r.get("late_s"),
                    "failure": failure_text(r),
                }
            )
    return rows


def _summary(rows: list[dict[str, Any]], counts: list[int]) -> list[dict[str, Any]]:
    out = []
    for mode in ("devmem", "stock"):
        for n in counts:
            mine = [r for r in rows if r["mode"] == mode and r["n"] == n and r["phase"].endswith("together")]
            if not mine:
                continue
            ratios = [r["block_ratio"] for r in mine if r["block_ratio"] is not None]
            s = {
                "mode": mode,
                "n": n,
                "engines": len(mine),
                "served": sum(bool(r["served"]) for r in mine),
                "blocks": [r["blocks"] for r in mine],
                "failures": sorted({r["failure"] for r in mine if r["failure"]}),
                "min_ratio": min(ratios, default=None),
                "max_ratio": max(ratios, default=None),
                "within_request": sum(bool(r["within_request"]) for r in mine),
            }
            if mode == "devmem":
                s["goal_met"] = (
                    s["served"] == len(mine)
                    and all(r["same_blocks"] for r in mine)
                    and s["within_request"] == len(mine)
                )
            out.append(s)
    return out


def _ratio(value: float | None) -> str:
    return "-" if value is None else f"{value:.4f}"


def render(result: dict[str, Any]) -> str:
    cfg, m = result["config"], result["machine"]
    head = (
        f"# transformers continuous batching on {m['device_name']} ({m['platform']}), total {gib(m['total'])} GiB; "
        f"Llama {cfg['model']['num_hidden_layers']} layers, hidden {cfg['model']['hidden_size']}, "
        f"{cfg['model']['num_key_value_heads']} KV heads, {cfg['dtype']}; {cfg['prompts']} prompts of "
        f"{cfg['prompt_tokens']} tokens, {cfg['new_tokens']} new tokens each; devmem at u = {cfg['share']} / N; "
        f"transformers {result['transformers']}"
    )
    table = format_table(
        [
            "phase",
            "mode",
            "N",
            "u",
            "engine",
            "blocks",
            "alone",
            "ratio",
            "served",
            "tok/s",
            "peak GiB",
            "after GiB",
            "u*total GiB",
            "<= u*total",
            "failure",
        ],
        [
            [
                r["phase"],
                r["mode"],
                r["n"],
                "-" if r["utilization"] is None else r["utilization"],
                r["engine"],
                "-" if r["blocks"] is None else r["blocks"],
                "-" if r["alone_blocks"] is None else r["alone_blocks"],
                _ratio(r["block_ratio"]),
                "yes" if r["served"] else "no",
                "-" if r["tokens_per_s"] is None else f"{r['tokens_per_s']:.0f}",
                gib(r["footprint_peak"]),
                gib(r["footprint_after"]),
                gib(r["requested"]),
                "-" if r["within_request"] is None else ("yes" if r["within_request"] else "NO"),
                r["failure"],
            ]
            for r in result["rows"]
        ],
    )
    side = format_table(
        ["mode", "N", "served", "blocks", "ratio to alone", "<= u*total", "failures"],
        [
            [
                s["mode"],
                s["n"],
                f"{s['served']}/{s['engines']}",
                ", ".join("-" if b is None else str(b) for b in s["blocks"]),
                f"{_ratio(s['min_ratio'])}..{_ratio(s['max_ratio'])}" if s["mode"] == "devmem" else "-",
                f"{s['within_request']}/{s['engines']}" if s["mode"] == "devmem" else "-",
                ", ".join(s["failures"]),
            ]
            for s in result["summary"]
        ],
    )
    graphs = [
        r
        for r in result["rows"]
        if r["phase"].startswith("devmem alone") and r["utilization"] == result["graphs_utilization"]
    ]
    graph_table = format_table(
        ["CUDA graph warm-up", "u", "blocks", "peak GiB", "after GiB", "u*total GiB", "tok/s", "failure"],
        [
            [
                "on" if r["graphs"] else "off (default with sdpa)",
                r["utilization"],
                r["blocks"],
                gib(r["footprint_peak"]),
                gib(r["footprint_after"]),
                gib(r["requested"]),
                "-" if r["tokens_per_s"] is None else f"{r['tokens_per_s']:.0f}",
                r["failure"],
            ]
            for r in graphs
        ],
    )
    skipped = [f"skipped (budget spent): {p}" for p in result["skipped"]]
    if result["machine"]["platform"] == "cpu":
        noise = f"{mib(result['config']['same_bytes'], 0)} MiB"
        same, within = noise, f"ceil(u * total) + {noise} of RSS noise"
    else:
        same, within = "0.1 %", "ceil(u * total)"
    verdict = (
        f"devmem goal (every devmem engine serves every request, blocks within {same} of the run alone, peak "
        f"footprint <= {within}): " + ("MET" if result["goal_met"] else "NOT MET")
    )
    return "\n\n".join([head, table, side, graph_table, *skipped, verdict])


def main(argv: list[str] | None = None) -> dict[str, Any]:
    args = parse_args(argv)
    multiprocessing.get_context("forkserver").set_forkserver_preload(_PRELOAD)
    platform = devmem.current_platform()
    gpu = on_accelerator(platform)
    if args.quick and gpu:
        raise SystemExit("--quick runs the cpu platform's tiny configuration: set DEVMEM_PLATFORM=cpu")
    d = GPU if gpu else CPU
    start = platform.device_memory_info(args.device)
    counts = [int(c) for c in (args.counts or d["counts"]).split(",")]
    if any(n <= 0 for n in counts):
        raise SystemExit(f"--counts must be positive engine counts, got {args.counts}")
    share = args.share or d.get("share") or utilization_for(d["request"] * max(counts), start.total)
    budget = args.budget or d["budget"]
    cfg = {
        "share": share,
        "counts": counts,
        "model": d["model"],
        "dtype": d["dtype"],
        "prompts": args.prompts or d["prompts"],
        "prompt_tokens": args.prompt_tokens or d["prompt_tokens"],
        "new_tokens": args.new_tokens or d["new_tokens"],
        "cb": d["cb"],
        "hold": d["hold"],
        "timeout": d["timeout"],
        "budget": budget,
        "same_bytes": same_budget(platform),
    }
    common = {k: cfg[k] for k in ("model", "dtype", "prompts", "prompt_tokens", "new_tokens", "cb", "hold")}
    common["device"] = args.device
    result: dict[str, Any] = {
        "benchmark": "transformers_cb",
        "transformers": importlib.metadata.version("transformers"),
        "command": ["python", "benchmarks/transformers_cb.py", *(argv if argv is not None else sys.argv[1:])],
        "machine": machine(platform, args.device),
        "config": cfg,
        "graphs_utilization": round(share / max(counts), 6),
    }
    began = time.monotonic()
    phases, skipped = [], []
    for name, mode, n, u, graphs in _phases(counts, share, gpu and not args.no_graphs_run):
        left = budget - (time.monotonic() - began)
        label = f"{name}: N={n}" + ("" if u is None else f", u={u}") + (", CUDA graphs on" if graphs else "")
        if left < 10:
            skipped.append(label)
            continue
        settle(platform, args.device, start.free, d["slack"], d["settle"])
        # stock engines on the cpu platform request what devmem's do (a full-size stock cache would fill the host)
        percent = None if gpu or mode == "devmem" else utilization_for(d["request"], start.total)
        lead = 1.0 + 0.25 * n
        phase = _phase(
            name, mode, n, u, graphs, {**common, "stock_percent": percent}, min(cfg["timeout"], left) + lead, lead
        )
        phase["label"] = label
        phases.append(phase)
        states = [
            f"blocks {e.get('blocks')}, " + ("served" if e.get("served") else failure_text(e) or "not served")
            for e in phase["engines"]
        ]
        print(f"{label}: {phase['wall_s']:.1f} s; " + "; ".join(states), flush=True)
    settle(platform, args.device, start.free, d["slack"], d["settle"])
    alone = {
        p["utilization"]: p["engines"][0].get("blocks")
        for p in phases
        if p["mode"] == "devmem" and p["n"] == 1 and not p["graphs"]
    }
    rows = _rows(phases, alone, gpu, same_budget(platform))
    summary = _summary(rows, counts)
    devmem_summaries = [s for s in summary if s["mode"] == "devmem"]
    result.update(
        phases=phases,
        rows=rows,
        summary=summary,
        skipped=skipped,
        wall_s=time.monotonic() - began,
        goal_met=bool(devmem_summaries)
        and len(devmem_summaries) == len(counts)
        and all(s["goal_met"] for s in devmem_summaries),
    )
    text = render(result)
    print(text)
    for path in write_outputs(args.out, "transformers_cb", result, text):
        print(f"wrote {path}")
    return result


if __name__ == "__main__":
    main()
