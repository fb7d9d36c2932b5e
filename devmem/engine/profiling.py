"""Memory snapshots, the profile window and the release of the allocator cache (docs/design.md, "Profiling").

torch is never imported here: a process that has not imported torch holds no torch memory, and importing it
would itself grow the process. The torch figures come from the torch device module the platform declares
(``platform.torch_device``) when the process has imported torch and it sees a device; otherwise they are 0 and
the results say why.
"""

from __future__ import annotations

import gc
import logging
import math
import os
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field, fields, replace
from fractions import Fraction
from typing import TYPE_CHECKING, Any

from devmem import arguments
from devmem._forksafe import ForkSafeLock
from devmem._host import trim_c_heap
from devmem._text import shown
from devmem.engine._segment_history import Replay, SegmentHistory, replay
from devmem.engine._torch_device import device_module, initialised_module
from devmem.errors import ArgumentError, SnapshotMismatchError
from devmem.platform import DeviceReading, Platform
from devmem.resolution.plugins import platform_argument
from devmem.types import DevmemError, MiB, NotEnoughMemoryError
from devmem.units import format_size

if TYPE_CHECKING:
    from devmem.planner.sizing import PlanInputs

log = logging.getLogger("devmem.engine.profiling")

#: A device-wide change that differs from this process's own by this much is logged as a warning.
WARN_DIFFERENCE = 128 * MiB


@dataclass(frozen=True)
class MemorySnapshot:
    """Device memory at one moment: the platform's figures and this process's torch allocator figures, in bytes.

    ``process`` is this process's device memory, ``None`` where the platform cannot attribute memory to
    processes. ``torch_peak`` and ``torch_reserved_peak`` are the allocator's peaks of allocated and reserved
    bytes since its peak statistics were last reset. ``torch_measured`` says whether torch's allocator was
    consulted; ``notes`` say why not. ``platform`` names the platform that read it, where known.
    Subtracting two snapshots gives their differences (``process`` is ``None`` unless both have it); snapshots of
    two devices, or of two platforms, refuse to subtract.
    """

    device: int
    free: int
    total: int
    process: int | None
    torch_allocated: int = 0
    torch_reserved: int = 0
    torch_peak: int = 0
    torch_reserved_peak: int = 0
    timestamp: float = 0.0
    torch_measured: bool = False
    notes: tuple[str, ...] = ()
    platform: str | None = None

    @classmethod
    def measure(cls, device: int = 0, platform: Platform | None = None) -> MemorySnapshot:
        """Read the platform's free/total/process figures and torch's allocated/reserved/peak for ``device``."""
        from devmem.platform import read_device

        device = arguments.device_index(device)
        platform = platform_argument(platform)
        return cls.from_reading(read_device(platform, device), platform)

    @classmethod
    def _read(cls, device: int, platform: Platform) -> MemorySnapshot:
        """:meth:`measure` of a checked ``device`` and ``platform``, marked as read by it."""
        from devmem.platform import read_device

        return cls.from_reading(read_device(platform, device), platform)

    @classmethod
    def from_reading(cls, reading: DeviceReading, platform: Platform) -> MemorySnapshot:
        """The snapshot of one coherent :class:`~devmem.platform.DeviceReading` (the figure and its reason agree) and of
        torch's allocator now, marked as read by ``platform``: what an engine takes once at start and shares."""
        device = reading.index
        info, process = reading.info, reading.process.used
        notes = []
        if reading.process.reason is not None:
            why = reading.process.reason.text
            notes.append(f"{platform.name} cannot attribute device memory to processes: {why}")
        module, why_not = device_module(platform)
        allocated = reserved = peak = reserved_peak = 0
        if module is not None:
            allocated = module.memory_allocated(device)
            reserved = module.memory_reserved(device)
            peak = module.max_memory_allocated(device)
            reserved_peak = module.max_memory_reserved(device)
        elif why_not:
            notes.append(why_not)
        return cls(
            device,
            info.free,
            info.total,
            process,
            allocated,
            reserved,
            peak,
            reserved_peak,
            time.time(),
            module is not None,
            tuple(notes),
            platform.name,
        )

    @property
    def used(self) -> int:
        """Device memory in use by anyone: ``total - free``."""
        return self.total - self.free

    def __sub__(self, other: MemorySnapshot) -> MemorySnapshot:
        if not isinstance(other, MemorySnapshot):
            return NotImplemented
        if other.device != self.device:
            raise SnapshotMismatchError(
                f"cannot subtract a snapshot of device {other.device} from one of device {self.device}"
            )
        if None not in (self.platform, other.platform) and self.platform != other.platform:
            raise SnapshotMismatchError(
                f"cannot subtract a snapshot read by the {other.platform!r} platform from one read by "
                f"{self.platform!r}: their figures count different things"
            )
        process = None if self.process is None or other.process is None else self.process - other.process
        return MemorySnapshot(
            self.device,
            self.free - other.free,
            self.total - other.total,
            process,
            self.torch_allocated - other.torch_allocated,
            self.torch_reserved - other.torch_reserved,
            self.torch_peak - other.torch_peak,
            self.torch_reserved_peak - other.torch_reserved_peak,
            self.timestamp - other.timestamp,
            self.torch_measured and other.torch_measured,
            self.notes,
            self.platform if self.platform is not None else other.platform,
        )

    def read_by(self, platform: Platform) -> MemorySnapshot:
        """This snapshot, marked as read by ``platform`` (so that one of another platform refuses to mix with it)."""
        return replace(self, platform=platform.name)


