"""Pure KV-cache arithmetic (docs/sizing.md): int bytes in, int bytes and an explanation out.

No torch, no platform, no I/O. Three paths, one function each, over the same shared terms (the block, the
figures that explain the memory that is not KV cache):

- :func:`plan_utilization`: ``kv = ceil(total * utilization) - (consumed + transient peak + graph capture)``;
- :func:`plan_pinned`: ``kv = pinned_bytes`` (the engine releases the allocator cache before allocating it);
- :func:`plan_growable`: ``kv = min(requested - non_kv_used, free + committed - margin) - transient peak``,
  floored at 0, with ``margin = max(margin_floor, ceil(margin_fraction * transient peak))`` and ``non_kv_used``
  the drop of free memory between the readings, never below what this engine knows it holds itself.

:func:`plan_kv_cache` chooses the path from its arguments (the engine-facing entry:
``plan_kv_cache(**profile.plan_inputs(), page_size_bytes=..., num_layers=...)``). Its keywords, and each path's,
are checked once (:meth:`~devmem.planner.inputs.CheckedPlanInputs.checked`); :func:`plan` sizes from the
checked inputs, trusting them (:class:`devmem.EngineMemory` builds them from what its door checked). Each raises
:class:`~devmem.NotEnoughMemoryError` with the numbers when the budget does not hold one block.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from fractions import Fraction
from types import MappingProxyType
from typing import NamedTuple, TypedDict

from devmem.arguments import MAX_BYTES as MAX_BYTES  # re-exported: no figure of memory reaches it
from devmem.errors import NotEnoughMemoryError, SizingError
from devmem.planner.inputs import DEFAULT_UTILIZATION as DEFAULT_UTILIZATION
from devmem.planner.inputs import MARGIN_FLOOR_BYTES as MARGIN_FLOOR_BYTES
from devmem.planner.inputs import MARGIN_FRACTION as MARGIN_FRACTION
from devmem.planner.inputs import CheckedPlanInputs, layers, margin_share, share
from devmem.planner.inputs import byte_count as _bytes
from devmem.planner.rounding import Rounding
from devmem.units import format_share, format_size


def requested_memory(total: int, utilization: float) -> int:
    """``ceil(total * utilization)``: the bytes an engine at ``utilization`` (``0 < utilization <= 1``) may use
    in all, the one rounding of a share to bytes (:func:`devmem.reserve` asks for it too).

    The product is exact: a float means the decimal it prints as (0.9 is 9/10), so where ``total * utilization``
    is a whole number (80 GiB at 0.9) it is that number, never one more; a bad value is a :class:`SizingError`.
    """
    return requested_of(_bytes("total", total, positive=True), share(utilization))


def requested_of(total: int, fraction: Fraction) -> int:
    """:func:`requested_memory` of a checked ``total`` and share (``fraction``, from :func:`devmem.arguments.
    utilization`): what :class:`devmem.EngineMemory`'s door asks with what it checked."""
    return math.ceil(total * fraction)


def profiled_kv_cache_bytes(
    requested: int, total_consumed: int, transient_peak_bytes: int = 0, graph_capture: int = 0
) -> int:
    """``requested - (total_consumed + transient_peak_bytes + graph_capture)``: the utilization path's budget.

    ``total_consumed`` is what the process holds after the profile run beyond what it held before the model
    was created; ``transient_peak_bytes`` is the part of the activation peak it no longer holds. The result
    may be zero or negative (by how much the budget falls short); :func:`plan_utilization` raises on it.
    """
    return _bytes("requested", requested) - (
        _bytes("total_consumed", total_consumed)
        + _bytes("transient_peak_bytes", transient_peak_bytes)
        + _bytes("graph_capture", graph_capture)
    )


