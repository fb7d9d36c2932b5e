"""Hugging Face transformers' continuous batching (``model.generate_batch``, ``init_continuous_batching``) sized by
devmem (docs/transformers.md): what is transformers' own, its engine run at ``n`` blocks, how its cache pads and
groups blocks, what it cannot serve. The runs, stored profile and plan are :mod:`devmem.engine.black_box_sizing`'s,
the call's checks :mod:`devmem.integrations.kit`'s. transformers and torch are imported on first use only.
"""

from __future__ import annotations

import inspect
import logging
import math
import os
import re
import time
from collections.abc import Iterator
from contextlib import contextmanager, nullcontext
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

from devmem import arguments
from devmem.engine.black_box_sizing import BatchFloor, BlackBoxEngine, CacheRun, SizedRuns
from devmem.engine.memory import EngineMemory
from devmem.engine.profile_store import ProfileStore
from devmem.engine.profiling import MemorySnapshot
from devmem.engine.reservations import Reservation
from devmem.integrations import kit
from devmem.planner.sizing import SizingError
from devmem.platform import Platform

if TYPE_CHECKING:
    from transformers import ContinuousBatchingConfig, GenerationConfig

log = logging.getLogger("devmem.integrations.transformers")

#: transformers' own default when ``max_batch_tokens`` is unset, read from transformers when it has one.
FALLBACK_MAX_BATCH_TOKENS = 8192
#: The kind of figures the profile store keeps for this integration; its version changes when the measurement does.
STORE_KIND = "transformers-cb"
METHOD_VERSION = 4
#: Query tokens of the small forwards run beside the worst case, so that decode steps' kernels are loaded first.
DECODE_TOKENS = (1, 8, 64, 512)
#: The attention types transformers' paged cache has an allocator for, where its module does not say.
PAGED_ATTENTION_TYPES = ("full_attention", "sliding_attention")
#: The logger transformers' continuous batching writes to.
TRANSFORMERS_LOGGER = "ContinuousBatchingLogger"
#: A call of the cache's ``update`` for a layer (its arguments), in an attention module's source.
_CACHE_UPDATE = re.compile(r"\.update\(([^()]*layer_idx[^()]*)\)")


@dataclass(frozen=True, kw_only=True)
class EngineRun(CacheRun):
    """One run of transformers' engine (:class:`~devmem.engine.black_box_sizing.CacheRun`) and its settings."""

    attn_implementation: str
    cuda_graphs: tuple[bool, ...]
    async_batching: bool


@dataclass(frozen=True)
class SizedConfig(SizedRuns):
    """The sized ``config`` (hand it to ``generate_batch`` / ``init_continuous_batching``), the plan and its figures."""

    ENGINE = "transformers continuous batching"
    STATIC_PARTS = "attention masks, read indices"

    def settings(self) -> str:
        run: Any = self.runs[0]
        return f", {run.attn_implementation}, CUDA graphs {'on' if any(run.cuda_graphs) else 'off'}"


def block_tokens(config: ContinuousBatchingConfig) -> int:
    """Tokens in one block of ``config``: ``page_size`` (transformers >= 5.18) or ``block_size`` (5.17)."""
    tokens = getattr(config, "page_size", None)
    return int(tokens if tokens is not None else config.block_size)


def cuda_graph_flags(value: Any) -> tuple[bool, ...]:
    """``ContinuousBatchingConfig.use_cuda_graph`` (a bool, a (varlen, decode) pair, or None) as a tuple."""
    if value is None:
        return ()
    return (value, value) if isinstance(value, bool) else tuple(bool(v) for v in value)


def default_max_batch_tokens() -> int:
    """transformers' ``max_batch_tokens`` when the config leaves it unset."""
    handler = getattr(_cache(), "PagedAttentionMemoryHandler", None)
    return int(getattr(handler, "_default_max_batch_tokens", FALLBACK_MAX_BATCH_TOKENS))


def _cache() -> Any:
    from transformers.generation.continuous_batching import cache

    return cache