def release_allocator_cache(device: int = 0, platform: Platform | None = None) -> int:
    """Collect garbage, then give torch's cached, unused device blocks back to the driver; return the bytes released.

    Where the device is host memory, the C heap's free pages are given back to the system too (they count in the
    process's figure there, as cached blocks do on a GPU). Engines call it right before allocating the KV cache,
    on every path (pinned included), and may call it before their baseline. Returns 0, and logs
    why, when torch is not imported, sees no device of ``platform`` (the current one by default), or has not
    initialised that device's runtime in this process.
    """
    return _release(arguments.device_index(device), platform_argument(platform))


def _release(device: int, platform: Platform, *, collect: bool = True) -> int:
    """:func:`release_allocator_cache` of a checked ``device`` and ``platform``; ``collect=False`` where garbage
    was collected just before (one ``gc.collect()`` per window edge)."""
    if collect:
        gc.collect()
    if _host_memory(platform, device) and trim_c_heap():
        log.debug("devmem: device %d is host memory: gave the C heap's free pages back to the system", device)
    module, why = initialised_module(platform)
    if module is None:
        log.info("devmem: no allocator cache to release on device %d: %s; released bytes not measured", device, why)
        return 0
    check = getattr(platform, "check_device", None)
    if callable(check):  # before torch reads an index it has no device for
        check(device)
    before = module.memory_reserved(device)
    module.empty_cache()
    released = max(0, before - module.memory_reserved(device))
    log.info("devmem: released %s of cached allocator blocks on device %d", format_size(released), device)
    return released


def check_startup_memory(
    snapshot: MemorySnapshot, requested: int, platform: Platform | None = None, *, held: int = 0
) -> None:
    """Fail at start when free memory is below what this engine requests (``held``: the part of the request
    this process holds already, an engine created after its model).

    Co-tenants that together ask for more than the device has must fail loudly, not shrink each other silently.
    Raises :class:`~devmem.NotEnoughMemoryError` naming the device, both figures and the largest utilization that
    fits (rounded down to 0.001, so that following the advice passes); :class:`~devmem.DevmemError` for a snapshot
    without a positive total or a requested size that is not a whole number of bytes >= 0.
    """
    if not isinstance(snapshot, MemorySnapshot):
        raise ArgumentError(
            f"snapshot must be a MemorySnapshot (MemorySnapshot.measure(device)), got {shown(snapshot)} of type "
            f"{type(snapshot).__name__}"
        )
    requested = arguments.byte_count("requested", requested)
    try:
        arguments.byte_count(f"device {snapshot.device}: the snapshot's total memory", snapshot.total, positive=True)
    except ArgumentError as exc:
        raise DevmemError(f"{exc}: the platform's reading is broken (see `devmem doctor`)") from None
    already = arguments.byte_count("held", held)
    if max(0, int(snapshot.free)) + already < requested:
        _refuse_start(snapshot, requested, platform_argument(platform), already)


