"""What of the memory a profile window keeps already existed at the window's peak, from the allocator's history.

The transient a forward pass needs is its reserved peak over what stays reserved. Subtracting everything the
window keeps is wrong when part of it appeared after the peak: a graph pool captured after the forward pass
did not exist when the pass peaked, and subtracting it undercharges the next pass by the pool's size. torch's
caching allocator can record its history; devmem asks it for segment events only (``segment_alloc``,
``segment_free``, ``segment_map``, ``segment_unmap``: a few per pass, no stack traces) while a window is open,
replays them to find when the reserved peak was reached, and counts what was created after that moment and still
exists at the end. Where the history is not available (a torch without it, a device namespace without it, a
window nested in another that records) the caller falls back to a rule that can only overcharge.

torch is never imported here: the history is asked of the torch device module the profiling module found.
"""

from __future__ import annotations

import inspect
import logging
from typing import Any

log = logging.getLogger("devmem.engine.profiling")

#: The allocator's actions that change what is reserved from the device, and by how much (sign).
SEGMENT_ACTIONS = {"segment_alloc": 1, "segment_map": 1, "segment_free": -1, "segment_unmap": -1}
#: Every other action the allocator records: not asked for where torch lets devmem skip them.
SKIPPED_ACTIONS = ["alloc", "free_requested", "free_completed", "oom", "snapshot"]
#: A history this long may have dropped its first events (torch keeps a ring of at most this many).
MAX_ENTRIES = 1_000_000


class SegmentHistory:
    """The segment history of one device's allocator while one window is open; ``start`` returns ``None`` where
    it cannot be recorded (the reason is logged at debug level)."""

    def __init__(self, memory: Any, device: int):
        self._memory, self._device = memory, device

    @classmethod
    def start(cls, module: Any, device: int) -> SegmentHistory | None:
        memory = getattr(module, "memory", None)
        record = getattr(memory, "_record_memory_history", None)
        if record is None or getattr(memory, "_snapshot", None) is None:
            log.debug("devmem: torch's allocator offers no memory history here; the transient is bounded instead")
            return None
        try:
            accepted = inspect.signature(getattr(memory, "_record_memory_history_impl", record)).parameters
            options: dict[str, Any] = {"context": None, "stacks": "python", "max_entries": MAX_ENTRIES}
            if "clear_history" in accepted:
                options["clear_history"] = True
            if "skip_actions" in accepted:
                options["skip_actions"] = SKIPPED_ACTIONS
            record("all", **options)
        except Exception as exc:  # a runtime that refuses: measure without it
            log.debug("devmem: torch's allocator history could not be started: %s", exc)
            return None
        return cls(memory, device)

    def stop(self) -> list[dict[str, Any]] | None:
        """The device's segment events since :meth:`start`, oldest first, and stop recording; ``None`` when the
        history could not be read or may have dropped events."""
        try:
            snapshot = self._memory._snapshot()
        except Exception as exc:
            log.debug("devmem: torch's allocator history could not be read: %s", exc)
            snapshot = None
        finally:
            try:
                self._memory._record_memory_history(None)
            except Exception as exc:
                log.debug("devmem: torch's allocator history could not be stopped: %s", exc)
        traces = (snapshot or {}).get("device_traces") or []
        if self._device >= len(traces) or len(traces[self._device]) >= MAX_ENTRIES:
            return None
        return [e for e in traces[self._device] if e.get("action") in SEGMENT_ACTIONS]


def created_after_peak(events: list[dict[str, Any]], reserved_at_start: int, reserved_peak: int) -> int | None:
    """Bytes reserved after the reserved peak was first reached that are still reserved after the last event.

    Replays ``events`` from ``reserved_at_start``; returns ``None`` when the replay does not reach
    ``reserved_peak`` (the allocator's own peak statistic), so that the history is not trusted.
    """
    reserved, peak, peak_at = reserved_at_start, reserved_at_start, -1
    for i, event in enumerate(events):
        reserved += SEGMENT_ACTIONS[event["action"]] * int(event["size"])
        if reserved > peak:
            peak, peak_at = reserved, i
    if peak != reserved_peak:
        log.debug("devmem: the allocator history replays to a peak of %d bytes, not %d", peak, reserved_peak)
        return None
    created: list[tuple[int, int]] = []  # disjoint [start, end) ranges reserved after the peak and still held
    for event in events[peak_at + 1 :]:
        start = int(event["addr"])
        end = start + int(event["size"])
        created = _without(created, start, end)
        if SEGMENT_ACTIONS[event["action"]] > 0:
            created.append((start, end))
    return sum(end - start for start, end in created)


def _without(ranges: list[tuple[int, int]], start: int, end: int) -> list[tuple[int, int]]:
    """``ranges`` less the range ``[start, end)``."""
    kept = []
    for a, b in ranges:
        if b <= start or end <= a:
            kept.append((a, b))
            continue
        if a < start:
            kept.append((a, start))
        if end < b:
            kept.append((end, b))
    return kept


__all__ = ["SegmentHistory", "created_after_peak"]
