"""Pure KV-cache arithmetic (DESIGN.md, "Sizing"): int bytes in, int bytes and an explanation out.

No torch, no platform, no I/O. Three paths:

- ``utilization``: ``kv = ceil(total * utilization) - (consumed + activation peak + CUDA graphs)``;
- ``pinned``: ``kv = pinned_bytes`` (the engine releases the allocator cache before allocating it);
- ``growable``: ``kv = min(requested - non_kv_used, free + committed - margin) - transient peak``, floored at 0.

:func:`plan_kv_cache` chooses the path from its arguments and raises :class:`~devmem.NotEnoughMemoryError`
with the numbers when the budget does not hold one block.
"""

from __future__ import annotations

import math
import numbers
from dataclasses import dataclass, field
from fractions import Fraction
from types import MappingProxyType
from typing import Mapping

from devmem.types import DevmemError, GiB, NotEnoughMemoryError
from devmem.units import format_size

PATHS = ("utilization", "pinned", "growable")


class SizingError(DevmemError, ValueError):
    """An input to the sizing arithmetic is outside what it accepts."""


def _bytes(name: str, value: object, *, positive: bool = False) -> int:
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise SizingError(f"{name} must be a whole number of bytes (int), got {value!r} of type {type(value).__name__}")
    value = int(value)
    if value < 0 or (positive and value == 0):
        raise SizingError(f"{name} must be {'> 0' if positive else '>= 0'} bytes, got {value}")
    return value


def _real(name: str, value: object) -> Fraction:
    """An exact rational of a real number; a float means the decimal it prints as (0.9 is 9/10)."""
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise SizingError(f"{name} must be a real number, got {value!r} of type {type(value).__name__}")
    if isinstance(value, numbers.Rational):
        return Fraction(value)
    if not math.isfinite(float(value)):
        raise SizingError(f"{name} must be finite, got {value!r}")
    return Fraction(repr(float(value)))


def _utilization(value: object) -> Fraction:
    u = _real("utilization", value)
    if not 0 < u <= 1:
        raise SizingError(f"utilization must be in (0, 1], got {value!r}")
    return u


def requested_memory(total: int, utilization: float) -> int:
    """``ceil(total * utilization)``: the bytes this engine may use in all, ``0 < utilization <= 1``."""
    return math.ceil(_bytes("total", total, positive=True) * _utilization(utilization))


def profiled_kv_cache_bytes(requested: int, total_consumed: int, transient_peak_bytes: int = 0,
                            cuda_graph_bytes: int = 0) -> int:
    """``requested - (total_consumed + transient_peak_bytes + cuda_graph_bytes)``.

    ``total_consumed`` is what the process holds after the profile run beyond what it held before the model
    was created; ``transient_peak_bytes`` is the part of the activation peak it no longer holds. The result
    may be zero or negative (by how much the budget falls short); :func:`plan_kv_cache` raises on it.
    """
    return _bytes("requested", requested) - (
        _bytes("total_consumed", total_consumed)
        + _bytes("transient_peak_bytes", transient_peak_bytes)
        + _bytes("cuda_graph_bytes", cuda_graph_bytes)
    )


def _growable_terms(requested_memory: int, init_free_memory: int, free_memory: int, committed_bytes: int,
                    transient_peak_bytes: int, margin_floor_bytes: int, margin_fraction: float) -> dict[str, int]:
    requested = _bytes("requested_memory", requested_memory)
    init_free = _bytes("init_free_memory", init_free_memory)
    free = _bytes("free_memory", free_memory)
    committed = _bytes("committed_bytes", committed_bytes)
    transient = _bytes("transient_peak_bytes", transient_peak_bytes)
    fraction = _real("margin_fraction", margin_fraction)
    if fraction < 0:
        raise SizingError(f"margin_fraction must be >= 0, got {margin_fraction!r}")
    margin = max(_bytes("margin_floor_bytes", margin_floor_bytes), math.ceil(fraction * transient))
    non_kv_used = max(0, init_free - free - committed)
    requested_cap = requested - non_kv_used
    free_cap = free + committed - margin
    return {
        "requested": requested, "init_free": init_free, "free": free, "committed": committed,
        "transient_peak": transient, "margin": margin, "non_kv_used": non_kv_used,
        "requested_cap": requested_cap, "free_cap": free_cap,
        "kv_cache": max(0, min(requested_cap, free_cap) - transient),
    }


