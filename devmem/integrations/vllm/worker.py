"""vLLM's GPU worker (``vllm.v1.worker.gpu_worker.Worker``, 0.24 onward, both model runners) driven by
:class:`devmem.EngineMemory`, method by method as docs/vllm.md's table says. Releases are told apart by what their
classes have, never by a list of versions: the version only declines a release older than the first the plugin
knows, and says so in one line of one newer than the newest verified (tried where the shapes match).
"""

from __future__ import annotations

import contextlib
import functools
import logging
import os
from collections.abc import Callable
from types import ModuleType
from typing import Any

from devmem.engine.distributed import agree_on_minimum
from devmem.engine.graphs import GraphsAfterCache
from devmem.engine.memory import EngineMemory, KvLayout
from devmem.integrations import kit
from devmem.units import format_size

#: The environment variable that turns the plugin off (``0``, ``false``, ``no`` or ``off``).
ENABLE_ENV = "DEVMEM_VLLM"
log = logging.getLogger("vllm.devmem")  # a child of vLLM's logger: its lines appear in vLLM's log
switch = kit.Switch(ENABLE_ENV, "vLLM", log)

#: vLLM's GPU worker's module (one class, both runners, every release); the oldest release the plugin knows and the
#: releases it was verified on (docs/vllm.md says where: GPU or CPU).
WORKER_MODULE, OLDEST = "vllm.v1.worker.gpu_worker", (0, 24)
VERIFIED = tuple((0, minor) for minor in range(24, 35))  # every minor release, 0.24 to 0.34
#: The worker's methods the plugin wraps or calls, and the runner's (checked when it sizes), with the parameters it
#: passes (a method may take more, with defaults).
WORKER_METHODS = {
    "init_device": ("self",),
    "determine_available_memory": ("self",),
    "initialize_from_config": ("self", "kv_cache_config"),
    "compile_or_warm_up_model": ("self",),
    "get_kv_cache_spec": ("self",),
    "shutdown": ("self",),
}
RUNNER_METHODS = {"profile_run": ("self",), "capture_model": ("self",)}

#: The attribute under which a worker keeps its EngineMemory; 0.34's extensible cache's measurement function (a
#: global of the worker's module, read at call time).
MEMORY, MEASURE = "devmem_memory", "measure_kv_cache_blocks"
#: Bytes per logit serving's sampling takes beyond vLLM's dummy sampler run (docs/vllm.md, "The sampler"). The V1
#: runner's sampler materialises what it applies: the penalties' int64 token counts and bool masks, the raw logits' fp32
#: logprobs. The V2 runner's keeps its penalty counts from its start and gathers logprobs of chosen tokens only: an
#: fp32 copy of the logits (0.26.0: a copy in the logits' own dtype, made only where raw logprobs are returned), a
#: torch sort where top-k/top-p meets a batch under 8 rows (fp32 values, int64 indices, fp32 probabilities), prompt
#: logits 1,024 tokens at a time in the logits' dtype, and one fp32 row of the vocabulary per streaming multiprocessor
#: (at most one per request) that its top-k/top-p kernel keeps for the process's life.
PENALTY_BYTES, LOGPROB_BYTES, FP32_BYTES, SORT_BYTES = 10, 4, 4, 16
V2_PROMPT_CHUNK, V2_KERNEL_MIN_ROWS = 1024, 8
#: Bytes per requested logprob of a row, both samplers: the top-k's fp32 values and int64 indices, the chosen token
#: beside them (int64) and their fp32 scores. V1's allowed-token mask: a bool a logit per request slot, allocated at
#: the first request that sets ``allowed_token_ids`` and kept.
TOPK_BYTES, MASK_BYTES = 24, 1
#: The charges' names in ``explain()``: held beside the dummy sampler run, and (kept from their first use) across the
#: whole profile pass.
SAMPLER, KERNEL_ROWS, ALLOWED_MASK = (
    "the heaviest sampling vLLM accepts",
    "the rows vLLM's top-k/top-p kernel keeps",
    "vLLM's allowed-token mask",
)
#: The charges kept from their first use, held across the whole profile pass.
KEPT_CHARGES = (KERNEL_ROWS, ALLOWED_MASK)