def _growable_terms(
    requested: int,
    init_free: int,
    free: int,
    committed: int,
    transient: int,
    margin_floor_bytes: int,
    margin_fraction: Fraction,
    own: int = 0,
) -> dict[str, int]:
    """Every term of the growable formula, of checked figures; ``unfloored`` is the budget before it is floored at
    0. ``own`` is what this engine knows it came to hold between the readings (its consumed memory):
    ``non_kv_used`` is never below it, so that memory a co-tenant released meanwhile is not credited to this
    engine."""
    margin = max(margin_floor_bytes, math.ceil(margin_fraction * transient))
    non_kv_used = max(0, init_free - free - committed, own)
    requested_cap = requested - non_kv_used
    free_cap = free + committed - margin
    unfloored = min(requested_cap, free_cap) - transient
    return {
        "requested": requested,
        "init_free": init_free,
        "free": free,
        "committed": committed,
        "transient_peak": transient,
        "margin": margin,
        "non_kv_used": non_kv_used,
        "requested_cap": requested_cap,
        "free_cap": free_cap,
        "unfloored": unfloored,
        "kv_cache": max(0, unfloored),
    }


def growable_kv_cache_bytes(
    *,
    requested_memory: int,
    init_free_memory: int,
    free_memory: int,
    committed_bytes: int = 0,
    transient_peak_bytes: int = 0,
    margin_floor_bytes: int = MARGIN_FLOOR_BYTES,
    margin_fraction: float = MARGIN_FRACTION,
    consumed: int = 0,
) -> int:
    """Budget of a growable (extensible) KV cache from two free-memory readings, floored at 0.

    ``non_kv_used = max(init_free - free - committed, consumed)`` (at least 0: memory that others released does
    not raise the cap, nor lower it below ``consumed``, what this engine knows it holds beside its cache),
    ``margin = max(margin_floor, ceil(margin_fraction * transient_peak))`` and
    ``kv = min(requested - non_kv_used, free + committed - margin) - transient_peak``.
    """
    requested, own = _bytes("requested_memory", requested_memory), _bytes("consumed", consumed)
    return _growable_terms(
        requested,
        _bytes("init_free_memory", init_free_memory),
        _bytes("free_memory", free_memory),
        _bytes("committed_bytes", committed_bytes),
        _bytes("transient_peak_bytes", transient_peak_bytes),
        _bytes("margin_floor_bytes", margin_floor_bytes),
        margin_share(margin_fraction),
        own,
    )["kv_cache"]


def blocks_for_bytes(kv_bytes: int, page_size_bytes: int, num_layers: int) -> int:
    """Whole KV blocks in ``kv_bytes``, one block being one page on every layer."""
    return _bytes("kv_bytes", kv_bytes) // (
        _bytes("page_size_bytes", page_size_bytes, positive=True) * layers(num_layers)
    )


_LABELS = {
    "total": "total",
    "requested": "requested",
    "pinned": "pinned",
    "weights": "weights",
    "transient_peak": "transient peak",
    "non_torch": "non-torch",
    "graph_capture": "graph capture",
    "consumed": "consumed",
    "non_kv": "non-KV",
    "other_processes": "other processes",
    "released_cache": "released allocator cache",
    "init_free": "free at start",
    "free": "free now",
    "committed": "committed to the cache",
    "non_kv_used": "non-KV used",
    "margin": "margin",
    "requested_cap": "requested - non-KV used",
    "free_cap": "free + committed - margin",
    "block": "one block",
    "kv_cache": "KV cache",
    "granularity": "allocation granularity",
    "allocations": "allocations",
}

_PATHS = {
    "utilization": "path: utilization {utilization} of the total, minus memory that is not KV cache",
    "pinned": "path: pinned (the size was given; the allocator cache is released before allocating it)",
    "growable": "path: growable (min(requested - non-KV used, free + committed - margin) - transient peak)",
}


