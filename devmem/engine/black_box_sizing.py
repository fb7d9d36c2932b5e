"""Sizing an engine that builds its own cache (docs/transformers.md, docs/sizing.md, "Engines that size their own
cache"), for any adapter: the engine runs at growing block counts through :class:`~devmem.EngineMemory`'s black-box
mode (:mod:`devmem.engine.black_box`), first in the profile window, then until the growth per block is linear
(:mod:`devmem.engine.block_cost`), with the Python heap frozen; the figures are kept in a
:class:`~devmem.engine.profile_store.ProfileStore` with the engine's runs beside them, so that a restart plans at
once; the plan then caps torch's caching allocator at the share (:mod:`devmem.engine.allocator_cap`).

The adapter gives what only it knows (:class:`BlackBoxEngine`): how to run the engine at ``n`` blocks, where to
place the runs, what a block reads back by the model's shapes, and the tensors its batch takes whatever it serves
(:class:`BatchFloor`); :func:`size_by_runs` does the rest and returns the adapter's :class:`SizedRuns`.
"""

from __future__ import annotations

import dataclasses
import math
import time
import typing
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any, ClassVar

from devmem._text import shown
from devmem.engine.allocator_cap import limit_allocator
from devmem.engine.block_cost import CAUTION, MAX_RUNS, BlockCost, BlockRun
from devmem.engine.layout import KvLayout
from devmem.engine.memory import EngineMemory
from devmem.engine.profile_store import ProfileStore, whole_figure
from devmem.engine.profiling import ProfileResult
from devmem.engine.reservations import Reservation
from devmem.errors import NotEnoughMemoryError
from devmem.planner.sizing import KvCachePlan, SizingError
from devmem.progress import Progress, progress
from devmem.units import format_share, format_size


@dataclass(frozen=True)
class CacheRun:
    """One run of the engine at ``num_blocks`` blocks: the device bytes it held and what its forward covered.

    ``cache_bytes`` and ``static_bytes`` are the storages of the engine's cache and of its batch's static tensors
    (inputs, outputs, masks, read indices); ``allocations`` counts them. ``forward_tokens``: the query tokens of its
    largest forward. ``peak_bytes`` and ``reserved_peak_bytes`` are torch's allocated and reserved peaks over the
    run's window above what it held when the window opened (``None`` where torch keeps no figure). ``layers_run``:
    the decoder layers its forwards ran (``None``: all); ``seconds``: how long it took. An engine's own record adds
    its settings as keyword-only fields of text, ``bool``, ``int`` or tuples of them (:func:`extra_problem` checks
    them as stored).
    """

    num_blocks: int
    cache_bytes: int
    static_bytes: int
    allocations: int
    forward_tokens: int
    peak_bytes: int | None = None
    reserved_peak_bytes: int | None = None
    layers_run: int | None = None
    seconds: float | None = None

    @property
    def held_bytes(self) -> int:
        return self.cache_bytes + self.static_bytes


@dataclass(frozen=True)
class BatchFloor:
    """Tensors the engine allocates whole for its largest batch when it starts, whatever it serves: ``nbytes(t)``
    bytes for a batch of ``t`` tokens, a ``t`` x columns table of ``itemsize``-byte items, ``growing`` of them with
    the cache. Named ``name`` ("transformers' attention mask"), its growing part ``growing_name``, ``key`` in the
    refusal's figures; ``remedy`` is the advice that drops them."""

    name: str
    growing_name: str
    key: str
    itemsize: int
    nbytes: Callable[[int], int]
    growing: int
    remedy: str


@dataclass(frozen=True)
class BlackBoxEngine:
    """What an adapter gives :func:`size_by_runs`.

    ``run(n, all_layers)`` builds the engine with ``n`` blocks, runs its worst-case forward (every decoder layer,
    or one of each attention type) and takes it down, returning its ``run_type`` record. ``placement()`` gives the
    profile window's block count (the smallest cache that holds a batch) and the granularity of the other runs;
    ``read_back(first)`` what a block adds to the cache-reading step by the model's shapes (it only places the
    runs). ``batch_setting`` names the engine's setting of ``max_batch_tokens``; ``block_tokens``: a block's tokens.
    ``configure(n)`` is the engine's config with ``n`` blocks; ``device`` the torch device of its cache."""

    run: Callable[[int, bool], CacheRun]
    placement: Callable[[], tuple[int, int]]
    read_back: Callable[[Any], int]
    batch_setting: str
    max_batch_tokens: int
    block_tokens: int
    configure: Callable[[int], Any]
    device: Any
    run_type: type[CacheRun] = CacheRun
    floor: BatchFloor | None = None