starts, _memory = kit.Starts(log), kit.memory_of(MEMORY)


def patch_worker(worker_class: Any, module: ModuleType | None = None) -> bool:
    """Wrap ``worker_class``'s methods (``module``, its module, for 0.34's extensible cache); ``False``, with one
    warning, where their shapes are not the ones this plugin knows. Patching twice is a no-op."""
    if worker_class.__dict__.get(kit.PATCHED, False):
        return True
    steps = dict(init_device=start, determine_available_memory=determine, initialize_from_config=allocate)
    steps.update(compile_or_warm_up_model=warm_up, shutdown=stop)
    if not kit.patch_class(worker_class, steps, WORKER_METHODS, _memory, switch, "vLLM's worker"):
        return False
    measure = getattr(module, MEASURE, None)
    if module is not None and measure is not None and not getattr(measure, kit.WRAPPED, False):
        params = kit.parameters(measure) or ()
        takes = {"init_free_memory", "requested_memory"} <= {*params}
        if params[:3] == ("kv_cache", "vllm_config", "device") and takes:
            setattr(module, MEASURE, _process_scoped(measure))
        elif hasattr(worker_class, "extensible_kv_cache_unsupported_reason"):
            log.info("devmem: %s.%s has another shape: the extensible KV cache is turned off", module.__name__, MEASURE)
            kit.wrap(worker_class, "extensible_kv_cache_unsupported_reason", _extensible_off, _memory)
    return True


def device_index(worker: Any) -> int:
    """The CUDA device (index among the visible ones) vLLM's ``init_device`` will give ``worker``: its local
    rank, moved by the data-parallel rank (``ParallelConfig.get_local_gpu_index`` where the release has it)."""
    from vllm.platforms import current_platform

    config, local = worker.parallel_config, worker.local_rank
    if callable(getattr(config, "get_local_gpu_index", None)):
        local = config.get_local_gpu_index(local)
    elif config.distributed_executor_backend not in ("ray", "external_launcher") and (
        config.data_parallel_backend != "ray" and config.nnodes_within_dp == 1
    ):
        dp = config.data_parallel_rank_local
        dp = config.data_parallel_index if dp is None else dp
        local += dp * config.pipeline_parallel_size * config.tensor_parallel_size
    return int(current_platform.logical_device_id_to_visible_device_id(local))


def _engine_memory(worker: Any, device: int, late: bool = False) -> EngineMemory:
    cache, model, tp = worker.cache_config, worker.model_config, int(worker.parallel_config.tensor_parallel_size)
    pinned = cache.kv_cache_memory_bytes or None
    utilization = getattr(cache, "resolved_gpu_memory_utilization", None)  # 0.34: None resolved by the cache mode
    reserve = None  # a pinned start reserves its weights beside the cache
    if pinned is not None:
        reserve = pinned + kit.weights_per_rank(str(model.model), lambda: model.hf_config, str(model.dtype), tp, log)
    return EngineMemory(
        device,
        utilization=cache.gpu_memory_utilization if utilization is None else utilization,
        pinned_bytes=pinned,
        reserve_bytes=reserve,
        # the extensible cache's utilization is a cap on what it may grow to, not memory free at start (vLLM's own)
        check_startup=not getattr(cache, "enable_extensible_kv_cache", False),
        late=late,
    )


