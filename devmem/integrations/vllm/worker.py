"""vLLM's GPU worker (``vllm.v1.worker.gpu_worker.Worker``, 0.24) driven by :class:`devmem.EngineMemory`.

- ``init_device``: the :class:`~devmem.EngineMemory` is created first, before vLLM creates the CUDA context: the
  baseline, and the reservation of ``gpu_memory_utilization x total`` (or ``kv_cache_memory_bytes``) on devmem's
  ledger, so an over-committed start is refused (:class:`~devmem.ReservationRefused`) before any weight loads.
- ``determine_available_memory`` (replaced): vLLM's profile run inside ``memory.profile(weights_memory=...)``;
  where CUDA graphs will be captured, vLLM's own graph profiling (``profile_cudagraph_memory``) inside
  ``memory.graphs()``, a throwaway capture (vLLM 0.24 captures them for good after the KV cache exists); then
  ``memory.plan(..., graphs=GraphsAfterCache(estimate=<vLLM's estimate>))`` for vLLM's KV cache spec, charged the
  larger of vLLM's estimate and what the window reached, tensor-parallel ranks agreeing on the smallest budget.
  What vLLM gets back, and prints as "Available KV cache memory", is the planned blocks' bytes. No assertion
  where another process frees memory.
- ``initialize_from_config``: the allocator cache released right before vLLM allocates the KV cache.
- ``compile_or_warm_up_model``: what graph capture and warm-up kept, measured and logged beside the charge.
- ``shutdown``: the reservation released (``EngineMemory.close()``).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from devmem.engine.distributed import agree_on_minimum
from devmem.engine.graphs import GraphsAfterCache
from devmem.engine.memory import EngineMemory, KvLayout
from devmem.engine.profiling import MemorySnapshot
from devmem.integrations.kit import Starts, wrap
from devmem.integrations.vllm.versions import shape_mismatches
from devmem.units import format_size

log = logging.getLogger("vllm.devmem")

#: The attribute of a patched vLLM class that says devmem patched it.
PATCHED = "_devmem_patched"
#: The attribute under which a worker keeps its EngineMemory.
MEMORY = "devmem_memory"


starts = Starts(log)


def _memory(worker: Any) -> EngineMemory | None:
    return getattr(worker, MEMORY, None)


def patch_worker(worker_class: Any, runner_class: Any = None) -> bool:
    """Wrap ``worker_class``'s methods (vLLM's GPU worker); ``False``, with one warning, where their shapes
    are not the ones this plugin was verified on. Patching twice is a no-op."""
    if worker_class.__dict__.get(PATCHED, False):
        return True
    if runner_class is None:
        from vllm.v1.worker.gpu_model_runner import GPUModelRunner

        runner_class = GPUModelRunner
    mismatches = shape_mismatches(worker_class, runner_class)
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
        wrap(worker_class, name, step, _memory)
    setattr(worker_class, PATCHED, True)
    return True


def determine(original: Callable[..., Any], worker: Any) -> int:
    """devmem's budget in place of vLLM's ``determine_available_memory`` (vLLM's own for a worker devmem did not
    start)."""
    if _memory(worker) is None:
        return int(original(worker))
    import torch

    with torch.inference_mode():
        return available_memory(worker)


def device_index(worker: Any) -> int:
    """The CUDA device (index among the visible ones) vLLM 0.24's ``init_device`` will give ``worker``: its local
    rank, moved by the data-parallel rank where vLLM does so, mapped to the visible device."""
    from vllm.platforms import current_platform

    config = worker.parallel_config
    local = worker.local_rank
    if (
        config.distributed_executor_backend not in ("ray", "external_launcher")
        and config.data_parallel_backend != "ray"
        and config.nnodes_within_dp == 1
    ):
        dp = config.data_parallel_rank_local
        dp = config.data_parallel_index if dp is None else dp
        local += dp * config.pipeline_parallel_size * config.tensor_parallel_size
    return int(current_platform.logical_device_id_to_visible_device_id(local))


def start(original: Callable[..., Any], worker: Any, *args: Any, **kwargs: Any) -> Any:
    """The baseline and the reservation, then vLLM's ``init_device`` (which creates the CUDA context); a worker on
    vLLM's V2 model runner, which the plugin was not verified on, is left stock with one warning."""
    if getattr(worker, "use_v2_model_runner", False):
        log.warning(
            "devmem: vLLM runs its V2 model runner (VLLM_USE_V2_MODEL_RUNNER, or the model's default), which this "
            "plugin was not verified on; vLLM sizes its KV cache itself (VLLM_USE_V2_MODEL_RUNNER=0 for devmem's)"
        )
        return original(worker, *args, **kwargs)
    cache = worker.cache_config
    device = device_index(worker)
    starts.begin(
        worker,
        MEMORY,
        device,
        lambda: EngineMemory(
            device,
            utilization=cache.gpu_memory_utilization,
            pinned_bytes=cache.kv_cache_memory_bytes or None,
        ),
    )
    return original(worker, *args, **kwargs)  # a failure here closes the memory (the patched method's wrapper)


