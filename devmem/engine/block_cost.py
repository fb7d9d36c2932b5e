"""What one cache block costs an engine whose cache devmem cannot see into, from runs of the engine at growing
block counts (docs/sizing.md, "Engines that size their own cache").

The engine gives a callable that builds itself with ``N`` blocks, runs its worst-case forward and returns a
:class:`BlockRun` (the bytes its tensors held and the allocator's peaks over the run). A forward's peak is the
largest of its steps': at small caches a step that reads nothing of the cache sets it and the peak grows only by
the held tensors; once the step that reads the cache sets it, the peak grows by the whole cost of a block, and
linearly. :func:`measure_block_cost` runs the engine at the sizes it is given, then towards the block count the
engine would plan, until the last two runs are both in that linear part, and returns the growth per block
between them (:class:`BlockCost`): the engine plans with the peak measured at its first run (its profile window)
plus that growth for every block more, a line above the peak wherever the peak is convex in the block count.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from devmem import arguments
from devmem._text import shown
from devmem.planner.sizing import SizingError
from devmem.progress import Progress, progress

#: Relative margin by which peaks must differ to count as growing (the allocated peak is exact; the reserved one
#: moves by the allocator's rounding).
LINEAR_GROWTH = 0.02
#: The run after one that left the linear part unconfirmed is planned with the growth so far raised by this share,
#: so that it stays below the engine's share while the growth is still being measured.
CAUTION = 0.3
#: Once the growth is linear, the next run is planned with it raised by this share (just below the plan).
CONFIRM = 0.05
#: Once the runs grow linearly, the plan may reach this share beyond the largest run (at the measured growth)
#: without another run to confirm it.
EXTEND = 0.25
#: Most runs :func:`measure_block_cost` makes.
MAX_RUNS = 6


@dataclass(frozen=True)
class BlockRun:
    """One run of the engine at ``num_blocks`` blocks.

    ``held_bytes``: the bytes of the tensors the engine held (its cache and whatever else grows with it);
    ``peak_bytes`` and ``reserved_peak_bytes``: the allocator's allocated and reserved peaks over the run above
    what was allocated when it began (``None`` where the allocator keeps no statistics). The reserved peak also
    holds what the allocator rounds and caches and what a graph pool keeps. Each is a whole number below 2**64
    (numpy integers are taken as Python ints).
    """

    num_blocks: int
    held_bytes: int
    peak_bytes: int | None = None
    reserved_peak_bytes: int | None = None

    def __post_init__(self) -> None:
        for name in ("num_blocks", "held_bytes", "peak_bytes", "reserved_peak_bytes"):
            value = getattr(self, name)
            if value is None and name.endswith("peak_bytes"):
                continue
            least = int(name == "num_blocks")
            object.__setattr__(
                self, name, arguments.integer(f"BlockRun.{name}", value, minimum=least, error=SizingError)
            )

    @property
    def measured_peak(self) -> bool:
        return self.peak_bytes is not None and self.reserved_peak_bytes is not None

    @property
    def peak(self) -> int:
        """The run's footprint above what it began with: the largest of its held tensors and its peaks."""
        return max(self.held_bytes, self.peak_bytes or 0, self.reserved_peak_bytes or 0)

    @property
    def transient_bytes(self) -> int | None:
        """The allocated peak above the held tensors: what the forward's largest step added (``None`` unmeasured)."""
        return None if self.peak_bytes is None else self.peak_bytes - self.held_bytes


def growth_per_block(before: BlockRun, after: BlockRun) -> int:
    """Bytes one block adds from ``before`` to ``after``: the largest of the held tensors' growth and the growths
    of the allocated and the reserved peak (where both runs measured them), per block, rounded up."""
    step = after.num_blocks - before.num_blocks
    if step <= 0:
        raise SizingError(f"runs must grow in blocks, got {before.num_blocks} then {after.num_blocks}")
    growth = after.held_bytes - before.held_bytes
    if before.measured_peak and after.measured_peak:
        for name in ("peak_bytes", "reserved_peak_bytes"):
            growth = max(growth, getattr(after, name) - getattr(before, name))
    return max(0, math.ceil(growth / step))