def start(original: Callable[..., Any], worker: Any, *args: Any, **kwargs: Any) -> Any:
    """The baseline and the reservation, then vLLM's ``init_device`` (which creates the CUDA context); where vLLM
    chose another device than predicted, the share moves there (the memory held since counted as this engine's)."""
    device = device_index(worker)
    starts.begin(worker, MEMORY, device, lambda: _engine_memory(worker, device))
    result = original(worker, *args, **kwargs)  # a failure here closes the memory (the wrapped method's kit)
    chosen = getattr(getattr(worker, "device", None), "index", None)
    if isinstance(chosen, int) and chosen != device:
        log.info("devmem: vLLM chose device %d, not %d: the share moves there", chosen, device)
        starts.begin(worker, MEMORY, chosen, lambda: _engine_memory(worker, chosen, late=True))
    return result


def determine(original: Callable[..., Any], worker: Any) -> int:
    """devmem's budget in place of vLLM's ``determine_available_memory`` (vLLM's own for a worker devmem did not
    start, or whose runner lacks what devmem calls: one warning, the share given back)."""
    memory = _memory(worker)
    missing = [] if memory is None else kit.shape_mismatches(type(worker.model_runner), RUNNER_METHODS)
    if missing:
        switch.declined(f"vLLM's model runner is not the shape this plugin knows ({'; '.join(missing)})")
        starts.drop(worker, MEMORY)
    if memory is None or missing:
        return int(original(worker))
    names, functions = kit.names_used(original)
    if "maybe_apply_startup_plan" in names and os.environ.get("VLLM_ENABLE_STARTUP_PLAN", "0") not in ("", "0"):
        log.info(
            "devmem: VLLM_ENABLE_STARTUP_PLAN: the saved plan is not applied; devmem sizes from this process's "
            "memory (graphs an earlier start captured are in devmem's profile store)"
        )
    import torch

    with torch.inference_mode():
        return available_memory(worker, memory, names, functions)


def available_memory(worker: Any, memory: EngineMemory, names: tuple[str, ...], functions: dict[str, Any]) -> int:
    """The KV cache bytes vLLM gets: devmem's plan for this process, less the release's multimodal IPC set-aside;
    vLLM's own "Available KV cache memory" line with devmem's figure, and devmem's line saying where it came from."""
    from vllm.distributed.parallel_state import get_tp_group, model_parallel_is_initialized
    from vllm.utils.mem_utils import format_gib
    from vllm.v1.worker import gpu_worker, utils

    runner, charges = worker.model_runner, sampler_charges(worker)
    with memory.profile(weights_memory=int(runner.model_memory_usage)) as profile, contextlib.ExitStack() as stack:
        for name in KEPT_CHARGES:  # kept from their first use: held beside every step of the pass
            if name in charges:
                stack.enter_context(memory.hold(name, *charges[name]))
        if SAMPLER in charges:
            sampling = charges[SAMPLER]
            stack.enter_context(kit.around(runner, "_dummy_sampler_run", lambda _: memory.hold(SAMPLER, *sampling)))
        if "_scoped_allocator_max_split" in names:
            stack.enter_context(worker._scoped_allocator_max_split(max_split_size_mb=20))
        if "set_current_vllm_config" in functions and "set_current_vllm_config" in names:
            stack.enter_context(functions["set_current_vllm_config"](worker.vllm_config))
        randomized = {"randomize_inputs": worker.randomize_dummy_inputs} if "randomize_dummy_inputs" in names else {}
        runner.profile_run(**randomized)
    graphs, specs = _graphs(worker, memory), worker.get_kv_cache_spec()
    pages = {spec.page_size_bytes for spec in specs.values()}
    if len(pages) != 1:  # layers of several page sizes: charge every layer the largest
        log.info("devmem: the KV cache's layers have pages of %s; each is charged the largest", sorted(pages))
    layout = KvLayout.tensors(1) if hasattr(utils, "allocate_kv_cache") else KvLayout.per_layer()
    plan = memory.plan(page_size_bytes=max(pages), num_layers=len(specs), layout=layout, graphs=graphs)
    budget = kv = plan.num_blocks * plan.block_bytes
    if model_parallel_is_initialized():  # tensor-parallel ranks: every rank takes the smallest budget
        budget = kv = agree_on_minimum(budget, group=get_tp_group().cpu_group)
    if "reserve_mm_ipc_gpu_memory" in names and "reserve_mm_ipc_gpu_memory" in functions:  # 0.30 onward
        processes = getattr(worker.parallel_config, "_api_process_count", 1)
        kv = int(functions["reserve_mm_ipc_gpu_memory"](budget, worker.model_config.multimodal_config, processes))
    elif "_reserve_mm_ipc_gpu_memory" in names:  # 0.25-0.26
        kv = int(worker._reserve_mm_ipc_gpu_memory(budget))
    worker.available_kv_cache_memory_bytes = budget
    worker.cudagraph_memory_estimate = plan.breakdown.get("graph_capture", 0)
    worker.peak_activation_memory = profile.transient_peak_bytes
    worker.non_torch_memory = profile.non_torch_increase  # read by 0.24-0.26's suggestion line
    worker.total_consumed = profile.total_consumed  # read by 0.30's onward
    gpu_worker.logger.info("Available KV cache memory: %s GiB", format_gib(budget))
    kit.log_sizing(log, memory, budget, plan.block_bytes, set_aside=(budget - kv, "multimodal IPC"))
    return kv