def measure_kv_cache_bytes(*, requested_memory: int, init_free_memory: int, free_memory: int,
                           committed_bytes: int = 0, transient_peak_bytes: int = 0,
                           margin_floor_bytes: int = GiB, margin_fraction: float = 0.75) -> int:
    """Budget of a growable (extensible) KV cache, floored at 0.

    ``non_kv_used = init_free - free - committed`` (at least 0: memory that others released does not raise the
    cap), ``margin = max(margin_floor, ceil(margin_fraction * transient_peak))`` and
    ``kv = min(requested - non_kv_used, free + committed - margin) - transient_peak``.
    """
    return _growable_terms(requested_memory, init_free_memory, free_memory, committed_bytes, transient_peak_bytes,
                           margin_floor_bytes, margin_fraction)["kv_cache"]


def blocks_for_bytes(kv_bytes: int, page_size_bytes: int, num_layers: int) -> int:
    """Whole KV blocks in ``kv_bytes``, one block being one page on every layer."""
    return _bytes("kv_bytes", kv_bytes) // (
        _bytes("page_size_bytes", page_size_bytes, positive=True) * _layers(num_layers)
    )


def _layers(num_layers: object) -> int:
    if isinstance(num_layers, bool) or not isinstance(num_layers, numbers.Integral) or num_layers <= 0:
        raise SizingError(f"num_layers must be an int > 0, got {num_layers!r}")
    return int(num_layers)


_LABELS = {
    "total": "total", "requested": "requested", "pinned": "pinned", "weights": "weights",
    "activation_peak": "activation peak", "non_torch": "non-torch", "cuda_graph": "CUDA graphs",
    "consumed": "consumed", "non_kv": "non-KV", "other_processes": "other processes",
    "released_cache": "released allocator cache", "init_free": "free at start", "free": "free now",
    "committed": "committed to the cache", "non_kv_used": "non-KV used", "margin": "margin",
    "requested_cap": "requested - non-KV used", "free_cap": "free + committed - margin",
    "block": "one block", "kv_cache": "KV cache", "granularity": "allocation granularity",
}


@dataclass(frozen=True)
class KvCachePlan:
    """How many bytes and blocks the KV cache gets, by which path, and the figures that led there."""

    kv_cache_bytes: int
    num_blocks: int
    path: str
    block_bytes: int
    utilization: float | None = None
    breakdown: Mapping[str, int] = field(default_factory=dict)

    def __post_init__(self) -> None:
        object.__setattr__(self, "breakdown", MappingProxyType(dict(self.breakdown)))

    def explain(self) -> str:
        """Lines for people: the result, then each figure that went into it."""
        head = (f"KV cache: {format_size(self.kv_cache_bytes)} ({self.kv_cache_bytes} bytes) = {self.num_blocks} "
                f"blocks of {format_size(self.block_bytes)}")
        how = {
            "utilization": f"path: utilization {self.utilization} of the total, minus memory that is not KV cache",
            "pinned": "path: pinned (the size was given; the allocator cache is released before allocating it)",
            "growable": "path: growable (min(requested - non-KV used, free + committed - margin) - transient peak)",
        }[self.path]
        width = max((len(_LABELS[k]) for k in self.breakdown), default=0)
        rows = [f"  {_LABELS[k]:<{width}}  {format_size(v)}" for k, v in self.breakdown.items()]
        return "\n".join([head, how, *rows])

    def as_dict(self) -> dict[str, object]:
        return {"path": self.path, "kv_cache_bytes": self.kv_cache_bytes, "num_blocks": self.num_blocks,
                "block_bytes": self.block_bytes, "utilization": self.utilization, "breakdown": dict(self.breakdown)}