@dataclass(frozen=True)
class SizedRuns:
    """The sized ``config`` (``num_blocks`` set), the plan and its figures.

    ``block_bytes`` is what one block costs the engine in all (the plan's block); ``kv_block_bytes`` the part of
    it in the cache tensors, ``static_block_bytes`` the batch's static tensors, ``read_back_block_bytes`` what the
    worst-case forward reads back from the cache per block (0 where the allocator keeps no peak statistics).
    An adapter's subclass names its engine (:attr:`ENGINE`) and settings (:meth:`settings`) in :meth:`explain`.
    """

    #: The engine, as :meth:`explain` names it; what its batch's static tensors are.
    ENGINE: ClassVar[str] = "an engine that builds its own cache"
    STATIC_PARTS: ClassVar[str] = "inputs, outputs"

    config: Any
    plan: KvCachePlan
    block_bytes: int
    kv_block_bytes: int
    static_block_bytes: int
    read_back_block_bytes: int
    block_tokens: int
    max_batch_tokens: int
    profile: ProfileResult | None
    runs: tuple[CacheRun, ...]
    transient_peak_bytes: int
    notes: tuple[str, ...] = field(default_factory=tuple)
    source: str = "measured now"
    seconds: float | None = None
    allocator_limit_bytes: int | None = None
    #: The engine's share on the host's ledger, where it holds one.
    reservation: Reservation | None = None
    #: The :class:`devmem.EngineMemory` whose lifecycle sized it (its windows, block cost, plan and reservation).
    memory: EngineMemory | None = None

    @property
    def num_blocks(self) -> int:
        return self.plan.num_blocks

    @property
    def stored(self) -> bool:
        """Whether the figures were read from a stored profile instead of measured by this call."""
        return self.profile is None

    def settings(self) -> str:
        """The engine's settings :meth:`explain`'s first line names after ``max_batch_tokens`` (", ..." each)."""
        return ""

    def explain(self) -> str:
        """Lines for people: where the figures came from, the blocks, what one costs and how it was measured,
        then the plan's figures."""
        small, before, large = self.runs[0], self.runs[-2], self.runs[-1]
        measured = (
            "the allocator's peak"
            if large.peak_bytes is not None
            else "the tensors the engine holds; this allocator keeps no peak statistics"
        )
        took = "" if self.seconds is None else f" (sized in {self.seconds:.2f} s)"
        lines = [
            f"{self.ENGINE}: {self.num_blocks} blocks of {self.block_tokens} tokens "
            f"(max_batch_tokens {self.max_batch_tokens}{self.settings()})",
            f"figures: {self.source}{took}",
            f"one block costs {format_size(self.block_bytes)}: KV cache "
            f"{format_size(self.kv_block_bytes)}, batch tensors {format_size(self.static_block_bytes)} "
            f"({self.STATIC_PARTS}), forward read-back {format_size(self.read_back_block_bytes)}; measured as the "
            f"growth of {measured} from {before.num_blocks} to {large.num_blocks} blocks (runs at "
            f"{', '.join(str(r.num_blocks) for r in self.runs)} blocks)",
            f"profile window: the engine at {small.num_blocks} blocks, its worst-case forward over "
            f"{small.forward_tokens} query tokens; transient peak {format_size(self.transient_peak_bytes)} = its "
            f"transient (at least the tensors it held) less its {small.num_blocks} blocks, plus the allocator's "
            "rounding of what grows with the cache",
            self.plan.explain(),
        ]
        if self.allocator_limit_bytes is not None:
            lines.append(
                f"torch's caching allocator is capped at {format_size(self.allocator_limit_bytes)} (the share less "
                "what torch does not allocate): it gives cached blocks back before it reserves past the share"
            )
        return "\n".join(lines + [f"note: {n}" for n in self.notes])

    def as_dict(self) -> dict[str, object]:
        return {
            "num_blocks": self.num_blocks,
            "block_bytes": self.block_bytes,
            "kv_block_bytes": self.kv_block_bytes,
            "static_block_bytes": self.static_block_bytes,
            "read_back_block_bytes": self.read_back_block_bytes,
            "block_tokens": self.block_tokens,
            "max_batch_tokens": self.max_batch_tokens,
            "transient_peak_bytes": self.transient_peak_bytes,
            "plan": self.plan.as_dict(),
            "profile": None if self.profile is None else self.profile.as_dict(),
            "runs": [vars(r) for r in self.runs],
            "notes": list(self.notes),
            "source": self.source,
            "seconds": self.seconds,
            "allocator_limit_bytes": self.allocator_limit_bytes,
        }


