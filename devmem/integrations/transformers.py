"""Hugging Face transformers' continuous batching (``model.generate_batch``, ``init_continuous_batching``) sized by
devmem: one call returns the ``ContinuousBatchingConfig`` whose ``num_blocks`` fits this process's share.

transformers sizes its paged cache from the device's free memory after the model is loaded, so engines started
together split a device by start order. :func:`size_continuous_batching` measures this engine instead:

1. The baseline is the snapshot the engine took BEFORE it created the CUDA context and loaded the model
   (``MemorySnapshot.measure()``), so that both count as this process's own growth.
2. The engine runs at growing cache sizes, ``N_b = 2 N_a`` blocks, then ``N_a = ceil(max_batch_tokens / block
   tokens) + 1`` (rounded up to whole ``kv_padding_interval_size`` where CUDA graphs or compile pad the reads, so
   that transformers' own padded warm-up reads alike at every size, and every run to whole sectors of the cache,
   :func:`sector_blocks`), then ``4 N_a``, ``8 N_a``, ... through
   transformers' own lifecycle: ``init_continuous_batching`` (the model switched to the attention continuous
   batching uses: ``paged|sdpa``, ``paged|eager``, ``paged|flash_*``), ``warmup()`` (CUDA graph capture where
   graphs are on), the engine's own worst-case warm-up forward, unpadded (``max_batch_tokens`` query tokens
   reading the whole cache, with as many logit rows as a batch holds) and decode-sized forwards (so that the
   kernels of decode steps are loaded), the compute stream ordered after the writes of the batch's inputs. The
   run at ``N_a`` is the profile window (:func:`~devmem.engine.profiling.memory_profiling`, process-scoped), the graph
   capture inside it; every other run is a window of its own.
3. One block costs what grows with the block count between the last two runs: the largest of the held tensors'
   growth (the cache and the batch's static tensors, summed over transformers' own objects) and the growths of
   the allocator's allocated and reserved peaks where it keeps statistics (CUDA and ROCm: also the keys and
   values the forward reads back from the cache, the graph pool). The cache doubles until the allocated peak
   grows linearly (:func:`grows_linearly`) or the runs reach the planned block count.
4. ``plan_kv_cache(**profile.plan_inputs(), page_size_bytes=block_bytes, num_layers=1)``, the transient peak
   being the window's transient (at least the tensors its engine held) less its ``N_a`` blocks (they are counted
   per block) plus the allocator's 2 MiB rounding of each allocation that grows with the cache. After each run,
   cuBLAS's workspace for the run's compute stream is dropped (the engine's next stream gets its own) and
   ``release_allocator_cache()`` gives back the allocator cache.

Profiled, not sized: what does not grow with the block count: weights and CUDA context (growth since the
baseline), the batch's static tensors sized by ``max_batch_tokens`` and ``max_requests_per_batch`` (inputs,
outputs, block table, the ``max_batch_tokens`` part of the masks), the worst-case forward's activations and
logits, and the CUDA graph pool. transformers and torch are imported when a function here runs, never before.
"""

from __future__ import annotations

import copy
import gc
import inspect
import logging
import math
import os
import re
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager, nullcontext
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

from devmem import arguments
from devmem._text import shown
from devmem.engine.block_cost import CAUTION, MAX_RUNS, BlockCost, BlockRun
from devmem.engine.kvcache import ALLOCATOR_GRANULARITY
from devmem.engine.memory import EngineMemory, EngineMemoryError, KvLayout
from devmem.engine.profile_store import ProfileStore, ProfileStoreError, resolve_store
from devmem.engine.profiling import MemorySnapshot, ProfileResult
from devmem.engine.reservations import Reservation
from devmem.planner.sizing import DEFAULT_UTILIZATION, KvCachePlan, SizingError, _bytes, requested_memory
from devmem.platform import Platform
from devmem.progress import Progress, progress
from devmem.resolution.plugins import current_platform, platform_argument
from devmem.types import DevmemError, NotEnoughMemoryError
from devmem.units import format_share, format_size

if TYPE_CHECKING:
    from transformers import ContinuousBatchingConfig, GenerationConfig

log = logging.getLogger("devmem.integrations.transformers")

#: transformers' own default when ``max_batch_tokens`` is unset, read from transformers when it has one.
FALLBACK_MAX_BATCH_TOKENS = 8192


@dataclass(frozen=True)
class EngineRun:
    """One run of the engine at ``num_blocks`` blocks: the device bytes it held and what its forward covered.

    ``cache_bytes`` and ``static_bytes`` are summed over the storages of transformers' own objects (the paged
    cache; the batch's inputs and outputs, attention masks and read indices included); ``allocations`` counts
    them. ``peak_bytes`` and ``reserved_peak_bytes`` are torch's allocated and reserved peaks over the run's
    window above what it held when the window opened (``None`` where torch keeps no figure): the reserved one
    also holds what the allocator rounds and what a CUDA graph pool keeps of its captured forwards.
    ``layers_run`` is how many decoder layers its forwards ran (``None``: all), ``seconds`` how long it took.
    """

    num_blocks: int
    cache_bytes: int
    static_bytes: int
    allocations: int
    forward_tokens: int
    attn_implementation: str
    cuda_graphs: tuple[bool, ...]
    async_batching: bool
    peak_bytes: int | None = None
    reserved_peak_bytes: int | None = None
    layers_run: int | None = None
    seconds: float | None = None

    @property
    def held_bytes(self) -> int:
        return self.cache_bytes + self.static_bytes


@dataclass(frozen=True)
class SizedConfig:
    """The sized ``config`` (hand it to ``generate_batch`` / ``init_continuous_batching``), the plan and its figures.

    ``block_bytes`` is what one block costs the engine in all (the plan's block); ``kv_block_bytes`` the part of
    it in the cache tensors, ``static_block_bytes`` the batch's static tensors (attention masks, read indices),
    ``read_back_block_bytes`` what the worst-case forward reads back from the cache per block (0 where the
    allocator keeps no peak statistics).
    """

    config: Any
    plan: KvCachePlan
    block_bytes: int
    kv_block_bytes: int
    static_block_bytes: int
    read_back_block_bytes: int
    block_tokens: int
    max_batch_tokens: int
    profile: ProfileResult | None
    runs: tuple[EngineRun, ...]
    transient_peak_bytes: int
    notes: tuple[str, ...] = field(default_factory=tuple)
    source: str = "measured now"
    seconds: float | None = None
    allocator_limit_bytes: int | None = None
    #: The engine's share on the host's ledger (``size_continuous_batching(reservation=...)``), where it holds one.
    reservation: Reservation | None = None
    #: The :class:`devmem.EngineMemory` whose lifecycle sized it (its windows, block cost, plan and reservation).
    memory: EngineMemory | None = None

    @property
    def num_blocks(self) -> int:
        return self.plan.num_blocks

    @property
    def stored(self) -> bool:
        """Whether the figures were read from a stored profile instead of measured by this call."""
        return self.profile is None

    def explain(self) -> str:
        """Lines for people: where the figures came from, the blocks, what one costs and how it was measured,
        then the plan's figures."""
        small, before, large = self.runs[0], self.runs[-2], self.runs[-1]
        graphs = "on" if any(small.cuda_graphs) else "off"
        measured = (
            "the allocator's peak"
            if large.peak_bytes is not None
            else "the tensors the engine holds; this allocator keeps no peak statistics"
        )
        took = "" if self.seconds is None else f" (sized in {self.seconds:.2f} s)"
        lines = [
            f"transformers continuous batching: {self.num_blocks} blocks of {self.block_tokens} tokens "
            f"(max_batch_tokens {self.max_batch_tokens}, {small.attn_implementation}, CUDA graphs {graphs})",
            f"figures: {self.source}{took}",
            f"one block costs {format_size(self.block_bytes)}: KV cache "
            f"{format_size(self.kv_block_bytes)}, batch tensors {format_size(self.static_block_bytes)} (attention "
            f"masks, read indices), forward read-back {format_size(self.read_back_block_bytes)}; measured as the "
            f"growth of {measured} from {before.num_blocks} to {large.num_blocks} blocks (runs at "
            f"{', '.join(str(r.num_blocks) for r in self.runs)} blocks)",
            f"profile window: the engine at {small.num_blocks} blocks, its worst-case forward over "
            f"{small.forward_tokens} query tokens; transient peak {format_size(self.transient_peak_bytes)} = its "
            f"transient (at least the tensors it held) less its {small.num_blocks} blocks, plus the allocator's "
            "rounding of what grows with the cache",
            self.plan.explain(),
        ]
        if self.allocator_limit_bytes is not None:
            lines.append(
                f"torch's caching allocator is capped at {format_size(self.allocator_limit_bytes)} (the share less "
                "what torch does not allocate): it gives cached blocks back before it reserves past the share"
            )
        return "\n".join(lines + [f"note: {n}" for n in self.notes])

    def as_dict(self) -> dict[str, object]:
        return {
            "num_blocks": self.num_blocks,
            "block_bytes": self.block_bytes,
            "kv_block_bytes": self.kv_block_bytes,
            "static_block_bytes": self.static_block_bytes,
            "read_back_block_bytes": self.read_back_block_bytes,
            "block_tokens": self.block_tokens,
            "max_batch_tokens": self.max_batch_tokens,
            "transient_peak_bytes": self.transient_peak_bytes,
            "plan": self.plan.as_dict(),
            "profile": None if self.profile is None else self.profile.as_dict(),
            "runs": [vars(r) for r in self.runs],
            "notes": list(self.notes),
            "source": self.source,
            "seconds": self.seconds,
            "allocator_limit_bytes": self.allocator_limit_bytes,
        }


