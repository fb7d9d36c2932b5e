"""SGLang's model runner and KV pool sizing driven by :class:`devmem.EngineMemory` (the hooks
:func:`devmem.integrations.sglang.register` registers).

``mem_fraction_static`` keeps SGLang's meaning, the static part (weights and KV pool), read against what is free to
this process: the device's total less what this process held at its baseline, so co-tenants no longer move it.

- :func:`start` (around ``ModelRunner.init_torch_distributed``, before any weight loads): the baseline, then the
  :class:`~devmem.EngineMemory`, which reserves the whole instance on devmem's ledger: the static part, the graphs
  captured after the pool (the largest of a previous start's figure and SGLang's estimate) and SGLang's own
  estimate of its activations; an over-committed start is refused (:class:`~devmem.ReservationRefused`) naming the
  holders.
- :func:`budget` (around ``_profile_available_bytes``): the static part less what this process holds since its
  baseline (an empty profile window), in whole pages of SGLang's own cell size, as one plan; ranks agree on the
  smallest budget; one line in SGLang's log.
- :func:`capture` (around the model runner's graph capture, after the pool): EngineMemory's graph step after the
  cache measures what capture kept, warns where it is more than was charged, and stores it for the next start.

Any of them failing gives the share back; the process's exit gives it back too.
"""

from __future__ import annotations

import logging
import math
import os
import sys
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from devmem.engine.distributed import agree_on_minimum
from devmem.engine.graphs import GraphsAfterCache, graph_charge
from devmem.engine.memory import EngineMemory, KvLayout
from devmem.engine.profile_store import ProfileStore
from devmem.engine.profiling import MemorySnapshot
from devmem.integrations import kit
from devmem.types import GiB, MiB
from devmem.units import format_size

log = logging.getLogger("sglang.devmem")

#: The attribute under which a model runner keeps its EngineMemory.
MEMORY = "devmem_memory"
#: SGLang's switch for resizing the pool after graph capture (off by default).
POST_CAPTURE_ENV = "SGLANG_ENABLE_POST_CAPTURE_KV_SIZING"
#: SGLang's fields that change what its graphs keep: the store's key names each one this release has.
KEY_FIELDS = (
    "model_path", "revision", "dtype", "kv_cache_dtype", "quantization", "tp_size", "pp_size", "dp_size",
    "enable_dp_attention", "page_size", "context_length", "attention_backend", "chunked_prefill_size",
    "max_running_requests", "disable_cuda_graph", "cuda_graph_max_bs", "cuda_graph_bs", "cuda_graph_config",
    "speculative_algorithm",
)  # fmt: skip

starts = kit.Starts(log)


@dataclass
class Start:
    """One start's sizing: its EngineMemory, the graphs it declares, and the parts of its share."""

    memory: EngineMemory
    graphs: GraphsAfterCache
    fraction: float
    static: int
    graphs_bytes: int
    activations: int


_starts: dict[int, Start] = {}  # by device: the target model runner's start in this (scheduler) process


def _memory_of_start(owner: Any) -> EngineMemory | None:
    """The EngineMemory of the start on the owner's device."""
    found = _starts.get(getattr(owner, "gpu_id", -1))
    return None if found is None else found.memory


def _guarded(step: Callable[..., Any]) -> Callable[..., Any]:
    """``step``, giving the share of the start on the owner's device back when anything in it raises."""
    return kit.guarded(step, _memory_of_start)


def setting(args: Any, name: str) -> Any:
    """SGLang's resolved value of its setting ``name``: read through its ``resolution_result`` where ``ServerArgs``
    keeps the user's raw input and resolves apart (it has ``resolve_once``, 0.5.19 on), else the field itself
    (resolved in place before); ``None`` where it has none."""
    if callable(getattr(args, "resolve_once", None)):
        from sglang.srt.arg_groups.overrides import resolution_result

        return resolution_result(args, name, None)
    return getattr(args, name, None)


def activation_estimate(args: Any) -> int:
    """SGLang's own estimate of its activations and metadata beside the static part (its reserve for the default
    ``mem_fraction_static``, without the 10 GiB floor it keeps on large devices), in bytes."""
    chunk = setting(args, "chunked_prefill_size")
    tokens = chunk if isinstance(chunk, int) and chunk > 0 else int(setting(args, "max_prefill_tokens") or 0)
    mib = 512 + max(tokens, 2048) * 1.5 + setting(args, "tp_size") * setting(args, "pp_size") / 8 * 1024
    return int(mib * MiB)


