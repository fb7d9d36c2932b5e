#!/usr/bin/env python3
"""An inference engine that serves a real transformer with a KV cache sized by devmem's public API.

The model is a Hugging Face transformers architecture built from a config with random weights (no hub, no
download): ``--model llama-1b`` (TinyLlama's shape: 22 layers, hidden 2048, 4 KV heads, 1.1B parameters),
``--model moe`` (a Mixtral-shaped mixture of experts, 8 experts, top-2), ``--model qwen3-0.6b`` (Qwen3-0.6B's
shape: 28 layers, a 151,936-token vocabulary), ``--model tiny`` / ``tiny-moe`` for
CPUs and CI, or ``--config FILE.json`` (any causal LM config transformers knows, ``model_type`` included).

1. Create ``devmem.EngineMemory`` before the device context and the model exist (the baseline snapshot, and
   the check that free memory covers ``u * total``); then create the context and the model.
2. Profile one step in its profile window: a prefill of ``--batch-tokens`` tokens (``--sequences`` sequences)
   and ``--decode-steps`` decode steps, as serving runs them. With ``--graphs`` (on a GPU), then capture decode
   CUDA graphs for batch sizes 1, 2, 4, ..., ``--max-graph-batch`` into one shared pool, largest first, in its
   graph window, as vLLM does after its profile run: the plan is charged what capture kept.
3. Plan the KV cache at utilization ``u`` from ``--accounting process`` (devmem's process-scoped budget) or
   ``--accounting device`` (today's device-wide method: non-KV = the drop of free memory since the init
   snapshot + torch's allocated peak, with vLLM's assertion that free memory did not grow), or at ``--pinned``
   bytes. One block is ``--block-size`` tokens on every layer, its bytes taken from the K and V tensors the
   model produced. Both budgets are reported; the chosen one is allocated.
4. ``--kv-layout devmem``: ``EngineMemory.allocate()`` (the allocator cache released, one allocation viewed per
   layer); ``--kv-layout per-layer``: the engine allocates one tensor per layer itself, planned with
   ``KvLayout.per_layer()``. Then serve ``--rounds`` steps: each prefill's keys and values are written into the
   cache's blocks (paged, round-robin over the pool). Attention during decode reads the model's own per-step
   cache; the paged pool is what an engine keeps between steps.
5. Read this process's device memory from the driver (raw NVML on NVIDIA, not devmem) with the cache alive
   after the passes ran, hold it ``--hold`` seconds so co-tenants overlap, and free everything.

Prints ONE JSON line with every figure (bytes) and timing where stdout is no terminal (or with ``--json``), and a
summary of a few lines for a person on a terminal; a failure (free memory below the request, vLLM's assertion, a
budget below one block, out of memory) is reported there (``"ok": false``) with exit status 1.
On the ``cpu`` platform the device is host memory and torch runs on the CPU.

    python examples/engine.py --model llama-1b --utilization 0.5 --batch-tokens 8192
"""

from __future__ import annotations

import argparse
import inspect
import json
import os
import sys
import time
from collections.abc import Callable
from typing import Any

import devmem
from devmem import EngineMemory, KvCachePlan, KvLayout, NotEnoughMemoryError, parse_size
from devmem.engine import ALLOCATOR_GRANULARITY, KvCacheTensors, MemorySnapshot, allocate_kv_cache
from devmem.engine.memory import PROFILE_PASSES
from devmem.planner import plan_kv_cache