def available_memory(worker: Any) -> int:
    """The KV cache bytes vLLM gets: devmem's plan for this process, less the CUDA graph pool vLLM captures later."""
    memory: EngineMemory = getattr(worker, MEMORY)
    runner = worker.model_runner
    with memory.profile(weights_memory=int(runner.model_memory_usage)) as profile:
        runner.profile_run()
    graphs = None
    if _captures_graphs(worker):  # vLLM measures its graphs here, and captures them for good beside the cache
        with memory.graphs():
            graphs = GraphsAfterCache(estimate=int(runner.profile_cudagraph_memory()))
    page, layers = _kv_spec(worker)
    plan = memory.plan(page_size_bytes=page, num_layers=layers, layout=KvLayout.per_layer(), graphs=graphs)
    budget, charge = plan.num_blocks * plan.block_bytes, plan.breakdown.get("graph_capture", 0)
    group = _tp_cpu_group()
    if group is not None:  # tensor-parallel ranks: every rank takes the smallest budget
        budget = agree_on_minimum(budget, group=group)
    worker.available_kv_cache_memory_bytes = budget
    worker.cudagraph_memory_estimate = charge
    worker.peak_activation_memory = profile.transient_peak_bytes
    worker.non_torch_memory = profile.non_torch_increase
    worker.devmem_graph_charge = charge
    _log_vllm_line(budget)
    source = (
        "process-scoped (this process's own memory)"
        if profile.process_scoped
        else "the device-wide fallback (the platform cannot attribute memory to processes)"
    )
    log.info(
        "devmem sized the KV cache from %s: %s = %d blocks of %s; requested %s of %s (%s), "
        "consumed %s, transient %s, CUDA graphs charged %s",
        source,
        format_size(budget),
        budget // plan.block_bytes,
        format_size(plan.block_bytes),
        format_size(memory.requested if memory.pinned_bytes is None else memory.pinned_bytes),
        format_size(memory.baseline.total),
        f"utilization {memory.utilization}" if memory.pinned_bytes is None else "kv_cache_memory_bytes, for the cache",
        format_size(profile.total_consumed),
        format_size(profile.transient_peak_bytes),
        format_size(charge),
    )
    log.debug("devmem: %s", memory.explain())
    return budget


def _captures_graphs(worker: Any) -> bool:
    from vllm.config import CUDAGraphMode
    from vllm.platforms import current_platform

    mode = worker.vllm_config.compilation_config.cudagraph_mode
    return bool(current_platform.is_cuda() and mode != CUDAGraphMode.NONE and not worker.model_config.enforce_eager)


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


def _log_vllm_line(budget: int) -> None:
    """vLLM's own "Available KV cache memory" line, with devmem's figure."""
    from vllm.utils.mem_utils import format_gib
    from vllm.v1.worker import gpu_worker

    gpu_worker.logger.info("Available KV cache memory: %s GiB", format_gib(budget))


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
    """vLLM's warm-up and CUDA graph capture, and what they kept, logged beside what the plan charged."""
    memory = _memory(worker)
    if memory is None:
        return original(worker, *args, **kwargs)
    before = MemorySnapshot.measure(memory.device, memory.platform)
    result = original(worker, *args, **kwargs)
    after = MemorySnapshot.measure(memory.device, memory.platform)
    kept = after.torch_reserved - before.torch_reserved
    own = None if after.process is None or before.process is None else after.process - before.process
    charge = getattr(worker, "devmem_graph_charge", 0)
    transient = 0 if memory.profile_result is None else memory.profile_result.transient_peak_bytes
    level = logging.WARNING if max(kept, own or 0) > charge + transient else logging.INFO
    log.log(
        level,
        "devmem: warm-up and CUDA graph capture kept %s in torch's allocator (%s of this process's memory); "
        "the plan charged %s for graphs and %s of transient headroom",
        format_size(kept),
        "unknown" if own is None else format_size(own),
        format_size(charge),
        format_size(transient),
    )
    return result


def stop(original: Callable[..., Any], worker: Any, *args: Any, **kwargs: Any) -> Any:
    """vLLM's shutdown, then the reservation released."""
    try:
        return original(worker, *args, **kwargs)
    finally:
        memory = _memory(worker)
        if memory is not None:
            memory.close()


__all__ = ["MEMORY", "PATCHED", "available_memory", "device_index", "patch_worker"]
