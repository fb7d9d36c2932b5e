"""transformers' continuous batching, stock sizing against devmem sizing: N = 1, 2, 4 engines started together,
CUDA graphs off and on, an ordinary and a worst-case workload.

Every engine is a fresh process (a child of the benchmarks' forkserver) that waits for a shared start time, takes
its snapshot, creates the CUDA context and a Llama-architecture model with random weights from a config (no
download; on the GPU TinyLlama's shape, 22 layers, hidden 2048, 4 KV heads, 1.1B parameters in bf16), then serves
with ``model.generate_batch``:

- ``stock``: ``ContinuousBatchingConfig()``, transformers sizes its cache from the device's free memory;
- ``devmem``: the config from ``devmem.integrations.transformers.size_continuous_batching`` at u = share / N. Each
  phase starts with an empty profile store (a first start: the engine measures), and each engine then sizes once
  more with the same key (a restart: the stored figures, no engine run): both times and both block counts are
  recorded.

Workloads: ``ordinary``, ``--prompts`` prompts of ``--prompt-tokens`` tokens, ``--new-tokens`` new tokens each;
``worst``, built to reach the case the plan charges every block for: prompts of ``max_batch_tokens - 64`` tokens,
as many as the sized cache holds with their new tokens, after one shorter prompt that takes the blocks left, so
that the last prompt's prefill runs in a batch of ``max_batch_tokens`` query tokens (the others decoding) that reads
nearly the whole cache. The worst case is served
at u = ``--worst-share`` (its cost grows with the square of the cache: every batch reads all the cached tokens).

Per engine: the blocks it got, whether it served every request (every request got all its new tokens), generated
tokens per second, the seconds sizing took (first start and restart; where the first start spent them, sampled
from its stack every 10 ms: ``size_samples``), and its footprint as raw NVML lists its PID
(``nvmlDeviceGetComputeRunningProcesses``): the peak sampled while it served and the figure once it served, its
cache still alive (the manager is kept), against its share ``ceil(u * total)``. An engine that crashes (out of
memory included) is recorded as crashed. Every process has a time limit and no phase starts once ``--budget``
seconds have passed.

devmem's goal: every devmem engine serves every request, its block count within 0.1 % of the run alone at its u
and the same at the restart, its peak footprint <= ceil(u * total); the worst case peaks at >= 0.9 of it. On the
cpu platform (``--smoke``): a tiny config, N = 2, host memory as the device (footprints are the growth of
``RssAnon + RssShmem`` since the snapshot) and a small request; the worst case is reported there, not judged
(torch's CPU allocator keeps no peak statistics, so no plan sees what that forward reads beside the cache); stock
engines get a ``max_memory_percent`` that requests the same bytes, as a full-size stock cache would fill the host.

Usage: python benchmarks/transformers_cb.py [--counts 1,2,4] [--share 0.9] [--out DIR] [--smoke]
"""

from __future__ import annotations

import argparse
import importlib.metadata
import logging
import multiprocessing
import os
import shutil
import sys
import tempfile
import threading
import time
import traceback
from typing import Any

from common import (
    MiB,
    StackSampler,
    failure_text,
    format_table,
    gib,
    machine,
    mib,
    on_accelerator,
    private_ledger,
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
    "max_position_embeddings": 16384,
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
    "hold": 1.0,
    "timeout": 110.0,
    "budget": 380.0,
    "slack": 1024 * MiB,
    "settle": 20.0,
    "worst_share": 0.08,
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
    "worst_request": 192 * MiB,
}
#: Block counts within this share of the run alone count as the same on a GPU (the goal); on the cpu
#: platform, within ``same_budget`` bytes of blocks (RSS moves by a few MiB with glibc's arenas).
SAME_BLOCKS = 0.001
#: Seconds between footprint samples while an engine serves.
SAMPLE_S = 0.02
#: The worst case peaks at this share of the engine's request or more (the plan charges what it reads).
WORST_FLOOR = 0.9

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
    p.add_argument("--graphs", default=None, help="CUDA graph modes to run, comma-separated: off,on (GPU: off,on)")
    p.add_argument("--no-graphs-run", action="store_true", help="the same as --graphs off")
    p.add_argument("--worst-share", type=float, default=None, help="utilization of the worst-case runs (GPU: 0.08)")
    p.add_argument("--no-stock", action="store_true", help="skip stock transformers' phases")
    p.add_argument("--budget", type=float, default=None, help="seconds after which no phase starts (GPU: 380)")
    p.add_argument("--smoke", "--quick", action="store_true", help="cpu platform: a tiny config, N = 2 (for CI)")
    p.add_argument("--out", default=None, help="a .json file, or a folder to write transformers_cb.json/.txt into")
    args = p.parse_args(argv)
    for name in ("share", "worst_share"):
        if getattr(args, name) is not None and not 0 < getattr(args, name) <= 1:
            p.error(f"--{name.replace('_', '-')} must be in (0, 1], got {getattr(args, name)}")
    modes = (args.graphs or ("off" if args.no_graphs_run else "off,on")).split(",")
    if not modes or any(m not in ("off", "on") for m in modes):
        p.error(f"--graphs must list off and/or on, got {args.graphs!r}")
    args.graph_modes = [m == "on" for m in modes]
    for name in ("prompts", "prompt_tokens", "new_tokens"):
        if getattr(args, name) is not None and getattr(args, name) <= 0:
            p.error(f"--{name.replace('_', '-')} must be > 0, got {getattr(args, name)}")
    return args