@dataclass(frozen=True)
class KvCachePlan:
    """How many bytes and blocks the KV cache gets, by which path, and the figures that led there; ``layout``
    says how the plan assumed the cache is allocated, ``device`` the device it was made for (where known:
    :class:`devmem.EngineMemory` sets it, and allocating it elsewhere is refused)."""

    kv_cache_bytes: int
    num_blocks: int
    path: str
    block_bytes: int
    utilization: float | None = None
    breakdown: Mapping[str, int] = field(default_factory=dict)
    layout: str = ""
    device: int | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "breakdown", MappingProxyType(dict(self.breakdown)))

    def explain(self) -> str:
        """Lines for people: the result, then each figure that went into it."""
        held = self.num_blocks * self.block_bytes
        left = self.kv_cache_bytes - held
        head = f"KV cache: {format_size(self.kv_cache_bytes)} ({self.kv_cache_bytes} bytes) " + (
            f"holds exactly {self.num_blocks} blocks x {format_size(self.block_bytes)} ({self.block_bytes} bytes)"
            if left == 0
            else f"= {self.num_blocks} blocks x {format_size(self.block_bytes)} = {held} bytes, {left} bytes left over"
        )
        width = max((len(_LABELS[k]) for k in self.breakdown), default=0)
        how = self._how_figures_add_up()
        rows = [
            f"  {_LABELS[k]:<{width}}  {v if k == 'allocations' else format_size(v)}"
            + (f"  ({how[k]})" if k in how else "")
            for k, v in self.breakdown.items()
        ]
        layout = [f"layout: {self.layout}"] if self.layout else []
        share = None if self.utilization is None else format_share(self.utilization)
        return "\n".join([head, _PATHS[self.path].format(utilization=share), *layout, *rows])

    def _how_figures_add_up(self) -> dict[str, str]:
        """For the breakdown's derived lines: what they add up from (the utilization path), and which figures are
        only reported."""
        b = self.breakdown
        how = {k: "reported, not subtracted" for k in ("other_processes", "released_cache") if k in b}
        if self.path != "utilization":
            return how
        how["requested"] = f"{self.utilization} x total, rounded up"
        if b["consumed"] == b["weights"] + b["non_torch"]:
            how["consumed"] = "weights + non-torch"
        else:  # measured by a profile: the weights and memory outside torch's allocator are inside it
            how["consumed"] = "this process's measured growth: it holds the weights and non-torch, which may overlap"
        how["non_kv"] = "consumed + transient peak + graph capture"
        return how

    def as_dict(self) -> dict[str, object]:
        return {
            "path": self.path,
            "kv_cache_bytes": self.kv_cache_bytes,
            "num_blocks": self.num_blocks,
            "block_bytes": self.block_bytes,
            "utilization": self.utilization,
            "breakdown": dict(self.breakdown),
            "layout": self.layout,
            "device": self.device,
        }


class _Shared(NamedTuple):
    """The terms every path shares: the block, and the figures that explain the memory that is not KV cache."""

    block: int
    weights: int
    transient_peak: int
    non_torch: int
    other_processes: int | None
    released_cache: int
    granularity: int
    allocations: int
    rounding: Rounding

    def parts(self) -> dict[str, int]:
        return {"weights": self.weights, "transient_peak": self.transient_peak, "non_torch": self.non_torch}

    def reported(self) -> dict[str, int]:
        """Figures reported, never subtracted: other processes' memory, the released cache and the allocation
        granularity, where known (and not 1 byte)."""
        return {
            k: v
            for k, v in (
                ("other_processes", self.other_processes),
                ("released_cache", self.released_cache or None),
                ("granularity", self.granularity if self.granularity > 1 else None),
                ("allocations", self.allocations if self.allocations > 1 else None),
            )
            if v is not None
        }

    def blocks(self, kv: int) -> int:
        """The most whole blocks whose allocations (``allocations`` equal tensors, rounded as ``rounding`` says)
        take at most ``kv`` bytes together."""
        return self.rounding.blocks(kv, self.block)

    def smallest(self) -> int:
        """The bytes one block takes once allocated."""
        return self.rounding.reserved(self.block)

    def layout(self) -> str:
        """How the plan assumed the cache is allocated, for people ("" for a plan that assumed no rounding)."""
        return self.rounding.describe()


def _shared(inputs: CheckedPlanInputs) -> _Shared:
    """The terms every path shares, of checked inputs."""
    block = inputs.page_size_bytes * inputs.num_layers
    allocator, count = inputs.allocator, inputs.allocations
    alternatives: tuple[int, ...] = ()
    if count is None:
        # not told the layout: with a modelled allocator, a tensor per layer, and it must fit one allocation and
        # keys and values apart too (either can take more than a tensor per layer)
        count = inputs.num_layers if allocator is not None else 1
        if allocator is not None:
            alternatives = tuple(c for c in dict.fromkeys((1, 2 * inputs.num_layers)) if c != count and block % c == 0)
    granularity = inputs.allocation_granularity
    return _Shared(
        block=block,
        weights=inputs.weights,
        transient_peak=inputs.transient_peak_bytes,
        non_torch=inputs.non_torch,
        other_processes=inputs.other_processes,
        released_cache=inputs.released_cache,
        granularity=granularity,
        allocations=count,
        rounding=Rounding(count, allocator, 1 if allocator is not None else granularity, alternatives),
    )


