"""What an :class:`~devmem.EngineMemory` says of itself: lines for people (``explain()``) and every figure in bytes for
JSON (``as_dict()``)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from devmem.units import format_share, format_size

if TYPE_CHECKING:
    from devmem.engine.memory import EngineMemory


def explain(memory: EngineMemory) -> str:
    """Lines for people: the start, each window and what the engine held in it, the plan with its layout, and the
    allocation."""
    b = memory.baseline
    request = (
        f"pinned cache {format_size(memory.pinned_bytes)}"
        if memory.pinned_bytes is not None
        else f"requested {format_size(memory.requested)} (utilization {format_share(memory.utilization)})"
    )
    lines = [
        f"device {memory.device} on {memory.platform.name}: at start {format_size(b.free)} free of "
        f"{format_size(b.total)}; {request}"
    ]
    if memory.reservation is not None:
        lines.append(
            f"reserved {format_size(memory.reservation.bytes)} on the host's ledger ({memory.reservation.path})"
        )
    for name, window in (("profile", memory.profile_result), ("graphs", memory.graphs_result)):
        if window is not None and window.complete:
            kept = window.kept_after_peak_bytes
            lines.append(
                f"{name} window: consumed {format_size(window.total_consumed)} since start, transient "
                f"{format_size(window.transient_peak_bytes)} ({window.transient_rule})"
                + (f", {format_size(kept)} kept after its peak" if kept else "")
            )
    lines += [f"profile window: {held.explain()}, inside its transient" for held in memory.held_charges.values()]
    if memory.block_cost is not None:
        lines.append(f"block cost: {memory.block_cost.explain()} ({memory.block_cost_source})")
    if memory.kv_plan is not None:
        lines.append(memory.kv_plan.explain())
        if memory.graph_charge is not None:
            charge = memory.graph_charge
            lines.append(
                f"graphs captured after the cache: charged {format_size(charge.bytes)} as graph capture "
                f"({charge.source}: {charge.detail})"
            )
        if memory.layout is not None and not memory.layout.by_engine:
            lines.append("allocated by devmem: one allocation with a view per layer (EngineMemory.allocate)")
    if memory.cache is not None:
        released = format_size(memory.released_bytes or 0)
        lines.append(
            f"allocated {format_size(memory.cache.nbytes)} after releasing {released} of cached allocator blocks"
        )
    if memory.graph_check is not None:
        lines.append(memory.graph_check.explain())
    return "\n".join(lines)


def as_dict(memory: EngineMemory) -> dict[str, object]:
    """Every figure, in bytes, for JSON."""
    charge, check = memory.graph_charge, memory.graph_check
    return {
        "device": memory.device,
        "platform": memory.platform.name,
        "phase": memory.phase.value,
        "total": memory.baseline.total,
        "free_at_start": memory.baseline.free,
        "utilization": memory.utilization,
        "pinned_bytes": memory.pinned_bytes,
        "requested": memory.requested,
        "reserved_bytes": None if memory.reservation is None else memory.reservation.bytes,
        "profile": None if memory.profile_result is None else memory.profile_result.as_dict(),
        "graphs": None if memory.graphs_result is None else memory.graphs_result.as_dict(),
        "held_charges": [charge.as_dict() for charge in memory.held_charges.values()],
        "graph_capture_bytes": None if memory.kv_plan is None else memory.kv_plan.breakdown.get("graph_capture"),
        "graphs_after_cache": None
        if charge is None
        else {**charge.as_dict(), "check": None if check is None else check.as_dict()},
        "plan": None if memory.kv_plan is None else memory.kv_plan.as_dict(),
        "allocated_bytes": None if memory.cache is None else memory.cache.nbytes,
        "released_bytes": memory.released_bytes,
    }


__all__ = ["as_dict", "explain"]
