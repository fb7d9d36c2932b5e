"""A scripted torch device runtime: a caching allocator with segments and peak statistics, on a ``Scenario``.

It stands in for ``torch`` at the runtime boundary (install it with
``monkeypatch.setitem(sys.modules, "torch", ScriptedTorch(scenario))``), so that profiling can be tested where no
GPU is present. It keeps the two properties of PyTorch's caching allocator that sizing depends on:

- a request is served from a free cached segment of its stream and pool that is large enough, else a new
  segment, rounded up to ``granularity`` (2 MiB, as large allocations are), is reserved from the device (charged
  to this process in the scenario); segments are not split, so what is reserved can exceed what is allocated;
- freeing keeps the segment reserved until ``empty_cache()`` gives the unused ones back.

``memory_allocated``, ``memory_reserved`` and their peaks follow what happened, and ``reset_peak_memory_stats``
resets both peaks to the current values, as torch does. ``memory._record_memory_history`` and
``memory._snapshot`` record and return the allocator's history as torch does (``alloc``, ``free_completed``,
``segment_alloc`` and ``segment_free`` entries with ``addr``, ``size`` and ``stream``, less the ``skip_actions``),
per device.
Memory that is allocated and never freed stands for what an engine keeps: its weights, a CUDA graph's pool.

What it does not model: torch's segment sizes below 10 MiB (requests of at most 1 MiB packed into shared 2 MiB
segments, those up to 10 MiB cut from shared 20 MiB ones), the splitting of a cached segment for a smaller
request, and expandable segments (``PYTORCH_CUDA_ALLOC_CONF`` is read by the profile window, not here). A plan
charges the real allocator's rules (:mod:`devmem.planner.rounding`), so footprints read here match it for
tensors of 10 MiB or more on the default allocator only.
"""

from __future__ import annotations

from functools import partial
from types import SimpleNamespace
from typing import Any

from devmem.testing.scenario import Scenario
from devmem.types import MiB

#: PyTorch's caching allocator rounds allocations above 1 MiB up to a multiple of 2 MiB.
GRANULARITY = 2 * MiB