def _refuse_start(snapshot: MemorySnapshot, requested: int, platform: Platform, already: int = 0) -> None:
    """:func:`check_startup_memory` of checked arguments: raise where free memory (with what this process holds
    of the request, ``already``) is below ``requested``; the snapshot's total is the platform's, which the
    contract checked."""
    total, free = snapshot.total, max(0, snapshot.free)
    if free + already >= requested:
        return
    name = platform.device_name(snapshot.device)
    fits = math.floor(Fraction(min(free + already, total), total) * 1000) / 1000
    used = total - free
    others = None if snapshot.process is None else used - snapshot.process
    if others is None:
        holders = f"{format_size(used)} is in use"
    elif others < 0:
        holders = (
            f"{format_size(used)} is in use; what other processes hold is unknown (this process's own figure, "
            f"{format_size(used - others)}, exceeds it)"
        )
    else:
        holders = f"other processes hold {format_size(others)}"
    # stopping other processes helps only where they hold memory (or what they hold is unknown)
    stop = "stop processes using the device" if others != 0 else "free what this process holds before starting"
    advice = f"Lower the utilization to at most {fits:.3f}, or {stop}" if fits > 0 else f"No utilization fits: {stop}"
    raise NotEnoughMemoryError(
        f"device {snapshot.device} ({name}): free memory at start, {format_size(free)}"
        + (f", with the {format_size(already)} this process holds already," if already else ",")
        + " is less than the "
        f"requested {format_size(requested)} ({requested / total:.3f} of the total "
        f"{format_size(total)}); {holders}. {advice}",
        {
            "free": free,
            "requested": requested,
            "total": total,
            "process": snapshot.process,
            "utilization_that_fits": fits,
        },
    )