def graph_estimate(args: Any) -> int:
    """SGLang's own estimate of its CUDA graphs' memory, in bytes: its ``reserve_for_graph_mb``, a method of its
    ``ServerArgs`` (0.5.16 to 0.5.18) or a function of them (where they resolve apart: 0.5.19 on), else two MiB
    per decode batch size it captures (its formula before)."""
    reserve = getattr(args, "reserve_for_graph_mb", None)
    if callable(reserve):
        return int(reserve() * MiB)
    if callable(getattr(args, "resolve_once", None)):
        from sglang.srt.arg_groups import memory_hook

        return int(memory_hook.reserve_for_graph_mb(args) * MiB)
    if getattr(args, "disable_cuda_graph", False):
        return 0
    decode = getattr(getattr(args, "cuda_graph_config", None), "decode", None)
    largest = getattr(decode, "max_bs", None) or getattr(args, "cuda_graph_max_bs", None) or 0
    return int(largest * 2 * MiB)


def _key(args: Any, baseline: MemorySnapshot) -> dict[str, str]:
    """Everything that changes what this start's graphs keep (the store's key)."""
    import torch

    key = {name: repr(setting(args, name)) for name in KEY_FIELDS if hasattr(args, name)}
    version = kit.installed_version("sglang", "sglang")
    return {**key, "engine": "sglang", "sglang": str(version), "torch": torch.__version__, "total": str(baseline.total)}


@_guarded
def start(original: Callable[..., Any], runner: Any, *args: Any, **kwargs: Any) -> Any:
    """The baseline and the share (``ModelRunner.init_torch_distributed``'s hook), then SGLang's own step; a draft
    worker, a device other than CUDA's, or an unknown ``mem_fraction_static`` is left stock. The fraction is the
    model runner's own: the resolved one its scheduler passed it, in every release (``server_args`` keeps the
    user's raw input from 0.5.19 on: ``None`` where SGLang picks it)."""
    server = runner.server_args
    fraction = getattr(runner, "mem_fraction_static", None)
    if runner.is_draft_worker or runner.device != "cuda":
        return original(runner, *args, **kwargs)
    if isinstance(fraction, bool) or not isinstance(fraction, (int, float)) or not 0 < fraction <= 1:
        log.warning("devmem: mem_fraction_static is %r, not a fraction; SGLang sizes its KV pool itself", fraction)
        return original(runner, *args, **kwargs)
    device = int(runner.gpu_id)
    baseline = MemorySnapshot.measure(device)  # before this engine loads anything
    free = baseline.total - (baseline.process or 0)  # free to this process: co-tenants do not move it
    static = math.ceil(float(fraction) * free)
    graphs = GraphsAfterCache(estimate=graph_estimate(server), store=ProfileStore(), key=_key(server, baseline))
    charge = graph_charge(graphs, baseline.total, None, 0).bytes
    activations = activation_estimate(server)
    share = min(static + charge + activations, free)

    def create() -> EngineMemory:
        return EngineMemory(
            device, utilization=min(1.0, (static + charge) / baseline.total), reserve_bytes=share, baseline=baseline
        )

    memory = starts.begin(runner, MEMORY, device, create)
    _starts[device] = Start(memory, graphs, float(fraction), static, charge, activations)
    _keep_the_pool_devmem_sizes()
    return original(runner, *args, **kwargs)


def _keep_the_pool_devmem_sizes() -> None:
    """Turn SGLang's opt-in resize of the pool after graph capture (``SGLANG_ENABLE_POST_CAPTURE_KV_SIZING``, 0.5.16
    on) off in this process, with one line: it resizes from the device's free memory, so a co-tenant's memory would
    count as this instance's and the share would no longer hold. devmem charges the graphs before the pool instead."""
    try:
        from sglang.srt.environ import envs
    except ImportError:  # a release without SGLang's environment registry has no such resize either
        return
    field = getattr(envs, POST_CAPTURE_ENV, None)
    if field is None or not field.get():
        return
    os.environ[POST_CAPTURE_ENV] = "0"
    log.warning(
        "devmem: %s resizes SGLang's KV pool after graph capture from the device's free memory, which counts other "
        "processes' memory as this instance's; turned off in this process: devmem sizes the pool from this "
        "process's own memory and charges the graphs before it",
        POST_CAPTURE_ENV,
    )


def _start_of(owner: Any) -> Start | None:
    found = None if owner.is_draft_worker else _starts.get(owner.gpu_id)
    return None if found is None or found.memory.closed or found.memory.kv_plan is not None else found