def size_by_runs(
    memory: EngineMemory,
    engine: BlackBoxEngine,
    result: type[SizedRuns],
    *,
    weights: int,
    store: ProfileStore | None,
    key: Mapping[str, Any],
    kind: str,
    limit_to_share: bool,
    notes: list[str],
    began: float,
) -> SizedRuns:
    """Size ``engine``'s cache through ``memory`` (after its baseline, before its profile window): refuse a share
    that cannot hold the engine's batch (:func:`check_batch_floor`), plan from the figures ``store`` keeps under
    ``key`` (of ``kind``) where a start measured them, else run the engine (:func:`measure_runs`) and keep them;
    then plan, refuse a cache smaller than one batch, and on the utilization path (``limit_to_share``) cap torch's
    caching allocator at the share less what torch does not allocate. ``notes`` are the caller's; ``began`` when
    the sizing started. Returns ``result`` (the adapter's :class:`SizedRuns`)."""
    if engine.floor is not None:
        check_batch_floor(memory, weights, engine)  # before seconds of engine runs
    accept = extra_accepted(memory.baseline.total, engine.run_type)
    extra = None if store is None else memory.load_profile(store, key, kind=kind, accept=accept)
    if extra is not None:
        runs, costs, figure_notes = stored_extra(extra, engine.run_type)
    else:
        limit_allocator(engine.device, None)  # measure without a cap set by an earlier sizing
        with progress("devmem: sizing", total=MAX_RUNS, unit="run") as bar:  # the heap frozen (EngineMemory)
            runs, costs, figure_notes = measure_runs(memory, engine, weights, bar)
        if store is not None:
            ours = {
                "runs": [vars(r) for r in runs],
                "costs": costs,
                "notes": figure_notes,
                "measure_seconds": time.perf_counter() - began,
            }
            kept = memory.save_profile(store, key, ours, kind=kind, accept=accept)
            runs, costs, figure_notes = stored_extra(kept, engine.run_type)  # another engine's where it stored first
    notes.extend(figure_notes)
    plan = memory.plan(layout=KvLayout.tensors(runs[0].allocations))
    memory.release_allocator_cache()  # the engine allocates its cache next: the start's last collection
    tokens, batch = engine.block_tokens, engine.max_batch_tokens
    if plan.num_blocks * tokens < batch:
        raise SizingError(
            f"{engine.batch_setting}={batch} is more than the sized cache holds ({plan.num_blocks} "
            f"blocks of {tokens} tokens = {plan.num_blocks * tokens} tokens): no batch of that size could be "
            "scheduled, and the worst case was measured on a larger cache; lower "
            f"{engine.batch_setting.rpartition('.')[2]} to at most {plan.num_blocks * tokens}, or give the engine "
            "more memory"
        )
    limit = None
    if memory.pinned_bytes is None and limit_to_share:
        limit = plan.breakdown["requested"] - memory.window_figures()["non_torch"]
        if limit_allocator(engine.device, limit) is None:
            limit = None
    return result(
        engine.configure(plan.num_blocks),
        plan,
        costs["block_bytes"],
        costs["kv_block_bytes"],
        costs["static_block_bytes"],
        costs["block_bytes"] - costs["kv_block_bytes"] - costs["static_block_bytes"],
        tokens,
        batch,
        memory.profile_result,
        runs,
        plan.breakdown["transient_peak"],
        tuple(notes),
        memory.block_cost_source or "measured now",
        time.perf_counter() - began,
        limit,
        memory.reservation,
        memory,
    )