@dataclass
class ProfileResult:
    """What a profile window measured, in bytes. Filled when the ``memory_profiling`` block exits.

    - ``total_consumed``: what this process holds after the window beyond what it held at ``baseline``: its own
      growth when both snapshots carry a per-process figure (``process_scoped``), else the device-wide drop of
      free memory; never below the lower bounds this process knows of itself (``weights_memory``, the growth of
      torch's reserved memory since ``baseline``).
    - ``device_wide_consumed``: the drop of free memory since ``baseline``, whoever caused it.
    - ``other_processes_delta``: device-wide minus own (``None`` when not process-scoped); may be negative.
    - ``transient_peak_bytes``: the headroom the KV cache must leave for the next forward pass: what torch's
      caching allocator reserved at its peak over what it kept after the window (``transient_source`` says
      ``"reserved"``). The same pass reserves it again, with its rounding and fragmentation, whatever it
      allocates. What the window kept but reserved only after the peak (``kept_after_peak_bytes``: a graph
      pool captured after the forward pass) is not subtracted, and where the window ran several passes (a
      forward pass, then a capture warming up on side streams) it is the largest pass's, not theirs together:
      ``transient_rule`` says how that was known (``"history"``: the allocator's history; ``"bounded"``: only
      memory reserved both when the window opened and after it is subtracted, one pass).
      ``transient_reach_bytes`` is all the window held at once (every pass's cache together), for graphs that
      are captured again beside the cache. ``transient_allocated_bytes`` is the allocated peak over what stays
      allocated, beside it. Where torch keeps no allocator statistics (host memory) but the platform keeps the
      process's high-water mark (``process_peak``, Linux's ``VmHWM`` on the ``cpu`` platform), it is the
      process's peak in the window over what it holds after it (``transient_source`` ``"process peak"``).
    - ``torch_peak_increase``: torch's allocated peak in the window above what it held when the window opened.
    - ``non_torch_increase``: growth outside torch's allocator.
    - ``non_kv_cache_memory``: ``total_consumed + transient_peak_bytes``.
    - ``released_cache_bytes``: what the allocator cache gave back on exit.
    - ``expandable_segments``: whether torch's allocator maps memory in expandable segments (``None`` when
      torch was not measured).
    - ``error``: set when the block raised or the window's end could not be measured; such a profile cannot feed
      the planner (:meth:`plan_inputs` raises).
    """

    baseline: MemorySnapshot
    weights_memory: int = 0
    before_profile: MemorySnapshot | None = None
    after_profile: MemorySnapshot | None = None
    total_consumed: int = 0
    process_scoped: bool = False
    device_wide_consumed: int = 0
    other_processes_delta: int | None = None
    torch_peak_increase: int = 0
    transient_peak_bytes: int = 0
    transient_allocated_bytes: int = 0
    transient_source: str = "none"
    transient_rule: str = "none"
    transient_reach_bytes: int = 0
    kept_after_peak_bytes: int = 0
    non_torch_increase: int = 0
    non_kv_cache_memory: int = 0
    released_cache_bytes: int = 0
    torch_measured: bool = False
    process_peak: int | None = None
    expandable_segments: bool | None = None
    error: str | None = None
    notes: list[str] = field(default_factory=list)

    @property
    def complete(self) -> bool:
        """True once the block ran to its end and the window was measured."""
        return self.after_profile is not None and self.error is None

    def plan_inputs(self) -> PlanInputs:
        """Keyword arguments for :func:`devmem.planner.sizing.plan_kv_cache` from what was measured.

        Raises :class:`~devmem.DevmemError` when the window is still open or its block raised: a profile of
        a pass that did not finish says nothing about the pass that will run.
        """
        if self.error is not None:
            raise DevmemError(
                f"the profile window on device {self.baseline.device} ended with an exception "
                f"({self.error}); its figures describe a pass that did not finish and cannot size a "
                "KV cache: fix the failure and profile again"
            )
        if self.after_profile is None:
            raise DevmemError(
                f"the profile window on device {self.baseline.device} is still open: call "
                "plan_inputs() after the `with memory_profiling(...)` block has exited"
            )
        others = self.other_processes_delta
        return {
            "consumed": self.total_consumed,
            "weights": self.weights_memory,
            "transient_peak_bytes": self.transient_peak_bytes,
            "non_torch": self.non_torch_increase,
            "other_processes": None if others is None else max(0, others),
            "released_cache": self.released_cache_bytes,
            "allocator": self.allocator,
        }

    @property
    def allocator(self) -> str | None:
        """The allocator model the plan charges the cache's tensors by (:mod:`devmem.planner.rounding`):
        ``"expandable"`` or ``"caching"`` where torch's allocator was measured, else ``None``."""
        if not self.torch_measured:
            return None
        return "expandable" if self.expandable_segments else "caching"

    def as_dict(self) -> dict[str, object]:
        return {
            f.name: getattr(self, f.name)
            for f in fields(self)
            if f.name not in ("baseline", "before_profile", "after_profile")
        }


def _consumed(result: ProfileResult, own: int, before: MemorySnapshot, after: MemorySnapshot) -> int:
    """``own`` floored at 0 and raised to the lower bounds this process knows of itself, with a note saying why.

    What the window itself kept in torch's allocator adds to what the process held when it opened: the declared
    weights and, where no per-process figure exists, the device-wide drop before the window (read before a
    co-tenant's release inside the window could hide it).
    """
    baseline = result.baseline
    bounds = {"the declared weights_memory": result.weights_memory}
    if baseline.torch_measured and after.torch_measured:
        bounds["the growth of torch's reserved memory since the baseline"] = (
            after.torch_reserved - baseline.torch_reserved
        )
    if before.torch_measured and after.torch_measured:
        kept = max(0, after.torch_reserved - before.torch_reserved)
        bounds["the declared weights_memory plus what torch's allocator kept from the window"] = (
            result.weights_memory + kept
        )
        if not result.process_scoped:
            bounds["the device-wide growth before the window plus what torch's allocator kept from it"] = (
                baseline.free - before.free + kept
            )
    name, bound = max(bounds.items(), key=lambda item: item[1])
    if bound > max(0, own):
        cause = (
            "the baseline was taken after memory was allocated?"
            if result.process_scoped
            else "other processes freed memory during the window"
        )
        result.notes.append(
            f"the measured growth, {format_size(own)}, is below {name}, {format_size(bound)} "
            f"({cause}); total_consumed is taken as that lower bound"
        )
        return bound
    if own < 0:
        result.notes.append(f"memory fell by {format_size(-own)} over the window; total_consumed is taken as 0")
    return max(0, own)


