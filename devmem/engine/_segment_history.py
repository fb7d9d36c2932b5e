"""What a profile window's work held reserved, pass by pass, from the allocator's history.

The transient a forward pass needs is its reserved peak over what stays reserved. Two things in a window make that
figure wrong when it is read from the allocator's statistics alone: a graph pool captured after the forward pass
did not exist when the pass peaked (subtracting it undercharges the next pass by the pool's size), and a capture's
warm-up on side streams reserves segments of its own while the forward pass's stay cached and idle (adding them
charges the two transients together, though only the forward pass runs again). torch's caching allocator can
record its history; devmem asks it for segment and block events (no stack traces) while a window is open, and
replays them (:func:`replay`). Where the history is not available (a torch without it, a device namespace without
it, a window nested in another that records) the caller falls back to a rule that can only overcharge.

torch is never imported here: the history is asked of the torch device module the profiling module found.
"""

from __future__ import annotations

import inspect
import logging
from dataclasses import dataclass
from typing import Any

log = logging.getLogger("devmem.engine.profiling")

#: The allocator's actions that change what is reserved from the device, and by how much (sign).
SEGMENT_ACTIONS = {"segment_alloc": 1, "segment_map": 1, "segment_free": -1, "segment_unmap": -1}
#: Actions the replay does not need: not asked for where torch lets devmem skip them.
SKIPPED_ACTIONS = ["free_requested", "oom", "snapshot"]
#: What the replay reads: the segment actions, and when blocks are allocated and freed.
RECORDED_ACTIONS = {*SEGMENT_ACTIONS, "alloc", "free_completed"}
#: A history this long may have dropped its first events (torch keeps a ring of at most this many).
MAX_ENTRIES = 1_000_000


class SegmentHistory:
    """The history of one device's allocator while one window is open; ``start`` returns ``None`` where it cannot
    be recorded (the reason is logged at debug level)."""

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
        """The device's segment and block events since :meth:`start`, oldest first, and stop recording; ``None``
        when the history could not be read or may have dropped events."""
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
        return [e for e in traces[self._device] if e.get("action") in RECORDED_ACTIONS]


@dataclass(frozen=True)
class Replay:
    """What one window's history shows.

    - ``created_after_peak``: bytes reserved after the reserved peak was first reached and still reserved at the
      end (a graph pool captured after the forward pass);
    - ``transient``: the most the window's passes held reserved at once of what the window gives back, pass by
      pass (see :func:`replay`);
    - ``passes``: how many passes the history was cut into (1 without block events).
    """

    created_after_peak: int
    transient: int
    passes: int


def replay(events: list[dict[str, Any]], reserved_at_start: int, reserved_peak: int) -> Replay | None:
    """Replay a window's allocator history from ``reserved_at_start``; ``None`` when it does not reach
    ``reserved_peak`` (the allocator's own peak statistic), so that the history is not trusted.

    The transient is found pass by pass. A pass ends where no block that the window frees later is allocated (the
    activations of a forward pass are all freed; a capture's warm-up is over). In a pass, what counts is what the
    window gives back: the segments the pass reserved, and those that earlier passes left cached on the streams
    this pass allocates on (the caching allocator serves a stream only from its own segments). Segments cached on
    streams the pass does not touch are idle in it (a forward pass's, while a graph capture warms up on side
    streams): counting them would charge the two passes' transients together, though only the forward pass runs
    again once the KV cache exists. A history without block events is one pass.
    """
    reserved, peak, peak_at = reserved_at_start, reserved_at_start, -1
    for i, event in enumerate(events):
        if event.get("action") in SEGMENT_ACTIONS:
            reserved += SEGMENT_ACTIONS[event["action"]] * int(event["size"])
            if reserved > peak:
                peak, peak_at = reserved, i
    if peak != reserved_peak:
        log.debug("devmem: the allocator history replays to a peak of %d bytes, not %d", peak, reserved_peak)
        return None
    kept, given_back_from_before = _kept_segments(events)
    pass_of, streams = _passes(events)
    most = pending = given_back_from_before  # memory held before the window that it gives back, until it goes
    alive: list[tuple[int, int, int]] = []  # disjoint [start, end) ranges the window reserved, with their event
    current = -1
    for i, event in enumerate(events):
        changed = pass_of[i] != current
        current = pass_of[i]
        if event.get("action") in SEGMENT_ACTIONS:
            start, end = int(event["addr"]), int(event["addr"]) + int(event["size"])
            alive, covered = _cut(alive, start, end)
            if SEGMENT_ACTIONS[event["action"]] > 0:
                alive.append((start, end, i))
            else:
                pending -= end - start - covered
            changed = True
        if changed:
            held: dict[int, int] = {}
            for a, b, j in alive:
                held[j] = held.get(j, 0) + b - a
            counted = sum(
                size - kept.get(j, 0)
                for j, size in held.items()
                if pass_of[j] == current or events[j].get("stream", 0) in streams[current]
            )
            most = max(most, pending + counted)
    after_peak = sum(size for j, size in kept.items() if j > peak_at)
    return Replay(after_peak, most, len(streams))