def _figure(name: str, value: int) -> str:
    return f"{_LABELS[name]} {format_size(value)}"


def _utilization_advice(total: int, needed_bytes: int) -> tuple[float | None, str]:
    needed = Fraction(needed_bytes, total)
    if needed > 1:
        return None, (f"no utilization is enough: memory that is not KV cache plus one block needs "
                      f"{format_size(needed_bytes)}, more than the total {format_size(total)}; use a smaller or "
                      "quantized model, shard it over more devices, or shorten the context or batch")
    rounded = math.ceil(needed * 1000) / 1000
    return rounded, (f"a utilization of at least {rounded:.3f} would hold one block: raise it, or shorten the "
                     "context or batch so the activation peak shrinks, or free memory that other processes hold")


def _shortfall(path: str, figures: dict[str, int], kv: int, block: int, total: int, arithmetic: str,
               other_processes: int | None) -> NotEnoughMemoryError:
    if path == "growable" and figures["free_cap"] - figures["activation_peak"] < block:
        short = block - (figures["free_cap"] - figures["activation_peak"])
        needed = None
        advice = (f"free memory binds, so no utilization is enough: the device needs {format_size(short)} more "
                  "free memory (stop or shrink other processes on it), or a smaller transient peak")
    else:
        used = figures["non_kv"] if path == "utilization" else figures["non_kv_used"] + figures["activation_peak"]
        needed, advice = _utilization_advice(total, used + block)
    parts = [_figure(k, figures[k]) for k in ("requested", "weights", "activation_peak", "non_torch")]
    if figures.get("cuda_graph"):
        parts.append(_figure("cuda_graph", figures["cuda_graph"]))
    if other_processes is not None:
        parts.append(_figure("other_processes", other_processes))
    message = (f"not enough memory for the KV cache ({path} path): {arithmetic} = {format_size(kv)}, less than one "
               f"block ({format_size(block)}). {', '.join(parts)}. Advice: {advice}.")
    breakdown: dict[str, int | float | None] = {**figures, "kv_cache": kv, "block": block,
                                                "other_processes": other_processes, "needed_utilization": needed}
    return NotEnoughMemoryError(message, breakdown)