def _transient(
    result: ProfileResult,
    before: MemorySnapshot,
    after: MemorySnapshot,
    reserved_peak: int,
    history: Replay | None,
) -> None:
    """The transient the next pass needs, from the allocator's history where it was recorded, else bounded.

    ``transient_reach_bytes`` is the reserved peak over what the window kept and already held at the peak: every
    stream's cache at once. With the history (:func:`devmem.engine._segment_history.replay`), memory kept at the
    end that did not exist at the peak (a graph pool captured after the forward pass) is not subtracted, and
    the transient is the largest pass's, not the passes' together. Without it, only what was reserved both when
    the window opened and after it is subtracted, which can only overcharge.
    """
    if history is not None:
        held_at_peak = after.torch_reserved - history.created_after_peak
        result.transient_rule = "history"
        reach = max(0, reserved_peak - held_at_peak)
        transient = history.transient
        how = (
            f"the allocator's history shows {format_size(history.created_after_peak)} of what it kept was reserved "
            f"after the peak, and the largest of its {history.passes} pass(es) held {format_size(transient)} "
            f"of what the window gave back (all of them together: {format_size(reach)})"
        )
    else:
        held_at_peak = min(before.torch_reserved, after.torch_reserved)
        result.transient_rule = "bounded"
        reach = transient = max(0, reserved_peak - held_at_peak)
        how = (
            "without the allocator's history only what was reserved both when the window opened and after it "
            "is subtracted (an upper bound)"
        )
    result.kept_after_peak_bytes = after.torch_reserved - held_at_peak
    result.transient_peak_bytes = transient
    result.transient_reach_bytes = max(reach, transient)
    result.transient_source = "reserved"
    result.expandable_segments = _expandable_segments()
    result.notes.append(
        f"transient headroom {format_size(result.transient_peak_bytes)}: torch's allocator reserved "
        f"{format_size(reserved_peak)} at its peak and kept {format_size(after.torch_reserved)}; {how}; the next "
        f"pass reserves the transient again (its allocated peak over what stays allocated is "
        f"{format_size(result.transient_allocated_bytes)}; expandable segments "
        f"{'on' if result.expandable_segments else 'off'})"
    )


def _process_transient(result: ProfileResult, after: MemorySnapshot, platform: Platform) -> None:
    """Where torch's allocator keeps no statistics: the process's peak over what it holds after the window."""
    peak, held = result.process_peak or 0, after.process or 0
    result.transient_peak_bytes = result.transient_reach_bytes = max(0, peak - held)
    result.transient_source = "process peak"
    result.transient_rule = "process high-water mark"
    result.notes.append(
        f"transient headroom {format_size(result.transient_peak_bytes)}: this process peaked at "
        f"{format_size(peak)} in the window and holds {format_size(held)} after it ({platform.name} keeps the "
        "process's high-water mark; torch's allocator keeps no statistics here)"
    )


def _finish(
    result: ProfileResult,
    before: MemorySnapshot,
    after: MemorySnapshot,
    peaks: tuple[int, int],
    platform: Platform,
    history: Replay | None = None,
) -> None:
    baseline = result.baseline
    result.after_profile = after
    result.device_wide_consumed = baseline.free - after.free
    result.process_scoped = baseline.process is not None and after.process is not None
    if baseline.process is not None and after.process is not None:
        own = after.process - baseline.process
        result.other_processes_delta = result.device_wide_consumed - own
        if abs(result.other_processes_delta) >= WARN_DIFFERENCE:
            host = _host_memory(platform, after.device)
            (log.debug if host else log.warning)(
                "devmem: while profiling device %d, device-wide use changed by %s but this process's own by %s: "
                "other processes moved %s; sizing uses this process's own figure",
                after.device,
                format_size(result.device_wide_consumed),
                format_size(own),
                format_size(result.other_processes_delta),
            )
            if host:
                _say_host_memory_moves(platform, after.device)
    else:
        own = result.device_wide_consumed
        result.notes.append(
            f"{platform.name} gives no per-process figure: total_consumed is the device-wide drop of "
            "free memory, which also counts what other processes allocated or freed meanwhile"
        )
    result.total_consumed = _consumed(result, own, before, after)
    result.torch_measured = before.torch_measured and after.torch_measured
    allocated_peak, reserved_peak = peaks
    result.torch_peak_increase = max(0, allocated_peak - before.torch_allocated)
    result.transient_allocated_bytes = max(0, allocated_peak - after.torch_allocated)
    if result.torch_measured:
        _transient(result, before, after, reserved_peak, history)
    elif result.process_peak is not None and after.process is not None:
        _process_transient(result, after, platform)
    result.non_torch_increase = max(0, result.total_consumed - (after.torch_reserved - baseline.torch_reserved))
    result.non_kv_cache_memory = result.total_consumed + result.transient_peak_bytes
    result.notes.extend(n for n in after.notes if n not in result.notes)