def _figure(name: str, value: int) -> str:
    return f"{_LABELS[name]} {format_size(value)}"


def _utilization_advice(total: int, needed_bytes: int, others: int | None = None) -> tuple[float | None, str]:
    """The smallest utilization that holds one block, and the remedies that would work: freeing other processes'
    memory is named only where they hold some (``others``, when known), with how much."""
    needed = Fraction(needed_bytes, total)
    if needed > 1:
        return None, (
            f"no utilization is enough: memory that is not KV cache plus one block needs "
            f"{format_size(needed_bytes)}, more than the total {format_size(total)}; use a smaller or "
            "quantized model, shard it over more devices, or shorten the context or batch"
        )
    rounded = math.ceil(needed * 1000) / 1000
    remedies = [
        f"a utilization of at least {rounded:.3f} ({format_size(math.ceil(rounded * total))}) would hold one block: "
        "raise it",
        "shorten the context or batch so the transient peak shrinks",
        "use a smaller or quantized model",
    ]
    if others:
        remedies.append(f"free memory that other processes hold ({format_size(others)}) if the device cannot give that")
    return rounded, ", or ".join(remedies)


def _shortfall(
    path: str, figures: dict[str, int], kv: int, shared: _Shared, arithmetic: str, needed: float | None, advice: str
) -> NotEnoughMemoryError:
    parts = [_figure(k, figures[k]) for k in ("requested", "weights", "transient_peak", "non_torch")]
    if figures.get("graph_capture"):
        parts.append(_figure("graph_capture", figures["graph_capture"]))
    if shared.other_processes is not None:
        parts.append(_figure("other_processes", shared.other_processes))
    smallest = shared.smallest()
    allocated = "" if smallest == shared.block else f", {format_size(smallest)} allocated"
    message = (
        f"not enough memory for the KV cache ({path} path): {arithmetic} = {format_size(kv)}, less than one "
        f"block ({format_size(shared.block)}{allocated}). {', '.join(parts)}. Advice: {advice}."
    )
    breakdown: dict[str, int | float | None] = {
        **figures,
        "kv_cache": kv,
        "block": shared.block,
        "other_processes": shared.other_processes,
        "needed_utilization": needed,
    }
    return NotEnoughMemoryError(message, breakdown)


# ---- the three paths ------------------------------------------------------------------------------------
def plan_utilization(
    *,
    page_size_bytes: int,
    num_layers: int,
    total: int,
    utilization: float = DEFAULT_UTILIZATION,
    consumed: int | None = None,
    weights: int = 0,
    transient_peak_bytes: int = 0,
    non_torch: int = 0,
    graph_capture: int = 0,
    other_processes: int | None = None,
    released_cache: int = 0,
    allocation_granularity: int = 1,
    allocations: int | None = None,
    allocator: str | None = None,
) -> KvCachePlan:
    """``requested - (consumed + transient_peak_bytes + graph_capture)``; ``consumed`` (the process's measured
    growth) defaults to ``weights + non_torch``."""
    return _plan_utilization(
        CheckedPlanInputs.checked(
            page_size_bytes=page_size_bytes,
            num_layers=num_layers,
            total=total,
            utilization=utilization,
            consumed=consumed,
            weights=weights,
            transient_peak_bytes=transient_peak_bytes,
            non_torch=non_torch,
            graph_capture=graph_capture,
            other_processes=other_processes,
            released_cache=released_cache,
            allocation_granularity=allocation_granularity,
            allocations=allocations,
            allocator=allocator,
        )
    )