def grows_linearly(runs: Sequence[BlockRun]) -> bool:
    """Whether the last two of ``runs`` (ascending block counts) are both in the part where the peak grows
    linearly with the cache.

    Without peak statistics only the held tensors are known, and they grow linearly from the start. Otherwise
    the first run's transient (its allocated peak over its held tensors) is what a step that reads nothing of the
    cache adds at most; the last two runs are linear when both add more than that (the cache-reading step sets
    their peaks), or when their growth per block and the one before it agree within :data:`LINEAR_GROWTH`, both
    above the held tensors' growth.
    """
    if len(runs) < 2:
        return False
    if not all(r.measured_peak for r in runs):
        return not any(r.measured_peak for r in runs)
    flat = runs[0].transient_bytes or 0
    b, c = runs[-2], runs[-1]
    if len(runs) >= 3 and all((r.transient_bytes or 0) > flat * (1 + LINEAR_GROWTH) for r in (b, c)):
        return True
    if len(runs) < 3:
        return False
    a = runs[-3]

    def allocated(x: BlockRun, y: BlockRun) -> float:
        return ((y.peak_bytes or 0) - (x.peak_bytes or 0)) / (y.num_blocks - x.num_blocks)

    previous, last = allocated(a, b), allocated(b, c)
    held = (c.held_bytes - b.held_bytes) / (c.num_blocks - b.num_blocks)
    return min(previous, last) > held * (1 + LINEAR_GROWTH) and abs(last - previous) <= previous * LINEAR_GROWTH


@dataclass(frozen=True)
class BlockCost:
    """The measured cost of a block: ``block_bytes``, the growth per block between the last two of ``runs``;
    ``linear`` says whether those were both in the linear part (else the growth is the last one measured, and a
    note says so)."""

    block_bytes: int
    runs: tuple[BlockRun, ...]
    linear: bool
    notes: tuple[str, ...] = field(default_factory=tuple)

    def fixed_bytes(self, first_transient: int) -> int:
        """What the engine's footprint holds beside its blocks at its peak, for a plan that charges every block
        ``block_bytes``: the first run's transient (``first_transient``, measured in its profile window, its
        blocks included) less its blocks. The plan's line passes through the first run's measured peak with the
        last growth per block: above the peak wherever it is convex in the block count (a step that reads
        nothing of the cache sets it at small caches, the step that reads it at large ones)."""
        return max(0, first_transient - self.runs[0].num_blocks * self.block_bytes)

    def explain(self) -> str:
        sizes = ", ".join(str(r.num_blocks) for r in self.runs)
        how = "in the linear part" if self.linear else "not yet linear"
        return (
            f"{self.block_bytes} bytes a block: the growth from {self.runs[-2].num_blocks} to "
            f"{self.runs[-1].num_blocks} blocks ({how}; runs at {sizes} blocks)"
        )


def measure_block_cost(
    run: Callable[[int], BlockRun],
    sizes: Sequence[int],
    plan: Callable[[BlockCost], int],
    *,
    made: Sequence[BlockRun] = (),
    max_runs: int = MAX_RUNS,
    granularity: int = 1,
) -> BlockCost:
    """Run the engine at ``sizes`` (after the runs already ``made``, such as its profile window: at least two in
    all, ascending), then at
    the block counts ``plan`` gives for the cost measured so far, until the cost is confirmed:

    - the last two runs grow linearly (:func:`grows_linearly`) and the plan stays within :data:`EXTEND` beyond
      the largest run (a plan below it interpolates between the last two runs, above the peak where the peak is
      convex in the block count), or
    - ``max_runs`` runs were made (a note says the growth was not confirmed).

    While the growth is not yet linear the next run is planned with it raised by :data:`CAUTION`, so that the
    run stays below the engine's share. ``plan`` returns the blocks a plan with that :class:`BlockCost` gives.
    ``granularity``: the runs this function places are rounded up to a multiple of it (an engine whose cache
    holds whole groups of blocks); the ``sizes`` given are run as they are.
    """
    sizes = checked_sizes(sizes, made)
    granularity = arguments.integer(
        "granularity", granularity, minimum=1, what="a whole number of blocks", error=SizingError
    )
    max_runs = arguments.integer(
        "max_runs",
        max_runs,
        minimum=len(made) + len(sizes),
        what="a number of runs (at least the runs asked for)",
        error=SizingError,
    )
    return _measure(run, sizes, plan, made, max_runs, granularity)


