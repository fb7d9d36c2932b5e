"""vLLM's GPU worker (``vllm.v1.worker.gpu_worker.Worker``, 0.24 onward, both model runners) driven by
:class:`devmem.EngineMemory`. What differs between releases is read from the classes (docs/vllm.md's table):

- ``init_device``: the :class:`~devmem.EngineMemory` is created first, before vLLM creates the CUDA context: the
  baseline, and the reservation of ``gpu_memory_utilization x total`` (0.34's ``None``: its resolved value), or of a
  pinned ``kv_cache_memory_bytes`` plus the weights beside it, so an over-committed start is refused
  (:class:`~devmem.ReservationRefused`) before any weight loads. The device is the one vLLM will pick
  (``ParallelConfig.get_local_gpu_index`` where it exists), checked after vLLM picked it.
- ``determine_available_memory`` (replaced): the runner's profile run inside ``memory.profile(...)``, in the
  contexts and with the arguments the release's own method uses; where the runner estimates its CUDA graphs by a
  throwaway capture (V1; V2 from 0.30), that estimate inside ``memory.graphs()``; graphs are always captured after
  the cache, so the plan is told so (``GraphsAfterCache``: vLLM's estimate, and what an earlier start's capture kept,
  from devmem's profile store); then the release's multimodal IPC set-aside. vLLM prints devmem's figure as
  "Available KV cache memory". No assertion where another process frees memory.
- ``initialize_from_config``: the allocator cache released right before vLLM allocates the KV cache.
- ``compile_or_warm_up_model``: capture inside ``memory.graphs_after_cache()`` (checked and stored); on 0.34 the
  extensible KV cache's measurement made process-scoped (``measure_kv_cache_blocks``), or, where that function has
  another shape, the extensible cache turned off (``extensible_kv_cache_unsupported_reason``), with one log line.
- ``shutdown``: the reservation released (``EngineMemory.close()``).
"""

from __future__ import annotations

import contextlib
import contextvars
import functools
import inspect
import logging
import os
from collections.abc import Callable
from types import ModuleType
from typing import Any

from devmem.engine.distributed import agree_on_minimum
from devmem.engine.graphs import GraphsAfterCache
from devmem.engine.memory import EngineMemory, KvLayout
from devmem.engine.profile_store import ProfileStore
from devmem.engine.profiling import ProfileResult
from devmem.integrations import kit
from devmem.integrations.vllm.versions import RUNNER_METHODS, shape_mismatches
from devmem.units import format_size

log = logging.getLogger("vllm.devmem")

#: The attribute of a patched vLLM class that says devmem patched it.
PATCHED = "_devmem_patched"
#: The attribute under which a worker keeps its EngineMemory.
MEMORY = "devmem_memory"
#: The measurement function of 0.34's extensible KV cache (a global of the worker's module, read at call time).
MEASURE = "measure_kv_cache_blocks"

#: Bytes per logit that serving's sampling can take beyond vLLM's dummy sampler run (every row sampled with
#: temperature, top-k and top-p): the penalties' output-token counts (int64) with the prompt and output masks (bool),
#: and the fp32 logprobs of the raw logits, kept while the batch is sampled (docs/vllm.md, "The sampler").
PENALTY_BYTES, LOGPROB_BYTES = 10, 4

starts = kit.Starts(log)
_warming: contextvars.ContextVar[EngineMemory | None] = contextvars.ContextVar("devmem_vllm_warming", default=None)


def _memory(worker: Any) -> EngineMemory | None:
    return getattr(worker, MEMORY, None)


def patch_worker(worker_class: Any, module: ModuleType | None = None) -> bool:
    """Wrap ``worker_class``'s methods (vLLM's GPU worker; ``module``, its module, for 0.34's extensible cache);
    ``False``, with one warning, where their shapes are not the ones this plugin knows. Patching twice is a no-op."""
    if worker_class.__dict__.get(PATCHED, False):
        return True
    mismatches = shape_mismatches(worker_class)
    if mismatches:
        log.warning(
            "devmem: vLLM's worker is not the shape this plugin knows (%s); vLLM sizes its KV cache itself",
            "; ".join(mismatches),
        )
        return False
    for name, step in (
        ("init_device", start),
        ("determine_available_memory", determine),
        ("initialize_from_config", allocate),
        ("compile_or_warm_up_model", warm_up),
        ("shutdown", stop),
    ):
        kit.wrap(worker_class, name, step, _memory)
    measure = getattr(module, MEASURE, None)
    if module is not None and measure is not None and not getattr(measure, kit.WRAPPED, False):
        params = kit.parameters(measure) or ()
        if params[:3] == ("kv_cache", "vllm_config", "device") and {"init_free_memory", "requested_memory"} <= set(
            params
        ):
            setattr(module, MEASURE, _process_scoped(measure))
        elif hasattr(worker_class, "extensible_kv_cache_unsupported_reason"):
            log.info("devmem: %s.%s has another shape: the extensible KV cache is turned off", module.__name__, MEASURE)
            kit.wrap(worker_class, "extensible_kv_cache_unsupported_reason", _extensible_off, _memory)
    setattr(worker_class, PATCHED, True)
    return True