def measure_runs(
    memory: EngineMemory, engine: BlackBoxEngine, weights: int, bar: Progress
) -> tuple[tuple[CacheRun, ...], dict[str, int], list[str]]:
    """Run the engine through ``memory``: its profile window at the placement's block count
    (:meth:`EngineMemory.profile_blocks`, every layer), then the runs :meth:`EngineMemory.measure_block_cost` asks
    for, the first where the shapes say the cache-reading step sets the peak; ``bar`` counts each run. Returns the
    runs, the per-block costs (in all, of the cache tensors, of the batch's static tensors) and notes."""
    small, quantum = engine.placement()
    made: dict[int, CacheRun] = {}

    def run(blocks: int, all_layers: bool = False) -> int:
        made[blocks] = engine.run(blocks, all_layers)
        bar.update(blocks=blocks)
        return made[blocks].held_bytes

    first = memory.profile_blocks(lambda blocks: run(blocks, all_layers=True), small, weights_memory=weights)
    check_first_run(memory, first, engine)  # before the block-cost runs
    start = 2 * small
    if first.peak_bytes is not None:
        flat = max(0, first.peak_bytes - first.held_bytes)
        estimate = engine.read_back(made[small])
        held = math.ceil(first.held_bytes / small)
        wanted = math.ceil(2 * flat / max(1, estimate))
        cap = memory.blocks_that_fit(BlockCost(math.ceil((held + estimate) * (1 + CAUTION)), (first, first), False))
        start = max(small + 1, min(max(wanted, start), cap))
    start = quantum * math.ceil(start / quantum)
    layout = KvLayout.tensors(made[small].allocations)
    cost = memory.measure_block_cost(run, [start], granularity=quantum, layout=layout)
    runs = tuple(
        replace(made[r.num_blocks], peak_bytes=r.peak_bytes, reserved_peak_bytes=r.reserved_peak_bytes)
        for r in cost.runs
    )
    before, after = runs[-2], runs[-1]
    step = after.num_blocks - before.num_blocks
    kv_block = math.ceil((after.cache_bytes - before.cache_bytes) / step)
    static_block = math.ceil((after.static_bytes - before.static_bytes) / step)
    block = cost.block_bytes
    costs = {
        "block_bytes": block,
        "kv_block_bytes": min(kv_block, block),
        "static_block_bytes": min(static_block, block - min(kv_block, block)),
    }
    profile = memory.profile_result
    return runs, costs, [*cost.notes, *([] if profile is None else profile.notes)]


def check_batch_floor(memory: EngineMemory, weights: int, engine: BlackBoxEngine) -> None:
    """Refuse at once a share in which the engine's own tensors for its batch cannot fit (the weights and
    ``engine.floor``, a floor: activations and blocks come on top), rather than after seconds of engine runs, with
    the error the plan would raise (:class:`~devmem.NotEnoughMemoryError` on the utilization path,
    :class:`SizingError` for pinned bytes) and what would pass the floor."""
    floor, setting, batch = engine.floor, engine.batch_setting, engine.max_batch_tokens
    assert floor is not None  # size_by_runs checks only a floor the engine has
    tensor, itemsize, total = floor.nbytes(batch), floor.itemsize, memory.baseline.total
    if memory.pinned_bytes is not None:  # the pinned bytes hold what grows with the cache
        columns = floor.growing
        if memory.pinned_bytes >= columns:
            return
        pin = (
            f"pin at least {columns} bytes (the cache itself comes on top), or "
            if columns <= total
            else f"no pin holds it (the device's total is {format_size(total)}): "
        )
        raise SizingError(
            f"pinned_bytes={memory.pinned_bytes} ({format_size(memory.pinned_bytes)}) is smaller than "
            f"{floor.growing_name} for a cache of {setting}={batch} tokens, {batch} x "
            f"{columns // (batch * itemsize)} x {itemsize} B = {columns} bytes ({format_size(columns)}), "
            f"checked before running the engine; {pin}lower {setting}, or {floor.remedy}"
        )
    need = weights + tensor
    if memory.requested >= need:
        return
    fewer = _tokens_within(floor.nbytes, memory.requested - weights)
    raise NotEnoughMemoryError(
        f"not enough memory for the KV cache (utilization path): requested {format_size(memory.requested)} "
        f"(utilization {format_share(memory.utilization)} of {format_size(total)}) cannot hold a batch of "
        f"{setting}={batch}: the weights {format_size(weights)} and {floor.name} for it, {batch} x "
        f"{tensor // (batch * itemsize)} x {itemsize} B = {format_size(tensor)}, take {format_size(need)} before "
        "any activation or block, checked before running the engine. Advice: "
        + (
            f"raise the utilization above {need / total:.3g} ({format_size(need)}, a floor: activations and the "
            "cache come on top), or "
            if need <= total
            else f"no utilization holds it (the device's total is {format_size(total)}): "
        )
        + (f"lower {setting} (at {fewer} the floor alone fills the share)" if fewer else "use a smaller model")
        + f", or {floor.remedy}",
        {"requested": memory.requested, "weights": weights, floor.key: tensor, "max_batch_tokens": batch},
    )


