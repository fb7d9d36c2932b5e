#!/usr/bin/env python3
"""A minimal inference "engine" that sizes its KV cache with devmem's public API, as vLLM-style engines do.

1. Create the device context, wait for ``--start-at``, take the init snapshot and check that free memory
   covers ``u * total`` (``check_startup_memory``).
2. Load ``--weights`` bytes of random weight matrices.
3. Profile: real matmuls through the first layers, whose activations peak at ``--activation-peak`` bytes, plus
   ``--non-torch`` bytes held outside torch's allocator for the rest of the run, standing for NCCL and cuBLAS
   workspaces (``cuMemAlloc`` through ctypes on CUDA, ``hipMalloc`` on ROCm, a touched mmap on the cpu platform).
4. Plan the KV cache at utilization ``u`` from ``--accounting process`` (devmem's process-scoped budget) or
   ``--accounting device`` (today's device-wide method: non-KV = the drop of free memory since the init
   snapshot + the activation peak, with vLLM's assertion that free memory did not grow), or at ``--pinned``
   bytes. Both budgets are reported; the chosen one is allocated.
5. Release the allocator cache (``--no-release`` skips it, as engines do today on the pinned path), allocate
   whole blocks, measure, run ``--decode-steps`` decode steps (matmuls over the whole cache), hold the cache
   ``--hold`` seconds so co-tenants overlap, and free everything.

Prints ONE JSON line with every figure (bytes) and timing. A failure (free memory below the request at start,
vLLM's assertion, a budget below one block, out of memory) is reported there (``"ok": false``, ``"failure"``)
and the exit status is 1. On the ``cpu`` platform the device is host memory and torch runs on the CPU.

    python examples/engine.py --weights 4GiB --activation-peak 2GiB --non-torch 512MiB --utilization 0.45
"""

from __future__ import annotations

import argparse
import ctypes
import json
import mmap
import os
import statistics
import sys
import time
from typing import Any, Callable

import devmem
from devmem import (
    KvCachePlan,
    MemorySnapshot,
    NotEnoughMemoryError,
    check_startup_memory,
    memory_profiling,
    parse_size,
    plan_kv_cache,
    release_allocator_cache,
    requested_memory,
)

#: Layers the profile pass runs through; two [tokens, hidden] activations are alive at once.
PROFILE_LAYERS = 4
#: Cache rows one decode matmul reads at a time (keeps its output small).
DECODE_CHUNK_ROWS = 1 << 18
DECODE_BATCH = 8