def device_index(worker: Any) -> int:
    """The CUDA device (index among the visible ones) vLLM's ``init_device`` will give ``worker``: its local
    rank, moved by the data-parallel rank (``ParallelConfig.get_local_gpu_index`` where the release has it)."""
    from vllm.platforms import current_platform

    config, local = worker.parallel_config, worker.local_rank
    if callable(getattr(config, "get_local_gpu_index", None)):
        local = config.get_local_gpu_index(local)
    elif (
        config.distributed_executor_backend not in ("ray", "external_launcher")
        and config.data_parallel_backend != "ray"
        and config.nnodes_within_dp == 1
    ):
        dp = config.data_parallel_rank_local
        dp = config.data_parallel_index if dp is None else dp
        local += dp * config.pipeline_parallel_size * config.tensor_parallel_size
    return int(current_platform.logical_device_id_to_visible_device_id(local))


def _engine_memory(worker: Any, device: int, late: bool = False) -> EngineMemory:
    cache = worker.cache_config
    pinned = cache.kv_cache_memory_bytes or None
    utilization = getattr(cache, "resolved_gpu_memory_utilization", None)  # 0.34: None resolved by the cache mode
    utilization = cache.gpu_memory_utilization if utilization is None else utilization
    return EngineMemory(
        device,
        utilization=utilization,
        pinned_bytes=pinned,
        reserve_bytes=None if pinned is None else pinned + _weights_per_rank(worker),
        # the extensible cache's utilization is a cap on what it may grow to, not memory free at start (vLLM's own)
        check_startup=not getattr(cache, "enable_extensible_kv_cache", False),
        late=late,
    )