@contextmanager
def _engine(model: Any, generation_config: Any, config: Any) -> Iterator[Any]:
    """transformers' continuous batching manager for ``config``, taken down on exit (its cache and batch tensors
    dropped, the model's attention implementation given back)."""
    attn_implementation = model.config._attn_implementation
    manager = model.init_continuous_batching(
        generation_config=kit.copied(generation_config), continuous_batching_config=config
    )
    try:
        yield manager
    finally:
        manager.batch_processor = None
        manager.destroy()
        if model.config._attn_implementation != attn_implementation:
            model.set_attn_implementation(attn_implementation)


def _forwards(manager: Any, model: Any, max_batch_tokens: int, tokens_per_block: int) -> None:
    """Run transformers' worst-case warm-up (``max_batch_tokens`` query tokens reading the whole cache) unpadded, so
    that it reads exactly the whole cache at any size, then decode-sized forwards. Where the layer groups share one
    pool (:func:`shared_block_groups`) it reads the blocks one request can hold in each group."""
    runner: Any = getattr(manager.batch_processor, "model_runner", None)
    config = getattr(runner, "cb_config", None)
    if not all(hasattr(runner, name) for name in ("pad_inputs", "warmup", "run_one_warmup")) or config is None:
        raise RuntimeError(
            f"transformers {kit.installed_version('transformers', 'transformers')}: continuous batching has no "
            "model runner with pad_inputs, warmup and run_one_warmup; devmem's integration was verified on "
            "transformers 5.17 to 5.25"
        )
    saved = runner.pad_inputs, config.q_padding_interval_size, config.kv_padding_interval_size
    runner.pad_inputs, config.q_padding_interval_size, config.kv_padding_interval_size = True, 1, 1
    try:
        groups = shared_block_groups(model)
        if groups == 1:
            runner.warmup(model)
        else:  # one pool for every group: a request holds at most num_blocks / groups blocks in each
            read = (runner.cache.num_blocks // groups) * runner.cache.block_size - max_batch_tokens
            runner.run_one_warmup(model=model, num_q_tokens=max_batch_tokens, max_kv_read=max(0, read))
        for tokens in (t for t in DECODE_TOKENS if t < max_batch_tokens):
            runner.run_one_warmup(model=model, num_q_tokens=tokens, max_kv_read=tokens_per_block)
    finally:
        runner.pad_inputs, config.q_padding_interval_size, config.kv_padding_interval_size = saved


def run_engine(
    model: Any, generation_config: Any, config: Any, num_blocks: int, *, all_layers: bool = True
) -> EngineRun:
    """Build the engine at ``num_blocks`` blocks, run its warm-up and worst-case forward under ``torch.no_grad()``
    (``all_layers=False``: :func:`~devmem.integrations.kit.one_layer_per_attention_type`), and take it down
    again. Raises :class:`RuntimeError` naming transformers' message where a warm-up failed (it logs "Failed to warm
    up"), or where no forward over ``config.max_batch_tokens`` query tokens completed."""
    import torch

    config, began, where = kit.copied(config, num_blocks=num_blocks), time.perf_counter(), model.device
    failures, engine = kit.logged(TRANSFORMERS_LOGGER, "Failed to warm up"), _engine(model, generation_config, config)
    with kit.forward_tokens(model) as tokens, failures as failed, torch.no_grad(), engine as manager:
        manager.batch_processor = manager._create_batch_processor()  # the cache, for every layer
        runner = manager.batch_processor.model_runner
        stream = getattr(runner.inputs_and_outputs, "compute_stream", None)
        if stream is not None:  # transformers computes on it with no wait for the writes of the batch's inputs
            kit.after_current_stream(runner, "compute_batch", stream)
        with nullcontext(None) if all_layers else kit.one_layer_per_attention_type(model) as layers:
            manager.warmup()
            _forwards(manager, model, config.max_batch_tokens, block_tokens(config))
            torch.get_device_module(where).synchronize(where)
        processor, seen, resolved = manager.batch_processor, set[int](), manager.continuous_batching_config
        cache = kit.storage_bytes([processor.cache], where, seen, "transformers.")
        static = kit.storage_bytes([processor.inputs_and_outputs], where, seen, "transformers.")
        run = EngineRun(
            *(num_blocks, cache[0], static[0], cache[1] + static[1], max(tokens, default=0)),
            layers_run=layers,
            attn_implementation=model.config._attn_implementation,
            cuda_graphs=cuda_graph_flags(resolved.use_cuda_graph),
            async_batching=bool(resolved.use_async_batching),
        )
    if failed:
        raise RuntimeError(f"transformers' warm-up failed at {num_blocks} blocks ({len(failed)} time(s)): {failed[0]}")
    if run.forward_tokens < config.max_batch_tokens:
        raise RuntimeError(
            f"the engine's worst-case forward over {config.max_batch_tokens} query tokens did not "
            f"complete at {num_blocks} blocks (largest forward: {run.forward_tokens} tokens)"
        )
    return replace(run, seconds=time.perf_counter() - began)


def kv_padding_interval(model: Any, generation_config: Any, config: Any) -> int | None:
    """The tokens transformers pads a batch's cache reads to with ``config`` (CUDA graphs or compile on), or
    ``None`` where it pads nothing. Resolved by transformers itself; no cache is created."""
    with _engine(model, generation_config, config) as manager:
        resolved = manager.continuous_batching_config
        compiled = resolved.varlen_compile_config is not None or resolved.decode_compile_config is not None
        interval = int(resolved.kv_padding_interval_size or 0)
        return interval if (any(cuda_graph_flags(resolved.use_cuda_graph)) or compiled) and interval > 0 else None


def _sectored() -> bool:
    """Whether transformers' paged cache is made of sectors (5.24)."""
    return hasattr(getattr(_cache(), "PagedAttentionMemoryHandler", None), "infer_max_batch_tokens_and_num_sectors")


def sector_blocks(model: Any, config: Any) -> int:
    """The fewest blocks that fill whole sectors of transformers' paged cache (5.24: a sector is the least common
    multiple of each attention type's block, in bytes, and of 128 bytes; ``num_blocks`` rounded up to whole
    sectors), so that runs at multiples of it hold what their blocks cost; 1 for a cache without sectors."""
    group = getattr(_cache(), "group_layers_by_attn_type", None)
    groups = group(kit.text_config(model)) if group is not None and _sectored() else None
    if not isinstance(groups, dict):
        return 1
    layers, (_, kv_heads, head_dim) = [len(g) for g in groups.values()], kit.kv_shape(model)
    page = 2 * block_tokens(config) * kv_heads * head_dim * model.dtype.itemsize
    sector = math.lcm(*(n * page for n in layers), 128)
    return sector // math.gcd(sector, sum(layers) * page)


def shared_block_groups(model: Any) -> int:
    """How many layer groups draw a request's blocks from one pool of ``num_blocks`` (5.17, before the cache of
    sectors: one group per attention type, a request's blocks taken once per group), else 1."""
    group = getattr(_cache(), "group_layers_by_attn_type", None)
    groups = group(kit.text_config(model)) if group is not None and not _sectored() else None
    return len(groups[0]) if isinstance(groups, tuple) and groups and isinstance(groups[0], list) else 1


def attention_mask_bytes(model: Any, max_batch_tokens: int, tokens_per_block: int) -> int:
    """The attention mask transformers allocates at start for a batch of ``max_batch_tokens`` (flash: none), at
    least ``[1, 1, M, N + M]`` of the model's dtype, N the batch's tokens in whole blocks."""
    if "flash" in str(model.config._attn_implementation):
        return 0
    cache_tokens = tokens_per_block * math.ceil(max_batch_tokens / tokens_per_block)
    return max_batch_tokens * (cache_tokens + max_batch_tokens) * model.dtype.itemsize


def _placement(model: Any, generation_config: Any, config: Any, max_batch_tokens: int) -> tuple[int, int]:
    """The profile window's blocks (a batch in every layer group, plus one) and the runs' granularity: whole
    sectors, groups, and padding intervals where graphs or compile pad the reads."""
    tokens, groups = block_tokens(config), shared_block_groups(model)
    interval = kv_padding_interval(model, generation_config, config)
    quantum = math.lcm(sector_blocks(model, config), groups)  # 5.17: a warm-up reads n / groups in each group
    if interval:
        quantum = math.lcm(quantum, math.lcm(interval, tokens) // tokens)
    return quantum * math.ceil((math.ceil(max_batch_tokens / tokens) * groups + 1) / quantum), quantum


def profile_key(model: Any, generation_config: Any, config: Any, sizing: kit.Sizing) -> dict[str, Any]:
    """Everything the measured figures depend on: the model (:func:`~devmem.integrations.kit.model_key`), the
    continuous batching and generation configs, and the request's part (:meth:`~devmem.integrations.kit.Sizing.key`)."""
    from transformers import __version__

    return {
        "method": METHOD_VERSION,
        **kit.model_key(model),
        "continuous_batching": config.to_dict() if hasattr(config, "to_dict") else vars(config),
        "generation": generation_config.to_diff_dict() if hasattr(generation_config, "to_diff_dict") else {},
        **sizing.key(model.device, transformers=__version__),
    }


def _checked(model: Any, config: Any, generation_config: Any) -> Any:
    """The config (default ``ContinuousBatchingConfig()``); refuses, naming why, what continuous batching cannot
    serve or devmem cannot size (hybrid layers, attention that hands the paged cache no ``kwargs``, beams)."""
    from transformers import ContinuousBatchingConfig, GenerationConfig

    config = ContinuousBatchingConfig() if config is None else config
    if not isinstance(config, ContinuousBatchingConfig):
        raise TypeError(f"config must be a transformers ContinuousBatchingConfig or None, got {type(config).__name__}")
    if config.num_blocks is not None:
        raise SizingError(
            f"config.num_blocks={config.num_blocks!r} is already set; devmem sizes num_blocks: pass the config "
            "without it"
        )
    if config.max_batch_tokens is not None:
        arguments.count("config.max_batch_tokens", config.max_batch_tokens, error=SizingError)
    if generation_config is not None and not isinstance(generation_config, GenerationConfig):
        raise SizingError(
            f"generation_config must be a transformers GenerationConfig or None (the model's), got "
            f"{generation_config!r} of type {type(generation_config).__name__}"
        )
    beams = getattr(generation_config, "num_beams", 1)
    if beams not in (None, 1):
        raise SizingError(
            f"generation_config.num_beams={beams!r}: transformers' continuous batching runs no "
            "beam search (it would serve one sequence per request, greedy or sampled); set num_beams=1, or use "
            "generate() for beams"
        )
    if not hasattr(model, "init_continuous_batching"):
        raise TypeError(
            "model must be a transformers model with continuous batching (init_continuous_batching), got "
            f"{type(model).__name__}"
        )
    kit.check_one_device(model, "continuous batching")
    paged = tuple(getattr(_cache(), "ATTN_TYPE_TO_ALLOCATOR", None) or PAGED_ATTENTION_TYPES)
    layer_types = list(getattr(kit.text_config(model), "layer_types", None) or [])
    if set(layer_types) - set(paged):
        raise SizingError(
            f"the model's layer_types hold {sorted(set(layer_types) - set(paged))} (layer_types={layer_types}): "
            f"transformers' continuous batching pages only {list(paged)} layers and refuses the others (a hybrid or "
            "state-space model); serve it with generate() instead"
        )
    found, update = kit.decoder_layers(model), kit.parameter(_cache().PagedAttentionCache.update, "kwargs")
    if found is not None and update is not None and update.default is inspect.Parameter.empty:  # 5.17 to 5.25
        attention: Any = kit.layer_attention(found[2][0], 0)  # found only where every layer holds one
        if any("kwargs" not in call for call in _CACHE_UPDATE.findall(kit.source(type(attention).forward))):
            raise SizingError(
                f"{type(attention).__name__}.forward calls the cache's update without kwargs=: transformers' paged "
                f"cache needs them, so continuous batching fails on every request of a {type(model).__name__} "
                "(PagedAttentionCache.update() missing 'kwargs'); serve it with generate() instead"
            )
    if getattr(model, "_cached_continuous_batching_manager", None) is not None:
        raise ValueError(
            "the model keeps a persistent continuous batching manager with its own cache; call "
            "model.destroy_cached_continuous_batching_manager() before sizing"
        )
    return config


def size_continuous_batching(
    model: Any,
    *,
    utilization: float | None = None,
    pinned_bytes: int | None = None,
    config: ContinuousBatchingConfig | None = None,
    generation_config: GenerationConfig | None = None,
    device: int | None = None,
    baseline: MemorySnapshot | None = None,
    weights_memory: int | None = None,
    platform: Platform | None = None,
    store: ProfileStore | str | os.PathLike[str] | bool | None = None,
    limit_allocator_to_share: bool = True,
    reservation: Reservation | bool = True,
    memory: EngineMemory | None = None,
) -> SizedConfig:
    """Size transformers' paged KV cache for ``model`` at ``utilization`` of the device (default 0.9) or at
    ``pinned_bytes``; returns a :class:`SizedConfig` whose ``config`` (default ``ContinuousBatchingConfig()``, every
    field kept) has ``num_blocks`` set, ``max_batch_tokens`` transformers' default where unset and
    ``max_memory_percent`` 1.0; hand ``generation_config`` (default the model's) to ``generate_batch`` too. Best,
    ``memory`` is the engine's :class:`devmem.EngineMemory`, created before the CUDA context and the model; the
    other arguments are :func:`~devmem.integrations.kit.begin_sizing`'s (``store``, ``limit_allocator_to_share``:
    :func:`~devmem.engine.black_box_sizing.size_by_runs`'s ``store``, ``limit_to_share``).
    Raises :class:`~devmem.planner.sizing.SizingError` naming a bad value, :class:`~devmem.NotEnoughMemoryError`
    when the budget holds no block, ``TypeError``/``ValueError`` for a model or config that cannot be sized."""
    began, model = time.perf_counter(), kit.unwrapped(model)
    config = _checked(model, config, generation_config)
    sizing = kit.begin_sizing(
        model,
        utilization=utilization,
        pinned_bytes=pinned_bytes,
        device=device,
        baseline=baseline,
        weights_memory=weights_memory,
        platform=platform,
        store=store,
        reservation=reservation,
        memory=memory,
        limit_allocator_to_share=limit_allocator_to_share,
        began=began,
        log=log,
    )
    generation = model.generation_config if generation_config is None else generation_config
    with sizing.closed_on_failure():
        tokens, batch = block_tokens(config), config.max_batch_tokens or default_max_batch_tokens()
        percent = 1.0 if config.max_memory_percent is None else config.max_memory_percent
        profiled = kit.copied(config, max_batch_tokens=batch, max_memory_percent=percent)
        floor = BatchFloor(
            name="transformers' attention mask",
            growing_name="the attention mask's columns",
            key="attention_mask",
            itemsize=model.dtype.itemsize,
            nbytes=lambda batch_tokens: attention_mask_bytes(model, batch_tokens, tokens),
            growing=attention_mask_bytes(model, batch, tokens) - batch * batch * model.dtype.itemsize,
            remedy="use flash attention (no mask)",
        )
        engine = BlackBoxEngine(
            run=lambda blocks, all_layers: run_engine(model, generation, profiled, blocks, all_layers=all_layers),
            placement=lambda: _placement(model, generation, profiled, batch),
            read_back=lambda first: kit.attention_read_bytes(model, first.attn_implementation, tokens, batch),
            batch_setting="config.max_batch_tokens",
            max_batch_tokens=batch,
            block_tokens=tokens,
            configure=lambda blocks: kit.copied(profiled, num_blocks=blocks),
            device=model.device,
            run_type=EngineRun,
            floor=floor,
        )
        sized = sizing.size(engine, SizedConfig, profile_key(model, generation, profiled, sizing), STORE_KIND)
        assert isinstance(sized, SizedConfig)
        return sized


__all__ = [
    "EngineRun",
    "SizedConfig",
    "block_tokens",
    "cuda_graph_flags",
    "default_max_batch_tokens",
    "kv_padding_interval",
    "profile_key",
    "run_engine",
    "sector_blocks",
    "shared_block_groups",
    "size_continuous_batching",
]