def _host_memory(platform: Platform, device: int) -> bool:
    """Whether ``device`` computes in host memory, whose free figure every process of the machine moves."""
    try:
        return bool(platform.is_integrated_gpu(device))
    except Exception:  # a platform that cannot say: a device of its own
        return False


#: The (platform, device) pairs whose host memory :func:`_say_host_memory_moves` spoke of in this process.
_host_memory_said: set[tuple[str, int]] = set()


def _say_host_memory_moves(platform: Platform, device: int) -> None:
    """Once per process and device, in place of a warning at every profile window: the device is host memory,
    which other processes move all the time, and sizing does not depend on it."""
    if (platform.name, device) not in _host_memory_said:
        _host_memory_said.add((platform.name, device))
        log.info(
            "devmem: device %d (%s) is host memory: its free memory moves with every process on this machine, so "
            "profile windows see other processes' changes; sizing uses this process's own figure",
            device,
            platform.name,
        )


def _expandable_segments() -> bool:
    """Whether torch's allocator is configured with ``expandable_segments:True`` (its environment settings)."""
    names = [n for n in os.environ if n.startswith("PYTORCH_") and n.endswith("ALLOC_CONF")]
    return any("expandable_segments:true" in os.environ[n].replace(" ", "").lower() for n in names)


class _OpenWindows:
    """Profile windows open per device, so that a nested window does not erase the outer one's peak.

    torch keeps one peak statistic per device and a window resets it when it opens; before resetting, the
    current peaks are carried into every window already open on that device, which take the larger at exit.
    """

    def __init__(self) -> None:
        self._lock = ForkSafeLock()
        self._carried: dict[int, list[list[int]]] = {}

    def open(self, module: Any, device: int, platform: Platform) -> tuple[list[int], bool]:
        """The list the window's carried peaks go into (torch's allocated and reserved peaks; where torch keeps
        none, the process's peak and whether its high-water mark was reset, 1 or 0), and whether it is the only
        window open on ``device``."""
        carried = [0, 0, 0, 0]
        with self._lock:
            stack = self._carried.setdefault(device, [])
            outermost = not stack
            if module is not None:
                now = [module.max_memory_allocated(device), module.max_memory_reserved(device)]
                for outer in stack:
                    outer[0], outer[1] = max(outer[0], now[0]), max(outer[1], now[1])
                module.reset_peak_memory_stats(device)
            else:
                peak = process_peak(platform, device) if stack else None  # read only for windows already open
                for outer in stack:
                    outer[2] = max(outer[2], peak or 0)
                carried[3] = int(_call_optional(platform, "reset_process_peak", device) is True)
            stack.append(carried)
        return carried, outermost

    def close(self, device: int, carried: list[int]) -> None:
        with self._lock:
            stack = self._carried.get(device, [])
            stack[:] = [c for c in stack if c is not carried]  # by identity: two windows' lists may be equal


_WINDOWS = _OpenWindows()


def _call_optional(platform: Platform, name: str, device: int) -> Any:
    """``platform.<name>(device)`` where the platform has it (a :class:`~devmem.PlatformBase` member outside the
    protocol), else ``None``; a platform error there is logged and taken as ``None``."""
    method = getattr(platform, name, None)
    if not callable(method):
        return None
    try:
        return method(device)
    except DevmemError as exc:
        log.debug("devmem: %s.%s(%d) failed: %s", platform.name, name, device, exc)
        return None