def _plan_utilization(inputs: CheckedPlanInputs) -> KvCachePlan:
    """:func:`plan_utilization` of checked inputs (``total`` given)."""
    shared = _shared(inputs)
    assert inputs.total is not None  # the path's (CheckedPlanInputs.checked)
    total = inputs.total
    requested = requested_of(total, inputs.utilization)
    used = shared.weights + shared.non_torch if inputs.consumed is None else inputs.consumed
    graphs = inputs.graph_capture
    kv = requested - (used + shared.transient_peak + graphs)
    non_kv = requested - kv
    figures = {
        "total": total,
        "requested": requested,
        **shared.parts(),
        "graph_capture": graphs,
        "consumed": used,
        "non_kv": non_kv,
    }
    if kv < shared.block or shared.blocks(kv) == 0:
        needed, advice = _utilization_advice(total, non_kv + shared.smallest(), shared.other_processes)
        raise _shortfall(
            "utilization",
            figures,
            kv,
            shared,
            f"requested {format_size(requested)} - non-KV {format_size(non_kv)}",
            needed,
            advice,
        )
    return KvCachePlan(
        kv,
        shared.blocks(kv),
        "utilization",
        shared.block,
        float(inputs.utilization),
        {**figures, **shared.reported()},
        shared.layout(),
    )


class PlanInputs(TypedDict):
    """What a profile window measured, as keyword arguments of :func:`plan_kv_cache`
    (:meth:`devmem.engine.profiling.ProfileResult.plan_inputs` returns one)."""

    consumed: int
    weights: int
    transient_peak_bytes: int
    non_torch: int
    other_processes: int | None
    released_cache: int
    allocator: str | None


def plan_pinned(
    *,
    page_size_bytes: int,
    num_layers: int,
    pinned_bytes: int,
    total: int | None = None,
    weights: int = 0,
    transient_peak_bytes: int = 0,
    non_torch: int = 0,
    other_processes: int | None = None,
    released_cache: int = 0,
    allocation_granularity: int = 1,
    allocations: int | None = None,
    allocator: str | None = None,
) -> KvCachePlan:
    """The cache is ``pinned_bytes``; the other figures only explain. Refuses a size below one block, and one
    larger than ``total`` (the device's total memory) where it is given, or that does not fit in it beside the
    weights, transient peak and non-torch memory (:class:`~devmem.NotEnoughMemoryError`)."""
    return _plan_pinned(
        CheckedPlanInputs.checked(
            page_size_bytes=page_size_bytes,
            num_layers=num_layers,
            pinned_bytes=pinned_bytes,
            total=total,
            weights=weights,
            transient_peak_bytes=transient_peak_bytes,
            non_torch=non_torch,
            other_processes=other_processes,
            released_cache=released_cache,
            allocation_granularity=allocation_granularity,
            allocations=allocations,
            allocator=allocator,
        )
    )


def _plan_pinned(inputs: CheckedPlanInputs) -> KvCachePlan:
    """:func:`plan_pinned` of checked inputs (``pinned_bytes`` given)."""
    shared = _shared(inputs)
    assert inputs.pinned_bytes is not None  # the path's
    pinned = inputs.pinned_bytes
    known_total = {} if inputs.total is None else {"total": inputs.total}
    if known_total and pinned > known_total["total"]:
        raise SizingError(
            f"pinned_bytes={pinned} ({format_size(pinned)}) is larger than the device's total memory "
            f"{known_total['total']} ({format_size(known_total['total'])}); pin at most the total, less "
            "what the model and its activations need"
        )
    if known_total:
        _check_pinned_fits(pinned, known_total["total"], shared)
    if shared.blocks(pinned) == 0:
        least = shared.smallest()
        raise SizingError(
            f"pinned_bytes={pinned} ({format_size(pinned)}) is smaller than one block of "
            f"{shared.block} bytes (page_size_bytes x num_layers) allocated as {shared.allocations} tensor(s) in "
            f"units of {shared.granularity} bytes; pin at least {least} bytes"
        )
    figures = {"pinned": pinned, **known_total, **{k: v for k, v in shared.parts().items() if v}, **shared.reported()}
    return KvCachePlan(pinned, shared.blocks(pinned), "pinned", shared.block, None, figures, shared.layout())


