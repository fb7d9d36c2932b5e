"""What an allocation of the KV cache really takes: the caching allocator's rounding, for a known layout.

Pure arithmetic, no torch. The plan knows every tensor's size, so it charges what torch's caching allocator
(``c10/cuda/CUDACachingAllocator.cpp``, also HIP's) reserves for it when the cache has just been released, not a
worst case per tensor:

- every request is rounded up to ``MIN_BLOCK`` (512 B) first (``round_size``);
- ``caching`` (the default settings): a request of at most ``SMALL_SIZE`` (1 MiB) is packed into ``SMALL_BUFFER``
  (2 MiB) segments; one below ``MIN_LARGE_ALLOC`` (10 MiB) is cut from a ``LARGE_BUFFER`` (20 MiB) segment that
  later such requests share; a larger one gets its own segment, rounded up to ``ROUND_LARGE`` (2 MiB)
  (``get_allocation_size``);
- ``expandable`` (``expandable_segments:True``): tensors are packed one after another into one segment per pool
  that maps memory in whole pages of ``LARGE_BUFFER`` (20 MiB; ``SMALL_BUFFER`` for the small pool), so their
  total is rounded up once.

Space cached inside a live segment can only lower what a tensor takes, so the figure is what the allocation takes
after the allocator cache is released, and never less. It assumes the allocator's default
``roundup_power2_divisions`` (none) and ``max_split_size_mb`` (unlimited).

A :class:`Rounding` is how a plan turns a budget into blocks: ``caching`` and ``expandable`` model the allocator
for ``count`` equal tensors; ``granularity`` rounds each of ``count`` tensors up to a given unit (the rule for an
allocator devmem does not model). ``alternatives`` are other tensor counts the cache may be allocated in (a plan
not told the layout): the allocation must fit in each of them.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from devmem.types import MiB
from devmem.units import format_size

#: Every request is rounded up to a multiple of this (``kMinBlockSize``).
MIN_BLOCK = 512
#: The largest request served from the small pool (``kSmallSize``).
SMALL_SIZE = 1 * MiB
#: The small pool's segments (``kSmallBuffer``), and an expandable small pool's page.
SMALL_BUFFER = 2 * MiB
#: Requests below this share a ``LARGE_BUFFER`` segment (``kMinLargeAlloc``).
MIN_LARGE_ALLOC = 10 * MiB
#: What a large request's own segment is rounded up to (``kRoundLarge``).
ROUND_LARGE = 2 * MiB
#: The segment requests between 1 and 10 MiB share (``kLargeBuffer``), and an expandable large pool's page.
LARGE_BUFFER = 20 * MiB

#: The allocator models a plan can charge, by name.
ALLOCATORS = ("caching", "expandable")


def _up(value: int, unit: int) -> int:
    return -(-value // unit) * unit


def request_size(nbytes: int) -> int:
    """What one request of ``nbytes`` is rounded to before a block is found for it (``round_size``)."""
    return _up(max(nbytes, 1), MIN_BLOCK)


def caching_reserved(nbytes: int, count: int = 1) -> int:
    """What torch's caching allocator (default settings) reserves for ``count`` tensors of ``nbytes`` each,
    allocated one after another right after its cache was released."""
    size = request_size(nbytes)
    if size <= SMALL_SIZE:
        return -(-count // (SMALL_BUFFER // size)) * SMALL_BUFFER
    if size < MIN_LARGE_ALLOC:
        return -(-count // (LARGE_BUFFER // size)) * LARGE_BUFFER
    return count * _up(size, ROUND_LARGE)


def expandable_reserved(nbytes: int, count: int = 1) -> int:
    """What torch's allocator with expandable segments maps for ``count`` tensors of ``nbytes`` each, packed
    into one segment after its cache was released."""
    size = request_size(nbytes)
    page = SMALL_BUFFER if size <= SMALL_SIZE else LARGE_BUFFER
    return _up(count * size, page)


@dataclass(frozen=True)
class Rounding:
    """How the cache's ``count`` equal tensors are rounded: by the allocator ``model`` (``"caching"``,
    ``"expandable"``), or each up to ``granularity`` bytes (``model`` ``None``; 1: no rounding)."""

    count: int = 1
    model: str | None = None
    granularity: int = 1
    alternatives: tuple[int, ...] = ()

    def reserved(self, nbytes: int) -> int:
        """Bytes the cache takes once allocated when its tensors hold ``nbytes`` in all (a multiple of
        ``count`` and of each of ``alternatives``): the most of its layouts."""
        return max(self._reserved(nbytes, count) for count in (self.count, *self.alternatives))

    def _reserved(self, nbytes: int, count: int) -> int:
        each = nbytes // count
        if self.model == "caching":
            return caching_reserved(each, count)
        if self.model == "expandable":
            return expandable_reserved(each, count)
        return count * _up(each, self.granularity)

    def blocks(self, kv: int, block: int) -> int:
        """The most whole blocks of ``block`` bytes whose allocation takes at most ``kv`` bytes."""
        if kv < 1:
            return 0
        low, high = 0, kv // block + 1  # reserved(low * block) fits, reserved(high * block) does not
        while high - low > 1:
            middle = (low + high) // 2
            low, high = (middle, high) if self.reserved(middle * block) <= kv else (low, middle)
        return low

    def describe(self) -> str:
        """How the plan assumed the cache is allocated, for people ("" for one allocation without rounding)."""
        tensors = "one allocation" if self.count == 1 else f"{self.count} equal tensors allocated separately"
        if self.alternatives:
            others = " or ".join("one allocation" if c == 1 else f"{c} tensor(s)" for c in self.alternatives)
            return f"{replace(self, alternatives=()).describe()}; not told the layout, it fits {others} too"
        if self.model == "caching":
            return (
                f"{self.count} tensor(s), each charged what torch's caching allocator reserves for its size (a "
                f"segment of its own rounded up to {format_size(ROUND_LARGE)} above {format_size(MIN_LARGE_ALLOC)}; "
                f"shared {format_size(LARGE_BUFFER)} or {format_size(SMALL_BUFFER)} segments below)"
            )
        if self.model == "expandable":
            return (
                f"{self.count} tensor(s) packed into torch's expandable segments, which map memory in pages of "
                f"{format_size(LARGE_BUFFER)}: their total rounded up once to it"
            )
        if self.granularity == 1:
            return "" if self.count == 1 else f"{tensors}, not rounded"
        if self.count == 1:
            return f"one allocation, rounded up once to {format_size(self.granularity)}"
        return f"{tensors}, each rounded up to {format_size(self.granularity)}"


__all__ = [
    "ALLOCATORS",
    "LARGE_BUFFER",
    "MIN_BLOCK",
    "MIN_LARGE_ALLOC",
    "ROUND_LARGE",
    "SMALL_BUFFER",
    "SMALL_SIZE",
    "Rounding",
    "caching_reserved",
    "expandable_reserved",
    "request_size",
]