def block_tokens(config: ContinuousBatchingConfig) -> int:
    """Tokens in one block of ``config``: ``page_size`` (transformers >= 5.18) or ``block_size`` (5.17)."""
    tokens = getattr(config, "page_size", None)
    return int(tokens if tokens is not None else config.block_size)


def cuda_graph_flags(value: Any) -> tuple[bool, ...]:
    """``ContinuousBatchingConfig.use_cuda_graph`` (a bool, a (varlen, decode) pair, or None) as a tuple."""
    if value is None:
        return ()
    if isinstance(value, bool):
        return (value, value)
    return tuple(bool(v) for v in value)


def default_max_batch_tokens() -> int:
    """transformers' ``max_batch_tokens`` when the config leaves it unset."""
    from transformers.generation.continuous_batching import cache

    handler = getattr(cache, "PagedAttentionMemoryHandler", None)
    return int(getattr(handler, "_default_max_batch_tokens", FALLBACK_MAX_BATCH_TOKENS))


def _check_request(utilization: float | None, pinned_bytes: int | None) -> float | None:
    """The utilization to plan at (``None`` on the pinned path); raises :class:`SizingError` naming a bad value."""
    if utilization is not None and pinned_bytes is not None:
        raise SizingError(
            f"give utilization or pinned_bytes, not both (got utilization={utilization!r}, "
            f"pinned_bytes={pinned_bytes!r})"
        )
    if pinned_bytes is not None:
        _bytes("pinned_bytes", pinned_bytes, positive=True)
        return None
    utilization = 0.9 if utilization is None else utilization
    requested_memory(1, utilization)  # raises SizingError naming a utilization outside (0, 1]
    return utilization


def _check_config(config: Any) -> Any:
    from transformers import ContinuousBatchingConfig

    if config is None:
        return ContinuousBatchingConfig()
    if not isinstance(config, ContinuousBatchingConfig):
        raise TypeError(f"config must be a transformers ContinuousBatchingConfig or None, got {type(config).__name__}")
    if config.num_blocks is not None:
        raise SizingError(
            f"config.num_blocks={config.num_blocks!r} is already set; devmem sizes num_blocks: pass "
            "the config without it"
        )
    if config.max_batch_tokens is not None:
        arguments.count("config.max_batch_tokens", config.max_batch_tokens, error=SizingError)
    return config


def _with(config: Any, **values: Any) -> Any:
    """A copy of ``config`` with ``values`` set (the caller's object is never changed)."""
    out = copy.deepcopy(config)
    for name, value in values.items():
        setattr(out, name, value)
    return out


def _storage_bytes(roots: list[Any], device: Any, seen: set[int]) -> tuple[int, int]:
    """Bytes and count of the distinct ``device`` storages reachable from ``roots`` through transformers' objects,
    lists, tuples and dicts (modules are not entered); ``seen`` holds storages already counted."""
    import torch

    total = count = 0
    visited: set[int] = set()
    stack = list(roots)
    while stack:
        obj = stack.pop()
        if id(obj) in visited:
            continue
        visited.add(id(obj))
        if isinstance(obj, torch.Tensor):
            if obj.device != device:
                continue
            storage = obj.untyped_storage()
            if storage.data_ptr() in seen:
                continue
            seen.add(storage.data_ptr())
            total += storage.nbytes()
            count += 1
        elif isinstance(obj, dict):
            stack.extend(obj.values())
        elif isinstance(obj, (list, tuple, set, frozenset)):
            stack.extend(obj)
        elif (
            not isinstance(obj, torch.nn.Module)
            and type(obj).__module__.startswith("transformers.")
            and hasattr(obj, "__dict__")
        ):
            stack.extend(vars(obj).values())
    return total, count


def model_bytes(model: Any) -> int:
    """Bytes of the model's parameters and buffers on its device (each storage once)."""
    return _storage_bytes([list(model.parameters()), list(model.buffers())], model.device, set())[0]


#: Query tokens of the small forwards run beside the worst case, so that the kernels decode steps use are
#: loaded (their code takes device memory on first use) before memory is measured.
DECODE_TOKENS = (1, 8, 64, 512)