def _tokens_within(nbytes: Callable[[int], int], budget: int) -> int:
    """The largest batch whose tensors (``nbytes``, growing with the batch) fit in ``budget`` bytes (0: none)."""
    low, high = 0, 1
    while nbytes(high) <= budget:
        low, high = high, 2 * high
    while high - low > 1:
        middle = (low + high) // 2
        low, high = (middle, high) if nbytes(middle) <= budget else (low, middle)
    return low


def check_first_run(memory: EngineMemory, first: BlockRun, engine: BlackBoxEngine) -> None:
    """Refuse right after the first engine run (the profile window, the smallest cache that holds a batch) a share
    that no block cost the next runs could measure would fit one batch in, rather than after all of them: with
    the plan's own figures, the fewest blocks a batch needs take at least the window's non-KV memory plus their
    share of the first run's peak (the plan's line through that peak is lowest where it charges no fixed bytes).
    The pinned path charges the cache alone, so the plan decides there."""
    if memory.pinned_bytes is not None:
        return
    setting, batch, tokens = engine.batch_setting, engine.max_batch_tokens, engine.block_tokens
    figures = memory.window_figures()
    needed_blocks = math.ceil(batch / tokens)
    peak = max(figures["transient_peak_bytes"], first.peak)
    beside = figures["consumed"] + figures.get("graph_capture", 0)
    need = beside + math.ceil(peak * needed_blocks / first.num_blocks)
    if memory.requested >= need:
        return
    total = memory.baseline.total
    raise NotEnoughMemoryError(
        f"not enough memory for the KV cache (utilization path): requested {format_size(memory.requested)} "
        f"(utilization {format_share(memory.utilization)} of {format_size(total)}) cannot hold a batch of "
        f"{setting}={batch}: the first engine run, at {first.num_blocks} blocks, peaked "
        f"at {format_size(peak)} beside {format_size(beside)} it holds for good (weights, non-torch), so the "
        f"{needed_blocks} blocks of {tokens} tokens a batch needs take at least {format_size(need)}; refused after "
        f"the first of up to {MAX_RUNS} engine runs. Advice: raise the utilization to at least "
        f"{need / total:.3g} ({format_size(need)}, a floor: the next runs measure the rest), or lower {setting}",
        {
            "requested": memory.requested,
            "consumed": figures["consumed"],
            "first_run_blocks": first.num_blocks,
            "first_run_peak": peak,
            "needed": need,
            "max_batch_tokens": batch,
        },
    )


#: The fields of a stored :class:`CacheRun` holding counts or bytes, the least each may be; those that may be absent.
_COUNTS = {"num_blocks": 1, "cache_bytes": 0, "static_bytes": 0, "allocations": 1, "forward_tokens": 0}
_OPTIONAL = ("peak_bytes", "reserved_peak_bytes", "layers_run")
_BASE_FIELDS = frozenset(f.name for f in dataclasses.fields(CacheRun))