def process_peak(platform: Platform, device: int) -> int | None:
    """``platform.process_peak(device)`` as a whole number of bytes, or ``None`` (none kept, or no such member)."""
    peak = _call_optional(platform, "process_peak", device)
    return peak if type(peak) is int and peak >= 0 else None


@contextmanager
def memory_profiling(
    baseline: MemorySnapshot, weights_memory: int = 0, platform: Platform | None = None
) -> Iterator[ProfileResult]:
    """Measure what the block (an engine's profile run) costs, relative to ``baseline`` (taken before the model).

    When it opens it releases the allocator cache (what work before the window left cached, a compile-time
    spike say, is not the window's transient); on exit it runs ``gc.collect()``, releases the cache again and
    measures. It never asserts on
    memory that other processes moved: a difference of 128 MiB or more between the device-wide change and
    this process's own is logged as a warning with both figures. Windows may nest: an inner window does not
    erase the outer one's peak. If the block raises, or the window's end cannot be measured, the result records it
    and cannot feed the planner.

    Run everything the engine will run again once the KV cache exists inside the window: the largest
    forward pass, and CUDA graph capture or collective warm-up where the engine uses them, so that what they
    reserve is measured instead of guessed. The order of that work inside the window does not matter: memory
    kept at the end that did not exist at the peak is not subtracted from it, and a capture's warm-up after the
    forward pass is not added to the pass's transient (see ``transient_rule``).

    The arguments are checked before the block runs: :class:`~devmem.DevmemError` for a baseline that is no
    :class:`MemorySnapshot`, or one read by another platform, and for a ``weights_memory`` that is not a whole
    number of bytes.
    """
    if not isinstance(baseline, MemorySnapshot):
        raise ArgumentError(
            f"baseline must be a MemorySnapshot (MemorySnapshot.measure(device) before the model exists), got "
            f"{shown(baseline)} of type {type(baseline).__name__}"
        )
    weights_memory = arguments.byte_count("weights_memory", weights_memory)
    platform = platform_argument(platform)
    if baseline.platform is not None and baseline.platform != platform.name:
        raise SnapshotMismatchError(
            f"the baseline was read by the {baseline.platform!r} platform, the window would measure with "
            f"{platform.name!r}: take the baseline with the platform that profiles"
        )
    device = arguments.device_index(baseline.device, name="baseline.device")
    with _window(baseline, weights_memory, platform, device) as result:
        yield result


@contextmanager
def _window(baseline: MemorySnapshot, weights_memory: int, platform: Platform, device: int) -> Iterator[ProfileResult]:
    """:func:`memory_profiling` of checked arguments (``device`` the baseline's)."""
    # what earlier work left cached (a compile-time spike) would be charged as this window's transient: give
    # it back first, as the KV allocation does, so the window measures only what its own work reserves
    released_at_open = _release(device, platform)
    module, _ = initialised_module(platform)
    carried, outermost = _WINDOWS.open(module, device, platform)
    history = SegmentHistory.start(module, device) if module is not None and outermost else None
    try:
        before = MemorySnapshot._read(device, platform)
        result = ProfileResult(baseline, weights_memory, before_profile=before)
        if released_at_open:
            result.notes.append(
                f"released {format_size(released_at_open)} of cached allocator blocks when the window opened "
                "(left by work before it: not this window's transient)"
            )
        try:
            yield result
            result.released_cache_bytes = _release(device, platform)  # collects garbage first
            after = MemorySnapshot._read(device, platform)
            events, history = (history.stop() if history is not None else None), None
            peaks = (max(after.torch_peak, carried[0]), max(after.torch_reserved_peak, carried[1]))
            history_replay = None if events is None else replay(events, before.torch_reserved, peaks[1])
            peak = process_peak(platform, device) if module is None and carried[3] else None
            result.process_peak = None if peak is None else max(peak, carried[2])
            _finish(result, before, after, peaks, platform, history_replay)
        except BaseException as exc:  # the block, or measuring its end: either way the window measured nothing
            result.error = f"{type(exc).__name__}: {exc}"
            result.after_profile = None
            raise
    finally:
        if history is not None:
            history.stop()
        _WINDOWS.close(device, carried)