#: Model shapes by name: (transformers config class, its arguments).
MODELS: dict[str, tuple[str, dict[str, Any]]] = {
    "llama-1b": (
        "LlamaConfig",
        {
            "hidden_size": 2048,
            "intermediate_size": 5632,
            "num_hidden_layers": 22,
            "num_attention_heads": 32,
            "num_key_value_heads": 4,
            "vocab_size": 32000,
            "max_position_embeddings": 4096,
        },
    ),
    "moe": (
        "MixtralConfig",
        {
            "hidden_size": 1024,
            "intermediate_size": 3584,
            "num_hidden_layers": 16,
            "num_attention_heads": 16,
            "num_key_value_heads": 4,
            "num_local_experts": 8,
            "num_experts_per_tok": 2,
            "vocab_size": 32000,
            "max_position_embeddings": 4096,
            "sliding_window": None,
        },
    ),
    "qwen3-0.6b": (  # Qwen3-0.6B's shape: a 151,936-token vocabulary, 28 layers, tied embeddings
        "Qwen3Config",
        {
            "hidden_size": 1024,
            "intermediate_size": 3072,
            "num_hidden_layers": 28,
            "num_attention_heads": 16,
            "num_key_value_heads": 8,
            "head_dim": 128,
            "vocab_size": 151936,
            "max_position_embeddings": 40960,
            "tie_word_embeddings": True,
        },
    ),
    "tiny": (
        "LlamaConfig",
        {
            "hidden_size": 64,
            "intermediate_size": 128,
            "num_hidden_layers": 2,
            "num_attention_heads": 4,
            "num_key_value_heads": 2,
            "vocab_size": 256,
            "max_position_embeddings": 512,
        },
    ),
    "tiny-moe": (
        "MixtralConfig",
        {
            "hidden_size": 64,
            "intermediate_size": 96,
            "num_hidden_layers": 2,
            "num_attention_heads": 4,
            "num_key_value_heads": 2,
            "num_local_experts": 4,
            "num_experts_per_tok": 2,
            "vocab_size": 256,
            "max_position_embeddings": 512,
            "sliding_window": None,
        },
    ),
}


class Failure(Exception):
    """A failure the engine reports in its JSON instead of crashing."""

    def __init__(self, stage: str, kind: str, message: str):
        super().__init__(message)
        self.stage, self.kind = stage, kind

    def as_dict(self) -> dict[str, str]:
        return {"stage": self.stage, "kind": self.kind, "message": str(self)}