def sampler_charges(worker: Any) -> dict[str, tuple[int, str]]:
    """What serving's heaviest sampling takes beyond vLLM's dummy sampler run, by name (:data:`SAMPLER`, and what
    stays from its first use: :data:`KERNEL_ROWS` on the V2 runner, :data:`ALLOWED_MASK` on V1): bytes, and from
    which settings; none where this rank samples nothing (a pooling model, V2's earlier pipeline stages, which
    build no sampler). :data:`SAMPLER` is the larger of the largest batch's sampling (``min(max_num_seqs x (1 +
    speculative tokens), max_num_batched_tokens)`` rows with every option on and ``max_logprobs`` logprobs, the
    whole vocabulary where it is -1) and prompt logprobs over the longest prefill (``min(max_num_batched_tokens,
    max_model_len)`` tokens; none where ``max_logprobs`` is 0)."""
    model, scheduler, runner = worker.model_config, worker.scheduler_config, worker.model_runner
    sampler = getattr(runner, "sampler", None)
    if sampler is None or getattr(runner, "is_pooling_model", False):  # V2's earlier pipeline stages, pooling
        return {}
    vocab, most = int(model.get_vocab_size()), int(getattr(model, "max_logprobs", 0))  # 0: none, -1: every token
    tokens, seqs, length = int(scheduler.max_num_batched_tokens), int(scheduler.max_num_seqs), int(model.max_model_len)
    speculative = int(
        getattr(getattr(worker.vllm_config, "speculative_config", None), "num_speculative_tokens", 0) or 0
    )
    rows, chunk, logprobs = min(seqs * (1 + speculative), tokens), min(tokens, length), vocab if most < 0 else most
    itemsize = _logit_bytes(model)
    unsampled = (rows - min(seqs, tokens)) * vocab * itemsize  # logits of speculative rows the dummy run lacks
    said = f"vocabulary {vocab}, max_logprobs {most}, max_num_batched_tokens {tokens}"
    kept: dict[str, tuple[int, str]] = {}
    if getattr(sampler, "penalties_state", None) is None:  # V1's sampler
        per_row, per_token = PENALTY_BYTES + (LOGPROB_BYTES if most else 0), itemsize + LOGPROB_BYTES
        row_label, prompt_label = f"penalties{' and logprobs' if most else ''}", f"a prefill chunk of {chunk} tokens"
        kept[ALLOWED_MASK] = (seqs * vocab * MASK_BYTES, f"{seqs} request slots x {vocab} logits at 1 byte")
    else:  # V2's
        per_token, chunk = itemsize, min(chunk, V2_PROMPT_CHUNK)
        if rows < V2_KERNEL_MIN_ROWS:
            per_row, row_label = SORT_BYTES, "top-k/top-p's sort"
        elif _copies_in_fp32(sampler):
            per_row, row_label = FP32_BYTES, "an fp32 copy"
        else:  # a copy in the logits' dtype, for raw logprobs only
            per_row, row_label = (itemsize, "a copy for raw logprobs") if most else (0, "no copy (no logprobs)")
        prompt_label = f"chunks of {chunk} prompt tokens"
        if rows >= V2_KERNEL_MIN_ROWS:
            count = kernel_rows(_multiprocessors(runner), rows)
            why = f"{count} fp32 rows of {vocab} logits, one per multiprocessor up to {rows}"
            kept[KERNEL_ROWS] = (count * vocab * FP32_BYTES, why)
    decode = rows * (vocab * per_row + logprobs * TOPK_BYTES) + unsampled
    prompt = chunk * (vocab * per_token + logprobs * TOPK_BYTES) if most else 0
    topk = f"; {logprobs} logprobs a row at {TOPK_BYTES} bytes each" if logprobs else ""
    if prompt > decode:
        why = f"prompt logprobs over {prompt_label} x {vocab} logits at {per_token} bytes{topk}"
        return {SAMPLER: (prompt, f"{why} ({said}, max_model_len {length}; the batch: {format_size(decode)})"), **kept}
    spec = f", {speculative} speculative tokens" if speculative else ""
    why = f"{row_label} over {rows} rows x {vocab} logits at {per_row} bytes{topk}"
    return {SAMPLER: (decode, f"{why} ({said}, max_num_seqs {seqs}{spec})"), **kept}