def _weights_per_rank(worker: Any) -> int:
    """What a pinned start's weights take on this rank, read before they load: the checkpoint's tensor bytes (a
    local folder), else counted from the model's config; 0, said once, where neither can be read."""
    from devmem.planner.models.memory import ModelMemory
    from devmem.planner.models.reading import checkpoint_weights

    model, ranks = worker.model_config, worker.parallel_config.tensor_parallel_size
    try:
        found = checkpoint_weights(model.model) if os.path.isdir(str(model.model)) else None
        if found is not None:
            return -(-found[0] // ranks)
        dtype = str(model.dtype).removeprefix("torch.")
        return ModelMemory.from_config(model.hf_config.to_dict(), tp=ranks, dtype=dtype).weights_bytes_per_rank
    except Exception as exc:  # an architecture devmem cannot count: the reservation covers the cache only
        log.warning("devmem: the weights beside the pinned cache cannot be counted (%s): reserved for the cache", exc)
        return 0


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


def _names(method: Callable[..., Any]) -> tuple[tuple[str, ...], dict[str, Any]]:
    """The global and attribute names ``method`` (a release's own) uses, and its module's globals: what tells the
    releases apart without a list of versions."""
    code = inspect.unwrap(method)
    return tuple(getattr(getattr(code, "__code__", None), "co_names", ())), getattr(code, "__globals__", {})


def determine(original: Callable[..., Any], worker: Any) -> int:
    """devmem's budget in place of vLLM's ``determine_available_memory`` (vLLM's own for a worker devmem did not
    start, or whose runner lacks what devmem calls: one warning, the share given back)."""
    memory = _memory(worker)
    if memory is None:
        return int(original(worker))
    missing = kit.shape_mismatches(type(worker.model_runner), RUNNER_METHODS)
    if missing:
        log.warning(
            "devmem: vLLM's model runner is not the shape this plugin knows (%s); vLLM sizes its KV cache itself",
            "; ".join(missing),
        )
        memory.close()
        setattr(worker, MEMORY, None)
        return int(original(worker))
    names, functions = _names(original)
    if "maybe_apply_startup_plan" in names and os.environ.get("VLLM_ENABLE_STARTUP_PLAN", "0") not in ("", "0"):
        log.info(
            "devmem: VLLM_ENABLE_STARTUP_PLAN: the saved plan is not applied; devmem sizes from this process's "
            "memory (graphs an earlier start captured are in devmem's profile store)"
        )
    import torch

    with torch.inference_mode():
        return available_memory(worker, memory, names, functions)


def available_memory(worker: Any, memory: EngineMemory, names: tuple[str, ...], functions: dict[str, Any]) -> int:
    """The KV cache bytes vLLM gets: devmem's plan for this process, less the release's multimodal IPC set-aside."""
    runner = worker.model_runner
    sampler, why = sampler_charge(worker)
    with memory.profile(weights_memory=int(runner.model_memory_usage)) as profile, contextlib.ExitStack() as stack:
        stack.enter_context(_held_while_sampling(runner, sampler, memory))
        if "_scoped_allocator_max_split" in names:
            stack.enter_context(worker._scoped_allocator_max_split(max_split_size_mb=20))
        if "set_current_vllm_config" in functions and "set_current_vllm_config" in names:
            stack.enter_context(functions["set_current_vllm_config"](worker.vllm_config))
        if "randomize_dummy_inputs" in names:
            runner.profile_run(randomize_inputs=worker.randomize_dummy_inputs)
        else:
            runner.profile_run()
    graphs = None
    if _captures_graphs(worker):  # always after the cache: measured there, and kept for the next start
        estimate = 0
        if _estimates_graphs(worker, runner):  # a throwaway capture into a pool it frees
            with memory.graphs():
                estimate = int(runner.profile_cudagraph_memory())
        graphs = GraphsAfterCache(estimate=estimate, store=ProfileStore(), key=_graph_key(worker, memory))
    page, layers = _kv_spec(worker)
    plan = memory.plan(page_size_bytes=page, num_layers=layers, layout=_layout(), graphs=graphs)
    budget, charge = plan.num_blocks * plan.block_bytes, plan.breakdown.get("graph_capture", 0)
    group = _tp_cpu_group()
    if group is not None:  # tensor-parallel ranks: every rank takes the smallest budget
        budget = agree_on_minimum(budget, group=group)
    kv = budget
    if "reserve_mm_ipc_gpu_memory" in names and "reserve_mm_ipc_gpu_memory" in functions:  # 0.30 onward
        mm = worker.model_config.multimodal_config
        kv = int(
            functions["reserve_mm_ipc_gpu_memory"](budget, mm, getattr(worker.parallel_config, "_api_process_count", 1))
        )
    elif "_reserve_mm_ipc_gpu_memory" in names:  # 0.25-0.26
        kv = int(worker._reserve_mm_ipc_gpu_memory(budget))
    worker.available_kv_cache_memory_bytes = budget
    worker.cudagraph_memory_estimate = charge
    worker.peak_activation_memory = profile.transient_peak_bytes
    worker.non_torch_memory = profile.non_torch_increase  # read by 0.24-0.26's suggestion line
    worker.total_consumed = profile.total_consumed  # read by 0.30's onward
    _log_sizing(worker, memory, profile, budget, plan.block_bytes, charge, kv)
    log.info("devmem: the profile charged %s for the heaviest sampling vLLM accepts: %s", format_size(sampler), why)
    return kv


def sampler_charge(worker: Any) -> tuple[int, str]:
    """What serving's heaviest sampling can take beyond vLLM's dummy sampler run, and why: penalties (and logprobs,
    where ``max_logprobs`` is not 0) over the largest batch, or prompt logprobs over the longest prefill chunk of one
    request (its logits and their fp32 logprobs), whichever is more."""
    model, scheduler = worker.model_config, worker.scheduler_config
    vocab, logprobs = int(model.get_vocab_size()), int(getattr(model, "max_logprobs", 0)) != 0
    tokens = int(scheduler.max_num_batched_tokens)
    rows, chunk = min(int(scheduler.max_num_seqs), tokens), min(tokens, int(model.max_model_len))
    decode = rows * vocab * (PENALTY_BYTES + (LOGPROB_BYTES if logprobs else 0))
    prompt = chunk * vocab * (int(getattr(model.dtype, "itemsize", 2)) + LOGPROB_BYTES) if logprobs else 0
    if prompt > decode:
        return prompt, f"prompt logprobs over a prefill chunk of {chunk} tokens x {vocab} logits"
    return decode, f"penalties{' and logprobs' if logprobs else ''} over {rows} requests x {vocab} logits"


@contextlib.contextmanager
def _held_while_sampling(runner: Any, nbytes: int, memory: EngineMemory) -> Any:
    """``nbytes`` held on the device while the profile run's dummy sampler runs (none where it runs no sampler)."""
    run = getattr(runner, "_dummy_sampler_run", None)
    if not callable(run) or nbytes <= 0:
        yield
        return
    import torch

    def _dummy_sampler_run(*args: Any, **kwargs: Any) -> Any:
        held = torch.empty(nbytes, dtype=torch.uint8, device=memory.torch_device)
        try:
            return run(*args, **kwargs)
        finally:
            del held

    runner._dummy_sampler_run = _dummy_sampler_run
    try:
        yield
    finally:
        runner.__dict__.pop("_dummy_sampler_run", None)


def _captures_graphs(worker: Any) -> bool:
    from vllm.config import CUDAGraphMode
    from vllm.platforms import current_platform

    cuda = getattr(current_platform, "is_cuda_alike", current_platform.is_cuda)()
    mode = worker.vllm_config.compilation_config.cudagraph_mode
    return bool(cuda and mode not in (None, CUDAGraphMode.NONE) and not worker.model_config.enforce_eager)


def _estimates_graphs(worker: Any, runner: Any) -> bool:
    """Whether the runner's ``profile_cudagraph_memory`` is a throwaway capture (V1's minimal cache; V2's
    ``capture_model(profile_only=...)``), not V2's placeholder (0.24-0.26) nor 0.34's 0 under the extensible cache."""
    if getattr(worker.cache_config, "enable_extensible_kv_cache", False):
        return False
    if not callable(getattr(runner, "profile_cudagraph_memory", None)):
        return False
    return hasattr(runner, "_init_minimal_kv_cache_for_profiling") or "profile_only" in (
        kit.parameters(type(runner).capture_model) or ()
    )


def _graph_key(worker: Any, memory: EngineMemory) -> dict[str, Any]:
    """Everything that changes what vLLM's graphs keep: the store's key for them."""
    from vllm import __version__

    model, compilation, runner = worker.model_config, worker.vllm_config.compilation_config, type(worker.model_runner)
    sizes = [int(n) for n in (compilation.cudagraph_capture_sizes or ())]
    return dict(
        engine="vllm",
        vllm=str(__version__),
        runner=f"{runner.__module__}.{runner.__name__}",
        model=str(model.model),
        dtype=str(model.dtype),
        max_model_len=int(model.max_model_len),
        max_num_seqs=int(worker.scheduler_config.max_num_seqs),
        cudagraph_mode=str(compilation.cudagraph_mode),
        capture_sizes=sizes,
        tp=int(worker.parallel_config.tensor_parallel_size),
        device_total=memory.baseline.total,
    )


def _layout() -> KvLayout:
    """One backing allocation where the release allocates so (``vllm.v1.worker.utils.allocate_kv_cache``, 0.30
    onward), else a tensor per layer."""
    from vllm.v1.worker import utils

    return KvLayout.tensors(1) if hasattr(utils, "allocate_kv_cache") else KvLayout.per_layer()


def _kv_spec(worker: Any) -> tuple[int, int]:
    """A block's page bytes on one layer and the number of layers, from vLLM's KV cache spec."""
    specs = worker.get_kv_cache_spec()
    pages = {spec.page_size_bytes for spec in specs.values()}
    if len(pages) != 1:  # layers of several page sizes: charge every layer the largest
        log.info("devmem: the KV cache's layers have pages of %s; each is charged the largest", sorted(pages))
    return max(pages), len(specs)


def _tp_cpu_group() -> Any:
    from vllm.distributed.parallel_state import get_tp_group, model_parallel_is_initialized

    return get_tp_group().cpu_group if model_parallel_is_initialized() else None


def _log_sizing(
    worker: Any, memory: EngineMemory, profile: ProfileResult, budget: int, block: int, charge: int, kv: int
) -> None:
    """vLLM's own "Available KV cache memory" line with devmem's figure, and devmem's line saying where it came from."""
    from vllm.utils.mem_utils import format_gib
    from vllm.v1.worker import gpu_worker

    gpu_worker.logger.info("Available KV cache memory: %s GiB", format_gib(budget))
    pinned, size = memory.pinned_bytes, format_size
    source = "process-scoped (this process's own memory)" if profile.process_scoped else "the device-wide fallback"
    asked = f"utilization {memory.utilization}" if pinned is None else "kv_cache_memory_bytes, for the cache"
    graphs = "" if memory.graph_charge is None else f" ({memory.graph_charge.source})"
    ipc = "" if kv == budget else f"; {size(budget - kv)} set aside for multimodal IPC"
    log.info(
        f"devmem sized the KV cache from {source}: {size(budget)} = {budget // block} blocks of {size(block)}; "
        f"requested {size(memory.requested if pinned is None else pinned)} of {size(memory.baseline.total)} ({asked}), "
        f"consumed {size(profile.total_consumed)}, transient {size(profile.transient_peak_bytes)}, CUDA graphs "
        f"charged {size(charge)}{graphs}{ipc}"
    )
    held, reserved = (pinned or 0) + profile.total_consumed + profile.transient_peak_bytes, memory.reservation
    if pinned is not None and reserved is not None and held > reserved.bytes:
        log.warning(
            f"devmem: this pinned start holds {size(held)} with its cache, {size(held - reserved.bytes)} more than "
            f"its reservation of {size(reserved.bytes)} (the cache and its weights): engines beside it may not fit"
        )
    log.debug("devmem: %s", memory.explain())


def allocate(original: Callable[..., Any], worker: Any, *args: Any, **kwargs: Any) -> Any:
    """The allocator cache released, then vLLM allocates its KV cache."""
    memory = _memory(worker)
    if memory is None:
        return original(worker, *args, **kwargs)
    memory.release_allocator_cache()
    result = original(worker, *args, **kwargs)
    starts.serving(memory)
    return result


def warm_up(original: Callable[..., Any], worker: Any, *args: Any, **kwargs: Any) -> Any:
    """vLLM's warm-up, with its CUDA graph capture inside ``memory.graphs_after_cache()`` (what it kept checked
    against the plan's charge and stored for the next start), and 0.34's extensible sizing made process-scoped."""
    memory = _memory(worker)
    if memory is None:
        return original(worker, *args, **kwargs)
    runner, token = worker.model_runner, _warming.set(memory)
    if memory.graphs_declared is not None:
        capture = runner.capture_model

        @functools.wraps(capture)
        def capture_model(*a: Any, **k: Any) -> Any:
            if k.get("profile_only"):
                return capture(*a, **k)
            with memory.graphs_after_cache():
                return capture(*a, **k)

        runner.capture_model = capture_model
    try:
        return original(worker, *args, **kwargs)
    finally:
        _warming.reset(token)
        runner.__dict__.pop("capture_model", None)


def _process_scoped(measure: Callable[..., int]) -> Callable[..., int]:
    """0.34's ``measure_kv_cache_blocks`` on this process's memory: vLLM counts all the device's memory used since
    its start as its own (``init_free - free``); given ``init_free = free + own - own at devmem's baseline``, it
    counts only what this process took, within devmem's share."""

    @functools.wraps(measure)
    def measure_kv_cache_blocks(kv_cache: Any, vllm_config: Any, device: Any, *args: Any, **kwargs: Any) -> int:
        memory = _warming.get()
        own = (
            None
            if memory is None or memory.baseline.process is None
            else memory.platform.get_process_memory_usage(memory.device)
        )
        if memory is None or own is None:
            return measure(kv_cache, vllm_config, device, *args, **kwargs)
        from vllm.utils.mem_utils import device_memory_info

        free, _ = device_memory_info(device)
        kwargs["init_free_memory"] = free + own - (memory.baseline.process or 0)
        kwargs["requested_memory"] = min(int(kwargs["requested_memory"]), memory.requested)
        log.info(
            "devmem: the extensible KV cache is sized from this process's memory: %s held since its start, within %s",
            format_size(own - (memory.baseline.process or 0)),
            format_size(kwargs["requested_memory"]),
        )
        return measure(kv_cache, vllm_config, device, *args, **kwargs)

    setattr(measure_kv_cache_blocks, kit.WRAPPED, True)
    return measure_kv_cache_blocks


def _extensible_off(original: Callable[..., Any], worker: Any) -> str | None:
    """0.34's extensible cache turned off where devmem cannot make its measurement process-scoped."""
    reason = original(worker)
    if reason is None and _memory(worker) is not None:
        return "devmem sizes the KV cache, and cannot make this release's extensible sizing process-scoped"
    return reason


def stop(original: Callable[..., Any], worker: Any, *args: Any, **kwargs: Any) -> Any:
    """vLLM's shutdown, then the reservation released."""
    try:
        return original(worker, *args, **kwargs)
    finally:
        memory = _memory(worker)
        if memory is not None:
            memory.close()


__all__ = ["MEMORY", "PATCHED", "available_memory", "device_index", "patch_worker"]