def _check_pinned_fits(pinned: int, total: int, shared: _Shared) -> None:
    """The pinned cache and what else stays on the device (weights, transient peak, non-torch) fit in ``total``,
    as ``devmem plan --pinned --total`` checks them."""
    parts = {"pinned": pinned, **shared.parts()}
    needed = sum(parts.values())
    if needed > total:
        shown_parts = " + ".join(_figure(k, v) for k, v in parts.items() if v)
        raise NotEnoughMemoryError(
            f"the pinned plan needs {shown_parts} = {format_size(needed)} ({needed} bytes), more than the "
            f"total {format_size(total)} ({total} bytes): pin less, or use a smaller model",
            {"total": total, **parts, "needed": needed},
        )


def plan_growable(
    *,
    page_size_bytes: int,
    num_layers: int,
    total: int,
    init_free_memory: int,
    free_memory: int,
    utilization: float = DEFAULT_UTILIZATION,
    committed_bytes: int = 0,
    weights: int = 0,
    transient_peak_bytes: int = 0,
    non_torch: int = 0,
    other_processes: int | None = None,
    released_cache: int = 0,
    margin_floor_bytes: int = MARGIN_FLOOR_BYTES,
    margin_fraction: float = MARGIN_FRACTION,
    allocation_granularity: int = 1,
    allocations: int | None = None,
    allocator: str | None = None,
    consumed: int | None = None,
) -> KvCachePlan:
    """:func:`growable_kv_cache_bytes` with ``requested = ceil(total * utilization)``. The free-memory readings
    count ``weights`` and ``non_torch``, but a co-tenant's release between them hides part of it: ``non_kv_used``
    is never below what this engine holds itself, ``consumed`` (a profile's, this process's own growth) or, not
    given, ``weights + non_torch`` (as on the utilization path)."""
    return _plan_growable(
        CheckedPlanInputs.checked(
            page_size_bytes=page_size_bytes,
            num_layers=num_layers,
            total=total,
            init_free_memory=init_free_memory,
            free_memory=free_memory,
            utilization=utilization,
            committed_bytes=committed_bytes,
            weights=weights,
            transient_peak_bytes=transient_peak_bytes,
            non_torch=non_torch,
            other_processes=other_processes,
            released_cache=released_cache,
            margin_floor_bytes=margin_floor_bytes,
            margin_fraction=margin_fraction,
            allocation_granularity=allocation_granularity,
            allocations=allocations,
            allocator=allocator,
            consumed=consumed,
        )
    )


def _plan_growable(inputs: CheckedPlanInputs) -> KvCachePlan:
    """:func:`plan_growable` of checked inputs (``total``, ``init_free_memory`` and ``free_memory`` given)."""
    shared = _shared(inputs)
    assert inputs.total is not None and inputs.init_free_memory is not None and inputs.free_memory is not None
    total = inputs.total
    requested = requested_of(total, inputs.utilization)
    own = shared.weights + shared.non_torch if inputs.consumed is None else inputs.consumed
    t = _growable_terms(
        requested,
        inputs.init_free_memory,
        inputs.free_memory,
        inputs.committed_bytes,
        shared.transient_peak,
        inputs.margin_floor_bytes,
        inputs.margin_fraction,
        own,
    )
    figures = {
        "total": total,
        "requested": requested,
        **shared.parts(),
        **{k: t[k] for k in ("init_free", "free", "committed", "non_kv_used", "margin", "requested_cap", "free_cap")},
    }
    if t["unfloored"] < shared.block or shared.blocks(t["unfloored"]) == 0:
        f = {k: format_size(v) for k, v in t.items()}
        arithmetic = (
            f"min(requested {f['requested']} - non-KV used {f['non_kv_used']}, free {f['free']} + committed "
            f"{f['committed']} - margin {f['margin']}) - transient peak {f['transient_peak']}"
        )
        headroom = t["free_cap"] - t["transient_peak"]
        if headroom < shared.smallest():
            needed, advice = (
                None,
                (
                    f"free memory binds, so no utilization is enough: the device needs "
                    f"{format_size(shared.smallest() - headroom)} more free memory (stop or shrink other "
                    "processes on it), or a smaller transient peak"
                ),
            )
        else:
            needed, advice = _utilization_advice(
                total, t["non_kv_used"] + t["transient_peak"] + shared.smallest(), shared.other_processes
            )
        raise _shortfall("growable", figures, t["unfloored"], shared, arithmetic, needed, advice)
    kv = t["kv_cache"]
    return KvCachePlan(
        kv,
        shared.blocks(kv),
        "growable",
        shared.block,
        float(inputs.utilization),
        {**figures, **shared.reported()},
        shared.layout(),
    )


