"""Tokens, not bytes: what a KV-cache budget holds for a model, and what a (context, sequences) target needs.

Pure arithmetic on a :class:`~devmem.planner.models.ModelMemory`, in exact ints. The cache is paged in blocks of
``block_size`` tokens; one block holds those tokens on every attention layer (``block_size x KV bytes per
token``), which is the block of :func:`devmem.planner.sizing.plan_kv_cache` with ``page_size_bytes = block_size x one
layer's bytes per token`` and ``num_layers`` = the attention layers. Per sequence at a context of ``c`` tokens:

- a full-attention layer holds ``ceil(c / block_size)`` blocks;
- a sliding-window layer holds ``min(ceil(c / block_size), ceil(window / block_size) + 1)`` blocks: its window,
  plus one block because the window need not start on a block boundary;
- a chunked-local layer (Llama 4) holds ``min(ceil(c / block_size), ceil(chunk / block_size))`` blocks: its
  current chunk (one block more where the chunk is not a whole number of blocks);
- recurrent layers hold their fixed state once per sequence.

No answer goes past the model's maximum context: the longest context is capped at it, and a context beyond it
holds no sequence. :mod:`devmem.planner.engine_layout` gives the same budget as vLLM lays it out and logs it.

The byte budget always comes from :func:`devmem.planner.sizing.plan_kv_cache`; nothing here re-derives it. With an
``allocation_granularity`` (an engine allocating the cache as one allocation rounded up to it, as
:func:`devmem.engine.kvcache.allocate_kv_cache` does with 2 MiB) only whole units of it are usable.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from fractions import Fraction
from typing import Any

from devmem import arguments
from devmem.planner.engine_layout import EngineLayout, engine_layout
from devmem.planner.models import MAX_TP, ModelMemory
from devmem.planner.sizing import KvCachePlan, SizingError, plan_kv_cache
from devmem.types import NotEnoughMemoryError
from devmem.units import format_size

DEFAULT_BLOCK_SIZE = 16


def _whole(name: str, value: object, minimum: int = 1) -> int:
    return arguments.integer(name, value, minimum=minimum, error=SizingError)


def _amount(nbytes: int) -> str:
    """``'1.42 GiB (1523568230 B)'``, or ``'197017 B'`` where the two would say the same."""
    text = format_size(nbytes)
    return text if text == f"{nbytes} B" else f"{text} ({nbytes} B)"


def _cdiv(a: int, b: int) -> int:
    return -(-a // b)


def _usable(kv_bytes: int, granularity: int) -> int:
    """The bytes of ``kv_bytes`` an allocation rounded up to ``granularity`` can use (negative stays as it is)."""
    return kv_bytes if kv_bytes < 0 else kv_bytes // granularity * granularity


def block_bytes(model: ModelMemory, block_size: int = DEFAULT_BLOCK_SIZE) -> int:
    """Bytes of one block: ``block_size`` tokens on every attention layer, on one rank."""
    return _whole("block_size", block_size) * model.kv_bytes_per_token


def plan_for_model(model: ModelMemory, *, block_size: int = DEFAULT_BLOCK_SIZE, **sizing: Any) -> KvCachePlan:
    """:func:`devmem.planner.sizing.plan_kv_cache` with this model's block; ``weights`` default to its weights per
    rank."""
    sizing.setdefault("weights", model.weights_bytes_per_rank)
    uniform = model.uniform_layers  # else one page is a block over every layer, whatever each layer holds
    return plan_kv_cache(
        page_size_bytes=_whole("block_size", block_size)
        * (model.kv_layer_bytes_per_token if uniform else model.kv_bytes_per_token),
        num_layers=model.attention_layers if uniform else 1,
        **sizing,
    )


@dataclass(frozen=True)
class SequenceCost:
    """What one sequence of ``context`` tokens holds on one rank: blocks per layer kind, KV bytes, state bytes."""

    context: int
    block_size: int
    full_blocks: int
    sliding_blocks: int
    kv_bytes: int
    state_bytes: int
    chunked_blocks: int = 0

    @property
    def total(self) -> int:
        return self.kv_bytes + self.state_bytes

    def formula(self, model: ModelMemory) -> str:
        if model.uniform_layers:
            page = self.block_size * model.kv_layer_bytes_per_token
            parts = []
            if model.full_attention_layers:
                parts.append(f"{model.full_attention_layers} full layers x {self.full_blocks} blocks")
            if model.sliding_attention_layers:
                parts.append(f"{model.sliding_attention_layers} sliding layers x {self.sliding_blocks} blocks")
            if model.chunked_attention_layers:
                parts.append(f"{model.chunked_attention_layers} chunked layers x {self.chunked_blocks} blocks")
            text = f"({' + '.join(parts)}) x {page} B per layer-block"
        else:  # layers of different shapes: each kind's bytes per block
            kinds = (
                (model.full_bytes_per_token, self.full_blocks, "full"),
                (model.sliding_bytes_per_token, self.sliding_blocks, "sliding"),
                (model.chunked_bytes_per_token, self.chunked_blocks, "chunked"),
            )
            text = " + ".join(
                f"{blocks} blocks x {self.block_size * each} B ({kind} layers)" for each, blocks, kind in kinds if each
            )
        if self.state_bytes:
            text += f" + state {self.state_bytes} B"
        return f"{text} = {self.total} B"

    def as_dict(self) -> dict[str, int]:
        return {
            "context": self.context,
            "block_size": self.block_size,
            "full_blocks": self.full_blocks,
            "sliding_blocks": self.sliding_blocks,
            "chunked_blocks": self.chunked_blocks,
            "kv_bytes": self.kv_bytes,
            "state_bytes": self.state_bytes,
            "total_bytes": self.total,
        }


def _window_blocks(model: ModelMemory, block_size: int) -> int:
    return _cdiv(model.sliding_window or 0, block_size) + 1


def _chunk_blocks(model: ModelMemory, block_size: int) -> int:
    chunk = model.attention_chunk_size or 0
    return _cdiv(chunk, block_size) + (1 if chunk % block_size else 0)


def _kv_bytes_at(model: ModelMemory, blocks: int, block_size: int) -> int:
    """KV bytes of one sequence whose full layers hold ``blocks`` blocks (sliding and chunked ones capped)."""
    sliding = min(blocks, _window_blocks(model, block_size)) if model.sliding_attention_layers else 0
    chunked = min(blocks, _chunk_blocks(model, block_size)) if model.chunked_attention_layers else 0
    per_token = (
        model.full_bytes_per_token * blocks
        + model.sliding_bytes_per_token * sliding
        + model.chunked_bytes_per_token * chunked
    )
    return per_token * block_size


def sequence_cost(model: ModelMemory, context: int, block_size: int = DEFAULT_BLOCK_SIZE) -> SequenceCost:
    """The bytes one sequence of ``context`` tokens holds (sliding layers capped at their window)."""
    context, block_size = _whole("context", context), _whole("block_size", block_size)
    full = _cdiv(context, block_size)
    sliding = min(full, _window_blocks(model, block_size)) if model.sliding_attention_layers else 0
    chunked = min(full, _chunk_blocks(model, block_size)) if model.chunked_attention_layers else 0
    kv = _kv_bytes_at(model, full, block_size)
    return SequenceCost(context, block_size, full, sliding, kv, model.state_bytes_per_sequence, chunked)


def tokens_in_pool(model: ModelMemory, kv_cache_bytes: int, block_size: int = DEFAULT_BLOCK_SIZE) -> int:
    """Tokens the pool holds on every attention layer: whole blocks x ``block_size``."""
    return _whole("kv_cache_bytes", kv_cache_bytes, 0) // block_bytes(model, block_size) * block_size


def sequences_at(model: ModelMemory, kv_cache_bytes: int, context: int, block_size: int = DEFAULT_BLOCK_SIZE) -> int:
    """How many sequences of ``context`` tokens the pool holds at once."""
    return _whole("kv_cache_bytes", kv_cache_bytes, 0) // sequence_cost(model, context, block_size).total


def longest_context(
    model: ModelMemory, kv_cache_bytes: int, sequences: int, block_size: int = DEFAULT_BLOCK_SIZE
) -> int | None:
    """The longest context (whole blocks of tokens) each of ``sequences`` sequences can have at once.

    0 when not even one block each fits; ``None`` when memory sets no limit (every attention layer slides or
    attends in chunks, so a sequence stops growing at its window or chunk). This is memory's limit alone:
    :func:`capacity` caps it at the model's maximum context.
    """
    kv_cache_bytes, sequences = _whole("kv_cache_bytes", kv_cache_bytes, 0), _whole("sequences", sequences)
    block_size = _whole("block_size", block_size)
    each = kv_cache_bytes // sequences - model.state_bytes_per_sequence
    if each < 0 or _kv_bytes_at(model, 1, block_size) > each:
        return 0
    if not model.full_attention_layers:
        caps = [_window_blocks(model, block_size)] * bool(model.sliding_attention_layers)
        caps += [_chunk_blocks(model, block_size)] * bool(model.chunked_attention_layers)
        if _kv_bytes_at(model, max(caps), block_size) <= each:
            return None
    # cost(low) fits, cost(high) not: every block of the full layers costs at least their bytes; without full layers
    # the cost stops growing at the largest cap, which does not fit (above)
    low, high = 1, each // (block_size * model.full_bytes_per_token) + 1 if model.full_attention_layers else max(caps)
    while high - low > 1:
        middle = (low + high) // 2
        low, high = (middle, high) if _kv_bytes_at(model, middle, block_size) <= each else (low, middle)
    return low * block_size


@dataclass(frozen=True)
class Capacity:
    """What a KV-cache budget holds for a model: blocks, tokens, and the answers to the questions asked."""

    model: ModelMemory
    kv_cache_bytes: int
    block_size: int
    block_bytes: int
    num_blocks: int
    tokens: int
    usable_bytes: int
    allocation_granularity: int = 1
    context: int | None = None
    cost: SequenceCost | None = None
    sequences_at_context: int | None = None
    sequences: int | None = None
    longest_context: int | None = None
    longest_context_by_memory: int | None = None
    engine: EngineLayout | None = None

    @property
    def context_beyond_max(self) -> bool:
        """Whether the context asked about is longer than the model takes (then no sequence of it fits)."""
        m = self.model.max_context
        return self.context is not None and m is not None and self.context > m

    def explain(self) -> str:
        """The arithmetic, one line per answer."""
        m, budget = self.model, format_size(self.usable_bytes)
        out = []
        if self.allocation_granularity > 1:
            out.append(
                f"usable: {self.kv_cache_bytes} B in whole allocation units of {self.allocation_granularity} B "
                f"= {self.usable_bytes} B"
            )
        mixed = m.sliding_attention_layers or m.chunked_attention_layers or m.states
        out.append(
            f"tokens: {self.usable_bytes} B // block {self.block_bytes} B ({self.block_size} tokens x "
            f"{m.kv_bytes_per_token} B per token) = {self.num_blocks} blocks = {self.tokens} tokens"
            + (" (the budget read as every attention layer holding every token; see sequences below)" if mixed else "")
        )
        if m.state_bytes_per_sequence:
            out.append(
                f"  every running sequence also holds {m.state_bytes_per_sequence} B of recurrent state "
                "from the same pool"
            )
        if self.cost is not None:
            out.append(
                f"sequences at {self.context} tokens: each holds {self.cost.formula(m)}; "
                f"{budget} holds {self.sequences_at_context}"
                + (
                    f", none: the model takes at most {m.max_context} tokens ({m.max_context_source})"
                    if self.context_beyond_max
                    else ""
                )
            )
        if self.sequences is not None:
            if self.longest_context_by_memory is None:
                limit = "no limit from memory (every attention layer slides or attends in chunks)"
            else:
                limit = (
                    f"({self.usable_bytes} B // {self.sequences}"
                    + (f" - state {m.state_bytes_per_sequence} B" if m.state_bytes_per_sequence else "")
                    + f") in whole blocks = {self.longest_context_by_memory} tokens"
                )
            out.append(f"longest context for {self.sequences} sequence(s): {limit}")
            by_memory = self.longest_context_by_memory
            if m.max_context is not None and (by_memory is None or by_memory > m.max_context):
                out.append(f"  capped at the model's maximum context: {m.max_context} tokens ({m.max_context_source})")
        if self.engine is not None and (
            self.engine.tokens != self.tokens or self.engine.block_size != self.block_size or mixed
        ):
            seqs = None if self.context_beyond_max else self.sequences_at_context
            out += self.engine.lines(m, self.tokens, None if seqs is None else self.context, seqs)
        return "\n".join(out)

    def as_dict(self) -> dict[str, object]:
        return {
            "kv_cache_bytes": self.kv_cache_bytes,
            "allocation_granularity": self.allocation_granularity,
            "usable_bytes": self.usable_bytes,
            "block_size": self.block_size,
            "block_bytes": self.block_bytes,
            "num_blocks": self.num_blocks,
            "tokens": self.tokens,
            "context": self.context,
            "sequence": self.cost.as_dict() if self.cost else None,
            "sequences_at_context": self.sequences_at_context,
            "sequences": self.sequences,
            "longest_context": self.longest_context,
            "longest_context_by_memory": self.longest_context_by_memory,
            "longest_context_unbounded": self.sequences is not None and self.longest_context is None,
            "max_context": self.model.max_context,
            "context_beyond_max": self.context_beyond_max,
            "vllm": None if self.engine is None else self.engine.as_dict(self.model, self.context),
        }


def capacity(
    model: ModelMemory,
    kv_cache_bytes: int,
    *,
    block_size: int = DEFAULT_BLOCK_SIZE,
    context: int | None = None,
    sequences: int | None = None,
    allocation_granularity: int = 1,
) -> Capacity:
    """Blocks and tokens in ``kv_cache_bytes``; sequences at ``context``; the longest context for ``sequences``.

    With ``allocation_granularity`` only its whole units of the budget are used (the cache is one allocation
    rounded up to it), so ``num_blocks`` is the one :func:`plan_for_model` gives with the same granularity.
    """
    kv_cache_bytes, block_size = _whole("kv_cache_bytes", kv_cache_bytes, 0), _whole("block_size", block_size)
    context = None if context is None else _whole("context", context)
    sequences = None if sequences is None else _whole("sequences", sequences)
    granularity = _whole("allocation_granularity", allocation_granularity)
    usable = _usable(kv_cache_bytes, granularity)
    block = block_bytes(model, block_size)
    cost = None if context is None else sequence_cost(model, context, block_size)
    by_memory = None if sequences is None else longest_context(model, usable, sequences, block_size)
    longest = by_memory
    if sequences is not None and model.max_context is not None:
        longest = model.max_context if by_memory is None else min(by_memory, model.max_context)
    beyond = context is not None and model.max_context is not None and context > model.max_context
    return Capacity(
        model=model,
        kv_cache_bytes=kv_cache_bytes,
        block_size=block_size,
        block_bytes=block,
        num_blocks=usable // block,
        tokens=usable // block * block_size,
        usable_bytes=usable,
        allocation_granularity=granularity,
        context=context,
        cost=cost,
        sequences_at_context=None if cost is None else 0 if beyond else usable // cost.total,
        sequences=sequences,
        longest_context=longest,
        longest_context_by_memory=by_memory,
        engine=engine_layout(model, usable, block_size),
    )


def _budget(
    model: ModelMemory, block_size: int, total: int, utilization: float, extra: dict[str, int]
) -> tuple[int, int]:
    """``(requested, KV budget)`` by :func:`plan_for_model`; the budget may be below one block or negative."""
    try:
        plan = plan_for_model(model, block_size=block_size, total=total, utilization=utilization, **extra)
    except NotEnoughMemoryError as exc:
        return int(exc.breakdown["requested"] or 0), int(exc.breakdown["kv_cache"] or 0)
    return int(plan.breakdown["requested"]), plan.kv_cache_bytes


@dataclass(frozen=True)
class Fit:
    """Whether ``sequences`` sequences of ``context`` tokens fit a device at ``utilization``, and what they need."""

    model: ModelMemory
    context: int
    sequences: int
    block_size: int
    cost: SequenceCost
    needed_kv_bytes: int
    total: int
    utilization: float
    requested: int
    non_kv: dict[str, int]
    kv_budget: int
    usable_kv_bytes: int
    allocation_granularity: int
    free: int | None
    needed_utilization: float | None
    gpus: int | None

    @property
    def fits_memory(self) -> bool:
        return self.usable_kv_bytes >= max(self.needed_kv_bytes, block_bytes(self.model, self.block_size))

    @property
    def fits_free(self) -> bool | None:
        """Whether free memory now covers the request, as an engine checks at start; ``None`` when unknown."""
        return None if self.free is None else self.free >= self.requested

    @property
    def fits_context(self) -> bool | None:
        return None if self.model.max_context is None else self.context <= self.model.max_context

    @property
    def fits(self) -> bool:
        return not self.reasons

    @property
    def reasons(self) -> list[str]:
        """Why the target does not fit (empty when it does)."""
        out = []
        if not self.fits_memory:
            short = max(self.needed_kv_bytes, block_bytes(self.model, self.block_size)) - self.usable_kv_bytes
            out.append(f"the KV budget is {_amount(short)} short")
        if self.fits_free is False:
            out.append("free memory is below the request")
        if self.fits_context is False:
            out.append(f"the context exceeds the model's maximum context ({self.model.max_context_source})")
        return out

    def explain(self) -> str:
        """The verdict, then the arithmetic behind it, one line each."""
        f = format_size
        non_kv = " + ".join(f"{k.replace('_', ' ')} {f(v)}" for k, v in self.non_kv.items() if v) or "0 B"
        verdict = "yes" if self.fits else f"no ({'; '.join(self.reasons)})"
        needed_u = (
            f"{self.needed_utilization:.4f}"
            if self.needed_utilization is not None
            else "more than 1: the target does not fit one device of this size"
        )
        gpus = str(self.gpus) if self.gpus is not None else "none up to the model's attention heads"
        out = [
            (
                f"fits: {verdict}: {self.sequences} sequence(s) of {self.context} tokens need "
                f"{f(self.needed_kv_bytes)} of KV cache ({self.needed_kv_bytes} B); at utilization {self.utilization} "
                f"the budget is {f(self.kv_budget)} ({self.kv_budget} B)"
            ),
            f"  per sequence: {self.cost.formula(self.model)}; x {self.sequences} = {self.needed_kv_bytes} B",
            f"  budget: requested ceil({f(self.total)} x {self.utilization}) = {f(self.requested)} - non-KV {non_kv}"
            + (
                f"; usable in whole units of {self.allocation_granularity} B: {self.usable_kv_bytes} B"
                if self.allocation_granularity > 1
                else ""
            ),
            f"  utilization needed: {needed_u}",
            f"  GPUs of this kind needed (tensor parallel, same utilization): {gpus}",
        ]
        if self.fits_free is not None and self.free is not None:
            out.append(
                f"  free now {f(self.free)} {'>=' if self.fits_free else '<'} requested {f(self.requested)}"
                + ("" if self.fits_free else ": an engine at this utilization fails to start")
            )
        if self.fits_context is not None:
            out.append(
                f"  context {self.context} {'<=' if self.fits_context else '>'} the model's maximum context "
                f"{self.model.max_context} ({self.model.max_context_source})"
            )
        return "\n".join(out)

    def as_dict(self) -> dict[str, object]:
        return {
            "fits": self.fits,
            "reasons": self.reasons,
            "fits_memory": self.fits_memory,
            "fits_free": self.fits_free,
            "fits_context": self.fits_context,
            "context": self.context,
            "sequences": self.sequences,
            "block_size": self.block_size,
            "sequence": self.cost.as_dict(),
            "needed_kv_bytes": self.needed_kv_bytes,
            "total": self.total,
            "utilization": self.utilization,
            "requested": self.requested,
            "non_kv": dict(self.non_kv),
            "kv_budget": self.kv_budget,
            "allocation_granularity": self.allocation_granularity,
            "usable_kv_bytes": self.usable_kv_bytes,
            "free": self.free,
            "needed_utilization": self.needed_utilization,
            "gpus": self.gpus,
            "tp": self.model.tp,
        }


def fit(
    model: ModelMemory,
    *,
    context: int,
    sequences: int,
    total: int,
    utilization: float = 0.9,
    free: int | None = None,
    block_size: int = DEFAULT_BLOCK_SIZE,
    transient_peak_bytes: int = 0,
    non_torch: int = 0,
    graph_capture: int = 0,
    allocation_granularity: int = 1,
) -> Fit:
    """Whether ``sequences`` x ``context`` fits a device of ``total`` bytes at ``utilization``, and what it needs.

    The budget is :func:`plan_for_model` (weights = the model's weights per rank, plus the activation peak and
    other non-KV memory given: they come from profiling, not from the config). ``needed_utilization`` is the
    smallest utilization, rounded up to 4 decimals, whose budget holds the target (``None`` above 1); ``gpus``
    the smallest tensor-parallel size whose ranks each hold their share at ``utilization``. With an
    ``allocation_granularity`` only whole units of it count (see :func:`capacity`).
    """
    sequences, total = _whole("sequences", sequences), _whole("total", total)
    block_size = _whole("block_size", block_size)
    free = None if free is None else _whole("free", free, 0)
    granularity = _whole("allocation_granularity", allocation_granularity)
    cost = sequence_cost(model, context, block_size)
    extra = {
        "transient_peak_bytes": transient_peak_bytes,
        "non_torch": non_torch,
        "graph_capture": graph_capture,
        "allocation_granularity": granularity,
    }
    requested, budget = _budget(model, block_size, total, utilization, extra)
    needed = sequences * cost.total
    non_kv = {
        "weights": model.weights_bytes_per_rank,
        "transient_peak_bytes": transient_peak_bytes,
        "non_torch": non_torch,
        "graph_capture": graph_capture,
    }
    share = Fraction(
        _cdiv(max(needed, block_bytes(model, block_size)), granularity) * granularity + sum(non_kv.values()), total
    )
    needed_u = None if share > 1 else math.ceil(share * 10_000) / 10_000
    gpus = None
    for tp in filter(model.splits_over, range(1, min(model.num_attention_heads, MAX_TP) + 1)):
        split = model.at_tp(tp)
        want = max(sequences * sequence_cost(split, context, block_size).total, block_bytes(split, block_size))
        if _usable(_budget(split, block_size, total, utilization, extra)[1], granularity) >= want:
            gpus = tp
            break
    return Fit(
        model=model,
        context=cost.context,
        sequences=sequences,
        block_size=block_size,
        cost=cost,
        needed_kv_bytes=needed,
        total=total,
        utilization=float(utilization),
        requested=requested,
        non_kv=non_kv,
        kv_budget=budget,
        usable_kv_bytes=_usable(budget, granularity),
        allocation_granularity=granularity,
        free=free,
        needed_utilization=needed_u,
        gpus=gpus,
    )