class Footprint:
    """This process's device memory as the driver lists it, sampled in a thread: raw NVML for its PID on a GPU,
    the kernel's ``RssAnon + RssShmem`` on the cpu platform (the memory only this process holds; file-backed pages
    are shared page cache). ``peak`` is the largest sample, ``read()`` one reading now."""

    def __init__(self, gpu: bool):
        self.gpu, self.peak = gpu, None
        self.source = "nvmlDeviceGetComputeRunningProcesses" if gpu else "RssAnon + RssShmem"
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        if gpu:
            import pynvml

            pynvml.nvmlInit()
            self._nvml = pynvml
            self._handles = [pynvml.nvmlDeviceGetHandleByIndex(i) for i in range(pynvml.nvmlDeviceGetCount())]

    def read(self) -> int | None:
        if not self.gpu:
            with open("/proc/self/status", encoding="ascii") as status:
                kib = [int(line.split()[1]) for line in status if line.startswith(("RssAnon:", "RssShmem:"))]
            return sum(kib) * 1024
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
    fields["use_cuda_graph"] = bool(spec["graphs"])
    if spec["stock_percent"] is not None:
        fields["max_memory_percent"] = spec["stock_percent"]
    return transformers.ContinuousBatchingConfig(**fields)


#: Most requests of the worst-case workload (the cache it fills holds them all at once).
WORST_REQUESTS = 48