def _logit_bytes(model: Any) -> int:
    """Bytes of one logit as the model's head writes it: its ``head_dtype`` where the release has one and it is set
    (an fp32 head), else the model's dtype (2 where neither says)."""
    for dtype in (getattr(model, "head_dtype", None), model.dtype):
        itemsize = getattr(dtype, "itemsize", None)
        if isinstance(itemsize, int):
            return itemsize
    return 2


def _copies_in_fp32(sampler: Any) -> bool:
    """Whether V2's sampler copies the batch's logits to fp32 before applying its options (every release but 0.26.0,
    whose ``apply_sampling_params`` clones them in their own dtype, for raw logprobs only): told by the names its
    code calls (``empty_like``), and taken as so wherever the code says neither (the larger charge)."""
    code = getattr(getattr(type(sampler), "apply_sampling_params", None), "__code__", None)
    names = set(getattr(code, "co_names", ()))
    return "empty_like" in names or "clone" not in names


def kernel_rows(multiprocessors: int | None, rows: int) -> int:
    """The rows V2's top-k/top-p kernel keeps: its programs (one per streaming multiprocessor, at most ``rows``)
    rounded up to a power of two, at most the multiprocessors; ``rows`` where their count is unknown."""
    if multiprocessors is None:
        return rows
    return min(1 << (min(multiprocessors, rows) - 1).bit_length(), multiprocessors)


def _multiprocessors(runner: Any) -> int | None:
    """The streaming multiprocessors of the runner's CUDA device; ``None`` off CUDA."""
    import torch

    device = getattr(runner, "device", None)
    if getattr(device, "type", None) != "cuda" or not torch.cuda.is_available():
        return None
    return int(torch.cuda.get_device_properties(device).multi_processor_count)