def plan(inputs: CheckedPlanInputs) -> KvCachePlan:
    """The plan of checked ``inputs`` (:meth:`CheckedPlanInputs.checked`, or built by a caller that checked them),
    by the path they choose; trusted: nothing is checked again."""
    if inputs.path == "pinned":
        return _plan_pinned(inputs)
    return _plan_growable(inputs) if inputs.path == "growable" else _plan_utilization(inputs)


def plan_kv_cache(
    *,
    page_size_bytes: int,
    num_layers: int,
    total: int | None = None,
    utilization: float = DEFAULT_UTILIZATION,
    pinned_bytes: int | None = None,
    init_free_memory: int | None = None,
    free_memory: int | None = None,
    committed_bytes: int = 0,
    consumed: int | None = None,
    weights: int = 0,
    transient_peak_bytes: int = 0,
    non_torch: int = 0,
    graph_capture: int = 0,
    other_processes: int | None = None,
    released_cache: int = 0,
    margin_floor_bytes: int = MARGIN_FLOOR_BYTES,
    margin_fraction: float = MARGIN_FRACTION,
    allocation_granularity: int = 1,
    allocations: int | None = None,
    allocator: str | None = None,
) -> KvCachePlan:
    """Size the KV cache by the path its arguments choose: ``pinned_bytes`` -> :func:`plan_pinned` (capped by
    ``total`` where given); ``init_free_memory`` and ``free_memory`` -> :func:`plan_growable`; otherwise
    :func:`plan_utilization`.

    ``other_processes`` (memory other processes hold, when known) and ``released_cache`` (bytes the allocator
    cache gave back before the KV allocation) are reported, never subtracted. ``consumed`` is subtracted on the
    utilization path and, on the growable path, the least non-KV use it counts (a co-tenant's release between the
    free-memory readings is not credited to this engine); ``graph_capture`` is used on the utilization path only
    (the growable readings are taken after graph capture). ``allocations`` is how many equal tensors the cache is
    allocated in (1: one allocation, a view per layer; the layers: one tensor per layer; twice them: keys and values
    apart); ``num_blocks`` is the most
    whole blocks whose allocation still fits the budget, and ``KvCachePlan.layout`` says what was assumed.
    ``allocator`` (``"caching"``: torch's caching allocator; ``"expandable"``: with expandable segments;
    :meth:`~devmem.engine.profiling.ProfileResult.plan_inputs` gives the one the window saw) charges each tensor
    what that allocator reserves for its size (:mod:`devmem.planner.rounding`); not told the layout, the cache must
    fit a tensor per layer, one allocation and keys and values apart (twice the layers) alike. With ``allocator``
    ``None`` each of ``allocations`` (default 1) is rounded up to ``allocation_granularity`` (default 1: not at
    all). Raises
    :class:`~devmem.NotEnoughMemoryError` when the budget holds no block, :class:`SizingError` on bad input,
    whichever path would use it. Numpy integers are accepted; every figure out is a Python int.
    """
    return plan(
        CheckedPlanInputs.checked(
            page_size_bytes=page_size_bytes,
            num_layers=num_layers,
            total=total,
            utilization=utilization,
            pinned_bytes=pinned_bytes,
            init_free_memory=init_free_memory,
            free_memory=free_memory,
            committed_bytes=committed_bytes,
            consumed=consumed,
            weights=weights,
            transient_peak_bytes=transient_peak_bytes,
            non_torch=non_torch,
            graph_capture=graph_capture,
            other_processes=other_processes,
            released_cache=released_cache,
            margin_floor_bytes=margin_floor_bytes,
            margin_fraction=margin_fraction,
            allocation_granularity=allocation_granularity,
            allocations=allocations,
            allocator=allocator,
        )
    )