def checked_sizes(sizes: Sequence[int], made: Sequence[BlockRun]) -> list[int]:
    """:func:`measure_block_cost`'s ``sizes``, checked to continue the runs ``made`` (a :class:`SizingError`)."""
    if isinstance(sizes, (str, bytes)) or not isinstance(sizes, Sequence):
        raise SizingError(f"sizes must be a list of block counts (ints > 0, ascending), got {shown(sizes)}")
    sizes = [arguments.integer("sizes", n, what="block counts", error=SizingError) for n in sizes]
    counts = [r.num_blocks for r in made] + sizes
    ascending = all(b > a for a, b in zip(counts, counts[1:], strict=False))
    if len(counts) < 2 or not ascending or counts[0] < 1 or counts[-1] >= 1 << 64:
        raise SizingError(
            f"the runs made and the sizes must be at least two ascending block counts in [1, 2**64), got {counts!r}"
        )
    return sizes


def _measure(
    run: Callable[[int], BlockRun],
    sizes: Sequence[int],
    plan: Callable[[BlockCost], int],
    made: Sequence[BlockRun],
    max_runs: int,
    granularity: int,
) -> BlockCost:
    """:func:`measure_block_cost` of checked arguments."""
    with progress("devmem: measuring a KV block's cost", total=max_runs - len(made), unit="run") as bar:
        runs = [*made, *(_checked(run, n, bar) for n in sizes)]
        while True:
            linear = grows_linearly(runs)
            cost = BlockCost(growth_per_block(runs[-2], runs[-1]), tuple(runs), linear)
            if cost.block_bytes == 0:
                raise SizingError(
                    f"the runs at {runs[-2].num_blocks} and {runs[-1].num_blocks} blocks did not grow (held "
                    f"{runs[-2].held_bytes} then {runs[-1].held_bytes} bytes; peaks {runs[-2].peak} then "
                    f"{runs[-1].peak}): a block must cost something; run(n) must build the cache with n blocks and "
                    "report what it held"
                )
            target = plan(cost)
            largest = runs[-1].num_blocks
            if linear and (not runs[-1].measured_peak or target <= largest * (1 + EXTEND)):
                return cost
            if len(runs) >= max_runs:
                note = (
                    f"after {len(runs)} runs up to {largest} blocks the peak did not yet grow linearly with the "
                    "cache; one block is charged its last growth"
                    if not linear
                    else f"the plan reaches {target} blocks, beyond the largest run ({largest}) by more than "
                    f"{EXTEND:.0%}; blocks past it are charged the growth measured below it"
                )
                return BlockCost(cost.block_bytes, cost.runs, linear, (note,))
            if target <= largest:
                return cost  # the plan interpolates between measured runs
            margin = CONFIRM if linear else CAUTION
            following = plan(BlockCost(math.ceil(cost.block_bytes * (1 + margin)), cost.runs, linear))
            following = max(following, largest + 1) if linear else min(max(following, largest + 1), 4 * largest)
            runs.append(_checked(run, granularity * math.ceil(following / granularity), bar))


def _checked(run: Callable[[int], BlockRun], num_blocks: int, bar: Progress) -> BlockRun:
    """``run(num_blocks)``, which must be a :class:`BlockRun` of that many blocks; ``bar`` counts it."""
    result = run(num_blocks)
    if not isinstance(result, BlockRun):
        raise SizingError(
            f"run({num_blocks}) must return a BlockRun (the bytes held and the peaks of a run at that many "
            f"blocks), got {shown(result)} of type {type(result).__name__}"
        )
    if result.num_blocks != num_blocks:
        raise SizingError(
            f"run({num_blocks}) returned a BlockRun of {result.num_blocks} blocks: it must run the cache at the "
            "block count it is given"
        )
    bar.update(blocks=num_blocks)
    return result


__all__ = [
    "BlockCost",
    "BlockRun",
    "growth_per_block",
    "grows_linearly",
    "measure_block_cost",
]