@_guarded
def budget(original: Callable[..., Any], owner: Any, pre_model_load_memory: Any, *args: Any, **kwargs: Any) -> int:
    """The KV pool's bytes (``_profile_available_bytes``' hook): the static part less what this process holds
    since its baseline, in whole pages; SGLang's own sizing where devmem did not start this process's runner or
    the pool is not SGLang's default one (hybrid, sliding-window and state-space models)."""
    found = _start_of(owner)
    if found is None:
        return int(original(owner, pre_model_load_memory, *args, **kwargs))
    from sglang.srt.model_executor.pool_configurator import DefaultPoolConfigurator, create_memory_pool_configurator

    pool = create_memory_pool_configurator(owner)
    if type(pool) is not DefaultPoolConfigurator or getattr(owner, "mambaish_config", None) is not None:
        log.warning("devmem: this model's KV pool is %s, not SGLang's default; SGLang sizes it", type(pool).__name__)
        return int(original(owner, pre_model_load_memory, *args, **kwargs))
    page = getattr(owner, "page_size", None)
    if isinstance(page, bool) or not isinstance(page, int) or page < 1:
        log.warning(
            "devmem: %s's page_size is %r, not a page size; SGLang sizes its KV pool", type(owner).__name__, page
        )
        return int(original(owner, pre_model_load_memory, *args, **kwargs))
    memory, cell = found.memory, int(pool._cell_size)
    with memory.profile() as held:  # what this process holds now, since its baseline: context, weights, buffers
        pass
    tensors = 2 * int(owner.model_config.num_hidden_layers)  # a key and a value tensor per layer, each rounded up
    plan = memory.plan(page_size_bytes=cell * page, num_layers=1, layout=KvLayout.tensors(tensors), graphs=found.graphs)
    multimodal = multimodal_reserve(owner)  # allocated after the pool, kept out of it as SGLang does
    pages = plan.num_blocks - 1 - math.ceil(multimodal / plan.block_bytes)  # SGLang adds one page to every tensor
    nbytes = max(0, pages) * plan.block_bytes
    group = _world_cpu_group()
    if group is not None:  # every rank takes the smallest budget
        nbytes = agree_on_minimum(nbytes, group=group)
    memory.release_allocator_cache()  # SGLang allocates its pool next
    source = "this process's own memory" if held.process_scoped else "the device-wide fallback (no per-process figures)"
    charge = memory.graph_charge
    log.info(
        "devmem sized SGLang's KV pool from %s: %s = %d tokens of %s; static part %s (mem_fraction_static %s of the "
        "%s free to this process) less %s this process holds and %s for SGLang's multimodal caches; reserved %s with "
        "graphs %s (%s) and activations %s (SGLang's estimate)",
        source,
        format_size(nbytes),
        nbytes // cell,
        format_size(cell),
        format_size(found.static),
        found.fraction,
        format_size(memory.baseline.total - (memory.baseline.process or 0)),
        format_size(held.total_consumed),
        format_size(multimodal),
        format_size(0 if memory.reservation is None else memory.reservation.bytes),
        format_size(found.graphs_bytes if charge is None else charge.bytes),
        "none" if charge is None else charge.source,
        format_size(found.activations),
    )
    log.debug("devmem: %s", memory.explain())
    return nbytes


def multimodal_reserve(owner: Any) -> int:
    """What SGLang keeps out of the pool's budget for the multimodal caches it allocates after the pool (0.5.19 on:
    its ``mm_runtime_reservation_gb``, beside the budget it hooks), in bytes; 0 where the release keeps none."""
    module = sys.modules.get(type(owner).__module__)
    reserve, settings = getattr(module, "mm_runtime_reservation_gb", None), getattr(module, "get_mm", None)
    if not callable(reserve) or not callable(settings):
        return 0
    transport = settings().mm_feature_transport
    return math.ceil(
        reserve(is_multimodal=bool(owner.model_config.is_multimodal), mm_feature_transport=transport) * GiB
    )


def _world_cpu_group() -> Any:
    """The world group's CPU group where there are several ranks: the runtime context's (0.5.14 on; from 0.5.21 the
    parallel state's getter is deprecated and no longer re-exported), else the parallel state's."""
    try:
        from sglang.srt.runtime_context import get_parallel
    except ImportError:
        from sglang.srt.distributed.parallel_state import get_world_group

        world = get_world_group()
    else:
        world = get_parallel().world_group
    return world.cpu_group if world.world_size > 1 else None


@_guarded
def capture(original: Callable[..., Any], runner: Any, *args: Any, **kwargs: Any) -> Any:
    """The model runner's first graph capture after the pool, in EngineMemory's graph step after the cache; a later
    one (SGLang 0.5.11 to 0.5.13 capture again through this method after a weight update) is SGLang's own."""
    memory = kit.memory_of(MEMORY)(runner)
    if memory is None or memory.closed or memory.graph_charge is None or memory.graph_check is not None:
        return original(runner, *args, **kwargs)
    with memory.graphs_after_cache():
        result = original(runner, *args, **kwargs)
    starts.serving(memory)
    return result


__all__ = [
    "MEMORY",
    "POST_CAPTURE_ENV",
    "activation_estimate",
    "budget",
    "capture",
    "graph_estimate",
    "multimodal_reserve",
    "setting",
    "start",
]
