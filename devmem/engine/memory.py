"""One object an engine keeps from start-up to its KV cache: the baseline, the profile windows, the plan, the cache.

::

    memory = devmem.EngineMemory(device=0, utilization=0.9)  # before the model and the device context exist
    model = load_model(memory.torch_device)
    memory.profile_forward(lambda: forward(largest_batch), weights_memory=model_bytes)  # run twice in the window
    with memory.graphs():  # where the engine captures graphs: charged what capture kept
        capture_graphs()
    memory.plan(page_size_bytes=page, num_layers=layers)
    cache = memory.allocate()  # releases the allocator cache, then one allocation with a view per layer
    log.info(memory.explain())

An engine that captures its graphs after the cache exists (vLLM's V2 model runner, SGLang) tells the plan so, and
captures them in the window after the cache (:mod:`devmem.engine.graphs`)::

    graphs = GraphsAfterCache(estimate=engine_estimate, store=ProfileStore(), key=engine_key)
    memory.plan(page_size_bytes=page, num_layers=layers, graphs=graphs)  # charged the largest figure known
    cache = memory.allocate()
    with memory.graphs_after_cache():  # what capture kept, checked against the charge and stored under the key
        capture_graphs()

Where serving makes a step of the profile pass heavier than the pass can (vLLM's sampler with penalties and
logprobs), the engine holds what it adds while that step runs, named and with where the figure came from:
``with memory.hold("sampler", nbytes, "how it was reached"): sample()`` inside the window; ``explain()`` says it.

Creating it reserves the engine's share on the host's per-device ledger (:func:`devmem.reserve`; ``reserve=False``
opts out), so engines started together are admitted or refused before any of them loads a model; ``close()`` (or
leaving its ``with`` block, or the process's exit) releases the reservation.

Its phases, and the steps each allows, are one table (:mod:`devmem.engine.phases`): a step the phase does not allow
(out of order, taken twice, while another is under way in any thread, after :meth:`~EngineMemory.close`, in a forked
child of the process that created the object) is a :class:`~devmem.errors.StepRefused` naming the step and the
phase. Each argument is checked once, at the door of the step it is given to (an
:class:`~devmem.errors.EngineArgumentError` naming it and the value); what is behind the door trusts it. A window
whose block raised may be opened again; until then the plan is refused. An engine whose cache devmem cannot see into
measures a block's cost by running itself (:mod:`devmem.engine.black_box`). Device indexes are devmem's everywhere;
the platform maps them to torch's device (:attr:`EngineMemory.torch_device`). The functions beneath
(``MemorySnapshot.measure``, ``check_startup_memory``, ``memory_profiling``, ``plan_kv_cache``,
``release_allocator_cache``, ``allocate_kv_cache``) stay public for engines that need another order.
"""

from __future__ import annotations

import logging
import numbers
import os
import time
import weakref
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, replace
from typing import Any

from devmem._forksafe import ForkSafeLock
from devmem.engine import _door, _heap, _report, black_box, charges
from devmem.engine._torch_device import _device_of
from devmem.engine.block_cost import BlockCost, BlockRun
from devmem.engine.charges import HeldCharge
from devmem.engine.graphs import GraphCharge, GraphCheck, GraphsAfterCache, graph_charge
from devmem.engine.kvcache import ALLOCATOR_GRANULARITY, KvCacheTensors, _allocate
from devmem.engine.layout import KvLayout
from devmem.engine.phases import BUSY, FAILED, Phase, meaning, next_phase, refusal
from devmem.engine.profile_store import StoredProfile, StoredStart
from devmem.engine.profiling import MemorySnapshot, ProfileResult, _refuse_start, _release, _window
from devmem.engine.reservations import Ledger, Reservation
from devmem.errors import EngineMemoryError, StepRefused
from devmem.planner.inputs import CheckedPlanInputs, splits
from devmem.planner.rounding import LARGE_BUFFER
from devmem.planner.sizing import DEFAULT_UTILIZATION, KvCachePlan, requested_of
from devmem.planner.sizing import plan as planned
from devmem.platform import Platform, prepare_and_read, read_device

log = logging.getLogger("devmem.engine")

#: How many times :meth:`EngineMemory.profile_forward` runs the forward pass: a caching allocator reaches its
#: steady state on the second pass (blocks cached by the first are split and reused in another order; on the H200
#: a 28-layer model's second pass reserved 54 MiB more than its first), which is what serving then needs.
PROFILE_PASSES = 2