def _worst_workload(blocks: int, block_tokens: int, max_batch_tokens: int, vocab: int) -> tuple[list[list[int]], int]:
    """Prompts of nearly ``max_batch_tokens`` tokens, as many as ``blocks`` hold with their new tokens (at most
    :data:`WORST_REQUESTS`), after one shorter prompt that takes the blocks they leave, and the new tokens each:
    enough that the first still decodes when the last prefills, so that the last prefill runs in a batch of
    ``max_batch_tokens`` query tokens reading the whole cache. Without the shorter prompt a cache of 125 blocks
    of 256 tokens held three prompts of 32 blocks: 29 blocks were never read."""
    length = max(1, max_batch_tokens - max(8, max_batch_tokens // 128))
    new = WORST_REQUESTS + 16
    per = -(-(length + new) // block_tokens)
    count = max(1, min(WORST_REQUESTS, blocks // per))
    *prompts, spare = _prompts(count + 1, length, vocab)  # the spare's tokens are distinct from the others'
    rest = (blocks - count * per) * block_tokens - new
    return ([spare[:rest]] if count < WORST_REQUESTS and rest > 0 else []) + prompts, new


def _size(
    spec: dict[str, Any], model: Any, config: Any, generation: Any, baseline: Any, platform: Any, out: dict
) -> tuple[Any, Any]:
    """Size twice with the same key: the first start measures (empty store), the restart reads the store. A
    restarted engine is a new process, which holds none of the old one's reservation: the first start's share is
    released before the restart reserves its own. Returns both; the engine serves the first start's config under
    the restart's reservation."""
    from devmem.integrations.transformers import size_continuous_batching

    kwargs = {
        "utilization": spec["utilization"],
        "config": config,
        "generation_config": generation,
        "baseline": baseline,
        "platform": platform,
        "store": spec["store"],
    }
    t = time.perf_counter()
    with StackSampler() as sampler:
        sized = size_continuous_batching(model, **kwargs)
    out["timings_s"]["size"] = time.perf_counter() - t
    out["size_samples"] = sampler.top()
    if sized.reservation is not None:
        sized.reservation.release()
    t = time.perf_counter()
    again = size_continuous_batching(model, **kwargs)
    out["timings_s"]["size_restart"] = time.perf_counter() - t
    out.update(
        sizing=sized.as_dict(),
        explain=sized.explain(),
        restart_blocks=again.num_blocks,
        restart_stored=again.stored,
        first_stored=sized.stored,
        restart_explain=again.explain().splitlines(),
    )
    return sized, again


def serve(spec: dict[str, Any]) -> dict[str, Any]:
    """One engine: wait for the start, snapshot, context, model, (devmem sizing), serve, read the footprint."""
    import torch
    import transformers

    from devmem.integrations.transformers import block_tokens, cuda_graph_flags

    logging.getLogger("ContinuousBatchingLogger").setLevel(logging.ERROR)
    out: dict[str, Any] = {
        **{k: spec[k] for k in _LABEL},
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
        baseline = devmem.engine.MemorySnapshot.measure(spec["device"], platform)
        out.update(total=baseline.total, free_at_start=baseline.free)
        if spec["utilization"] is not None:
            out["requested"] = devmem.planner.requested_memory(baseline.total, spec["utilization"])
            devmem.engine.check_startup_memory(baseline, out["requested"], platform)
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
        config = _cb_config(transformers, spec)
        new_tokens = spec["new_tokens"]
        prompts = _prompts(spec["prompts"], spec["prompt_tokens"], spec["model"]["vocab_size"])
        generation = transformers.GenerationConfig(
            max_new_tokens=new_tokens, do_sample=False, eos_token_id=-1, pad_token_id=0
        )
        if spec["mode"] == "devmem":
            stage = "size"
            sized, restarted = _size(spec, model, config, generation, baseline, platform, out)
            out["reservation_held"] = restarted.reservation is not None  # held while this engine serves
            config = sized.config
            if spec["workload"] == "worst":
                prompts, new_tokens = _worst_workload(
                    sized.num_blocks, block_tokens(config), config.max_batch_tokens, spec["model"]["vocab_size"]
                )
                generation = transformers.GenerationConfig(
                    max_new_tokens=new_tokens, do_sample=False, eos_token_id=-1, pad_token_id=0
                )
        stage, t = "serve", time.perf_counter()
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
            prompt_tokens=len(prompts[0]),
            new_tokens=new_tokens,
            finished=len(results),
            generated_tokens=sum(tokens),
            tokens_per_s=sum(tokens) / seconds if seconds > 0 else None,
            served=len(results) == len(prompts) and not errors and all(n == new_tokens for n in tokens),
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


#: What names an engine's phase in its result.
_LABEL = ("mode", "n", "engine", "utilization", "graphs", "workload")


def _engine(conn: Any, spec: dict[str, Any]) -> None:
    try:
        result = serve(spec)
    except BaseException:  # reported to the parent, which records it as this engine's failure
        result = {
            **{k: spec[k] for k in _LABEL},
            "ok": False,
            "failure": {"stage": "engine", "kind": "crash", "message": traceback.format_exc()[-3000:]},
        }
    conn.send(result)
    conn.close()


def _phase(
    phase: tuple[str, str, int, Any, bool, str],
    common: dict[str, Any],
    timeout: float,
    lead: float,
) -> dict[str, Any]:
    name, mode, n, u, graphs, workload = phase
    start_at = time.time() + lead
    store = tempfile.mkdtemp(prefix="devmem-profiles-")  # a first start: nothing measured yet
    specs = [
        {
            **common,
            "mode": mode,
            "n": n,
            "engine": i,
            "utilization": u,
            "graphs": graphs,
            "workload": workload,
            "start_at": start_at,
            "store": store,
        }
        for i in range(n)
    ]
    began = time.monotonic()
    engines = []
    try:
        for spec, (result, code) in zip(specs, spawn(_engine, [(s,) for s in specs], timeout), strict=True):
            if result is None:
                result = {
                    **{k: spec[k] for k in _LABEL},
                    "ok": False,
                    "failure": {
                        "stage": "engine",
                        "kind": "died",
                        "message": f"the engine process ended with "
                        f"exit code {code} without a result (time limit {timeout:.0f} s)",
                    },
                }
            engines.append(result)
    finally:
        shutil.rmtree(store, ignore_errors=True)
    return {
        "phase": name,
        "mode": mode,
        "n": n,
        "utilization": u,
        "graphs": graphs,
        "workload": workload,
        "start_at": start_at,
        "wall_s": time.monotonic() - began,
        "engines": engines,
    }


def _phases(
    counts: list[int], share: float, graph_modes: list[bool], worst_u: float, stock: bool
) -> list[tuple[str, str, int, Any, bool, str]]:
    """(name, mode, N, u, graphs, workload) in the order they run: per graph mode the largest N first (its run
    alone, then together), the worst case alone; stock transformers with its defaults (graphs off) after the
    first graph mode, so that the budget never leaves it out."""
    order: list[tuple[str, str, int, Any, bool, str]] = []
    for i, graphs in enumerate(graph_modes):
        for n in sorted(counts, reverse=True):
            u = round(share / n, 6)
            if n > 1:
                order.append(("devmem alone", "devmem", 1, u, graphs, "ordinary"))
            order.append(("devmem together", "devmem", n, u, graphs, "ordinary"))
        order.append(("devmem worst case", "devmem", 1, worst_u, graphs, "worst"))
        if stock and i == 0:
            order += [("stock together", "stock", n, None, False, "ordinary") for n in sorted(counts, reverse=True)]
    return order


def _same_blocks(blocks: int | None, ref: int | None, block_bytes: int | None, gpu: bool, slack: int) -> bool | None:
    if not blocks or not ref:
        return None
    if gpu or not block_bytes:
        return abs(blocks / ref - 1) <= SAME_BLOCKS
    return abs(blocks - ref) * block_bytes <= slack


def _rows(
    phases: list[dict[str, Any]], alone: dict[tuple[float, bool], int | None], gpu: bool, slack: int
) -> list[dict[str, Any]]:
    """One row per engine; on the cpu platform footprints (anonymous RSS) and block counts are judged within
    ``slack``."""
    noise = 0 if gpu else slack
    rows = []
    for phase in phases:
        for r in phase["engines"]:
            u, blocks, graphs = r.get("utilization"), r.get("blocks"), bool(r.get("graphs"))
            ref = alone.get((u, graphs)) if r["mode"] == "devmem" else None
            block_bytes = r.get("sizing", {}).get("block_bytes")
            requested = r.get("requested")
            peak = r.get("footprint_peak")
            timings = r.get("timings_s", {})
            rows.append(
                {
                    "phase": phase["phase"],
                    "mode": r["mode"],
                    "n": r["n"],
                    "engine": r["engine"],
                    "utilization": u,
                    "graphs": graphs,
                    "workload": r.get("workload"),
                    "blocks": blocks,
                    "alone_blocks": ref,
                    "block_ratio": blocks / ref if blocks and ref else None,
                    "same_blocks": _same_blocks(blocks, ref, block_bytes, gpu, slack),
                    "restart_blocks": r.get("restart_blocks"),
                    "first_stored": r.get("first_stored"),
                    "restart_stored": r.get("restart_stored"),
                    "served": r.get("served", False),
                    "requests": r.get("requests"),
                    "tokens_per_s": r.get("tokens_per_s"),
                    "size_s": timings.get("size"),
                    "size_samples": r.get("size_samples"),
                    "restart_s": timings.get("size_restart"),
                    "runs_s": [run.get("seconds") for run in r.get("sizing", {}).get("runs", [])],
                    "timings_s": timings,
                    "footprint_peak": peak,
                    "footprint_after": r.get("footprint_after"),
                    "requested": requested,
                    "peak_share": None if peak is None or not requested else peak / requested,
                    "within_request": None if peak is None or requested is None else peak <= requested + noise,
                    "late_s": r.get("late_s"),
                    "failure": failure_text(r),
                }
            )
    return rows


def _devmem_goal(row: dict[str, Any], gpu: bool) -> bool:
    """The row meets devmem's goal. On the cpu platform the worst case's footprint is reported, not judged: torch's
    CPU allocator keeps no peak statistics, so no plan there sees what that forward reads beside the cache."""
    ok = bool(row["served"] and row["restart_blocks"] == row["blocks"])
    if row["workload"] == "worst":
        return ok and (not gpu or (bool(row["within_request"]) and (row["peak_share"] or 0) >= WORST_FLOOR))
    return ok and bool(row["within_request"]) and bool(row["same_blocks"])


def _summary(rows: list[dict[str, Any]], gpu: bool) -> list[dict[str, Any]]:
    out = []
    keys = sorted({(r["mode"], r["n"], r["graphs"], r["workload"], r["phase"]) for r in rows}, key=str)
    for mode, n, graphs, workload, phase in keys:
        if phase == "devmem alone":
            continue
        mine = [
            r
            for r in rows
            if (r["mode"], r["n"], r["graphs"], r["workload"], r["phase"]) == (mode, n, graphs, workload, phase)
        ]
        ratios = [r["block_ratio"] for r in mine if r["block_ratio"] is not None]
        shares = [r["peak_share"] for r in mine if r["peak_share"] is not None]
        sizes = [r["size_s"] for r in mine if r["size_s"] is not None]
        restarts = [r["restart_s"] for r in mine if r["restart_s"] is not None]
        s = {
            "mode": mode,
            "n": n,
            "graphs": graphs,
            "workload": workload,
            "engines": len(mine),
            "served": sum(bool(r["served"]) for r in mine),
            "blocks": [r["blocks"] for r in mine],
            "failures": sorted({r["failure"] for r in mine if r["failure"]}),
            "min_ratio": min(ratios, default=None),
            "max_ratio": max(ratios, default=None),
            "max_peak_share": max(shares, default=None),
            "max_size_s": max(sizes, default=None),
            "max_restart_s": max(restarts, default=None),
            "within_request": sum(bool(r["within_request"]) for r in mine),
        }
        if mode == "devmem":
            s["goal_met"] = all(_devmem_goal(r, gpu) for r in mine)
        out.append(s)
    return out


def _ratio(value: float | None) -> str:
    return "-" if value is None else f"{value:.4f}"


def _seconds(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}"


def render(result: dict[str, Any]) -> str:
    cfg, m = result["config"], result["machine"]
    head = (
        f"# transformers continuous batching on {m['device_name']} ({m['platform']}), total {gib(m['total'])} GiB; "
        f"Llama {cfg['model']['num_hidden_layers']} layers, hidden {cfg['model']['hidden_size']}, "
        f"{cfg['model']['num_key_value_heads']} KV heads, {cfg['dtype']}; ordinary workload: {cfg['prompts']} "
        f"prompts of {cfg['prompt_tokens']} tokens, {cfg['new_tokens']} new tokens each; devmem at u = "
        f"{cfg['share']} / N, the worst case at u = {cfg['worst_share']}; transformers {result['transformers']}"
    )
    table = format_table(
        [
            "phase",
            "mode",
            "N",
            "u",
            "graphs",
            "workload",
            "engine",
            "blocks",
            "alone",
            "ratio",
            "restart",
            "served",
            "tok/s",
            "size s",
            "restart s",
            "peak GiB",
            "u*total GiB",
            "peak/share",
            "failure",
        ],
        [
            [
                r["phase"],
                r["mode"],
                r["n"],
                "-" if r["utilization"] is None else r["utilization"],
                "on" if r["graphs"] else "off",
                r["workload"],
                r["engine"],
                "-" if r["blocks"] is None else r["blocks"],
                "-" if r["alone_blocks"] is None else r["alone_blocks"],
                _ratio(r["block_ratio"]),
                "-" if r["restart_blocks"] is None else r["restart_blocks"],
                "yes" if r["served"] else "no",
                "-" if r["tokens_per_s"] is None else f"{r['tokens_per_s']:.0f}",
                _seconds(r["size_s"]),
                _seconds(r["restart_s"]),
                gib(r["footprint_peak"]),
                gib(r["requested"]),
                _ratio(r["peak_share"]),
                r["failure"],
            ]
            for r in result["rows"]
        ],
    )
    side = format_table(
        [
            "mode",
            "N",
            "graphs",
            "workload",
            "served",
            "blocks",
            "ratio to alone",
            "peak/share",
            "size s",
            "restart s",
            "failures",
        ],
        [
            [
                s["mode"],
                s["n"],
                "on" if s["graphs"] else "off",
                s["workload"],
                f"{s['served']}/{s['engines']}",
                ", ".join("-" if b is None else str(b) for b in s["blocks"]),
                f"{_ratio(s['min_ratio'])}..{_ratio(s['max_ratio'])}" if s["mode"] == "devmem" else "-",
                _ratio(s["max_peak_share"]),
                _seconds(s["max_size_s"]),
                _seconds(s["max_restart_s"]),
                ", ".join(s["failures"]),
            ]
            for s in result["summary"]
        ],
    )
    skipped = [f"skipped (budget spent): {p}" for p in result["skipped"]]
    if result["machine"]["platform"] == "cpu":
        noise = f"{mib(result['config']['same_bytes'], 0)} MiB"
        same, within = noise, f"ceil(u * total) + {noise} of RSS noise"
    else:
        same, within = "0.1 %", "ceil(u * total)"
    verdict = (
        f"devmem goal (every devmem engine serves every request, blocks within {same} of the run alone and the "
        f"same at the restart, peak footprint <= {within}; on a GPU the worst case too, at >= {WORST_FLOOR} of "
        "it): " + ("MET" if result["goal_met"] else "NOT MET")
    )
    return "\n\n".join([head, table, side, *skipped, verdict])


def main(argv: list[str] | None = None) -> dict[str, Any]:
    args = parse_args(argv)
    if not args.smoke:
        return _main(args, argv)
    with private_ledger():  # a smoke run (CI, a newcomer's try) leaves nothing in the machine's shared ledger
        return _main(args, argv)


def _main(args: argparse.Namespace, argv: list[str] | None) -> dict[str, Any]:
    multiprocessing.get_context("forkserver").set_forkserver_preload(_PRELOAD)
    platform = devmem.current_platform()
    gpu = on_accelerator(platform)
    if args.smoke and gpu:
        raise SystemExit("--smoke runs the cpu platform's tiny configuration: set DEVMEM_PLATFORM=cpu")
    d = GPU if gpu else CPU
    start = platform.device_memory_info(args.device)
    counts = [int(c) for c in (args.counts or d["counts"]).split(",")]
    if any(n <= 0 for n in counts):
        raise SystemExit(f"--counts must be positive engine counts, got {args.counts}")
    share = args.share or d.get("share") or utilization_for(d["request"] * max(counts), start.total)
    worst = args.worst_share or d.get("worst_share") or utilization_for(d["worst_request"], start.total)
    graph_modes = args.graph_modes if gpu else [False]
    budget = args.budget or d["budget"]
    cfg = {
        "share": share,
        "worst_share": worst,
        "counts": counts,
        "graphs": graph_modes,
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
    }
    began = time.monotonic()
    phases, skipped = [], []
    for phase in _phases(counts, share, graph_modes, worst, not args.no_stock):
        name, mode, n, u, graphs, workload = phase
        left = budget - (time.monotonic() - began)
        label = (
            f"{name}: N={n}"
            + ("" if u is None else f", u={u}")
            + f", graphs {'on' if graphs else 'off'}, {workload} workload"
        )
        if left < 10:
            skipped.append(label)
            continue
        settle(platform, args.device, start.free, d["slack"], d["settle"])
        # stock engines on the cpu platform request what devmem's do (a full-size stock cache would fill the host)
        percent = None if gpu or mode == "devmem" else utilization_for(d["request"], start.total)
        lead = 1.0 + 0.25 * n
        done = _phase(phase, {**common, "stock_percent": percent}, min(cfg["timeout"], left) + lead, lead)
        done["label"] = label
        phases.append(done)
        states = [
            f"blocks {e.get('blocks')}, size {_seconds(e.get('timings_s', {}).get('size'))} s, "
            + ("served" if e.get("served") else failure_text(e) or "not served")
            for e in done["engines"]
        ]
        print(f"{label}: {done['wall_s']:.1f} s; " + "; ".join(states), flush=True)
    settle(platform, args.device, start.free, d["slack"], d["settle"])
    alone = {
        (p["utilization"], bool(p["graphs"])): p["engines"][0].get("blocks")
        for p in phases
        if p["mode"] == "devmem" and p["n"] == 1 and p["workload"] == "ordinary"
    }
    rows = _rows(phases, alone, gpu, same_budget(platform))
    summary = _summary(rows, gpu)
    devmem_summaries = [s for s in summary if s["mode"] == "devmem"]
    expected = len(counts) * len(graph_modes) + len(graph_modes)
    result.update(
        phases=phases,
        rows=rows,
        summary=summary,
        skipped=skipped,
        wall_s=time.monotonic() - began,
        goal_met=len(devmem_summaries) == expected and all(s["goal_met"] for s in devmem_summaries),
    )
    text = render(result)
    print(text)
    for path in write_outputs(args.out, "transformers_cb", result, text):
        print(f"wrote {path}")
    return result


if __name__ == "__main__":
    main()