def _forwards(manager: Any, model: Any, max_batch_tokens: int, tokens_per_block: int) -> None:
    """Run continuous batching's own worst-case warm-up (``max_batch_tokens`` query tokens reading every token
    the cache holds) unpadded, so that it reads exactly the whole cache at any size, then decode-sized forwards.

    transformers runs that warm-up only where CUDA graphs or compile pad the inputs, and there with the reads
    padded to ``kv_padding_interval_size`` and capped at the cache: the read then grows by steps with the cache.
    Where the layer groups share one pool of blocks (:func:`shared_block_groups`), the worst case reads the
    blocks one request can hold in each group.
    """
    runner: Any = getattr(manager.batch_processor, "model_runner", None)
    config = getattr(runner, "cb_config", None)
    if not all(hasattr(runner, name) for name in ("pad_inputs", "warmup", "run_one_warmup")) or config is None:
        import transformers

        raise RuntimeError(
            f"transformers {transformers.__version__}: continuous batching has no model runner with "
            "pad_inputs, warmup and run_one_warmup; devmem's integration supports transformers 5.17 "
            "to 5.24"
        )
    saved = runner.pad_inputs, config.q_padding_interval_size, config.kv_padding_interval_size
    runner.pad_inputs, config.q_padding_interval_size, config.kv_padding_interval_size = True, 1, 1
    try:
        groups = shared_block_groups(model)
        if groups == 1:
            runner.warmup(model)
        else:  # one pool for every group: a request holds at most num_blocks / groups blocks in each
            cache = runner.cache
            read = (cache.num_blocks // groups) * cache.block_size - max_batch_tokens
            runner.run_one_warmup(model=model, num_q_tokens=max_batch_tokens, max_kv_read=max(0, read))
        for tokens in DECODE_TOKENS:
            if tokens < max_batch_tokens:
                runner.run_one_warmup(model=model, num_q_tokens=tokens, max_kv_read=tokens_per_block)
    finally:
        runner.pad_inputs, config.q_padding_interval_size, config.kv_padding_interval_size = saved


def _order_streams(runner: Any) -> None:
    """Order the batch's compute stream after the stream that wrote the batch's inputs, and back.

    transformers writes a batch's static tensors (input ids, read and write indices, attention masks) on the
    current stream and runs the forward on the compute stream of its inputs and outputs, with no wait between
    the two. Where the device is busy (engines started together) the forward can then read tensors not yet
    written: memory the previous, larger profiled run left behind, whose cache indices are out of range for this
    cache (a device-side assert). The next batch's writes wait for the forward in turn."""
    stream = getattr(runner.inputs_and_outputs, "compute_stream", None)
    if stream is None:
        return
    import torch

    compute_batch = runner.compute_batch

    def ordered(model: Any, batch_data: Any) -> None:
        current = torch.get_device_module(stream.device).current_stream(stream.device)
        stream.wait_stream(current)
        compute_batch(model, batch_data)
        current.wait_stream(stream)

    runner.compute_batch = ordered


def _synchronize(device: Any) -> None:
    import torch

    torch.get_device_module(device).synchronize(device)


def _close(manager: Any, model: Any, attn_implementation: str) -> None:
    """Drop the manager's cache and batch tensors and give the model its attention implementation back."""
    manager.batch_processor = None
    manager.destroy()
    if model.config._attn_implementation != attn_implementation:
        model.set_attn_implementation(attn_implementation)


def _text_config(model: Any) -> Any:
    return model.config.get_text_config() if hasattr(model.config, "get_text_config") else model.config


def _layer_attention(layer: Any, index: int) -> Any | None:
    """The attention module of decoder layer ``index``: the submodule whose ``layer_idx`` is ``index`` (the
    index the paged cache keys its layers by), or ``None``."""
    for module in layer.modules():
        if getattr(module, "layer_idx", None) == index and module is not layer:
            return module
    return None


def _decoder_layers(model: Any) -> tuple[Any, str, Any] | None:
    """(parent, name, layers): the model's ``nn.ModuleList`` of decoder layers, or ``None`` where it has none.

    The list is found by what it holds, not by its name (``model.layers``, ``transformer.h``,
    ``language_model.layers``): one module per hidden layer of the text config, layer ``i`` holding the
    attention whose ``layer_idx`` is ``i``. A vision tower's list of the same length holds no such attention."""
    import torch

    count = getattr(_text_config(model), "num_hidden_layers", None)
    for module in model.modules():
        for child_name, child in module.named_children():
            if (
                isinstance(child, torch.nn.ModuleList)
                and len(child) == count
                and all(_layer_attention(layer, i) is not None for i, layer in enumerate(child))
            ):
                return module, child_name, child
    return None


#: What an attention module may say of its own window: layers that differ in one of these differ in type.
WINDOW_ATTRIBUTES = ("sliding_window", "is_sliding", "attention_type", "layer_type")


def attention_types(model: Any, layers: Any) -> list[tuple[Any, ...]]:
    """The attention type of each decoder layer: its ``layer_types`` entry in the config, where the config has
    one, and what its attention module says of its own window (:data:`WINDOW_ATTRIBUTES`), so that layers whose
    window is set by other config keys (a pattern, a per-layer window) count as a type of their own too."""
    named = getattr(_text_config(model), "layer_types", None)
    types = []
    for i, layer in enumerate(layers):
        attention = _layer_attention(layer, i)
        own = tuple(getattr(attention, name, None) for name in WINDOW_ATTRIBUTES)
        types.append((named[i] if named is not None and i < len(named) else None, *own))
    return types


@contextmanager
def one_layer_per_attention_type(model: Any) -> Iterator[int | None]:
    """Run the model's forwards through the first decoder layer of each attention type only (the cache keeps
    every layer); yields how many layers run, ``None`` where the model's layers cannot be found (all run).

    Under ``torch.no_grad()`` a layer's activations are freed before the next layer runs, so a forward's peak
    is the largest of one layer's steps, the same in every layer of one attention type: running one layer of
    each type reaches the same peak in a fraction of the time. The model's own loop runs
    ``layers[:num_hidden_layers]``, so a shorter list runs the layers kept; where the config has
    ``layer_types`` (which the loop reads by position to pick each layer's mask and rotary embedding) it holds
    the kept layers' types meanwhile. Enter it after the engine's cache exists: the cache is built from the
    config's layers.
    """
    import torch

    found = _decoder_layers(model)
    if found is None:
        yield None
        return
    parent, name, layers = found
    types = attention_types(model, layers)
    kept = sorted({types.index(kind) for kind in set(types)})
    text = _text_config(model)
    named = getattr(text, "layer_types", None)
    setattr(parent, name, torch.nn.ModuleList([layers[i] for i in kept]))
    if named is not None:
        text.layer_types = [named[i] for i in kept]
    try:
        yield len(kept)
    finally:
        setattr(parent, name, layers)
        if named is not None:
            text.layer_types = named


class _FailedWarmups(logging.Handler):
    """Collects what transformers' continuous batching logs about warm-ups that failed (it catches their errors,
    out of memory included, and logs "Failed to warm up")."""

    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.messages: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        message = record.getMessage()
        if "Failed to warm up" in message:
            self.messages.append(message.splitlines()[0])


#: The logger transformers' continuous batching writes to.
TRANSFORMERS_LOGGER = "ContinuousBatchingLogger"


def run_engine(
    model: Any, generation_config: Any, config: Any, num_blocks: int, *, all_layers: bool = True
) -> EngineRun:
    """Build the engine at ``num_blocks`` blocks, run its warm-up and worst-case forward, and take it down again;
    with ``all_layers=False`` the forwards run one decoder layer of each attention type
    (:func:`one_layer_per_attention_type`: the same peak, a fraction of the time).

    Every forward runs as transformers serves: without autograd (``torch.no_grad()``). Raises
    :class:`RuntimeError` naming transformers' message when one of its warm-ups failed (it catches the error, out
    of memory included, and logs "Failed to warm up"), or when no forward over ``config.max_batch_tokens`` query
    tokens completed.
    """
    import torch

    config = _with(config, num_blocks=num_blocks)
    attn_implementation = model.config._attn_implementation
    tokens: list[int] = [0]

    def count(module: Any, args: Any, kwargs: dict[str, Any], output: Any) -> None:
        ids = kwargs.get("input_ids", args[0] if args else None)
        if ids is not None:
            tokens.append(int(ids.shape[-1]))

    failed = _FailedWarmups()
    transformers_log = logging.getLogger(TRANSFORMERS_LOGGER)
    transformers_log.addHandler(failed)
    hook = model.register_forward_hook(count, with_kwargs=True)
    began = time.perf_counter()
    try:
        with torch.no_grad():
            manager = model.init_continuous_batching(
                generation_config=copy.deepcopy(generation_config), continuous_batching_config=config
            )
            try:
                manager.batch_processor = manager._create_batch_processor()  # the cache, for every layer
                _order_streams(manager.batch_processor.model_runner)
                with nullcontext(None) if all_layers else one_layer_per_attention_type(model) as layers:
                    manager.warmup()
                    _forwards(manager, model, config.max_batch_tokens, block_tokens(config))
                    _synchronize(model.device)
                processor = manager.batch_processor
                seen: set[int] = set()
                cache_bytes, cache_count = _storage_bytes([processor.cache], model.device, seen)
                static_bytes, static_count = _storage_bytes([processor.inputs_and_outputs], model.device, seen)
                resolved = manager.continuous_batching_config
                run = EngineRun(
                    num_blocks,
                    cache_bytes,
                    static_bytes,
                    cache_count + static_count,
                    max(tokens),
                    model.config._attn_implementation,
                    cuda_graph_flags(resolved.use_cuda_graph),
                    bool(resolved.use_async_batching),
                    layers_run=layers,
                )
            finally:
                _close(manager, model, attn_implementation)
    finally:
        hook.remove()
        transformers_log.removeHandler(failed)
    if failed.messages:
        raise RuntimeError(
            f"transformers' warm-up failed at {num_blocks} blocks ({len(failed.messages)} time(s)): "
            f"{failed.messages[0]}"
        )
    if run.forward_tokens < config.max_batch_tokens:
        raise RuntimeError(
            f"the engine's worst-case forward over {config.max_batch_tokens} query tokens did not "
            f"complete at {num_blocks} blocks (largest forward: {run.forward_tokens} tokens)"
        )
    return replace(run, seconds=time.perf_counter() - began)


def kv_padding_interval(model: Any, generation_config: Any, config: Any) -> int | None:
    """The tokens transformers pads a batch's cache reads to with ``config`` (CUDA graphs or compile on), or
    ``None`` where it pads nothing. Resolved by transformers itself; no cache is created."""
    attn_implementation = model.config._attn_implementation
    manager = model.init_continuous_batching(
        generation_config=copy.deepcopy(generation_config), continuous_batching_config=config
    )
    try:
        resolved = manager.continuous_batching_config
        pads = (
            any(cuda_graph_flags(resolved.use_cuda_graph))
            or resolved.varlen_compile_config is not None
            or resolved.decode_compile_config is not None
        )
        interval = int(resolved.kv_padding_interval_size or 0)
        return interval if pads and interval > 0 else None
    finally:
        _close(manager, model, attn_implementation)


def sector_blocks(model: Any, config: Any) -> int:
    """The fewest blocks that fill whole sectors of transformers' paged cache (5.24: one flat cache of sectors,
    a sector the least common multiple of each attention type's block, in bytes, and of 128 bytes; ``num_blocks``
    rounded up to whole sectors). Runs at multiples of it hold exactly what their blocks cost, so the growth
    between two of them is the growth per block; between other counts it is off by up to a sector's rounding
    (a third of a block per block between 5 and 10 blocks of a model with two sliding layers and one full).
    Where the cache is not made of sectors (transformers before 5.24: one tensor per layer group), any block
    count holds what its blocks cost: 1."""
    from transformers.generation.continuous_batching import cache

    group = getattr(cache, "group_layers_by_attn_type", None)
    if not _sectored(cache) or group is None:
        return 1
    text = _text_config(model)
    groups = group(text)
    if not isinstance(groups, dict):
        return 1
    layers = [len(g) for g in groups.values()]
    heads = int(getattr(text, "num_attention_heads", 1) or 1)
    kv_heads = int(getattr(text, "num_key_value_heads", None) or heads)
    head_dim = int(getattr(text, "head_dim", None) or text.hidden_size // heads)
    page = 2 * block_tokens(config) * kv_heads * head_dim * model.dtype.itemsize
    sector = math.lcm(*(n * page for n in layers), 128)
    return sector // math.gcd(sector, sum(layers) * page)


def _sectored(cache: Any) -> bool:
    """Whether transformers' paged cache (its ``continuous_batching.cache`` module) is made of sectors (5.24)."""
    return hasattr(getattr(cache, "PagedAttentionMemoryHandler", None), "infer_max_batch_tokens_and_num_sectors")


def shared_block_groups(model: Any) -> int:
    """How many layer groups draw a request's blocks from one pool of ``num_blocks``: the groups of transformers
    before its cache of sectors (5.17: a model with sliding and full layers has one group per type, and a
    request of N tokens takes its blocks once per group), else 1. The smallest run holds a batch of
    ``max_batch_tokens`` in every group."""
    from transformers.generation.continuous_batching import cache

    group = getattr(cache, "group_layers_by_attn_type", None)
    if group is None or _sectored(cache):
        return 1
    groups = group(_text_config(model))
    return len(groups[0]) if isinstance(groups, tuple) and groups and isinstance(groups[0], list) else 1


def read_back_estimate(model: Any, config: Any, attn_implementation: str, max_batch_tokens: int) -> int:
    """Bytes a block adds to the worst-case forward's attention step, from the model's shapes: the keys and
    values of one layer gathered for the block's tokens (``sdpa`` and ``eager`` also repeat them to every query
    head and copy the mask's columns). Only steers the sizes of the runs; what is charged is measured."""
    text = _text_config(model)
    heads = int(getattr(text, "num_attention_heads", 1) or 1)
    kv_heads = int(getattr(text, "num_key_value_heads", None) or heads)
    head_dim = int(getattr(text, "head_dim", None) or text.hidden_size // heads)
    itemsize = model.dtype.itemsize
    tokens = block_tokens(config)
    gathered = 2 * tokens * kv_heads * head_dim * itemsize
    if "flash" in attn_implementation:
        return gathered
    return gathered + 2 * tokens * heads * head_dim * itemsize + max_batch_tokens * tokens * itemsize


#: The kind of figures :class:`~devmem.engine.profile_store.ProfileStore` keeps for this integration; its version
#: changes whenever the measurement does.
STORE_KIND = "transformers-cb"
METHOD_VERSION = 4


def _versions() -> dict[str, str | None]:
    import torch
    import transformers

    import devmem

    return {
        "devmem": devmem.__version__,
        "torch": torch.__version__,
        "transformers": transformers.__version__,
        "torch_cuda": getattr(torch.version, "cuda", None),
        "torch_hip": getattr(torch.version, "hip", None),
    }


def _driver_version(device: Any) -> int | None:
    """The GPU driver's version as the runtime reports it (``None`` on the CPU or where torch does not say)."""
    import torch

    if device.type != "cuda":
        return None
    query = getattr(torch._C, "_cuda_getDriverVersion", None)
    return int(query()) if query is not None else None


def _allocator_settings() -> dict[str, str]:
    return {n: v for n, v in sorted(os.environ.items()) if n.startswith("PYTORCH_") and "ALLOC" in n}


def profile_key(
    model: Any,
    generation_config: Any,
    config: Any,
    platform: Platform,
    device: int,
    total: int,
    weights: int,
    baseline_given: bool,
) -> dict[str, Any]:
    """Everything the measured figures depend on: the model's config, dtype and attention, the continuous
    batching and generation configs, the device (platform, name, total, driver), the libraries' versions, the
    allocator's settings, the weights charged and whether the engine gave a baseline."""
    generation = generation_config.to_diff_dict() if hasattr(generation_config, "to_diff_dict") else {}
    return {
        "method": METHOD_VERSION,
        "model": model.config.to_dict(),
        "model_class": type(model).__name__,
        "dtype": str(model.dtype),
        "attn_implementation": model.config._attn_implementation,
        "continuous_batching": config.to_dict() if hasattr(config, "to_dict") else vars(config),
        "generation": generation,
        "platform": platform.name,
        "device_name": platform.device_name(device),
        "device_total": total,
        "driver_version": _driver_version(model.device),
        "versions": _versions(),
        "allocator": _allocator_settings(),
        "weights": weights,
        "baseline_given": baseline_given,
    }


def _platform_and_device(model: Any, device: int | None, platform: Platform | None) -> tuple[Platform, int]:
    where = model.device
    if platform is None:
        platform = current_platform()
        if where.type == "cpu" and platform.name != "cpu":
            from devmem.cpu import CpuPlatform

            platform = CpuPlatform()
    if (where.type == "cpu") != (platform.name == "cpu"):
        raise ValueError(
            f"the model is on {where} but devmem's platform is {platform.name!r}: the KV cache goes "
            "where the model is; move the model or give the platform of its device"
        )
    if device is None:
        device = where.index if where.index is not None else 0
    return platform, device


def _check_arguments(
    model: Any,
    utilization: float | None,
    pinned_bytes: int | None,
    config: Any,
    generation_config: Any,
    device: int | None,
    baseline: MemorySnapshot | None,
    weights_memory: int | None,
    store: Any,
) -> tuple[float | None, Any, ProfileStore | None]:
    """Every argument checked before anything runs; raises :class:`SizingError` (or ``TypeError`` for a model or
    config of the wrong kind) naming the value."""
    from transformers import GenerationConfig

    u = _check_request(utilization, pinned_bytes)
    if baseline is not None and not isinstance(baseline, MemorySnapshot):
        raise SizingError(
            f"baseline must be a devmem MemorySnapshot (MemorySnapshot.measure() before the model exists) or None, "
            f"got {shown(baseline)} of type {type(baseline).__name__}"
        )
    if weights_memory is not None:
        if isinstance(weights_memory, str):
            raise SizingError(
                f"weights_memory must be a whole number of bytes (int), got the text {weights_memory!r}: "
                f"write devmem.parse_size({weights_memory!r}) for a size written as text"
            )
        _bytes("weights_memory", weights_memory)
    config = _check_config(config)
    if generation_config is not None and not isinstance(generation_config, GenerationConfig):
        raise SizingError(
            f"generation_config must be a transformers GenerationConfig or None (the model's), got "
            f"{generation_config!r} of type {type(generation_config).__name__}"
        )
    if device is not None:
        arguments.device_index(device, error=SizingError)
    if not hasattr(model, "init_continuous_batching"):
        raise TypeError(
            f"model must be a transformers model with continuous batching (init_continuous_batching), "
            f"got {type(model).__name__}"
        )
    _check_model(model)
    if generation_config is not None:
        _check_generation(generation_config)
    if getattr(model, "_cached_continuous_batching_manager", None) is not None:
        raise ValueError(
            "the model keeps a persistent continuous batching manager with its own cache; call "
            "model.destroy_cached_continuous_batching_manager() before sizing"
        )
    try:
        resolved_store = resolve_store(store)
    except ProfileStoreError as exc:
        raise SizingError(str(exc)) from None
    return u, config, resolved_store


#: The attention types transformers' paged cache has an allocator for, where its module does not say.
PAGED_ATTENTION_TYPES = ("full_attention", "sliding_attention")


def _paged_attention_types() -> tuple[str, ...]:
    """The layer types transformers' continuous batching pages (``ATTN_TYPE_TO_ALLOCATOR``)."""
    from transformers.generation.continuous_batching import cache

    return tuple(getattr(cache, "ATTN_TYPE_TO_ALLOCATOR", None) or PAGED_ATTENTION_TYPES)


def _unwrapped(model: Any) -> Any:
    """The model itself where ``model`` is wrapped by ``torch.compile``: continuous batching runs the wrapped
    model's own forward (``generate_batch`` and ``init_continuous_batching`` are its methods, reached through the
    wrapper), and compiles it only as its config's ``varlen_compile_config``/``decode_compile_config`` ask."""
    inner = getattr(model, "_orig_mod", None)
    return inner if inner is not None and type(model).__name__ == "OptimizedModule" else model


def _check_model(model: Any) -> None:
    """Refuse, naming why, a model transformers' continuous batching cannot serve or devmem cannot size: weights
    not loaded (the meta device) or on several devices, layers whose state is not a paged KV cache (linear
    attention, state-space layers: hybrid models), attention that does not hand the paged cache what it needs."""
    devices = sorted({str(p.device) for p in model.parameters()} | {str(b.device) for b in model.buffers()})
    if "meta" in devices:
        raise SizingError(
            f"the model's weights are on the meta device (devices {devices}): they are not loaded, so nothing "
            "can run or be measured; load the weights (from_pretrained, or build the model outside "
            "torch.device('meta')) before sizing"
        )
    if len(devices) > 1:
        raise SizingError(
            f"the model's parameters and buffers are on several devices ({', '.join(devices)}): devmem sizes the "
            "KV cache of one device, where continuous batching puts it (model.device); put the whole model on one "
            "device"
        )
    text = _text_config(model)
    paged = _paged_attention_types()
    layer_types = list(getattr(text, "layer_types", None) or [])
    other = sorted(set(layer_types) - set(paged))
    if other:
        raise SizingError(
            f"the model's layer_types hold {other} (layer_types={layer_types}): transformers' continuous batching "
            f"pages only {list(paged)} layers and refuses the others (a hybrid or state-space model); serve it with "
            "generate() instead"
        )
    found = _decoder_layers(model)
    if found is None:
        return
    if not _paged_update_needs_kwargs():
        return
    attention: Any = _layer_attention(found[2][0], 0)  # found only where every layer holds one
    source = _source(type(attention).forward) or ""
    if any("kwargs" not in call for call in _CACHE_UPDATE.findall(source)):
        raise SizingError(
            f"{type(attention).__name__}.forward calls the cache's update without kwargs=: transformers' paged "
            f"cache needs them, so continuous batching fails on every request of a {type(model).__name__} "
            "(PagedAttentionCache.update() missing 'kwargs'); serve it with generate() instead"
        )


#: A call of the cache's ``update`` for a layer (its arguments), in an attention module's source.
_CACHE_UPDATE = re.compile(r"\.update\(([^()]*layer_idx[^()]*)\)")


def _paged_update_needs_kwargs() -> bool:
    """Whether this transformers' paged cache takes ``update(..., kwargs)`` with no default (5.17 to 5.24 do)."""
    from transformers.generation.continuous_batching.cache import PagedAttentionCache

    try:
        parameter = inspect.signature(PagedAttentionCache.update).parameters.get("kwargs")
    except (TypeError, ValueError):
        return False
    return parameter is not None and parameter.default is inspect.Parameter.empty


def _source(function: Any) -> str | None:
    try:
        return inspect.getsource(function)
    except (OSError, TypeError):
        return None


def _check_generation(generation_config: Any) -> None:
    beams = getattr(generation_config, "num_beams", 1)
    if beams is not None and beams != 1:
        raise SizingError(
            f"generation_config.num_beams={beams!r}: transformers' continuous batching runs no beam search (it "
            "would serve one sequence per request, greedy or sampled); set num_beams=1, or use generate() for beams"
        )


#: Devices whose caching allocator :func:`limit_allocator` capped, and at what fraction of their total.
_LIMITED: dict[str, float] = {}


def limit_allocator(device: Any, nbytes: int | None) -> float | None:
    """Cap torch's caching allocator on ``device`` at ``nbytes`` (``None``: lift a cap set here before); returns
    the fraction of the device's total set, ``None`` on the CPU or where torch has no such cap.

    At the cap the allocator gives its cached, unused blocks back and retries before it reserves more, so what
    batch after batch leaves cached never takes the process past its share; a pass that needs more than the
    cap fails with out of memory instead of taking memory from the engines beside it.
    """
    import torch

    if device.type == "cpu":
        return None
    module = torch.get_device_module(device.type)
    setter, info = getattr(module, "set_per_process_memory_fraction", None), getattr(module, "mem_get_info", None)
    if setter is None or info is None:
        return None
    key = str(device)
    if nbytes is None:
        if key in _LIMITED:
            setter(1.0, device)
            del _LIMITED[key]
        return None
    fraction = min(1.0, max(0.0, nbytes / info(device)[1]))
    setter(fraction, device)
    _LIMITED[key] = fraction
    return fraction


#: The fields of a stored :class:`EngineRun` holding bytes or counts, and the least each may be.
_RUN_COUNTS = {"num_blocks": 1, "cache_bytes": 0, "static_bytes": 0, "allocations": 1, "forward_tokens": 0}


def _extra_problem(extra: Mapping[str, Any], total: int) -> str | None:
    """Why ``extra`` is not the runs, costs and notes this integration keeps beside a stored profile measured on a
    device of ``total`` bytes (``None``: it is)."""
    from devmem.engine.profile_store import whole_figure

    runs, costs, notes = extra.get("runs"), extra.get("costs"), extra.get("notes")
    if not isinstance(runs, list) or len(runs) < 2 or not all(isinstance(r, dict) for r in runs):
        return f"extra.runs is {shown(runs)}, not a list of at least two runs"
    fields = set(EngineRun.__dataclass_fields__)
    for i, r in enumerate(runs):
        if set(r) - fields or not {*_RUN_COUNTS, "attn_implementation", "cuda_graphs", "async_batching"} <= set(r):
            return f"extra.runs[{i}] has the fields {sorted(r)}, not those of an EngineRun"
        for name, least in _RUN_COUNTS.items():
            problem = whole_figure(f"extra.runs[{i}].{name}", r[name], low=least, high=total)
            if problem:
                return problem
        for name in ("peak_bytes", "reserved_peak_bytes", "layers_run"):
            problem = None if r.get(name) is None else whole_figure(f"extra.runs[{i}].{name}", r[name], high=total)
            if problem:
                return problem
        if r["cache_bytes"] + r["static_bytes"] > total:
            return f"extra.runs[{i}] held {r['cache_bytes'] + r['static_bytes']} bytes, more than the device's {total}"
        graphs, seconds = r["cuda_graphs"], r.get("seconds")
        if not isinstance(r["attn_implementation"], str) or type(r["async_batching"]) is not bool:
            return f"extra.runs[{i}]: attn_implementation must be text and async_batching true or false"
        if not isinstance(graphs, list) or not all(type(g) is bool for g in graphs):
            return f"extra.runs[{i}].cuda_graphs is {shown(graphs)}, not a list of true or false"
        if seconds is not None and (type(seconds) not in (int, float) or not 0 <= seconds < math.inf):
            return f"extra.runs[{i}].seconds is {shown(seconds)}, not a duration"
    if any(b["num_blocks"] <= a["num_blocks"] for a, b in zip(runs, runs[1:], strict=False)):
        return f"extra.runs' block counts {[r['num_blocks'] for r in runs]} do not ascend"
    if not isinstance(costs, dict):
        return f"extra.costs is {shown(costs)}, not a mapping"
    for name in ("block_bytes", "kv_block_bytes", "static_block_bytes"):
        problem = whole_figure(f"extra.costs.{name}", costs.get(name), high=total)
        if problem:
            return problem
    if costs["kv_block_bytes"] + costs["static_block_bytes"] > costs["block_bytes"]:
        return f"extra.costs {costs}: the KV and static parts of a block are more than the block"
    if not isinstance(notes, list) or not all(isinstance(n, str) for n in notes):
        return f"extra.notes is {shown(notes)}, not a list of text"
    return None


def _stored_extra(extra: Mapping[str, Any]) -> tuple[tuple[EngineRun, ...], dict[str, int], list[str]]:
    """(runs, costs, notes) this integration keeps beside a stored profile's figures (:func:`_extra_problem`
    found nothing wrong with them)."""
    runs = tuple(EngineRun(**{**r, "cuda_graphs": tuple(r["cuda_graphs"])}) for r in extra["runs"])
    costs = {name: extra["costs"][name] for name in ("block_bytes", "kv_block_bytes", "static_block_bytes")}
    return runs, costs, list(extra["notes"])


def _extra_accepted(total: int) -> Callable[[Mapping[str, Any]], bool]:
    """The ``accept`` of :meth:`EngineMemory.load_profile`: ``True`` for an extra :func:`_extra_problem` finds
    nothing wrong with, else a ``ValueError`` saying what is wrong (named in the store's one warning)."""

    def accept(extra: Mapping[str, Any]) -> bool:
        problem = _extra_problem(extra, total)
        if problem is not None:
            raise ValueError(problem)
        return True

    return accept


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
    ``pinned_bytes``; returns a :class:`SizedConfig` whose ``config`` has ``num_blocks`` set.

    The sizing is :class:`devmem.EngineMemory`'s lifecycle: best, ``memory`` is the one the engine created BEFORE
    the CUDA context and the model existed (it holds the baseline, the request and the reservation; give neither
    ``utilization``, ``pinned_bytes``, ``baseline`` nor ``reservation`` with it). Without it one is created here,
    from ``baseline`` where given (the snapshot taken before the model existed), else from a reading now: a
    warning is logged and this process's whole device memory (or, where the platform has no per-process figure,
    ``weights_memory``) counts as consumed.

    ``config`` (default ``ContinuousBatchingConfig()``) keeps every field the caller gave; ``max_batch_tokens``
    becomes transformers' default (8192) when unset and ``max_memory_percent`` 1.0 (with both sizes fixed,
    transformers only checks its own estimate against free memory with it). Hand the same ``generation_config``
    (default ``model.generation_config``) to ``generate_batch``. ``weights_memory`` (int bytes) defaults to the
    model's parameters and buffers; ``device`` (devmem's index) to the baseline's, else the model's device. On the
    pinned path ``pinned_bytes`` is what every block-proportional tensor may take: the cache, the batch's
    attention masks and read indices, and the forward's read-back.

    ``store`` keeps the measured figures (:class:`~devmem.engine.profile_store.ProfileStore`): ``None``/``True`` the
    default folder (``$DEVMEM_PROFILE_DIR``, else the XDG cache folder), a path that folder, ``False`` none. A
    start whose :func:`profile_key` was measured before plans from the stored figures without running the engine
    (:meth:`EngineMemory.load_profile`).

    On the utilization path, ``limit_allocator_to_share`` (default) caps torch's caching allocator of the device
    at the share less what torch does not allocate (:func:`limit_allocator`), so that serving never reserves
    past the share: the allocator gives cached blocks back first. Pass ``False`` to leave the allocator alone.

    ``reservation``: the engine's share on the host's per-device ledger (:func:`devmem.reserve`), where no
    ``memory`` is given: a :class:`~devmem.Reservation` taken with the baseline; ``True`` (default) reserves the
    share now, before the engine runs (a refusal is a :class:`~devmem.ReservationRefused` naming the holders), on
    the pinned path the cache beside the weights; ``False`` reserves nothing. ``SizedConfig.reservation`` keeps it
    (and ``SizedConfig.memory`` the lifecycle); it is released at exit.

    Every argument is checked before the engine runs. Raises :class:`~devmem.planner.sizing.SizingError` naming a bad
    value, :class:`~devmem.NotEnoughMemoryError` when the budget holds no block, ``TypeError``/``ValueError``
    for a model or config that cannot be sized.
    """
    began = time.perf_counter()
    model = _unwrapped(model)
    if memory is not None:
        utilization, pinned_bytes, device, platform = _from_memory(
            memory, utilization, pinned_bytes, device, platform, baseline, reservation
        )
    u, config, profile_store = _check_arguments(
        model, utilization, pinned_bytes, config, generation_config, device, baseline, weights_memory, store
    )
    arguments.flag("limit_allocator_to_share", limit_allocator_to_share, error=SizingError)
    if not isinstance(reservation, (bool, Reservation)):
        raise SizingError(f"reservation must be a devmem.Reservation, True or False, got {reservation!r}")
    if platform is not None:
        platform_argument(platform, error=SizingError)
    given = device if device is not None else (baseline.device if baseline is not None else None)
    platform, device = _platform_and_device(model, given, platform)
    check = getattr(platform, "check_device", None)
    if check is not None:
        try:
            check(device)
        except DevmemError as exc:
            raise SizingError(f"device={device!r}: {exc}") from None
    generation_config = model.generation_config if generation_config is None else generation_config
    weights = model_bytes(model) if weights_memory is None else int(weights_memory)
    notes: list[str] = []
    owned = memory is None and not isinstance(reservation, Reservation)
    if memory is None:
        try:  # EngineMemory checks the baseline and the reservation against the device
            memory = EngineMemory(
                device,
                utilization=u if u is not None else DEFAULT_UTILIZATION,
                pinned_bytes=pinned_bytes,
                platform=platform,
                check_startup=False,
                allocation_granularity=ALLOCATOR_GRANULARITY if platform.name != "cpu" else 1,
                reserve=reservation,
                reserve_bytes=None if pinned_bytes is None else pinned_bytes + weights,
                baseline=baseline,
                late=baseline is None,
            )
        except EngineMemoryError as exc:
            raise SizingError(str(exc)) from None
        if baseline is None:
            message = (
                "no baseline taken before the model was given: one was taken now, and "
                + (
                    f"this process's device memory now, {format_size(memory.baseline.process)}, counts as consumed"
                    if memory.baseline.process is not None
                    else "only the weights count as consumed; the CUDA context does not"
                )
                + "; take MemorySnapshot.measure() before creating the model (or create the EngineMemory then)"
            )
            log.warning("devmem: %s", message)
            notes.append(message)
    try:
        tokens = block_tokens(config)
        max_batch_tokens = config.max_batch_tokens or default_max_batch_tokens()
        percent = 1.0 if config.max_memory_percent is None else config.max_memory_percent
        profile_config = _with(config, max_batch_tokens=max_batch_tokens, max_memory_percent=percent)
        _check_share_holds_the_batch(model, memory, weights, max_batch_tokens, tokens)  # before seconds of engine runs
        key = profile_key(
            model, generation_config, profile_config, platform, device, memory.baseline.total, weights, not memory.late
        )
        extra = (
            None
            if profile_store is None
            else memory.load_profile(profile_store, key, kind=STORE_KIND, accept=_extra_accepted(memory.baseline.total))
        )
        if extra is not None:
            runs, costs, figure_notes = _stored_extra(extra)
        else:
            limit_allocator(model.device, None)  # measure without a cap set by an earlier sizing
            with _frozen_heap(), progress("devmem: sizing", total=MAX_RUNS, unit="run") as bar:
                runs, costs, figure_notes = _measure(
                    memory, model, generation_config, profile_config, weights, max_batch_tokens, bar
                )
            if profile_store is not None:
                ours = {
                    "runs": [vars(r) for r in runs],
                    "costs": costs,
                    "notes": figure_notes,
                    "measure_seconds": time.perf_counter() - began,
                }
                accept = _extra_accepted(memory.baseline.total)
                kept = memory.save_profile(profile_store, key, ours, kind=STORE_KIND, accept=accept)
                runs, costs, figure_notes = _stored_extra(kept)  # another engine's where it stored first
        notes.extend(figure_notes)
        plan = memory.plan(layout=KvLayout.tensors(runs[0].allocations))
        if plan.num_blocks * tokens < max_batch_tokens:
            raise SizingError(
                f"config.max_batch_tokens={max_batch_tokens} is more than the sized cache holds ({plan.num_blocks} "
                f"blocks of {tokens} tokens = {plan.num_blocks * tokens} tokens): no batch of that size could be "
                "scheduled, and the worst case was measured on a larger cache; lower max_batch_tokens to at most "
                f"{plan.num_blocks * tokens}, or give the engine more memory"
            )
        limit = None
        if u is not None and limit_allocator_to_share:
            limit = plan.breakdown["requested"] - memory.window_figures()["non_torch"]
            if limit_allocator(model.device, limit) is None:
                limit = None
        sized = _with(config, num_blocks=plan.num_blocks, max_batch_tokens=max_batch_tokens, max_memory_percent=percent)
        return SizedConfig(
            sized,
            plan,
            costs["block_bytes"],
            costs["kv_block_bytes"],
            costs["static_block_bytes"],
            costs["block_bytes"] - costs["kv_block_bytes"] - costs["static_block_bytes"],
            tokens,
            max_batch_tokens,
            memory.profile_result,
            runs,
            plan.breakdown["transient_peak"],
            tuple(notes),
            memory.block_cost_source or "measured now",
            time.perf_counter() - began,
            limit,
            memory.reservation,
            memory,
        )
    except BaseException:
        if owned:  # a sizing that fails gives back the share it reserved, so a retry in this process is admitted
            memory.close()
        raise


def attention_mask_bytes(model: Any, max_batch_tokens: int, tokens_per_block: int) -> int:
    """The fewest bytes of the attention mask transformers allocates for a batch of ``max_batch_tokens`` query tokens
    (``paged|sdpa`` and ``paged|eager``; flash attention takes none): ``[1, 1, M, N + M]`` of the model's dtype, N
    the tokens the cache holds, at least the batch's own in whole blocks. Allocated whole when the engine starts,
    whatever the batches served."""
    if "flash" in str(model.config._attn_implementation):
        return 0
    cache_tokens = tokens_per_block * math.ceil(max_batch_tokens / tokens_per_block)
    return max_batch_tokens * (cache_tokens + max_batch_tokens) * model.dtype.itemsize


def _check_share_holds_the_batch(
    model: Any, memory: EngineMemory, weights: int, max_batch_tokens: int, tokens_per_block: int
) -> None:
    """Refuse at once a share in which transformers' own tensors for the batch cannot fit (the weights and the
    attention mask, a floor: activations and blocks come on top), rather than after seconds of engine runs, with
    the error the plan would raise (:class:`~devmem.NotEnoughMemoryError` on the utilization path,
    :class:`SizingError` for pinned bytes) and what would pass the floor."""
    mask = attention_mask_bytes(model, max_batch_tokens, tokens_per_block)
    itemsize = model.dtype.itemsize
    if memory.pinned_bytes is not None:  # the pinned bytes hold what grows with the cache: the mask's N columns
        columns = mask - max_batch_tokens * max_batch_tokens * itemsize
        if memory.pinned_bytes >= columns:
            return
        pin = (
            f"pin at least {columns} bytes (the cache itself comes on top), or "
            if columns <= memory.baseline.total
            else f"no pin holds it (the device's total is {format_size(memory.baseline.total)}): "
        )
        raise SizingError(
            f"pinned_bytes={memory.pinned_bytes} ({format_size(memory.pinned_bytes)}) is smaller than the attention "
            f"mask's columns for a cache of config.max_batch_tokens={max_batch_tokens} tokens, {max_batch_tokens} x "
            f"{columns // (max_batch_tokens * itemsize)} x {itemsize} B = {columns} bytes ({format_size(columns)}), "
            f"checked before running the engine; {pin}lower config.max_batch_tokens, or use flash attention (no mask)"
        )
    floor = weights + mask
    total = memory.baseline.total
    if memory.requested >= floor:
        return
    fewer = _tokens_within(model, memory.requested - weights, tokens_per_block)
    raise NotEnoughMemoryError(
        f"not enough memory for the KV cache (utilization path): requested {format_size(memory.requested)} "
        f"(utilization {format_share(memory.utilization)} of {format_size(memory.baseline.total)}) cannot hold a "
        "batch of "
        f"config.max_batch_tokens={max_batch_tokens}: the weights {format_size(weights)} and transformers' "
        f"attention mask for it, {max_batch_tokens} x {mask // (max_batch_tokens * itemsize)} x {itemsize} B = "
        f"{format_size(mask)}, take {format_size(floor)} before any activation or block, checked before running "
        "the engine. Advice: "
        + (
            f"raise the utilization above {floor / total:.3g} ({format_size(floor)}, a floor: activations and the "
            "cache come on top), or "
            if floor <= total
            else f"no utilization holds it (the device's total is {format_size(total)}): "
        )
        + (
            f"lower config.max_batch_tokens (at {fewer} the floor alone fills the share)"
            if fewer
            else "use a smaller model"
        )
        + ", or use flash attention (no mask)",
        {
            "requested": memory.requested,
            "weights": weights,
            "attention_mask": mask,
            "max_batch_tokens": max_batch_tokens,
        },
    )


def _check_share_holds_the_first_run(memory: EngineMemory, first: BlockRun, max_batch_tokens: int, tokens: int) -> None:
    """Refuse right after the first engine run (the profile window, the smallest cache that holds a batch) a share
    that no block cost the next runs could measure would fit one batch in, rather than after all of them: with
    the plan's own figures, the fewest blocks a batch needs take at least the window's non-KV memory plus their
    share of the first run's peak (the plan's line through that peak is lowest where it charges no fixed bytes).
    The pinned path charges the cache alone, so the plan decides there."""
    if memory.pinned_bytes is not None:
        return
    figures = memory.window_figures()
    needed_blocks = math.ceil(max_batch_tokens / tokens)
    peak = max(figures["transient_peak_bytes"], first.peak)
    beside = figures["consumed"] + figures.get("graph_capture", 0)
    need = beside + math.ceil(peak * needed_blocks / first.num_blocks)
    if memory.requested >= need:
        return
    total = memory.baseline.total
    raise NotEnoughMemoryError(
        f"not enough memory for the KV cache (utilization path): requested {format_size(memory.requested)} "
        f"(utilization {format_share(memory.utilization)} of {format_size(total)}) cannot hold a batch of "
        f"config.max_batch_tokens={max_batch_tokens}: the first engine run, at {first.num_blocks} blocks, peaked "
        f"at {format_size(peak)} beside {format_size(beside)} it holds for good (weights, non-torch), so the "
        f"{needed_blocks} blocks of {tokens} tokens a batch needs take at least {format_size(need)}; refused after "
        f"the first of up to {MAX_RUNS} engine runs. Advice: raise the utilization to at least "
        f"{need / total:.3g} ({format_size(need)}, a floor: the next runs measure the rest), or lower "
        "config.max_batch_tokens",
        {
            "requested": memory.requested,
            "consumed": figures["consumed"],
            "first_run_blocks": first.num_blocks,
            "first_run_peak": peak,
            "needed": need,
            "max_batch_tokens": max_batch_tokens,
        },
    )


def _tokens_within(model: Any, budget: int, tokens_per_block: int) -> int:
    """The largest ``max_batch_tokens`` whose attention mask fits in ``budget`` bytes (0 where none does)."""
    if budget <= 0:
        return 0
    tokens = math.isqrt(budget // (2 * model.dtype.itemsize)) + 1
    while tokens > 0 and attention_mask_bytes(model, tokens, tokens_per_block) > budget:
        tokens -= 1
    return tokens


def _from_memory(
    memory: object,
    utilization: float | None,
    pinned_bytes: int | None,
    device: int | None,
    platform: Platform | None,
    baseline: object,
    reservation: object,
) -> tuple[float | None, int | None, int, Platform]:
    """The request, device and platform of the engine's own :class:`EngineMemory`, which holds them alone."""
    if not isinstance(memory, EngineMemory):
        raise SizingError(f"memory must be a devmem.EngineMemory or None, got {shown(memory)}")
    doubled = [
        name
        for name, value in (
            ("utilization", utilization),
            ("pinned_bytes", pinned_bytes),
            ("baseline", baseline),
            ("platform", platform),
        )
        if value is not None
    ]
    if reservation is not True:
        doubled.append("reservation")
    if device is not None and device != memory.device:
        doubled.append("device")
    if doubled:
        raise SizingError(
            f"memory holds the request, the baseline and the reservation: give {', '.join(doubled)} to the "
            "EngineMemory, not beside it"
        )
    if memory.pinned_bytes is not None:
        return None, memory.pinned_bytes, memory.device, memory.platform
    return memory.utilization, None, memory.device, memory.platform