def extra_problem(extra: Mapping[str, Any], total: int, run_type: type[CacheRun] = CacheRun) -> str | None:
    """Why ``extra`` is not the runs (of ``run_type``), costs and notes :func:`size_by_runs` keeps beside a stored
    profile measured on a device of ``total`` bytes (``None``: it is)."""
    runs, costs, notes = extra.get("runs"), extra.get("costs"), extra.get("notes")
    if not isinstance(runs, list) or len(runs) < 2 or not all(isinstance(r, dict) for r in runs):
        return f"extra.runs is {shown(runs)}, not a list of at least two runs"
    fields, hints = dataclasses.fields(run_type), typing.get_type_hints(run_type)
    named = {f.name for f in fields}
    required = {f.name for f in fields if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING}
    for i, r in enumerate(runs):
        if set(r) - named or not required <= set(r):
            return f"extra.runs[{i}] has the fields {sorted(r)}, not those of an {run_type.__name__}"
        for name, least in _COUNTS.items():
            problem = whole_figure(f"extra.runs[{i}].{name}", r[name], low=least, high=total)
            if problem:
                return problem
        for name in _OPTIONAL:
            problem = None if r.get(name) is None else whole_figure(f"extra.runs[{i}].{name}", r[name], high=total)
            if problem:
                return problem
        if r["cache_bytes"] + r["static_bytes"] > total:
            return f"extra.runs[{i}] held {r['cache_bytes'] + r['static_bytes']} bytes, more than the device's {total}"
        seconds = r.get("seconds")
        if seconds is not None and (type(seconds) not in (int, float) or not 0 <= seconds < math.inf):
            return f"extra.runs[{i}].seconds is {shown(seconds)}, not a duration"
        own = (f for f in fields if f.name not in _BASE_FIELDS)
        problem = next(
            filter(None, (_value_problem(f"extra.runs[{i}].{f.name}", r[f.name], hints[f.name]) for f in own)), None
        )
        if problem:
            return problem
    if any(b["num_blocks"] <= a["num_blocks"] for a, b in zip(runs, runs[1:], strict=False)):
        return f"extra.runs' block counts {[r['num_blocks'] for r in runs]} do not ascend"
    if not isinstance(costs, dict):
        return f"extra.costs is {shown(costs)}, not a mapping"
    for name in ("block_bytes", "kv_block_bytes", "static_block_bytes"):
        problem = whole_figure(f"extra.costs.{name}", costs.get(name), high=total)
        if problem:
            return problem
    if costs["kv_block_bytes"] + costs["static_block_bytes"] > costs["block_bytes"]:
        return f"extra.costs {costs}: the KV and static parts of a block are more than the block"
    if not isinstance(notes, list) or not all(isinstance(n, str) for n in notes):
        return f"extra.notes is {shown(notes)}, not a list of text"
    return None


def _value_problem(name: str, value: object, hint: Any) -> str | None:
    """Why ``value`` (stored as JSON, called ``name``) is no value of ``hint`` (text, ``bool``, ``int`` or a tuple of
    them; ``None``: it is)."""
    if typing.get_origin(hint) is tuple:
        if not isinstance(value, list):
            return f"{name} is {shown(value)}, not a list"
        return next(
            filter(None, (_value_problem(f"{name}[{i}]", v, typing.get_args(hint)[0]) for i, v in enumerate(value))),
            None,
        )
    kinds = {str: "text", bool: "true or false", int: "a whole number"}
    return f"{name} is {shown(value)}, not {kinds[hint]}" if hint in kinds and type(value) is not hint else None


def stored_extra(
    extra: Mapping[str, Any], run_type: type[CacheRun] = CacheRun
) -> tuple[tuple[CacheRun, ...], dict[str, int], list[str]]:
    """(runs, costs, notes) kept beside a stored profile's figures (:func:`extra_problem` found nothing wrong)."""
    stored: list[dict[str, Any]] = [
        {k: tuple(v) if isinstance(v, list) else v for k, v in r.items()} for r in extra["runs"]
    ]
    runs = tuple(run_type(**r) for r in stored)
    costs = {name: extra["costs"][name] for name in ("block_bytes", "kv_block_bytes", "static_block_bytes")}
    return runs, costs, list(extra["notes"])


def extra_accepted(total: int, run_type: type[CacheRun] = CacheRun) -> Callable[[Mapping[str, Any]], bool]:
    """The ``accept`` of :meth:`EngineMemory.load_profile`: ``True`` for an extra :func:`extra_problem` finds
    nothing wrong with, else a ``ValueError`` saying what is wrong (named in the store's one warning)."""

    def accept(extra: Mapping[str, Any]) -> bool:
        problem = extra_problem(extra, total, run_type)
        if problem is not None:
            raise ValueError(problem)
        return True

    return accept


__all__ = [
    "BatchFloor",
    "BlackBoxEngine",
    "CacheRun",
    "SizedRuns",
    "check_batch_floor",
    "check_first_run",
    "extra_accepted",
    "extra_problem",
    "measure_runs",
    "size_by_runs",
    "stored_extra",
]