def _graphs(worker: Any, memory: EngineMemory) -> GraphsAfterCache | None:
    """vLLM's CUDA graphs (``None``: none), captured after the cache in every release, kept under all that changes
    them; its estimate where ``profile_cudagraph_memory`` is a throwaway capture (V1's minimal cache; V2's
    ``capture_model(profile_only=...)``), not V2's placeholder (0.24-0.26) nor 0.34's 0 under the extensible cache."""
    from vllm import __version__
    from vllm.config import CUDAGraphMode
    from vllm.platforms import current_platform

    model, compilation, runner = worker.model_config, worker.vllm_config.compilation_config, worker.model_runner
    cuda = getattr(current_platform, "is_cuda_alike", current_platform.is_cuda)()
    if not cuda or compilation.cudagraph_mode in (None, CUDAGraphMode.NONE) or model.enforce_eager:
        return None
    estimate = getattr(runner, "profile_cudagraph_memory", None)
    throwaway = hasattr(runner, "_init_minimal_kv_cache_for_profiling") or "profile_only" in (
        kit.parameters(type(runner).capture_model) or ()
    )
    if not callable(estimate) or not throwaway or getattr(worker.cache_config, "enable_extensible_kv_cache", False):
        estimate = None
    sizes = [int(n) for n in (compilation.cudagraph_capture_sizes or ())]
    key: dict[str, Any] = dict(engine="vllm", vllm=str(__version__), model=str(model.model), dtype=str(model.dtype))
    key.update(runner=f"{type(runner).__module__}.{type(runner).__name__}", max_model_len=int(model.max_model_len))
    key.update(max_num_seqs=int(worker.scheduler_config.max_num_seqs), cudagraph_mode=str(compilation.cudagraph_mode))
    key.update(capture_sizes=sizes, tp=int(worker.parallel_config.tensor_parallel_size))
    return kit.graphs_after_cache(memory, key, estimate)


allocate = kit.allocating(starts, _memory)  # the allocator cache released, then vLLM allocates its KV cache
stop = kit.closing(_memory)  # vLLM's shutdown, then the share given back


def warm_up(original: Callable[..., Any], worker: Any, *args: Any, **kwargs: Any) -> Any:
    """vLLM's warm-up, with its CUDA graph capture inside ``memory.graphs_after_cache()`` (what it kept checked
    against the plan's charge and stored for the next start), and 0.34's extensible sizing made process-scoped."""

    def captured(kwargs: dict[str, Any]) -> Any:  # V2's throwaway capture (profile_only) is no capture for good
        memory = _memory(worker)
        if memory is None or memory.graphs_declared is None or kwargs.get("profile_only"):
            return None
        return memory.graphs_after_cache()

    with kit.around(worker.model_runner, "capture_model", captured):
        return original(worker, *args, **kwargs)


def _process_scoped(measure: Callable[..., int]) -> Callable[..., int]:
    """0.34's ``measure_kv_cache_blocks`` (called by the warm-up) on this process's memory: vLLM counts all the
    device's memory used since its start as its own (``init_free - free``); given ``init_free = free + own - own at
    devmem's baseline``, it counts only what this process took, within devmem's share."""

    @functools.wraps(measure)
    def measure_kv_cache_blocks(kv_cache: Any, vllm_config: Any, device: Any, *args: Any, **kwargs: Any) -> int:
        memory = kit.current()
        grown = None if memory is None else kit.grown_since_baseline(memory)
        if memory is None or grown is None:
            return measure(kv_cache, vllm_config, device, *args, **kwargs)
        from vllm.utils.mem_utils import device_memory_info

        kwargs["init_free_memory"] = device_memory_info(device)[0] + grown
        kwargs["requested_memory"] = min(int(kwargs["requested_memory"]), memory.requested)
        said = f"{format_size(grown)} held since its start, within {format_size(kwargs['requested_memory'])}"
        log.info("devmem: the extensible KV cache is sized from this process's memory: %s", said)
        return measure(kv_cache, vllm_config, device, *args, **kwargs)

    setattr(measure_kv_cache_blocks, kit.WRAPPED, True)
    return measure_kv_cache_blocks


def _extensible_off(original: Callable[..., Any], worker: Any) -> str | None:
    """0.34's extensible cache turned off where devmem cannot make its measurement process-scoped."""
    reason = original(worker)
    if reason is None and _memory(worker) is not None:
        return "devmem sizes the KV cache, and cannot make this release's extensible sizing process-scoped"
    return reason


__all__ = ["MEMORY", "available_memory", "device_index", "patch_worker"]