def _kept_segments(events: list[dict[str, Any]]) -> tuple[dict[int, int], int]:
    """For each segment event that reserved memory, its bytes still reserved after the last event; and the bytes
    reserved before the window that it gave back."""
    alive: list[tuple[int, int, int]] = []
    from_before = 0
    for i, event in enumerate(events):
        if event.get("action") not in SEGMENT_ACTIONS:
            continue
        start, end = int(event["addr"]), int(event["addr"]) + int(event["size"])
        alive, covered = _cut(alive, start, end)
        if SEGMENT_ACTIONS[event["action"]] > 0:
            alive.append((start, end, i))
        else:
            from_before += end - start - covered
    kept: dict[int, int] = {}
    for start, end, i in alive:
        kept[i] = kept.get(i, 0) + end - start
    return kept, from_before


def _passes(events: list[dict[str, Any]]) -> tuple[list[int], list[set[Any]]]:
    """Each event's pass, and each pass's streams: those it allocated blocks on that the window frees again (a
    block kept to the end, a graph's static input say, is no work that runs again). A pass ends after the event
    that frees the last allocated block the window frees at all; one pass without block events."""
    if not any(e.get("action") == "alloc" for e in events):
        return [0] * len(events), [set()]  # one pass: every segment counts
    allocated: dict[int, int] = {}  # address -> its alloc event
    freed: set[int] = set()  # alloc events whose block the window frees
    before = 0  # blocks from before the window that it frees
    for i, event in enumerate(events):
        if event.get("action") == "alloc":
            allocated[int(event["addr"])] = i
        elif event.get("action") == "free_completed":
            j = allocated.pop(int(event["addr"]), None)
            if j is None:
                before += 1
            else:
                freed.add(j)
    pass_of: list[int] = []
    streams: list[set[Any]] = [set()]
    live, current = before, 0
    for i, event in enumerate(events):
        action = event.get("action")
        pass_of.append(current)
        if action == "alloc" and i in freed:  # a block the pass uses and gives back: its stream is at work
            streams[current].add(event.get("stream", 0))
            live += 1
        elif action == "free_completed":
            live -= 1
            if live == 0 and i < len(events) - 1:
                current += 1
                streams.append(set())
    return pass_of, streams


def _cut(ranges: list[tuple[int, int, int]], start: int, end: int) -> tuple[list[tuple[int, int, int]], int]:
    """``ranges`` less the range ``[start, end)``, and how many bytes of that range they held."""
    kept, covered = [], 0
    for a, b, tag in ranges:
        if b <= start or end <= a:
            kept.append((a, b, tag))
            continue
        covered += min(b, end) - max(a, start)
        if a < start:
            kept.append((a, start, tag))
        if end < b:
            kept.append((end, b, tag))
    return kept, covered


__all__ = ["Replay", "SegmentHistory", "replay"]