class ScriptedCachingAllocator:
    """One device's caching allocator on ``scenario`` device ``device``."""

    def __init__(self, scenario: Scenario, device: int = 0, granularity: int = GRANULARITY):
        self.scenario, self.device, self.granularity = scenario, device, granularity
        self.segments: dict[int, int] = {}  # segment id -> reserved bytes
        self.in_use: dict[int, int] = {}  # segment id -> allocated bytes (absent when the segment is free)
        self.pools: dict[int, object] = {}  # segment id -> the pool it serves (None: the default pool)
        self.streams: dict[int, int] = {}  # segment id -> the stream it serves
        self.initialized = False
        self._next = 0
        self.peak_allocated = self.peak_reserved = 0
        self.trace: list[dict[str, Any]] = []
        self.recording: set[str] | None = None  # the actions recorded while the history is on

    def _record(self, action: str, segment: int, size: int) -> None:
        if self.recording is not None and action in self.recording:
            stream = self.streams[segment]
            self.trace.append({"action": action, "addr": (segment + 1) << 40, "size": size, "stream": stream})

    @property
    def allocated(self) -> int:
        return sum(self.in_use.values())

    @property
    def reserved(self) -> int:
        return sum(self.segments.values())

    def _track(self) -> None:
        self.peak_allocated = max(self.peak_allocated, self.allocated)
        self.peak_reserved = max(self.peak_reserved, self.reserved)

    def malloc(self, nbytes: int, pool: object = None, stream: int = 0) -> int:
        """Allocate ``nbytes`` on ``stream`` from ``pool`` (a private pool, as a CUDA graph's, serves only its own
        requests; a segment serves only the stream it was reserved on); return a handle for :meth:`free`."""
        self.initialized = True
        free = [
            s
            for s, size in self.segments.items()
            if s not in self.in_use and size >= nbytes and self.pools[s] is pool and self.streams[s] == stream
        ]
        if free:
            segment = min(free, key=lambda s: self.segments[s])
        else:
            size = -(-nbytes // self.granularity) * self.granularity
            self.scenario.allocate(size, self.device)
            segment, self._next = self._next, self._next + 1
            self.segments[segment] = size
            self.pools[segment] = pool
            self.streams[segment] = stream
            self._record("segment_alloc", segment, size)
        self.in_use[segment] = nbytes
        self._record("alloc", segment, nbytes)
        self._track()
        return segment

    def free(self, handle: int) -> None:
        self._record("free_completed", handle, self.in_use.pop(handle))

    def empty_cache(self) -> None:
        for segment in [s for s in self.segments if s not in self.in_use]:
            size = self.segments.pop(segment)
            del self.pools[segment]
            self.scenario.release(size, self.device)
            self._record("segment_free", segment, size)
            del self.streams[segment]

    def reset_peak(self) -> None:
        self.peak_allocated, self.peak_reserved = self.allocated, self.reserved


def _empty_caches(allocators: list[ScriptedCachingAllocator]) -> None:
    for allocator in allocators:
        allocator.empty_cache()


#: The actions the scripted allocator records.
ACTIONS = ("alloc", "free_completed", "segment_alloc", "segment_free")


def _record_memory_history(
    allocators: list[ScriptedCachingAllocator],
    enabled: str | None = "all",
    context: str | None = "all",
    stacks: str = "all",
    max_entries: int = 1 << 62,
    device: Any = None,
    clear_history: bool = False,
    skip_actions: list[str] | None = None,
) -> None:
    for allocator in allocators:
        if clear_history:
            allocator.trace.clear()
        allocator.recording = None if enabled is None else set(ACTIONS) - set(skip_actions or ())


class ScriptedTensor:
    """What :meth:`ScriptedTorch.zeros` gives: its bytes go back to the allocator when it is dropped."""

    def __init__(self, runtime: ScriptedTorch, handle: Any):
        self.runtime, self.handle = runtime, handle

    def __del__(self) -> None:
        self.runtime.free(self.handle)


class ScriptedTorch(SimpleNamespace):
    """A ``torch`` module whose device namespace ``namespace`` (the platform's ``torch_device``) answers from
    :class:`ScriptedCachingAllocator` objects, one per scenario device."""

    def __init__(self, scenario: Scenario, namespace: str, granularity: int = GRANULARITY):
        allocators = [ScriptedCachingAllocator(scenario, d, granularity) for d in range(len(scenario.devices))]
        a = allocators.__getitem__
        module = SimpleNamespace(
            is_available=lambda: True,
            is_initialized=lambda: any(x.initialized for x in allocators),
            device_count=lambda: len(allocators),
            memory_allocated=lambda device=0: a(device).allocated,
            memory_reserved=lambda device=0: a(device).reserved,
            max_memory_allocated=lambda device=0: a(device).peak_allocated,
            max_memory_reserved=lambda device=0: a(device).peak_reserved,
            reset_peak_memory_stats=lambda device=0: a(device).reset_peak(),
            empty_cache=lambda: _empty_caches(allocators),
            mem_get_info=lambda device=0: scenario.mem_get_info(device),
            memory=SimpleNamespace(
                _record_memory_history=partial(_record_memory_history, allocators),
                _snapshot=lambda device=None: {
                    "segments": [],
                    "device_traces": [[dict(e) for e in x.trace] for x in allocators],
                },
            ),
        )
        super().__init__(__version__="2.13.0+scripted", allocators=allocators, uint8="uint8", **{namespace: module})

    def device(self, kind: str, index: int = 0) -> str:
        """``torch.device``: ``"<kind>:<index>"``."""
        return f"{kind}:{index}"

    def zeros(self, nbytes: int, dtype: object = "uint8", device: object = "cuda:0") -> ScriptedTensor:
        """``torch.zeros`` of ``nbytes`` bytes (uint8) on ``device``: allocated through its allocator, freed when the
        tensor is dropped."""
        index = int(str(device).rpartition(":")[2] or 0)
        return ScriptedTensor(self, self.malloc(nbytes, index))

    def malloc(self, nbytes: int, device: int = 0, pool: object = None, stream: int = 0) -> Any:
        """Allocate through device ``device``'s allocator (what a tensor's creation does) on ``stream``, from
        ``pool`` where given (what a CUDA graph capture does); a handle to :meth:`free`."""
        return device, self.allocators[device].malloc(nbytes, pool, stream)

    def free(self, handle: Any) -> None:
        device, segment = handle
        self.allocators[device].free(segment)


__all__ = ["GRANULARITY", "ScriptedCachingAllocator", "ScriptedTensor", "ScriptedTorch"]