#: What torch's allocator maps at a time in expandable segments (its large pool's page,
#: :data:`devmem.planner.rounding.LARGE_BUFFER`): with ``expandable_segments:True`` the cache's allocation, and every
#: later growth, is rounded up to it.
EXPANDABLE_SEGMENT_GRANULARITY = LARGE_BUFFER

#: The plan's layout where none is given: devmem's one allocation (:meth:`EngineMemory.allocate`).
_ONE_ALLOCATION = KvLayout.one_allocation()


@dataclass
class _Next:
    """Where a step that runs to its end leads: the table's phase, unless the step finds otherwise."""

    phase: Phase


class EngineMemory:
    """The engine's device memory from start-up to its KV cache, for one device (devmem's index ``device``).

    Created before the model and the device context exist: it resolves the platform (``platform``, the current
    one by default), lets it prepare the device where it has a ``prepare`` step, takes the baseline snapshot and,
    unless the cache is ``pinned_bytes``, checks that free memory covers ``ceil(utilization * total)``
    (:class:`~devmem.NotEnoughMemoryError` otherwise; ``check_startup=False`` skips it).
    ``allocation_granularity`` is what torch's allocator rounds an allocation up to (2 MiB). With expandable
    segments, which the profile window detects, tensors are packed into one mapping that grows in units of
    20 MiB: the plan rounds the cache's total up to that unit once, whatever the layout.

    ``reserve`` (default ``True``): reserve the requested share on the host's per-device ledger before anything
    else (:func:`devmem.reserve`; a refusal is a :class:`~devmem.ReservationRefused` naming the holders), for
    a pinned cache the ``pinned_bytes``; ``ledger_dir`` overrides ``DEVMEM_LEDGER_DIR``. Use the object as a
    context manager, or call :meth:`close`, to release it. ``baseline``: a :class:`MemorySnapshot` of this device
    taken earlier (before the device context); ``late``: created after the model, so that all this process holds
    counts as consumed.
    """

    def __init__(
        self,
        device: int = 0,
        *,
        utilization: float = DEFAULT_UTILIZATION,
        pinned_bytes: int | None = None,
        platform: Platform | None = None,
        check_startup: bool = True,
        allocation_granularity: int = ALLOCATOR_GRANULARITY,
        reserve: bool | Reservation = True,
        ledger_dir: str | os.PathLike[str] | None = None,
        reserve_bytes: int | None = None,
        baseline: MemorySnapshot | None = None,
        late: bool = False,
    ):
        self.device = _door.device(device)
        self._share = _door.utilization(utilization)  # exactly: what the plan sizes from
        # a Python number, whatever kind the caller gave (a numpy float is neither JSON nor printed as given)
        self.utilization = int(utilization) if isinstance(utilization, numbers.Integral) else float(utilization)
        self.pinned_bytes = (
            None if pinned_bytes is None else _door.byte_count("pinned_bytes", pinned_bytes, positive=True)
        )
        self.allocation_granularity = _door.byte_count("allocation_granularity", allocation_granularity, positive=True)
        check_startup = _door.flag("check_startup", check_startup)
        _door.instance(
            "ledger_dir",
            ledger_dir,
            (str, os.PathLike),
            "a folder (str or os.PathLike) or None ($DEVMEM_LEDGER_DIR)",
            optional=True,
        )
        self.late = _door.flag("late", late)
        if reserve_bytes is not None:
            reserve_bytes = _door.byte_count("reserve_bytes", reserve_bytes, positive=True)
        if not isinstance(reserve, Reservation):
            reserve = _door.flag("reserve", reserve)
        elif reserve.device != self.device:
            why = f"reserve is a reservation of device {reserve.device}, but this EngineMemory is for device "
            raise _door.refused("reserve", reserve, f"{why}{self.device}")
        elif reserve.released:
            why = f"reserve is a reservation of device {self.device} that was released ({reserve.path}): it holds "
            raise _door.refused("reserve", reserve, f"{why}nothing on the ledger; reserve again, or give reserve=True")
        what = "a MemorySnapshot (MemorySnapshot.measure() before the model exists) or None"
        _door.instance("baseline", baseline, MemorySnapshot, what, optional=True)
        self.platform = _door.platform(platform)
        self._lock, self._pid, self._phase, self.closed = ForkSafeLock(), os.getpid(), Phase.CREATED, False
        self._heap_held: weakref.finalize | None = None
        self.reservation: Reservation | None = reserve if isinstance(reserve, Reservation) else None
        if baseline is None:  # one coherent reading of the device serves the baseline and the admission
            reading = prepare_and_read(self.platform, self.device)  # a platform that learns this process's PIDs first
            self.baseline = MemorySnapshot.from_reading(reading, self.platform)
        else:  # the reading checks the adopted baseline's device, then serves the admission
            reading = read_device(self.platform, self.device)
            self.baseline = _door.adopted_baseline(baseline, reading, self.platform)
        total = self.baseline.total
        if self.pinned_bytes is not None:
            _door.within_total("pinned_bytes", self.pinned_bytes, total, self.device)
        self.requested = requested_of(total, self._share)
        if reserve is True:
            if reserve_bytes is not None:
                _door.within_total("reserve_bytes", reserve_bytes, total, self.device)
            # before the start-up check: a refusal names who holds the device
            share = reserve_bytes or (self.requested if self.pinned_bytes is None else self.pinned_bytes)
            held_outside = 0 if self.late else self.baseline.process  # the share covers its growth (all, if late)
            self.reservation = Ledger(ledger_dir).reserve(
                self.platform, self.device, share, reading=reading, held_outside=held_outside
            )
        try:
            if check_startup and self.pinned_bytes is None:
                held = (self.baseline.process or 0) if self.late else 0  # a late engine's share holds its model
                _refuse_start(self.baseline, self.requested, self.platform, held)
        except BaseException:
            self.close()  # a start refused here gives its share back, so a retry that fits is admitted
            raise
        self.profile_result: ProfileResult | None = None
        self.held_charges: dict[str, HeldCharge] = {}  # held in the profile window beyond the engine's pass (hold)
        self.graphs_result: ProfileResult | None = None
        self.graphs_declared: GraphsAfterCache | None = None  # graphs captured after the cache (plan's graphs)
        self.graph_charge: GraphCharge | None = None  # what the plan charged for them, and why
        self.graph_check: GraphCheck | None = None  # what their capture kept against that (graphs_after_cache)
        self.kv_plan: KvCachePlan | None = None
        self.layout: KvLayout | None = None
        self.num_layers: int | None = None
        self.released_bytes: int | None = None
        self.cache: KvCacheTensors | None = None
        # a cache devmem cannot see into (devmem.engine.black_box)
        self.block_cost: BlockCost | None = None
        self.block_cost_source: str | None = None
        self.first_run: BlockRun | None = None  # the profile window's run of the engine (profile_blocks)
        self.stored: StoredProfile | None = None  # where the windows' figures were read from (load_profile)
        self._record: StoredStart | None = None  # the whole start read there
        self._cost_layout: KvLayout | None = None
        self._kept: StoredProfile | None = None  # the profile this object stored itself (save_profile)
        _heap.hold()  # until the start's last collection (or this object's end): each collects only what it created
        self._heap_held = weakref.finalize(self, _heap.let_go)

    @property
    def torch_device(self) -> Any:
        """torch's device for this engine's device: the platform's torch namespace and the index, or the CPU on
        the ``cpu`` platform. Imports torch."""
        return _device_of(self.platform, self.device)

    @property
    def phase(self) -> Phase:
        """Where the object is in its lifecycle (:class:`~devmem.engine.phases.Phase`)."""
        if self.closed:
            return Phase.CLOSED
        return Phase.FORKED if os.getpid() != self._pid else self._phase

    # ---- the steps' door --------------------------------------------------------------------------------------
    @contextmanager
    def _step(self, step: str, guard: Callable[[], str | None] | None = None) -> Iterator[_Next]:
        """Take ``step`` where the phase allows it (and ``guard``, where given, finds nothing against it): checked
        and claimed under one lock, so two threads cannot both take it; the phase moves on once it ran to its end."""
        with self._lock:
            phase = self.phase
            following = next_phase(phase, step, pinned=self.pinned_bytes is not None)
            why = None if following is None or guard is None else guard()
            if following is None or why is not None:
                raise self._refusal(step, phase, why)
            self._phase = BUSY[step]
        outcome = _Next(following)
        try:
            yield outcome
        except BaseException:
            self._phase = FAILED.get(step, phase)
            raise
        self._phase = outcome.phase

    def _refusal(self, step: str, phase: Phase | None = None, why: str | None = None) -> StepRefused:
        phase = self.phase if phase is None else phase
        return refusal(self.device, step, phase, why or meaning(phase, self))

    def _weights(self, weights_memory: object) -> int:
        weights = _door.byte_count("weights_memory", weights_memory)
        hint = "give the bytes the weights take on this device (its shard, where the model is split)"
        return _door.within_total("weights_memory", weights, self.baseline.total, self.device, hint)

    # ---- the windows --------------------------------------------------------------------------------------
    @contextmanager
    def _profile_window(self, weights: int) -> Iterator[ProfileResult]:
        with _window(self.baseline, weights, self.platform, self.device) as result:
            self.profile_result = result
            yield result

    @contextmanager
    def profile(self, weights_memory: int = 0) -> Iterator[ProfileResult]:
        """The profile window: run the largest forward pass in it (after loading the model, before the plan).

        ``weights_memory`` is what the engine knows its weights take, a lower bound of what it consumed.
        """
        weights = self._weights(weights_memory)
        with self._step("profile"), self._profile_window(weights) as result:
            yield result

    #: A named charge held on the device inside the profile window (devmem.engine.charges), said by explain().
    hold = charges.hold

    def profile_forward(
        self, forward: Callable[[], object], *, weights_memory: int = 0, passes: int = PROFILE_PASSES
    ) -> ProfileResult:
        """The profile window around ``forward()`` (the largest forward pass), run ``passes`` times (default 2):
        torch's caching allocator reserves more on the second pass of the same work than on the first, and
        serving runs it many times."""
        _door.callable_("forward", forward, "a callable running the largest forward pass")
        count = _door.count("passes", passes)
        weights = self._weights(weights_memory)
        with self._step("profile_forward"), self._profile_window(weights) as result:
            for _ in range(count):
                _door.ran(forward())
        return result

    @contextmanager
    def graphs(self) -> Iterator[ProfileResult]:
        """The graph window: capture the engine's device graphs in it, after the profile window and before the plan.

        The plan is charged what capture kept (the graphs' pool), and the larger of the two windows' transients.
        Where the plan is told the graphs are captured for good after the cache (``plan(graphs=GraphsAfterCache(
        ...))``), this window is a throwaway capture measuring them (vLLM 0.24 captures into a pool it frees): all
        it reached (its transient and what it kept) is then a measurement of the graphs beside the cache
        (:mod:`devmem.engine.graphs`), on top of the profile's transient.
        """
        with self._step("graphs"):
            weights = self.profile_result.weights_memory if self.profile_result is not None else 0
            with _window(self.baseline, weights, self.platform, self.device) as result:
                self.graphs_result = result
                yield result

    @contextmanager
    def graphs_after_cache(self) -> Iterator[ProfileResult]:
        """The window around graph capture after the KV cache exists, for graphs the plan was told of
        (``plan(graphs=GraphsAfterCache(...))``): after :meth:`allocate`, or after :meth:`plan` where the engine
        allocates its own cache (a :class:`KvLayout` ``by_engine``). It measures what capture kept (this process's
        memory growth where the platform attributes memory to processes, else torch's reserved growth), records
        the check against the plan's charge (:attr:`graph_check`, in :meth:`explain` and :meth:`as_dict`), logs one
        warning where capture kept more than was charged, and stores the figure under the declaration's key so
        that the next start plans for it exactly."""

        def guard() -> str | None:
            if self.graphs_declared is None:
                return (
                    "the plan was not told of graphs captured after the cache: plan(..., "
                    "graphs=GraphsAfterCache(estimate=...)) first"
                )
            if self.cache is None and not (self.layout is not None and self.layout.by_engine):
                return "the plan is devmem's one allocation, and the cache does not exist yet: allocate() first"
            return None

        with self._step("graphs_after_cache", guard):
            declared, charge = self.graphs_declared, self.graph_charge
            assert declared is not None and charge is not None  # the guard's
            with _window(self.baseline, 0, self.platform, self.device) as result:
                yield result
            check = GraphCheck.of(result, charge)
            self.graph_check = check
            declared.keep(check.kept_bytes, time.time())
        self._heap_let_go(unless_graphs_follow=False)
        if check.fits:
            log.info("devmem: device %d: %s", self.device, check.explain())
        else:
            next_start = (
                "the next start with this key plans for it"
                if declared.store is not None
                else "give GraphsAfterCache a store and key so that the next start plans for it"
            )
            log.warning("devmem: device %d: %s; %s", self.device, check.explain(), next_start)

    # ---- a cache devmem cannot see into: devmem.engine.black_box's steps, as methods ---------------------------
    profile_blocks = black_box.profile_blocks
    measure_block_cost = black_box.measure_block_cost
    blocks_that_fit = black_box.blocks_that_fit
    load_profile = black_box.load_profile
    save_profile = black_box.save_profile

    def window_figures(self) -> dict[str, Any]:
        """The windows' figures the plan is made of (the profile window's, with the graph window's where one
        ran, or a stored profile's): ``plan_kv_cache``'s inputs before a block's cost is charged."""
        if self._record is not None and self._record.windows is not None:  # read at start or stored first by a twin
            figures = dict(self._record.windows)
        elif self.profile_result is None:
            raise self._refusal("window_figures")
        else:
            figures = dict(self.profile_result.plan_inputs())
            if self.graphs_result is not None:
                graphs = self.graphs_result.plan_inputs()
                if self.graphs_declared is None:  # graphs kept from the window: charged what capture kept
                    figures["graph_capture"] = max(0, graphs["consumed"] - figures["consumed"])
                    figures["transient_peak_bytes"] = max(
                        figures["transient_peak_bytes"], graphs["transient_peak_bytes"]
                    )
                figures["other_processes"] = graphs["other_processes"]
                figures["released_cache"] += graphs["released_cache"]
        if self.graph_charge is not None:  # graphs captured after the cache (plan's graphs)
            figures["graph_capture"] = self.graph_charge.bytes
        if self.late:  # created after the model: everything this process holds counts as consumed
            figures["consumed"] = max(figures["consumed"], self._held_now())
        return figures

    def _held_now(self) -> int:
        """This process's device memory after the last window, or now where figures were stored (0 unknown)."""
        after = None if self.profile_result is None else self.profile_result.after_profile
        if after is not None and after.process is not None:
            return after.process
        if self.baseline.process is None:
            return 0
        return self.platform.get_process_memory_usage(self.device) or 0

    # ---- the plan and the cache ---------------------------------------------------------------------------
    def plan(
        self,
        *,
        page_size_bytes: int | None = None,
        num_layers: int | None = None,
        layout: KvLayout | None = None,
        graphs: GraphsAfterCache | None = None,
    ) -> KvCachePlan:
        """Size the KV cache for blocks of ``page_size_bytes`` on each of ``num_layers`` layers, allocated as
        ``layout`` says (:meth:`KvLayout.one_allocation`, :meth:`allocate`'s, by default). After
        :meth:`measure_block_cost`, both may be left out: a block is what it measured (one allocation per block
        count, the engine's), and the rest of the first run's peak is the transient headroom. ``graphs``: the
        engine captures its device graphs after the cache (:class:`~devmem.engine.graphs.GraphsAfterCache`): the
        plan charges them the largest of the figure stored under its key, all a throwaway capture in the graph
        window reached and its estimate, or, where none measured anything, the profile window's transient
        (:attr:`graph_charge` says which); :meth:`graphs_after_cache` then checks what capture kept.

        At the utilization the profile window (and the graph window, where one was opened) is required; a
        pinned cache is checked against the total beside what the profile measured, where it ran. A block's
        bytes are ``page_size_bytes * num_layers``: the place where a black-box cache's measured per-block cost,
        or a stored profile, enters the plan.
        """
        _door.instance("layout", layout, KvLayout, "a KvLayout", optional=True)
        _door.instance(
            "graphs",
            graphs,
            GraphsAfterCache,
            "a GraphsAfterCache (graphs captured after the cache) or None",
            optional=True,
        )
        page = None if page_size_bytes is None else _door.byte_count("page_size_bytes", page_size_bytes, positive=True)
        layers = None if num_layers is None else _door.count("num_layers", num_layers)
        with self._step("plan"):
            if self.block_cost is not None and page is None and layers is None:
                page, layers = self.block_cost.block_bytes, 1
            elif page is None or layers is None:
                missing = "page_size_bytes" if page is None else "num_layers"
                raise _door.refused(
                    missing,
                    None,
                    f"device {self.device}: plan() needs page_size_bytes and "
                    "num_layers (or a measure_block_cost() first)",
                )
            layout = (self._cost_layout or _ONE_ALLOCATION) if layout is None else layout
            self.graphs_declared, self.graph_charge = graphs, None
            if graphs is not None:
                self.graph_charge = self._graph_charge(graphs)
            self.kv_plan = self._sized(page, layers, layout, self.block_cost)
            self.layout, self.num_layers = layout, layers
            self._reserve_beside_pinned()
            return self.kv_plan

    def _reserve_beside_pinned(self) -> None:
        """A pinned cache's reservation, taken before the weights loaded with the cache and what the engine said
        beside it, raised to what the windows measured: the cache, all this start took since its baseline, the
        transient peak and the graphs' charge as a share's would be. :class:`~devmem.ReservationRefused` where that
        no longer fits."""
        if self.pinned_bytes is None or self.reservation is None:
            return
        if self.profile_result is None and self._record is None:
            return
        figures, graphs = self.window_figures(), self.graphs_declared
        after = 0 if graphs is None else self._graph_charge(graphs, pinned=False).bytes
        beside = figures["consumed"] + figures["transient_peak_bytes"] + max(figures.get("graph_capture", 0), after)
        held_outside = 0 if self.late else self.baseline.process
        self.reservation.grow(self.pinned_bytes + beside, self.platform, held_outside=held_outside)

    def _graph_charge(self, graphs: GraphsAfterCache, *, pinned: bool = True) -> GraphCharge:
        """The charge for graphs captured after the cache (:func:`~devmem.engine.graphs.graph_charge`); with
        ``pinned=False``, a share's charge even where the cache is pinned (what its reservation covers)."""
        if pinned and self.pinned_bytes is not None:
            return graph_charge(graphs, self.baseline.total, None, 0, pinned=True)
        figures = self.window_figures()
        window = None
        if self.graphs_result is not None and self.profile_result is not None:  # a throwaway capture: all it
            kept = max(0, self.graphs_result.total_consumed - self.profile_result.total_consumed)  # reached
            window = kept + self.graphs_result.transient_reach_bytes
        return graph_charge(graphs, self.baseline.total, window, figures["transient_peak_bytes"])

    def _sized(
        self, page_size_bytes: int | None, layers: int | None, layout: KvLayout | None, cost: BlockCost | None
    ) -> KvCachePlan:
        """The plan for pages of ``page_size_bytes`` on ``layers`` layers (a block of ``cost`` where not given),
        from the windows' figures: the one formula of how many blocks fit."""
        if page_size_bytes is None or layers is None:
            assert cost is not None
            page_size_bytes, layers = cost.block_bytes, 1
        layout = _ONE_ALLOCATION if layout is None else layout
        figures: dict[str, Any] = {}
        if self.pinned_bytes is None or self.profile_result is not None or self._record is not None:
            figures = self.window_figures()
        if cost is not None and figures:
            figures["transient_peak_bytes"] = self._transient_beside_blocks(cost, figures["transient_peak_bytes"])
        if self.pinned_bytes is not None:
            figures.pop("consumed", None)
            figures.pop("graph_capture", None)
        expandable = self._expandable_segments()
        # None: no torch allocator (host memory), as the window saw or, without one, as the platform declares
        seen = figures.pop("allocator", None if self.platform.torch_device is None else "caching")
        if self.allocation_granularity == ALLOCATOR_GRANULARITY and seen is not None:  # charged what torch reserves
            rounding: dict[str, Any] = {"allocator": "expandable" if expandable else "caching"}
        elif expandable:  # an allocator of the engine's own granularity, packed into expandable segments
            rounding = {"allocation_granularity": max(self.allocation_granularity, EXPANDABLE_SEGMENT_GRANULARITY)}
        else:
            rounding = {"allocation_granularity": self.allocation_granularity}
        allocations = 1 if expandable and "allocator" not in rounding else layout.allocations(layers)
        if cost is not None and page_size_bytes == cost.block_bytes and layers == 1 and allocations > 1:
            # a measured block is no sum of equal tensors: each tensor that grows with the cache is charged its
            # rounding once, the most the allocator adds to it
            # (in expandable segments, their total once to the segment's unit)
            extra = EXPANDABLE_SEGMENT_GRANULARITY if expandable else allocations * self.allocation_granularity
            figures["transient_peak_bytes"] = figures.get("transient_peak_bytes", 0) + extra
            allocations, rounding = 1, {"allocation_granularity": 1}
        splits(page_size_bytes * layers, allocations)  # the layout's tensors, against the block the door checked
        inputs = CheckedPlanInputs(  # what the door checked and the windows measured: nothing is checked again
            total=self.baseline.total,
            utilization=self._share,
            pinned_bytes=self.pinned_bytes,
            page_size_bytes=page_size_bytes,
            num_layers=layers,
            allocations=allocations,
            **rounding,
            **figures,
        )
        return replace(planned(inputs), device=self.device)

    def _transient_beside_blocks(self, cost: BlockCost, window_transient: int) -> int:
        """The headroom beside a plan that charges every block ``cost.block_bytes``: the rest of the first run's
        peak. Where the profile window was that run (:meth:`profile_blocks`), its transient held the run's blocks
        too, and they are counted per block."""
        if self._first_in_window:
            return cost.fixed_bytes(max(window_transient, cost.runs[0].peak))
        return max(window_transient, cost.fixed_bytes(cost.runs[0].peak))

    @property
    def _first_in_window(self) -> bool:
        return self._record.first_in_window if self._record is not None else self.first_run is not None

    def _expandable_segments(self) -> bool:
        """Whether a window (or the stored profile's) found torch's allocator mapping memory in expandable
        segments."""
        if self._record is not None:
            return self._record.expandable_segments
        return any(w is not None and w.expandable_segments for w in (self.profile_result, self.graphs_result))

    def allocate(self, plan: KvCachePlan | None = None) -> KvCacheTensors:
        """Release the allocator's cache, then allocate the planned cache as one zeroed allocation with a view
        per layer (:func:`devmem.engine.allocate_kv_cache`) on this engine's device. ``plan``, where given, must be the
        one :meth:`plan` returned."""
        what = "the KvCachePlan this EngineMemory's plan() returned, or None"
        _door.instance("plan", plan, KvCachePlan, what, optional=True)

        def guard() -> str | None:
            if self.layout is not None and self.layout.by_engine:
                return (
                    f"the plan assumed the engine allocates its own tensors ({self.layout}); allocate them yourself "
                    "after release_allocator_cache(), or plan with KvLayout.one_allocation()"
                )
            return None

        with self._step("allocate", guard):
            if plan is not None and plan != self.kv_plan:
                where = "another device's" if plan.device not in (None, self.device) else "not this engine's"
                raise _door.refused(
                    "plan",
                    plan,
                    f"device {self.device}: the plan given is {where} (made for device "
                    f"{plan.device}); allocate the plan this EngineMemory made",
                )
            assert self.kv_plan is not None and self.num_layers is not None  # the phase's
            self.released_bytes = _release(self.device, self.platform)
            self.cache = _allocate(self.kv_plan, self.num_layers, self.torch_device)
        self._heap_let_go(unless_graphs_follow=True)
        return self.cache

    def release_allocator_cache(self) -> int:
        """Give torch's cached, unused blocks back (right before an engine allocates its own cache tensors)."""
        released = _release(self.device, self.platform)
        if self.kv_plan is not None:  # the engine's own cache comes next
            self._heap_let_go(unless_graphs_follow=True)
        return released

    def _heap_let_go(self, *, unless_graphs_follow: bool) -> None:
        """The start's last collection is made (:mod:`devmem.engine._heap`): unless graphs after the cache follow."""
        if self._heap_held is not None and not (unless_graphs_follow and self.graphs_declared is not None):
            self._heap_held()  # once: a finalizer runs at most once

    def close(self) -> None:
        """Release the reservation (the cache itself is the engine's to drop); every step after it is refused
        (:meth:`explain` and :meth:`as_dict` still answer). Idempotent."""
        self.closed = True
        self._heap_let_go(unless_graphs_follow=False)
        if self.reservation is not None:
            self.reservation.release()

    def __enter__(self) -> EngineMemory:
        if self.closed:
            raise self._refusal("enter a `with` block")
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ---- for people and for logs: devmem.engine._report's, as methods ----------------------------------------
    explain = _report.explain
    as_dict = _report.as_dict


__all__ = [
    "EXPANDABLE_SEGMENT_GRANULARITY",
    "PROFILE_PASSES",
    "EngineMemory",
    "EngineMemoryError",
    "KvLayout",
]