def _positive(text: str) -> int:
    value = int(text)
    if value <= 0:
        raise argparse.ArgumentTypeError(f"must be a whole number > 0, got {text}")
    return value


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--device", type=int, default=0, help="device index (devmem's, after CUDA_VISIBLE_DEVICES)")
    p.add_argument(
        "--model", choices=sorted(MODELS), default=None, help="model shape (default llama-1b on a GPU, tiny on the CPU)"
    )
    p.add_argument("--config", default=None, help="a transformers config.json to build instead of --model")
    p.add_argument(
        "--accounting",
        choices=("process", "device"),
        default="process",
        help="process: devmem's process-scoped budget; device: the device-wide method (vLLM's)",
    )
    p.add_argument("--utilization", type=float, default=0.9, help="share of the device's total memory (u)")
    p.add_argument("--pinned", type=parse_size, default=None, help="KV cache bytes, instead of sizing by u")
    p.add_argument(
        "--batch-tokens",
        type=_positive,
        default=None,
        help="tokens in one prefill (default 8192 on a GPU, 256 on the CPU)",
    )
    p.add_argument("--sequences", type=_positive, default=8, help="sequences the prefill tokens are split into")
    p.add_argument("--block-size", type=_positive, default=16, help="tokens in one KV block")
    p.add_argument("--decode-steps", type=int, default=4)
    p.add_argument("--rounds", type=_positive, default=2, help="serving steps run with the cache in place")
    p.add_argument("--expandable-segments", action="store_true", help="run torch's allocator with expandable segments")
    p.add_argument("--graphs", action="store_true", help="capture decode CUDA graphs after the profile run (GPU only)")
    p.add_argument("--max-graph-batch", type=_positive, default=256, help="largest decode batch captured")
    p.add_argument(
        "--kv-layout",
        choices=("devmem", "per-layer"),
        default="devmem",
        help="devmem: EngineMemory.allocate (one allocation); per-layer: one tensor per layer, allocated here",
    )
    p.add_argument(
        "--no-release",
        action="store_true",
        help="do not release the allocator cache before the KV allocation (what engines do today on the pinned path)",
    )
    p.add_argument(
        "--start-at",
        type=float,
        default=None,
        help="wall-clock time (seconds since the epoch) to take the init snapshot at, so several "
        "engines start at the same moment",
    )
    p.add_argument("--hold", type=float, default=0.0, help="seconds to keep the KV cache before exiting")
    p.add_argument(
        "--json",
        action="store_true",
        help="print every figure as one JSON line (the default where stdout is no terminal; on one, a summary)",
    )
    args = p.parse_args(argv)
    if not 0 < args.utilization <= 1:
        p.error(f"--utilization must be in (0, 1], got {args.utilization}")
    if args.decode_steps < 0:
        p.error(f"--decode-steps must be >= 0, got {args.decode_steps}")
    return args


def build_model(args: argparse.Namespace, torch: Any, device: Any, dtype: Any) -> Any:
    """The model with random weights, built directly on ``device`` in ``dtype``."""
    import transformers

    if args.config is not None:
        with open(args.config, encoding="utf-8") as f:
            config = transformers.AutoConfig.for_model(**json.load(f))
    else:
        name = args.model or ("tiny" if device.type == "cpu" else "llama-1b")
        class_name, kwargs = MODELS[name]
        config = getattr(transformers, class_name)(**kwargs)
    torch.manual_seed(0)
    default = torch.get_default_dtype()
    torch.set_default_dtype(dtype)
    try:
        with torch.device(device):
            model = transformers.AutoModelForCausalLM.from_config(config)
    finally:
        torch.set_default_dtype(default)
    return model.eval()


def cache_argument(model: Any) -> str:
    """The forward argument that takes the per-step KV cache: ``cache`` (transformers >= 5.2x) or
    ``past_key_values``."""
    return "cache" if "cache" in inspect.signature(model.forward).parameters else "past_key_values"


def output_cache(out: Any) -> Any:
    """The per-step KV cache a forward returned, under either name."""
    return out["cache"] if "cache" in out else out["past_key_values"]


def layer_kv(cache: Any) -> list[tuple[Any, Any]]:
    """(keys, values) of every layer of a transformers cache, ``[batch, heads, tokens, head_dim]`` each."""
    if hasattr(cache, "layers"):
        return [(layer.keys, layer.values) for layer in cache.layers]
    return list(zip(cache.key_cache, cache.value_cache, strict=True))


def gc_collect_and_empty(torch: Any) -> None:
    """Collect garbage and empty torch's cache (vLLM does this before capturing its graphs)."""
    import gc

    gc.collect()
    torch.cuda.empty_cache()


def _sync(torch: Any, device: Any) -> None:
    if device.type != "cpu":
        torch.cuda.synchronize(device)


def device_footprint(torch: Any, device: Any) -> tuple[int | None, str]:
    """This process's device memory as the driver lists it (raw NVML), and where the figure came from."""
    if device.type == "cpu" or torch.version.hip:
        return None, "no driver figure read on this device"
    import pynvml

    pynvml.nvmlInit()
    try:
        used = [
            p.usedGpuMemory
            for i in range(pynvml.nvmlDeviceGetCount())
            for p in pynvml.nvmlDeviceGetComputeRunningProcesses(pynvml.nvmlDeviceGetHandleByIndex(i))
            if p.pid == os.getpid() and p.usedGpuMemory is not None
        ]
    finally:
        pynvml.nvmlShutdown()
    return (sum(used), "nvmlDeviceGetComputeRunningProcesses") if used else (None, "this PID is not listed by NVML")


class Engine:
    """One run: the model, the KV cache and the figures it reports."""

    def __init__(self, args: argparse.Namespace, torch: Any, platform: Any, device: Any):
        self.args, self.torch, self.platform, self.device = args, torch, platform, device
        self.dtype = torch.float32 if device.type == "cpu" else torch.bfloat16
        self.batch_tokens = args.batch_tokens or (256 if device.type == "cpu" else 8192)
        if self.batch_tokens % args.sequences or (self.batch_tokens // args.sequences) % args.block_size:
            raise Failure(
                "startup",
                "bad_input",
                f"--batch-tokens {self.batch_tokens} must split into "
                f"--sequences {args.sequences} of whole blocks of {args.block_size} tokens",
            )
        self.model: Any = None
        self.memory: Any = None
        self.graphs: dict[int, tuple[Any, Any, Any]] = {}
        self.kv: Any = None
        self.kv_shapes: list[tuple[int, int, int, int]] = []
        self.out: dict[str, Any] = {"batch_tokens": self.batch_tokens, "dtype": str(self.dtype).replace("torch.", "")}
        self.timings: dict[str, float] = {}
        self.stage = "startup"
        self.next_block = 0

    def _timed(self, name: str, fn: Callable[[], Any]) -> Any:
        self.stage = name.removesuffix("_s")
        start = time.perf_counter()
        try:
            return fn()
        finally:
            self.timings[name] = time.perf_counter() - start

    def step(self, pool: Any = None) -> int:
        """One serving step: prefill ``batch_tokens`` tokens, decode, write the prompt's K/V into ``pool``."""
        t, a = self.torch, self.args
        length = self.batch_tokens // a.sequences
        ids = t.randint(0, self.model.config.vocab_size, (a.sequences, length), device=self.device)
        with t.inference_mode():
            out = self.model(input_ids=ids, use_cache=True, logits_to_keep=1)
            cache, generated = output_cache(out), 0
            if pool is not None:
                self._write(pool, cache)
            token = out.logits[:, -1:].argmax(-1)
            del out
            for _ in range(a.decode_steps):
                out = self.model(
                    input_ids=token, use_cache=True, logits_to_keep=1, **{cache_argument(self.model): cache}
                )
                token, generated = out.logits[:, -1:].argmax(-1), generated + a.sequences
                del out
            del cache
        _sync(t, self.device)
        return generated

    def _write(self, pool: Any, cache: Any) -> None:
        """Copy every layer's prompt keys and values into the next blocks of the pool, round-robin."""
        bs, seqs = self.args.block_size, self.args.sequences
        blocks, length = self.batch_tokens // bs, self.batch_tokens // seqs
        start = self.next_block if self.next_block + blocks <= pool.num_blocks else 0
        self.next_block = (start + blocks) % pool.num_blocks
        for layer, (k, v) in zip(pool.layers, layer_kv(cache), strict=True):
            elems = layer.view(self.dtype)
            split = bs * k.shape[1] * k.shape[3]
            for part, src in ((elems[:, :split], k), (elems[:, split:], v)):
                heads, dim = src.shape[1], src.shape[3]
                dst = part[start : start + blocks].view(seqs, blocks // seqs, bs, heads, dim)
                # views only: a copy through a reshaped temporary would allocate outside the profiled work
                dst.copy_(src[:, :, :length].permute(0, 2, 1, 3).unflatten(1, (blocks // seqs, bs)))

    def _warm_up(self, during_profile: Callable[[], None] | None) -> None:
        """Serving steps without the cache, as many as the allocator needs to reach its steady state
        (``PROFILE_PASSES``: its second pass reserves more than its first), then a one-token probe for every
        layer's K and V shapes."""
        t = self.torch
        for _ in range(PROFILE_PASSES):
            self.step()
        with t.inference_mode():
            probe = self.model(input_ids=t.zeros((1, 1), dtype=t.long, device=self.device), use_cache=True)
            self.kv_shapes = [
                (k.shape[1], k.shape[3], v.shape[1], v.shape[3]) for k, v in layer_kv(output_cache(probe))
            ]
            del probe
        if during_profile is not None:
            during_profile()

    def page_size(self) -> int:
        """Bytes of one block on one layer: ``block_size`` tokens of K and V, from the tensors the model made."""
        elem = self.torch.empty((), dtype=self.dtype).element_size()
        pages = {self.args.block_size * (kh * kd + vh * vd) * elem for kh, kd, vh, vd in self.kv_shapes}
        if len(pages) != 1:
            raise Failure(
                "plan",
                "unsupported_model",
                f"layers differ in K/V shape ({sorted(pages)} bytes a page); this engine pages uniform layers only",
            )
        return pages.pop()

    def size(self, during_profile: Callable[[], None] | None) -> KvCachePlan:
        a, out, t = self.args, self.out, self.torch
        try:  # before the device context and the model: the baseline, and the start-up check
            self.memory = EngineMemory(
                a.device, utilization=a.utilization, pinned_bytes=a.pinned, platform=self.platform
            )
        except NotEnoughMemoryError as exc:
            raise Failure("startup", "not_enough_memory", str(exc)) from exc
        baseline = self.memory.baseline
        out.update(total=baseline.total, requested=self.memory.requested, init_free=baseline.free)
        out["init_process"] = baseline.process
        if self.device.type != "cpu":
            t.cuda.set_device(self.device)
            t.empty(1, device=self.device)  # the device context, inside the measured share
        self.model = self._timed("model_s", lambda: build_model(a, t, self.device, self.dtype))
        weights = sum(p.numel() * p.element_size() for p in self.model.parameters())
        out.update(weights=weights, model_type=self.model.config.model_type, layers=self.model.config.num_hidden_layers)
        if a.pinned is not None:  # engines skip the memory profile when the size is given
            self._timed("profile_s", lambda: self._warm_up(during_profile))
            self._timed("graphs_s", self.capture_graphs)
        else:
            with self.memory.profile(weights_memory=weights):
                self._timed("profile_s", lambda: self._warm_up(during_profile))
            with self.memory.graphs():
                self._timed("graphs_s", self.capture_graphs)
        page, layers = self.page_size(), len(self.kv_shapes)
        out.update(page_size=page, kv_layers=layers, block_size=a.block_size)
        layout = KvLayout.per_layer() if a.kv_layout == "per-layer" else KvLayout.one_allocation()
        plans = {"process": _budget(lambda: self.memory.plan(page_size_bytes=page, num_layers=layers, layout=layout))}
        if a.pinned is None:
            profile = self.memory.profile_result
            out.update(
                after_profile_free=profile.after_profile.free, after_profile_process=profile.after_profile.process
            )
            shape = {"page_size_bytes": page, "num_layers": layers, "allocation_granularity": ALLOCATOR_GRANULARITY}
            plans["device"] = _budget(lambda: device_wide_plan(a, profile, weights, shape))
        out["budgets"] = {name: figures for name, (_, figures) in plans.items()}
        out["memory"] = self.memory.as_dict()
        plan, figures = plans["process" if a.pinned is not None else a.accounting]
        if plan is None:
            failure = figures["failure"]
            raise Failure(failure["stage"], failure["kind"], failure["message"])
        return plan

    def capture_graphs(self) -> None:
        """Decode CUDA graphs for batch sizes 1, 2, 4, ..., ``--max-graph-batch``, largest first, in one shared
        pool (vLLM's order): each graph runs one decode step's compute at its batch size (attention over the
        step's token; a paged kernel would read the cache outside it). Skipped, with a note, on the CPU."""
        a, t, out = self.args, self.torch, self.out
        sizes = [1 << i for i in range(a.max_graph_batch.bit_length()) if 1 << i <= a.max_graph_batch]
        if not a.graphs or self.device.type == "cpu":
            out["graphs"] = {"captured": [], "note": "not asked for" if not a.graphs else "no CUDA graphs on the CPU"}
            return
        pool, self.graphs = t.cuda.graph_pool_handle(), {}
        gc_collect_and_empty(t)  # as vLLM does before capturing
        with t.inference_mode():
            for bs in reversed(sizes):
                ids = t.zeros((bs, 1), dtype=t.long, device=self.device)
                stream = t.cuda.Stream(self.device)
                stream.wait_stream(t.cuda.current_stream(self.device))
                with t.cuda.stream(stream):  # warm-up on a side stream, as torch's capture recipe does
                    self.model(input_ids=ids, use_cache=False, logits_to_keep=1)
                t.cuda.current_stream(self.device).wait_stream(stream)
                graph = t.cuda.CUDAGraph()
                with t.cuda.graph(graph, pool=pool):
                    logits = self.model(input_ids=ids, use_cache=False, logits_to_keep=1).logits
                self.graphs[bs] = (graph, ids, logits)
        _sync(t, self.device)
        out["graphs"] = {"captured": sizes, "note": "one shared pool, largest batch first"}

    def _cached(self) -> tuple[int | None, int | None]:
        """Bytes torch's allocator holds cached and unused, and of them the bytes in segments holding no live
        tensor (the part a release can give back); ``None`` on the CPU, where it keeps no cache."""
        if self.device.type == "cpu":
            return None, None
        cuda = self.torch.cuda
        idle = sum(
            s["total_size"]
            for s in cuda.memory_snapshot()
            if s["device"] == self.device.index and s["allocated_size"] == 0
        )
        return cuda.memory_reserved(self.device) - cuda.memory_allocated(self.device), idle

    def allocate_and_serve(self, plan: KvCachePlan) -> None:
        a, t, d, out = self.args, self.torch, self.device, self.out
        out.update(
            plan=plan.as_dict(),
            explain=self.memory.explain(),
            kv_cache_bytes=plan.kv_cache_bytes,
            num_blocks=plan.num_blocks,
            block_bytes=plan.block_bytes,
            kv_tokens=plan.num_blocks * a.block_size,
        )
        if plan.num_blocks * a.block_size < self.batch_tokens:
            raise Failure(
                "plan",
                "not_enough_memory",
                f"{plan.num_blocks} blocks of {a.block_size} tokens cannot "
                f"hold one prefill of {self.batch_tokens} tokens",
            )
        out["allocator_cache_before_release"], out["idle_segments_before_release"] = self._cached()
        # --no-release shows what engines do today on the pinned path: allocate beside the profile's cached blocks
        out["released_before_kv"] = None if a.no_release else self.memory.release_allocator_cache()
        out["allocator_cache_at_kv_alloc"], out["idle_segments_at_kv_alloc"] = self._cached()
        self.stage, start = "kv_alloc", time.perf_counter()
        if a.kv_layout == "devmem" and not a.no_release:
            self.kv = self.memory.allocate()  # releases again (nothing left), then one allocation
        elif a.kv_layout == "devmem":
            self.kv = allocate_kv_cache(plan, len(self.kv_shapes), a.device, self.platform)
        else:  # the engine's own tensors, one per layer, as the plan assumed (KvLayout.per_layer())
            page = plan.block_bytes // len(self.kv_shapes)
            layers = tuple(t.zeros((plan.num_blocks, page), dtype=t.uint8, device=d) for _ in self.kv_shapes)
            self.kv = KvCacheTensors(None, layers, plan.num_blocks, page)
        self.timings["kv_alloc_s"] = time.perf_counter() - start
        _sync(t, d)
        out["kv_allocated_bytes"] = self.kv.nbytes
        if d.type == "cuda":  # where the serving steps' memory goes, for diagnosis
            out["torch_reserved_at_serve"] = t.cuda.memory_reserved(d)
            out["torch_allocated_at_serve"] = t.cuda.memory_allocated(d)
            t.cuda.reset_peak_memory_stats(d)
        start, generated = time.perf_counter(), 0
        replay = min((bs for bs in self.graphs if bs >= a.sequences), default=None)
        for _ in range(a.rounds):
            generated += self.step(self.kv)
            if replay is not None:  # a captured decode step, replayed: it allocates nothing
                self.graphs[replay][0].replay()
        self.timings["serve_s"] = time.perf_counter() - start
        if d.type == "cuda":
            out["torch_reserved_peak_serving"] = t.cuda.max_memory_reserved(d)
            out["torch_allocated_peak_serving"] = t.cuda.max_memory_allocated(d)
            stats = t.cuda.memory_stats(d)
            out["torch_segments_after_serve"] = {
                k: stats.get(k)
                for k in (
                    "segment.all.current",
                    "segment.large_pool.current",
                    "segment.small_pool.current",
                    "reserved_bytes.large_pool.current",
                    "reserved_bytes.small_pool.current",
                    "inactive_split_bytes.all.current",
                )
            }
        out.update(prefill_tokens=a.rounds * self.batch_tokens, generated_tokens=generated)
        after = MemorySnapshot.measure(a.device, self.platform)
        footprint, source = device_footprint(t, d)
        out.update(
            process_after_serve=after.process,
            free_after_serve=after.free,
            footprint=footprint,
            footprint_source=source,
            torch_reserved_after_serve=after.torch_reserved if after.torch_measured else None,
        )
        if a.hold > 0:
            time.sleep(a.hold)

    def release(self) -> None:
        """Give back everything this run holds (so a process can run the engine again)."""
        self.kv, self.model, self.graphs = None, None, {}
        if self.device.type != "cpu":
            self.torch.cuda.synchronize(self.device)
            self.torch.cuda.empty_cache()


def device_wide_plan(args: argparse.Namespace, profile: Any, weights: int, shape: dict[str, int]) -> KvCachePlan:
    """The device-wide method of today's engines (vLLM's ``determine_available_memory``), reproduced.

    Non-KV memory is the drop of free memory since the init snapshot, whoever caused it, plus torch's allocated
    peak; vLLM asserts ``init_free >= free`` after profiling, so a co-tenant's release aborts start-up.
    """
    init_free, free = profile.baseline.free, profile.after_profile.free
    if not init_free >= free:
        raise Failure(
            "profile",
            "assertion",
            f"Error in memory profiling. Initial free memory {init_free / 2**30:.2f} GiB, current free "
            f"memory {free / 2**30:.2f} GiB. This happens when other processes sharing the same "
            "container release GPU memory while vLLM is profiling during initialization. "
            "(vLLM's assertion, reproduced by the device-wide method)",
        )
    consumed = init_free - free
    torch_growth = profile.after_profile.torch_reserved - profile.baseline.torch_reserved
    return plan_kv_cache(
        total=profile.baseline.total,
        utilization=args.utilization,
        consumed=consumed,
        weights=weights,
        transient_peak_bytes=profile.transient_allocated_bytes,
        non_torch=max(0, consumed - torch_growth),
        **shape,
    )


def _budget(make: Callable[[], KvCachePlan]) -> tuple[KvCachePlan | None, dict[str, object]]:
    try:
        plan = make()
    except Failure as exc:
        return None, {"kv_cache_bytes": None, "num_blocks": None, "failure": exc.as_dict()}
    except NotEnoughMemoryError as exc:
        return None, {
            "kv_cache_bytes": None,
            "num_blocks": None,
            "failure": Failure("plan", "not_enough_memory", str(exc)).as_dict(),
        }
    return plan, {"kv_cache_bytes": plan.kv_cache_bytes, "num_blocks": plan.num_blocks, "failure": None}


def _is_oom(torch: Any, exc: BaseException) -> bool:
    return isinstance(exc, torch.OutOfMemoryError) or (
        isinstance(exc, RuntimeError) and "can't allocate memory" in str(exc)
    )


def run(argv: list[str] | None = None, *, during_profile: Callable[[], None] | None = None) -> dict[str, Any]:
    """Run the engine once and return its figures (what ``main`` prints as JSON).

    ``during_profile`` is called inside the profile window, where a real engine's co-tenants act (tests use it
    to release a co-tenant's memory at a known moment).
    """
    start = time.perf_counter()
    args = parse_args(argv)
    if args.expandable_segments:
        os.environ["PYTORCH_CUDA_ALLOC_CONF"] = "expandable_segments:True"
    import torch

    if args.expandable_segments and torch.cuda.is_available():
        torch.cuda.memory._set_allocator_settings("expandable_segments:True")
    platform = devmem.current_platform()
    device = torch.device("cpu") if platform.name == "cpu" else torch.device("cuda", args.device)
    out: dict[str, Any] = {
        "pid": os.getpid(),
        "accounting": "pinned" if args.pinned is not None else args.accounting,
        "platform": platform.name,
        "device": args.device,
        "torch_device": str(device),
        "torch": torch.__version__,
        "model": args.config or args.model,
        "utilization": args.utilization,
        "pinned": args.pinned,
        "sequences": args.sequences,
        "decode_steps": args.decode_steps,
        "rounds": args.rounds,
        "expandable_segments": args.expandable_segments,
        "release": not args.no_release,
        "start_at": args.start_at,
        "ok": False,
        "failure": None,
    }
    try:
        engine = Engine(args, torch, platform, device)
    except Failure as exc:
        return {**out, "failure": exc.as_dict()}
    engine.timings["ready_s"] = time.perf_counter() - start
    if args.start_at is not None:
        time.sleep(max(0.0, args.start_at - time.time()))
        out["late_s"] = max(0.0, time.time() - args.start_at)
    try:
        try:
            engine.allocate_and_serve(engine.size(during_profile))
            out["ok"] = True
        except Failure as exc:
            out["failure"] = exc.as_dict()
        except (RuntimeError, MemoryError) as exc:
            if not (isinstance(exc, MemoryError) or _is_oom(torch, exc)):
                raise
            out["failure"] = Failure(engine.stage, "out_of_memory", str(exc).splitlines()[0]).as_dict()
    finally:
        engine.release()
    out.update(engine.out)
    engine.timings["total_s"] = time.perf_counter() - start
    out["timings_s"] = engine.timings
    return out


def summary(result: dict[str, Any]) -> str:
    """The result for a person: the engine, the device, the KV cache and where its size came from, what was
    served, how long each stage took, or the failure (every figure: ``--json``)."""
    from devmem.units import format_share, format_size

    def size(key: str) -> str:
        return "-" if result.get(key) is None else format_size(result[key])

    lines = [
        f"engine: {result['model']} ({result.get('model_type', '?')}, {result.get('layers', '?')} layers, "
        f"{result.get('dtype', '?')}) on {result['platform']} device {result['device']} "
        f"(torch device {result['torch_device']}): {'ok' if result['ok'] else 'failed'}"
    ]
    if result.get("total") is not None:
        asked = (
            f"pinned {format_size(result['pinned'])}"
            if result.get("pinned") is not None
            else f"utilization {format_share(result['utilization'])}, {size('requested')}"
        )
        lines.append(f"device: {size('init_free')} free of {size('total')} at start; asked for {asked}")
    if result.get("num_blocks") is not None:
        lines.append(
            f"KV cache: {size('kv_cache_bytes')} = {result['num_blocks']} blocks of {result['block_size']} tokens "
            f"({result['kv_tokens']} tokens), sized by {result['accounting']} accounting"
        )
    if result.get("generated_tokens") is not None:
        held = f"; this process held {size('process_after_serve')}" if result.get("process_after_serve") else ""
        lines.append(f"served: {result['prefill_tokens']} prefill tokens, {result['generated_tokens']} generated{held}")
    failure = result.get("failure")
    if failure:
        lines.append(f"failure at {failure['stage']}: {failure['kind']}: {failure['message']}")
    timings = result.get("timings_s") or {}
    if timings:
        lines.append("time: " + ", ".join(f"{k.removesuffix('_s')} {v:.1f} s" for k, v in timings.items()))
    return "\n".join([*lines, "every figure: --json"])


def main(argv: list[str] | None = None) -> int:
    result = run(argv)
    as_json = "--json" in (sys.argv[1:] if argv is None else argv) or not sys.stdout.isatty()
    print(json.dumps(result) if as_json else summary(result), flush=True)
    return 0 if result["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