@contextmanager
def _frozen_heap() -> Iterator[None]:
    """Keep every object that exists out of the collections each run's window makes (``gc.freeze``): with
    transformers and torch loaded a full collection takes a quarter of a second (H200 host, 450,000 objects), and
    each run collects several times (its window, transformers' own clean-up).

    Where nothing was frozen before, everything is unfrozen afterwards, and nothing is collected first: garbage that
    exists now is collected after the sizing (meanwhile any device memory it holds is only charged to the engine,
    never missed). Where the application froze objects itself (as servers do after start-up, and as some
    libraries do at import), ``gc.unfreeze`` would undo its choice, so what is frozen stays frozen, garbage
    collected once first so that none of it is kept for good."""
    frozen_before = gc.get_freeze_count()
    if frozen_before:
        gc.collect()
    gc.freeze()
    try:
        yield
    finally:
        if not frozen_before:
            gc.unfreeze()


def _measure(
    memory: EngineMemory,
    model: Any,
    generation_config: Any,
    config: Any,
    weights: int,
    max_batch_tokens: int,
    bar: Progress,
) -> tuple[tuple[EngineRun, ...], dict[str, int], list[str]]:
    """Run the engine through ``memory``: its profile window at ``N_a`` blocks (:meth:`EngineMemory.profile_blocks`),
    then the runs :meth:`EngineMemory.measure_block_cost` asks for (the first where the shapes say the
    cache-reading step sets the peak); ``bar`` counts each run. Returns the runs, the per-block costs and notes."""
    tokens = block_tokens(config)
    groups = shared_block_groups(model)
    small = math.ceil(max_batch_tokens / tokens) * groups + 1
    interval = kv_padding_interval(model, generation_config, config)
    quantum = math.lcm(sector_blocks(model, config), groups)  # 5.17: a warm-up reads n / groups in each group
    if interval:
        quantum = math.lcm(quantum, math.lcm(interval, tokens) // tokens)
    small = quantum * math.ceil(small / quantum)
    engine_runs: dict[int, EngineRun] = {}

    def run(blocks: int, all_layers: bool = False) -> int:
        engine_runs[blocks] = run_engine(model, generation_config, config, blocks, all_layers=all_layers)
        bar.update(blocks=blocks)
        return engine_runs[blocks].held_bytes

    first = memory.profile_blocks(lambda blocks: run(blocks, all_layers=True), small, weights_memory=weights)
    _check_share_holds_the_first_run(memory, first, max_batch_tokens, tokens)  # before the block-cost runs
    start = 2 * small
    if first.peak_bytes is not None:
        flat = max(0, first.peak_bytes - first.held_bytes)
        estimate = read_back_estimate(model, config, engine_runs[small].attn_implementation, max_batch_tokens)
        held = math.ceil(first.held_bytes / small)
        wanted = math.ceil(2 * flat / max(1, estimate))
        cap = memory.blocks_that_fit(BlockCost(math.ceil((held + estimate) * (1 + CAUTION)), (first, first), False))
        start = max(small + 1, min(max(wanted, start), cap))
    start = quantum * math.ceil(start / quantum)
    layout = KvLayout.tensors(engine_runs[small].allocations)
    cost = memory.measure_block_cost(run, [start], granularity=quantum, layout=layout)
    runs = tuple(
        replace(engine_runs[r.num_blocks], peak_bytes=r.peak_bytes, reserved_peak_bytes=r.reserved_peak_bytes)
        for r in cost.runs
    )
    before, after = runs[-2], runs[-1]
    step = after.num_blocks - before.num_blocks
    kv_block = math.ceil((after.cache_bytes - before.cache_bytes) / step)
    static_block = math.ceil((after.static_bytes - before.static_bytes) / step)
    block = cost.block_bytes
    costs = {
        "block_bytes": block,
        "kv_block_bytes": min(kv_block, block),
        "static_block_bytes": min(static_block, block - min(kv_block, block)),
    }
    profile = memory.profile_result
    return runs, costs, [*cost.notes, *([] if profile is None else profile.notes)]


__all__ = [
    "EngineRun",
    "SizedConfig",
    "attention_types",
    "block_tokens",
    "cuda_graph_flags",
    "default_max_batch_tokens",
    "kv_padding_interval",
    "limit_allocator",
    "model_bytes",
    "one_layer_per_attention_type",
    "profile_key",
    "read_back_estimate",
    "run_engine",
    "sector_blocks",
    "shared_block_groups",
    "size_continuous_batching",
]