def plan_kv_cache(
    *,
    page_size_bytes: int,
    num_layers: int,
    total: int | None = None,
    utilization: float = 0.9,
    pinned_bytes: int | None = None,
    init_free_memory: int | None = None,
    free_memory: int | None = None,
    committed_bytes: int = 0,
    consumed: int | None = None,
    weights: int = 0,
    activation_peak: int = 0,
    non_torch: int = 0,
    cuda_graph: int = 0,
    other_processes: int | None = None,
    released_cache: int = 0,
    margin_floor_bytes: int = GiB,
    margin_fraction: float = 0.75,
    allocation_granularity: int = 1,
) -> KvCachePlan:
    """Size the KV cache by one of three paths, chosen by the arguments given.

    - ``pinned_bytes`` -> ``pinned``: the cache is that size (``total`` is not needed).
    - ``init_free_memory`` and ``free_memory`` -> ``growable``: :func:`measure_kv_cache_bytes` with
      ``activation_peak`` as the transient peak; ``weights`` and ``non_torch`` only explain.
    - otherwise ``utilization``: ``requested - (consumed + activation_peak + cuda_graph)`` where ``consumed``
      (the process's measured growth; used on this path only) defaults to ``weights + non_torch``.

    ``other_processes`` (memory other processes hold, when known) and ``released_cache`` (bytes the allocator
    cache gave back before the KV allocation) are reported, never subtracted. ``allocation_granularity`` is what
    the allocator rounds the cache's one allocation up to (2 MiB for PyTorch's caching allocator, see
    :func:`devmem.kvcache.allocate_kv_cache`): ``num_blocks`` is the most whole blocks whose rounded allocation
    still fits the budget. Raises
    :class:`~devmem.NotEnoughMemoryError` when the budget holds no block, :class:`SizingError` on bad input.
    """
    block = _bytes("page_size_bytes", page_size_bytes, positive=True) * _layers(num_layers)
    granularity = _bytes("allocation_granularity", allocation_granularity, positive=True)
    parts = {name: _bytes(name, value) for name, value in
             (("weights", weights), ("activation_peak", activation_peak), ("non_torch", non_torch))}
    graphs = _bytes("cuda_graph", cuda_graph)
    measured = None if consumed is None else _bytes("consumed", consumed)
    others = None if other_processes is None else _bytes("other_processes", other_processes)
    released = _bytes("released_cache", released_cache)
    extra = {k: v for k, v in (("other_processes", others), ("released_cache", released or None)) if v is not None}
    growable = init_free_memory is not None or free_memory is not None
    if pinned_bytes is not None:
        if growable:
            raise SizingError("pinned_bytes selects the pinned path and init_free_memory/free_memory the growable "
                              "path; give one of them")
        pinned = _bytes("pinned_bytes", pinned_bytes, positive=True)
        if _whole_blocks(pinned, block, granularity) == 0:
            raise SizingError(f"pinned_bytes={pinned} ({format_size(pinned)}) is smaller than one block of "
                              f"{block} bytes (page_size_bytes x num_layers) allocated in units of {granularity} bytes; pin at least "
                              f"{-(-block // granularity) * granularity} bytes")
        figures = {"pinned": pinned, **{k: v for k, v in parts.items() if v}, **extra}
        if granularity > 1:
            figures["granularity"] = granularity
        return KvCachePlan(pinned, _whole_blocks(pinned, block, granularity), "pinned", block, None, figures)
    path = "growable" if growable else "utilization"
    if total is None:
        raise SizingError(f"the {path} path needs total (the device's total memory in bytes)")
    requested = requested_memory(total, utilization)
    if growable:
        if init_free_memory is None or free_memory is None:
            raise SizingError("the growable path needs both init_free_memory and free_memory")
        if graphs:
            raise SizingError("cuda_graph applies to the utilization path; on the growable path the free-memory "
                              "readings are taken after graph capture and already count it")
        terms = _growable_terms(requested, init_free_memory, free_memory, committed_bytes, parts["activation_peak"],
                                margin_floor_bytes, margin_fraction)
        figures = {"total": total, "requested": requested, **parts, "init_free": terms["init_free"],
                   "free": terms["free"], "committed": terms["committed"], "non_kv_used": terms["non_kv_used"],
                   "margin": terms["margin"], "requested_cap": terms["requested_cap"], "free_cap": terms["free_cap"]}
        raw = min(terms["requested_cap"], terms["free_cap"]) - terms["transient_peak"]
        kv = terms["kv_cache"]
        t = {k: format_size(v) for k, v in terms.items()}
        arithmetic = (f"min(requested {t['requested']} - non-KV used {t['non_kv_used']}, free {t['free']} + committed "
                      f"{t['committed']} - margin {t['margin']}) - transient peak {t['transient_peak']}")
    else:
        used = parts["weights"] + parts["non_torch"] if measured is None else measured
        non_kv = used + parts["activation_peak"] + graphs
        figures = {"total": total, "requested": requested, **parts, "cuda_graph": graphs, "consumed": used,
                   "non_kv": non_kv}
        raw = kv = requested - non_kv
        arithmetic = f"requested {format_size(requested)} - non-KV {format_size(non_kv)}"
    if raw < block or _whole_blocks(raw, block, granularity) == 0:
        raise _shortfall(path, figures, raw, block, total, arithmetic, others)
    if granularity > 1:
        extra["granularity"] = granularity
    return KvCachePlan(kv, _whole_blocks(kv, block, granularity), path, block, float(utilization),
                       {**figures, **extra})


def _whole_blocks(kv: int, block: int, granularity: int) -> int:
    """The most whole blocks whose allocation, rounded up to ``granularity``, fits in ``kv`` bytes."""
    return kv // granularity * granularity // block