class Failure(Exception):
    """A failure the engine reports in its JSON instead of crashing."""

    def __init__(self, stage: str, kind: str, message: str):
        super().__init__(message)
        self.stage, self.kind = stage, kind

    def as_dict(self) -> dict[str, str]:
        return {"stage": self.stage, "kind": self.kind, "message": str(self)}


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--device", type=int, default=0, help="device index (devmem's, after CUDA_VISIBLE_DEVICES)")
    p.add_argument("--accounting", choices=("process", "device"), default="process",
                   help="process: devmem's process-scoped budget; device: the device-wide method (vLLM's)")
    p.add_argument("--weights", type=parse_size, default=parse_size("64MiB"), help="bytes of weights (e.g. 4GiB)")
    p.add_argument("--activation-peak", type=parse_size, default=parse_size("32MiB"),
                   help="bytes the profile pass's activations peak at")
    p.add_argument("--non-torch", type=parse_size, default=parse_size("8MiB"),
                   help="bytes allocated outside torch's allocator during the profile pass")
    p.add_argument("--utilization", type=float, default=0.9, help="share of the device's total memory (u)")
    p.add_argument("--pinned", type=parse_size, default=None, help="KV cache bytes, instead of sizing by u")
    p.add_argument("--page-size", type=parse_size, default=parse_size("64KiB"), help="bytes of one page on one layer")
    p.add_argument("--layers", type=int, default=32, help="layers: one block is one page on every layer")
    p.add_argument("--hidden", type=int, default=None, help="hidden size (default 4096 on a GPU, 256 on the CPU)")
    p.add_argument("--decode-steps", type=int, default=3)
    p.add_argument("--no-release", action="store_true",
                   help="do not release the allocator cache before the KV allocation (what engines do today "
                        "on the pinned path)")
    p.add_argument("--start-at", type=float, default=None,
                   help="wall-clock time (seconds since the epoch) to take the init snapshot at, after the "
                        "device context exists, so several engines start at the same moment")
    p.add_argument("--hold", type=float, default=0.0, help="seconds to keep the KV cache before exiting")
    args = p.parse_args(argv)
    if not 0 < args.utilization <= 1:
        p.error(f"--utilization must be in (0, 1], got {args.utilization}")
    return args


class RawMemory:
    """Memory outside torch's allocator, held until :meth:`free`; the bytes are committed (touched)."""

    def __init__(self, torch: Any, device: Any, nbytes: int):
        self.nbytes = nbytes
        self._free: Callable[[], None] = lambda: None
        if nbytes == 0:
            return
        if device.type == "cpu":
            block = mmap.mmap(-1, nbytes)
            for offset in range(0, nbytes, mmap.PAGESIZE):
                block[offset] = 1
            self._free = block.close
        elif torch.version.hip:
            hip, ptr = ctypes.CDLL("libamdhip64.so"), ctypes.c_void_p()
            self._check("hipMalloc", hip.hipMalloc(ctypes.byref(ptr), ctypes.c_size_t(nbytes)))
            self._check("hipMemset", hip.hipMemset(ptr, 1, ctypes.c_size_t(nbytes)))
            self._free = lambda: self._check("hipFree", hip.hipFree(ptr))
        else:
            # torch made the device's primary context current on this thread; allocate in it.
            cuda, ctx, ptr = ctypes.CDLL("libcuda.so.1"), ctypes.c_void_p(), ctypes.c_uint64()
            self._check("cuCtxGetCurrent", cuda.cuCtxGetCurrent(ctypes.byref(ctx)))
            if not ctx.value:
                raise RuntimeError("no current CUDA context on this thread for the raw allocation")
            self._check("cuMemAlloc", cuda.cuMemAlloc_v2(ctypes.byref(ptr), ctypes.c_size_t(nbytes)))
            self._check("cuMemsetD8", cuda.cuMemsetD8_v2(ptr, ctypes.c_ubyte(1), ctypes.c_size_t(nbytes)))
            self._free = lambda: self._check("cuMemFree", cuda.cuMemFree_v2(ptr))

    @staticmethod
    def _check(what: str, rc: int) -> None:
        if rc != 0:
            raise RuntimeError(f"{what} failed with error {rc}")

    def free(self) -> None:
        release, self._free = self._free, (lambda: None)
        release()


def _sync(torch: Any, device: Any) -> None:
    if device.type != "cpu":
        torch.cuda.synchronize(device)


def load_weights(torch: Any, device: Any, dtype: Any, hidden: int, nbytes: int) -> list[Any]:
    """``nbytes`` of random [hidden, hidden] matrices (scaled to keep activations finite), the rest in one vector."""
    elem = torch.empty((), dtype=dtype).element_size()
    count, rest = divmod(nbytes, hidden * hidden * elem)
    weights = [torch.randn(hidden, hidden, device=device, dtype=dtype).mul_(hidden ** -0.5) for _ in range(count)]
    if rest >= elem:
        weights.append(torch.randn(rest // elem, device=device, dtype=dtype))
    _sync(torch, device)
    return weights


def profile_pass(torch: Any, device: Any, dtype: Any, hidden: int, weights: list[Any], peak_bytes: int) -> int:
    """A forward pass through the first layers whose two live activations total ``peak_bytes``, then a decode
    step over a small zeroed dummy cache, so every kernel the engine runs later is loaded (its code takes device
    memory on first use) before memory is measured. Returns the activation peak."""
    layers = [w for w in weights if w.dim() == 2][:PROFILE_LAYERS]
    elem = torch.empty((), dtype=dtype).element_size()
    dummy_cache = torch.zeros(DECODE_BATCH * hidden * elem, dtype=torch.uint8, device=device)
    decode(torch, device, dtype, hidden, dummy_cache, 1)
    tokens = peak_bytes // (2 * hidden * elem)
    if tokens == 0 or not layers:
        return 0
    x = torch.randn(tokens, hidden, device=device, dtype=dtype)
    for w in layers:
        x = (x @ w).relu_()
    _sync(torch, device)
    return 2 * tokens * hidden * elem


def decode(torch: Any, device: Any, dtype: Any, hidden: int, kv: Any, steps: int) -> list[float]:
    """``steps`` decode steps: a batch of queries against every row of the cache; seconds per step."""
    elem = torch.empty((), dtype=dtype).element_size()
    rows = kv.numel() // (hidden * elem)
    if rows == 0:
        return []
    cache = kv[: rows * hidden * elem].view(dtype).view(rows, hidden)
    queries = torch.randn(hidden, DECODE_BATCH, device=device, dtype=dtype)
    times = []
    for _ in range(steps):
        start = time.perf_counter()
        for part in cache.split(DECODE_CHUNK_ROWS):
            (part @ queries).amax()
        _sync(torch, device)
        times.append(time.perf_counter() - start)
    return times


def device_wide_plan(args: argparse.Namespace, profile: Any, weights: int, peak: int) -> KvCachePlan:
    """The device-wide method of today's engines (vLLM's ``determine_available_memory``), reproduced.

    Non-KV memory is the drop of free memory since the init snapshot, whoever caused it, plus the activation
    peak; vLLM asserts ``init_free >= free`` after profiling, so a co-tenant's release aborts start-up.
    """
    init_free, free = profile.baseline.free, profile.after_profile.free
    if not init_free >= free:
        raise Failure("profile", "assertion",
                      f"Error in memory profiling. Initial free memory {init_free / 2**30:.2f} GiB, current free "
                      f"memory {free / 2**30:.2f} GiB. This happens when other processes sharing the same "
                      "container release GPU memory while vLLM is profiling during initialization. "
                      "(vLLM's assertion, reproduced by the device-wide method)")
    consumed = init_free - free
    torch_growth = profile.after_profile.torch_reserved - profile.baseline.torch_reserved
    return plan_kv_cache(page_size_bytes=args.page_size, num_layers=args.layers, total=profile.baseline.total,
                         utilization=args.utilization, consumed=consumed, weights=weights, activation_peak=peak,
                         non_torch=max(0, consumed - torch_growth))


def process_plan(args: argparse.Namespace, profile: Any, peak: int) -> KvCachePlan:
    """devmem's budget: this process's own growth since the init snapshot plus the activation peak."""
    inputs = {**profile.plan_inputs(), "activation_peak": peak}
    return plan_kv_cache(page_size_bytes=args.page_size, num_layers=args.layers, total=profile.baseline.total,
                         utilization=args.utilization, **inputs)


def _budget(make: Callable[[], KvCachePlan]) -> tuple[KvCachePlan | None, dict[str, object]]:
    try:
        plan = make()
    except Failure as exc:
        return None, {"kv_cache_bytes": None, "num_blocks": None, "failure": exc.as_dict()}
    except NotEnoughMemoryError as exc:
        return None, {"kv_cache_bytes": None, "num_blocks": None,
                      "failure": Failure("plan", "not_enough_memory", str(exc)).as_dict()}
    return plan, {"kv_cache_bytes": plan.kv_cache_bytes, "num_blocks": plan.num_blocks, "failure": None}


def _is_oom(torch: Any, exc: BaseException) -> bool:
    return isinstance(exc, torch.OutOfMemoryError) or (
        isinstance(exc, RuntimeError) and "can't allocate memory" in str(exc))


class Engine:
    """One run: the state an engine holds (weights, workspaces, KV cache) and the figures it reports."""

    def __init__(self, args: argparse.Namespace, torch: Any, platform: Any, device: Any):
        self.args, self.torch, self.platform, self.device = args, torch, platform, device
        self.dtype = torch.float32 if device.type == "cpu" else torch.float16
        self.hidden = args.hidden or (256 if device.type == "cpu" else 4096)
        self.weights: list[Any] = []
        self.raw: RawMemory | None = None
        self.kv: Any = None
        self.out: dict[str, Any] = {"hidden": self.hidden, "dtype": str(self.dtype).replace("torch.", "")}
        self.timings: dict[str, float] = {}
        self.stage = "startup"

    def _timed(self, name: str, fn: Callable[[], Any]) -> Any:
        self.stage = name.removesuffix("_s")
        start = time.perf_counter()
        try:
            return fn()
        finally:
            self.timings[name] = time.perf_counter() - start

    def _profile_body(self, during_profile: Callable[[], None] | None) -> int:
        t, d = self.torch, self.device
        peak = profile_pass(t, d, self.dtype, self.hidden, self.weights, self.args.activation_peak)
        self.raw = RawMemory(t, d, self.args.non_torch)
        if during_profile is not None:
            during_profile()
        return peak

    def size(self, during_profile: Callable[[], None] | None) -> KvCachePlan:
        a, out = self.args, self.out
        baseline = MemorySnapshot.measure(a.device, self.platform)
        requested = requested_memory(baseline.total, a.utilization)
        out.update(total=baseline.total, requested=requested, init_free=baseline.free, init_process=baseline.process)
        try:
            check_startup_memory(baseline, requested, self.platform)
        except NotEnoughMemoryError as exc:
            raise Failure("startup", "not_enough_memory", str(exc)) from exc
        if self.device.type != "cpu":
            # The CUDA context, created after the init snapshot (which creates none), so that this process's
            # whole footprint, context included, is inside its requested share.
            self.torch.cuda.set_device(self.device)
            self.torch.empty(1, device=self.device)
            self.torch.cuda.synchronize(self.device)
            with_context = self.platform.get_process_memory_usage(a.device)
            if with_context is not None and baseline.process is not None:
                out["context_bytes"] = with_context - baseline.process
        self.weights = self._timed("weights_s", lambda: load_weights(
            self.torch, self.device, self.dtype, self.hidden, a.weights))
        weights = sum(w.numel() * w.element_size() for w in self.weights)
        out["weights_allocated"] = weights
        if a.pinned is not None:  # engines skip the memory profile when the size is given
            own_peak = self._timed("profile_s", lambda: self._profile_body(during_profile))
            out.update(activation_peak=own_peak, activation_peak_source="engine's own count (not profiled)")
            return plan_kv_cache(page_size_bytes=a.page_size, num_layers=a.layers, pinned_bytes=a.pinned,
                                 weights=weights, activation_peak=own_peak, non_torch=a.non_torch)
        self.stage, start = "profile", time.perf_counter()
        with memory_profiling(baseline, weights_memory=weights, platform=self.platform) as profile:
            own_peak = self._profile_body(during_profile)
        self.timings["profile_s"] = time.perf_counter() - start
        peak = profile.transient_peak_bytes if profile.torch_measured else own_peak
        out.update(activation_peak=peak, activation_peak_source="torch allocator" if profile.torch_measured else
                   "engine's own count (torch's CPU allocator keeps no statistics)",
                   profile={k: v for k, v in profile.as_dict().items() if k != "weights_memory"},
                   after_profile_free=profile.after_profile.free, after_profile_process=profile.after_profile.process)
        plans = {"process": _budget(lambda: process_plan(a, profile, peak)),
                 "device": _budget(lambda: device_wide_plan(a, profile, weights, peak))}
        out["budgets"] = {name: figures for name, (_, figures) in plans.items()}
        plan, figures = plans[a.accounting]
        if plan is None:
            failure = figures["failure"]
            raise Failure(failure["stage"], failure["kind"], failure["message"])
        return plan

    def _cached(self) -> int | None:
        """Bytes torch's allocator holds cached and unused (``None`` on the CPU, where it keeps no cache)."""
        if self.device.type == "cpu":
            return None
        return self.torch.cuda.memory_reserved(self.device) - self.torch.cuda.memory_allocated(self.device)

    def allocate_and_serve(self, plan: KvCachePlan) -> None:
        a, t, d, out = self.args, self.torch, self.device, self.out
        out.update(plan=plan.as_dict(), explain=plan.explain(), kv_cache_bytes=plan.kv_cache_bytes,
                   num_blocks=plan.num_blocks, block_bytes=plan.block_bytes)
        out["allocator_cache_before_release"] = self._cached()
        out["released_before_kv"] = None if a.no_release else self._timed(
            "release_s", lambda: release_allocator_cache(a.device))
        out["allocator_cache_at_kv_alloc"] = self._cached()
        nbytes = plan.num_blocks * plan.block_bytes

        def allocate() -> Any:
            kv = t.zeros(nbytes, dtype=t.uint8, device=d)
            _sync(t, d)
            return kv

        self.kv = self._timed("kv_alloc_s", allocate)
        after = MemorySnapshot.measure(a.device, self.platform)
        out.update(kv_allocated_bytes=nbytes, process_after_kv=after.process, free_after_kv=after.free,
                   torch_reserved_after_kv=after.torch_reserved if after.torch_measured else None)
        steps = self._timed("decode_s", lambda: decode(t, d, self.dtype, self.hidden, self.kv, a.decode_steps))
        self.timings["decode_step_median_s"] = statistics.median(steps) if steps else 0.0
        if a.hold > 0:
            time.sleep(a.hold)

    def release(self) -> None:
        """Give back everything this run holds (so a process can run the engine again)."""
        self.kv, self.weights = None, []
        if self.raw is not None:
            self.raw.free()
            self.raw = None
        if self.device.type != "cpu":
            self.torch.cuda.synchronize(self.device)
            self.torch.cuda.empty_cache()


def run(argv: list[str] | None = None, *, during_profile: Callable[[], None] | None = None) -> dict[str, Any]:
    """Run the engine once and return its figures (what ``main`` prints as JSON).

    ``during_profile`` is called inside the profile window, where a real engine's co-tenants act (tests use it
    to release a co-tenant's memory at a known moment).
    """
    start = time.perf_counter()
    args = parse_args(argv)
    import torch

    platform = devmem.current_platform()
    device = torch.device("cpu") if platform.name == "cpu" else torch.device("cuda", args.device)
    out: dict[str, Any] = {
        "pid": os.getpid(), "accounting": "pinned" if args.pinned is not None else args.accounting,
        "platform": platform.name, "device": args.device, "torch_device": str(device), "torch": torch.__version__,
        "weights": args.weights, "activation_peak_target": args.activation_peak, "non_torch": args.non_torch,
        "utilization": args.utilization, "pinned": args.pinned, "page_size": args.page_size, "layers": args.layers,
        "decode_steps": args.decode_steps, "release": not args.no_release, "start_at": args.start_at,
        "ok": False, "failure": None,
    }
    engine = Engine(args, torch, platform, device)
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


def main(argv: list[str] | None = None) -> int:
    result = run(argv)
    print(json.dumps(result), flush=True)
    return 0 if result["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
