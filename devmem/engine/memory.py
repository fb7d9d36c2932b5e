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

Creating it reserves the engine's share on the host's per-device ledger (:func:`devmem.reserve`; ``reserve=False``
opts out), so engines started together are admitted or refused before any of them loads a model; ``close()`` (or
leaving its ``with`` block, or the process's exit) releases the reservation.

Each step checks that the one before it happened, and refuses a step taken twice, with an
:class:`EngineMemoryError` naming what is missing; so are a step while another is under way (in any thread), a
step after :meth:`~EngineMemory.close`, and any step in a forked child of the process that created the object. A
window whose block raised may be opened again; until then the plan refuses its figures. Device indexes are
devmem's everywhere; the platform maps them to torch's device (:attr:`EngineMemory.torch_device`). The functions
beneath (``MemorySnapshot.measure``, ``check_startup_memory``, ``memory_profiling``, ``plan_kv_cache``,
``release_allocator_cache``, ``allocate_kv_cache``) stay public for engines that need another order.
"""

from __future__ import annotations

import inspect
import logging
import numbers
import os
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, replace
from typing import Any

from devmem import arguments
from devmem._forksafe import ForkSafeLock
from devmem._text import shown
from devmem.engine._torch_device import initialised_module, torch_device_for
from devmem.engine.block_cost import BlockCost, BlockRun, measure_block_cost
from devmem.engine.kvcache import ALLOCATOR_GRANULARITY, KvCacheTensors, allocate_kv_cache
from devmem.engine.profile_store import ProfileStore, StoredProfile
from devmem.engine.profiling import MemorySnapshot, ProfileResult, check_startup_memory, memory_profiling
from devmem.engine.profiling import release_allocator_cache as _release
from devmem.engine.reservations import Reservation
from devmem.engine.reservations import reserve as reserve_share
from devmem.errors import DevmemError, EngineMemoryError, NotEnoughMemoryError
from devmem.planner.rounding import LARGE_BUFFER
from devmem.planner.sizing import DEFAULT_UTILIZATION, KvCachePlan, plan_kv_cache, requested_memory
from devmem.platform import DeviceReading, Platform, prepare_and_read, read_device
from devmem.units import format_share, format_size

log = logging.getLogger("devmem.engine")

#: How many times :meth:`EngineMemory.profile_forward` runs the forward pass: a caching allocator reaches its
#: steady state on the second pass (blocks cached by the first are split and reused in another order; on the H200
#: a 28-layer model's second pass reserved 54 MiB more than its first), which is what serving then needs.
PROFILE_PASSES = 2

#: The kind under which :meth:`EngineMemory.measure_block_cost` keeps a measured cost in a profile store.
BLOCK_COST_KIND = "block-cost"

#: What torch's allocator maps at a time in expandable segments (its large pool's page,
#: :data:`devmem.planner.rounding.LARGE_BUFFER`): with ``expandable_segments:True`` the cache's allocation, and every
#: later growth, is rounded up to it.
EXPANDABLE_SEGMENT_GRANULARITY = LARGE_BUFFER


@dataclass(frozen=True)
class KvLayout:
    """How the KV cache will be allocated, so that the plan charges the allocator's rounding it will really pay.

    - ``KvLayout.one_allocation()`` (the default): :meth:`EngineMemory.allocate`'s one allocation with a view per
      layer, rounded up once;
    - ``KvLayout.per_layer(tensors_per_layer=1)``: the engine allocates its own tensors, ``tensors_per_layer`` per
      layer (2 for keys and values apart), each rounded up to the allocator's granularity;
    - ``KvLayout.tensors(count)``: the engine allocates ``count`` equal tensors (one per group of layers, say),
      each rounded up.

    Where the engine allocates, every tensor is charged the most the allocator can add to it, so the plan is
    never over whatever the allocator does; ``EngineMemory.explain()`` says which layout was assumed.
    """

    by_engine: bool
    count: int | None = None
    per_layer_count: int = 1

    def __post_init__(self) -> None:
        arguments.flag("KvLayout.by_engine", self.by_engine, error=EngineMemoryError)
        if self.count is not None:
            if not self.by_engine:
                raise EngineMemoryError(
                    f"KvLayout.count is the number of tensors the engine allocates, got {shown(self.count)} for "
                    "devmem's one allocation: use KvLayout.tensors(count)"
                )
            object.__setattr__(self, "count", arguments.count("KvLayout.count", self.count, error=EngineMemoryError))
        per_layer = arguments.count("KvLayout.per_layer_count", self.per_layer_count, error=EngineMemoryError)
        object.__setattr__(self, "per_layer_count", per_layer)

    @classmethod
    def one_allocation(cls) -> KvLayout:
        return cls(False)

    @classmethod
    def per_layer(cls, tensors_per_layer: int = 1) -> KvLayout:
        return cls(True, None, arguments.count("tensors_per_layer", tensors_per_layer, error=EngineMemoryError))

    @classmethod
    def tensors(cls, count: int) -> KvLayout:
        return cls(True, arguments.count("count", count, error=EngineMemoryError))

    def allocations(self, num_layers: int) -> int:
        """How many separately rounded allocations the cache is made of, for ``num_layers`` layers."""
        if not self.by_engine:
            return 1
        return self.count if self.count is not None else self.per_layer_count * num_layers


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
    context manager, or call :meth:`close`, to release it.
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
        self.device = arguments.device_index(device, error=EngineMemoryError)
        arguments.utilization(utilization, error=EngineMemoryError)
        # a Python number, whatever kind the caller gave (a numpy float is neither JSON nor printed as given)
        self.utilization = int(utilization) if isinstance(utilization, numbers.Integral) else float(utilization)
        self.pinned_bytes = (
            None
            if pinned_bytes is None
            else arguments.byte_count("pinned_bytes", pinned_bytes, positive=True, error=EngineMemoryError)
        )
        self.allocation_granularity = arguments.byte_count(
            "allocation_granularity", allocation_granularity, positive=True, error=EngineMemoryError
        )
        check_startup = arguments.flag("check_startup", check_startup, error=EngineMemoryError)
        if ledger_dir is not None and not isinstance(ledger_dir, (str, os.PathLike)):
            raise EngineMemoryError(
                f"ledger_dir must be a folder (str or os.PathLike) or None ($DEVMEM_LEDGER_DIR), got "
                f"{shown(ledger_dir)} of type {type(ledger_dir).__name__}"
            )
        self.late = arguments.flag("late", late, error=EngineMemoryError)
        if reserve_bytes is not None:
            reserve_bytes = arguments.byte_count("reserve_bytes", reserve_bytes, positive=True, error=EngineMemoryError)
        self.platform = arguments.platform(platform, error=EngineMemoryError)
        self._lock = ForkSafeLock()
        self._pid = os.getpid()
        self._busy: str | None = None  # the step under way: a window open, a measurement, an allocation
        self.closed = False
        self.reservation: Reservation | None = None
        if baseline is None:  # one coherent reading of the device serves the baseline and the admission
            reading = prepare_and_read(self.platform, self.device)  # a platform that learns this process's PIDs first
            self.baseline = MemorySnapshot.from_reading(reading, self.platform)
        else:  # the reading checks the adopted baseline's device, then serves the admission
            reading = read_device(self.platform, self.device)
            self.baseline = _adopted_baseline(baseline, reading, self.platform)
        if self.pinned_bytes is not None:
            self._within_total("pinned_bytes", self.pinned_bytes)
        self.requested = requested_memory(self.baseline.total, utilization)
        if isinstance(reserve, Reservation):
            if reserve.device != self.device:
                raise EngineMemoryError(
                    f"reserve is a reservation of device {reserve.device}, but this EngineMemory is for device "
                    f"{self.device}"
                )
            if reserve.released:
                raise EngineMemoryError(
                    f"reserve is a reservation of device {self.device} that was released ({reserve.path}): it holds "
                    "nothing on the ledger; reserve again, or give reserve=True"
                )
            self.reservation = reserve
        elif arguments.flag("reserve", reserve, error=EngineMemoryError):
            if reserve_bytes is not None:
                self._within_total("reserve_bytes", reserve_bytes)
            # before the start-up check: a refusal names who holds the device
            share = reserve_bytes or (self.requested if self.pinned_bytes is None else self.pinned_bytes)
            self.reservation = reserve_share(  # the share covers what it holds since its baseline (all, if late)
                self.device,
                share,
                platform=self.platform,
                ledger_dir=ledger_dir,
                reading=reading,
                held_outside=0 if self.late else self.baseline.process,
            )
        try:
            if check_startup and self.pinned_bytes is None:
                held = (self.baseline.process or 0) if self.late else 0  # a late engine's share holds its model
                check_startup_memory(self.baseline, self.requested, self.platform, held=held)
        except BaseException:
            self.close()  # a start refused here gives its share back, so a retry that fits is admitted
            raise
        self.profile_result: ProfileResult | None = None
        self.graphs_result: ProfileResult | None = None
        self._graphs_after_cache = False
        self._graph_bytes = 0  # the engine's own estimate of graphs captured after the cache (plan's graph_bytes)
        self.kv_plan: KvCachePlan | None = None
        self.layout: KvLayout | None = None
        self.num_layers: int | None = None
        self.released_bytes: int | None = None
        self.cache: KvCacheTensors | None = None
        self.block_cost: BlockCost | None = None
        self.block_cost_source: str | None = None
        self.first_run: BlockRun | None = None  # the profile window's run of the engine (profile_blocks)
        self.stored: StoredProfile | None = None  # where the windows' figures were read from (load_profile)
        self._stored_figures: dict[str, Any] | None = None
        self._cost_layout: KvLayout | None = None
        self._kept: StoredProfile | None = None  # the profile this object stored itself (save_profile)

    def _within_total(self, name: str, given: int) -> None:
        if given > self.baseline.total:
            raise EngineMemoryError(
                f"{name}={given} ({format_size(given)}) is more than device {self.device}'s total memory, "
                f"{self.baseline.total} ({format_size(self.baseline.total)}): give at most the total"
            )

    @property
    def torch_device(self) -> Any:
        """torch's device for this engine's device: the platform's torch namespace and the index, or the CPU on
        the ``cpu`` platform. Imports torch."""
        return torch_device_for(self.platform, self.device)

    # ---- the windows --------------------------------------------------------------------------------------
    @contextmanager
    def profile(self, weights_memory: int = 0) -> Iterator[ProfileResult]:
        """The profile window: run the largest forward pass in it (after loading the model, before the plan).

        ``weights_memory`` is what the engine knows its weights take, a lower bound of what it consumed.
        """
        weights = arguments.byte_count("weights_memory", weights_memory, error=EngineMemoryError)
        if weights > self.baseline.total:
            raise EngineMemoryError(
                f"weights_memory={weights} ({format_size(weights)}) is more than device {self.device}'s total "
                f"memory, {self.baseline.total} ({format_size(self.baseline.total)}): give the bytes the weights "
                "take on this device (its shard, where the model is split)"
            )
        with self._step("open the profile window"):
            if self.stored is not None:
                raise EngineMemoryError(
                    f"device {self.device}: the windows' figures were read from {self.stored.path}: plan() next"
                )
            if self.profile_result is not None and self.profile_result.error is None:
                raise EngineMemoryError(
                    f"device {self.device}: the profile window was already opened; profile once, then plan"
                )
            if self.kv_plan is not None:
                raise EngineMemoryError(
                    f"device {self.device}: the KV cache was already planned; profile before plan()"
                )
            with memory_profiling(self.baseline, weights, self.platform) as result:
                self.profile_result = result
                yield result

    def profile_forward(
        self, forward: Callable[[], object], *, weights_memory: int = 0, passes: int = PROFILE_PASSES
    ) -> ProfileResult:
        """The profile window around ``forward()`` (the largest forward pass), run ``passes`` times (default 2):
        torch's caching allocator reserves more on the second pass of the same work than on the first, and
        serving runs it many times."""
        if not callable(forward):
            raise EngineMemoryError(
                f"forward must be a callable running the largest forward pass, got {shown(forward)}"
            )
        count = arguments.count("passes", passes, error=EngineMemoryError)
        with self.profile(weights_memory) as result:
            for _ in range(count):
                _ran(forward())
        return result

    @contextmanager
    def graphs(self, *, captured_again_after_cache: bool = False) -> Iterator[ProfileResult]:
        """The graph window: capture the engine's device graphs in it, after the profile window and before the plan.

        The plan is charged what capture kept (the graphs' pool), and the larger of the two windows' transients.
        ``captured_again_after_cache``: the engine measures its graphs here and frees them, to capture them for
        good once the KV cache exists (vLLM 0.24): then all the window reached (its transient peak and what it
        kept) is graph memory beside the cache, charged on top of the profile's transient, and the plan's
        ``graph_bytes`` may raise it to the engine's own estimate.
        """
        with self._step("open the graph window"):
            after_cache = arguments.flag(
                "captured_again_after_cache", captured_again_after_cache, error=EngineMemoryError
            )
            profile = self._profiled("open the graph window")
            if self.graphs_result is not None and self.graphs_result.error is None:
                raise EngineMemoryError(
                    f"device {self.device}: the graph window was already opened; capture every graph in one window"
                )
            if self.kv_plan is not None:
                raise EngineMemoryError(
                    f"device {self.device}: the KV cache was already planned; capture graphs before plan()"
                )
            self._graphs_after_cache = after_cache
            with memory_profiling(self.baseline, profile.weights_memory, self.platform) as result:
                self.graphs_result = result
                yield result

    def _profiled(self, step: str) -> ProfileResult:
        """The profile window's result, which must have run to its end."""
        if self.profile_result is None and self.stored is not None:
            raise EngineMemoryError(
                f"device {self.device}: cannot {step}: the windows' figures were read from {self.stored.path} "
                "(load_profile), which replaces the windows: plan() next"
            )
        if self.profile_result is None:
            raise EngineMemoryError(
                f"device {self.device}: cannot {step} before the profile window: run the largest forward pass "
                "inside `with memory.profile(weights_memory=...)` first"
            )
        self._finished("profile", self.profile_result, step)
        return self.profile_result

    def _finished(self, name: str, window: ProfileResult, step: str) -> None:
        if window.error is not None:
            raise EngineMemoryError(
                f"device {self.device}: cannot {step}: the {name} window ended with an exception ({window.error}), "
                f"so its figures describe work that did not finish; fix the failure and open the {name} window again"
            )

    def _usable(self, step: str) -> None:
        """Refuse ``step`` on a closed object, in a forked child, or while another step is under way."""
        if self.closed:
            raise EngineMemoryError(
                f"device {self.device}: cannot {step}: this EngineMemory was closed (its reservation released); "
                "create a new one"
            )
        if os.getpid() != self._pid:
            raise EngineMemoryError(
                f"device {self.device}: cannot {step} in process {os.getpid()}: this EngineMemory was created by "
                f"process {self._pid}, of which this is a forked child (its baseline and reservation are the "
                "parent's); create the EngineMemory in the process that runs the engine"
            )
        if self._busy is not None:
            raise EngineMemoryError(
                f"device {self.device}: cannot {step} while {self._busy} is under way (in this thread or "
                "another): the steps run one at a time, in order"
            )

    @contextmanager
    def _step(self, step: str) -> Iterator[None]:
        """Claim the object for ``step`` (checked and claimed under one lock, so two threads cannot both take it)."""
        with self._lock:
            self._usable(step)
            self._busy = step.replace("open the ", "the ")
        try:
            yield
        finally:
            self._busy = None

    # ---- a cache devmem cannot see into ---------------------------------------------------------------------
    def profile_blocks(
        self, run: Callable[[int], BlockRun | int], num_blocks: int, *, weights_memory: int = 0
    ) -> BlockRun:
        """The profile window around ``run(num_blocks)``, for an engine that builds its own cache: its first
        block run (:meth:`measure_block_cost` starts from it). ``run(n)`` builds the engine with ``n`` blocks,
        runs its worst-case forward, takes it down again and returns the bytes its tensors held (an ``int``; the
        window measures the allocator's peaks) or a :class:`~devmem.engine.block_cost.BlockRun` it measured."""
        if not callable(run):
            raise EngineMemoryError(f"run must be a callable taking a block count, got {shown(run)}")
        blocks = arguments.count("num_blocks", num_blocks, error=EngineMemoryError)
        with self.profile(weights_memory) as window:
            result = run(blocks)
        _release_run_leftovers(self.device, self.platform)
        try:
            self.first_run = _block_run(blocks, result, window)
        except DevmemError as exc:  # a run that gave nothing usable failed its window: it may be opened again
            window.error = f"{type(exc).__name__}: {exc}"
            raise
        return self.first_run

    def measure_block_cost(
        self,
        run: Callable[[int], BlockRun | int],
        sizes: Sequence[int] = (),
        *,
        store: ProfileStore | None = None,
        key: Mapping[str, Any] | None = None,
        granularity: int = 1,
        layout: KvLayout | None = None,
    ) -> BlockCost:
        """What one block costs an engine whose cache devmem cannot see into (it allocates the cache and its
        per-block tensors itself): ``run(n)`` builds the cache with ``n`` blocks, runs the engine's worst-case
        forward and returns a :class:`~devmem.engine.block_cost.BlockRun`, or the bytes its tensors held (an
        ``int``: each such run is then measured in a window of its own, and what it leaves behind released).
        It runs at ``sizes`` (ascending; after :meth:`profile_blocks`' run where there was one, at least two in
        all), then towards the blocks the share holds until the growth is linear
        (:func:`~devmem.engine.block_cost.measure_block_cost`; runs it places are whole multiples of
        ``granularity``). After the profile window; :meth:`plan` then charges every block what it measured, and
        the rest of the first run's peak as headroom, allocated as ``layout`` says (its default for
        :meth:`plan`).

        With a ``store`` and a ``key`` (everything that changes the cost: the model, the engine's config, the
        device, the versions), a cost measured before under that key is read back instead of run, and a new one is
        kept with the windows' figures (:meth:`save_profile`); :meth:`explain` says where the figures came from.
        """
        if not callable(run):
            raise EngineMemoryError(f"run must be a callable taking a block count, got {shown(run)}")
        if (store is None) != (key is None) or (store is not None and not isinstance(store, ProfileStore)):
            raise EngineMemoryError(f"store and key go together: a ProfileStore and a mapping, got {shown(store)}")
        quantum = arguments.count("granularity", granularity, error=EngineMemoryError)
        if layout is not None and not isinstance(layout, KvLayout):
            raise EngineMemoryError(f"layout must be a KvLayout, got {shown(layout)} of type {type(layout).__name__}")
        with self._step("measure a block's cost"):
            profile = self._profiled("measure a block's cost")
            if self.kv_plan is not None:
                raise EngineMemoryError(
                    f"device {self.device}: the KV cache was already planned; measure before plan()"
                )
            if self.block_cost is not None:
                raise EngineMemoryError(
                    f"device {self.device}: a block's cost was already measured ({self.block_cost_source}); "
                    "measure once, then plan"
                )
            self._cost_layout = layout
            check = _stored_check(self.baseline.total)
            stored = None if store is None or key is None else store.load(BLOCK_COST_KIND, key, check)
            if stored is not None:  # one key, one profile: its windows too, where whole
                cost = _stored_cost(stored)
                whole = _stored_start(stored)
                if whole is None:
                    self.block_cost, self.block_cost_source = cost, f"stored profile {stored.path}"
                else:
                    self._adopt(stored, cost, whole[1], f"stored profile {stored.path}")
                return cost

            def measured(blocks: int) -> BlockRun:
                return self._run_window(run, blocks, profile.weights_memory)

            made = () if self.first_run is None else (self.first_run,)
            self.block_cost = measure_block_cost(measured, sizes, self.blocks_that_fit, made=made, granularity=quantum)
            self.block_cost_source = "measured now"
        if store is not None and key is not None:
            self.save_profile(store, key)
        return self.block_cost

    def _run_window(self, run: Callable[[int], BlockRun | int], blocks: int, weights: int) -> BlockRun:
        """``run(blocks)``, measured in a window of its own where it reports only what it held."""
        with memory_profiling(self.baseline, weights, self.platform) as window:
            result = run(blocks)
        _release_run_leftovers(self.device, self.platform)
        return _block_run(blocks, result, window)

    def blocks_that_fit(self, cost: BlockCost) -> int:
        """The blocks :meth:`plan` would give with a block of ``cost`` (0 where none fits): how the runs of
        :meth:`measure_block_cost` are steered, by the plan's own arithmetic."""
        if not isinstance(cost, BlockCost):
            raise EngineMemoryError(f"cost must be a BlockCost, got {shown(cost)} of type {type(cost).__name__}")
        try:
            return self._sized(None, None, self._cost_layout, cost).num_blocks
        except NotEnoughMemoryError:
            return 0

    # ---- figures kept across starts ---------------------------------------------------------------------------
    def load_profile(
        self,
        store: ProfileStore,
        key: Mapping[str, Any],
        *,
        kind: str = BLOCK_COST_KIND,
        accept: Callable[[Mapping[str, Any]], bool] | None = None,
    ) -> Mapping[str, Any] | None:
        """Before the profile window: where ``store`` holds a whole start measured under ``key`` (the windows'
        figures and the block cost, :meth:`save_profile`), take them instead of running the engine, so that
        :meth:`plan` follows at once; returns what the engine kept beside them (``extra``). ``None`` where
        nothing usable is stored: run the windows then. The figures are checked (shape, types, ranges, what this
        device can hold); ``accept``, where given, checks the engine's ``extra`` (``False``, or a ``ValueError``
        saying why, refuses it). A stored profile that fails is named in one warning and set aside
        (:mod:`devmem.engine.profile_store`)."""
        if not isinstance(store, ProfileStore) or not isinstance(key, Mapping):
            raise EngineMemoryError(f"store and key must be a ProfileStore and a mapping, got {shown(store)}")
        _check_accept(accept)
        with self._step("read a stored profile"):
            if self.stored is not None:
                raise EngineMemoryError(
                    f"device {self.device}: the windows' figures were already read from {self.stored.path}: plan() next"
                )
            if self.profile_result is not None or self.block_cost is not None or self.kv_plan is not None:
                raise EngineMemoryError(
                    f"device {self.device}: a stored profile replaces the windows: load it before profiling"
                )
            stored = store.load(kind, key, _stored_check(self.baseline.total, accept))
            read = None if stored is None else _stored_start(stored)
            if stored is None or read is None:
                return None
            cost, figures, extra = read
            self._adopt(stored, cost, figures, f"stored profile {stored.path} (measured {time.ctime(stored.created)})")
            return extra

    def save_profile(
        self,
        store: ProfileStore,
        key: Mapping[str, Any],
        extra: Mapping[str, Any] | None = None,
        *,
        kind: str = BLOCK_COST_KIND,
        accept: Callable[[Mapping[str, Any]], bool] | None = None,
    ) -> Mapping[str, Any]:
        """Keep this start's figures (the windows' and the block cost) under ``key``, with the engine's own
        ``extra`` (JSON), for :meth:`load_profile` at the next start. Where another engine of this key stored
        first, its figures are taken instead (one key, one cost), and its ``extra`` is returned; else ``extra``."""
        if not isinstance(store, ProfileStore) or not isinstance(key, Mapping):
            raise EngineMemoryError(f"store and key must be a ProfileStore and a mapping, got {shown(store)}")
        _check_accept(accept)
        if extra is not None and not isinstance(extra, Mapping):
            raise EngineMemoryError(
                f"extra must be a mapping of what the engine keeps beside the figures (JSON) or None, got "
                f"{shown(extra)} of type {type(extra).__name__}"
            )
        with self._step("keep the profile"):
            return self._save_profile(store, key, extra, kind, accept)

    def _save_profile(
        self,
        store: ProfileStore,
        key: Mapping[str, Any],
        extra: Mapping[str, Any] | None,
        kind: str,
        accept: Callable[[Mapping[str, Any]], bool] | None,
    ) -> Mapping[str, Any]:
        if self.block_cost is None:
            raise EngineMemoryError(f"device {self.device}: nothing to keep yet: measure_block_cost() first")
        cost, ours = self.block_cost, dict(extra or {})
        figures = {
            "block_bytes": cost.block_bytes,
            "linear": cost.linear,
            "runs": [vars(r) for r in cost.runs],
            "notes": list(cost.notes),
            "windows": self.window_figures(),
            "first_in_window": self._first_in_window,
            "expandable_segments": self._expandable_segments(),
            "extra": ours,
        }
        kept, mine = store.save_first(kind, key, figures, time.time(), _stored_check(self.baseline.total, accept))
        if kept is None:
            return ours
        own = self._kept is not None and (kept.path, kept.created) == (self._kept.path, self._kept.created)
        if own:  # this object's own profile, stored before (measure_block_cost's store): kept again with this extra
            store.save(kind, key, figures, kept.created)
            return ours
        if not mine:  # another engine of this key stored first: one key, one profile (as a restart reads)
            first, whole = _stored_cost(kept), _stored_start(kept)  # its extra describes its cost
            source = f"{self.block_cost_source}; another engine of this key stored its profile first ({kept.path})"
            if whole is None:  # it holds a block cost only: its cost, beside our own windows
                self.block_cost, self.block_cost_source = first, f"{source}: used its cost"
                return ours
            self._adopt(kept, first, whole[1], f"{source}: used that")
            return whole[2]
        self._kept = kept
        self.block_cost_source = f"{self.block_cost_source}, stored in {kept.path}"
        return ours

    def _adopt(self, stored: StoredProfile, cost: BlockCost, figures: dict[str, Any], source: str) -> None:
        self.stored, self.block_cost, self._stored_figures = stored, cost, figures
        self.block_cost_source = source

    def window_figures(self) -> dict[str, Any]:
        """The windows' figures the plan is made of (the profile window's, with the graph window's where one
        ran, or a stored profile's): ``plan_kv_cache``'s inputs before a block's cost is charged."""
        if self._stored_figures is not None:  # a stored profile, read at start or stored first by a twin
            figures = dict(self._stored_figures)
        else:
            figures = dict(self._profiled("plan").plan_inputs())
            if self.graphs_result is not None:
                self._finished("graph", self.graphs_result, "plan")
                graphs = self.graphs_result.plan_inputs()
                kept = max(0, graphs["consumed"] - figures["consumed"])
                if self._graphs_after_cache:  # the window's whole reach is memory beside the cache
                    figures["graph_capture"] = max(kept + self.graphs_result.transient_reach_bytes, self._graph_bytes)
                else:
                    figures["graph_capture"] = kept
                    figures["transient_peak_bytes"] = max(
                        figures["transient_peak_bytes"], graphs["transient_peak_bytes"]
                    )
                figures["other_processes"] = graphs["other_processes"]
                figures["released_cache"] += graphs["released_cache"]
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
        graph_bytes: int = 0,
    ) -> KvCachePlan:
        """Size the KV cache for blocks of ``page_size_bytes`` on each of ``num_layers`` layers, allocated as
        ``layout`` says (:meth:`KvLayout.one_allocation`, :meth:`allocate`'s, by default). After
        :meth:`measure_block_cost`, both may be left out: a block is what it measured (one allocation per block
        count, the engine's), and the rest of the first run's peak is the transient headroom. ``graph_bytes``:
        the engine's own estimate of the graphs it captures after the cache (``graphs(captured_again_after_cache=
        True)``), charged where it is larger than what that window measured.

        At the utilization the profile window (and the graph window, where one was opened) is required; a
        pinned cache is checked against the total beside what the profile measured, where it ran. A block's
        bytes are ``page_size_bytes * num_layers``: the place where a black-box cache's measured per-block cost,
        or a stored profile, enters the plan.
        """
        with self._step("plan"):
            graph_bytes = arguments.byte_count("graph_bytes", graph_bytes, error=EngineMemoryError)
            if graph_bytes and not self._graphs_after_cache:
                raise EngineMemoryError(
                    f"graph_bytes={graph_bytes} is the estimate of graphs captured after the cache: open "
                    "`memory.graphs(captured_again_after_cache=True)` first"
                )
            self._graph_bytes = graph_bytes
            return self._plan(page_size_bytes, num_layers, layout)

    def _plan(self, page_size_bytes: int | None, num_layers: int | None, layout: KvLayout | None) -> KvCachePlan:
        if self.kv_plan is not None:
            raise EngineMemoryError(f"device {self.device}: the KV cache was already planned; plan once")
        layout = (self._cost_layout or KvLayout.one_allocation()) if layout is None else layout
        if not isinstance(layout, KvLayout):
            raise EngineMemoryError(f"layout must be a KvLayout, got {shown(layout)} of type {type(layout).__name__}")
        if self.block_cost is not None and page_size_bytes is None and num_layers is None:
            page_size_bytes, num_layers = self.block_cost.block_bytes, 1
        elif page_size_bytes is None or num_layers is None:
            raise EngineMemoryError(
                f"device {self.device}: plan() needs page_size_bytes and num_layers (or a measure_block_cost() first)"
            )
        layers = arguments.count("num_layers", num_layers, error=EngineMemoryError)
        self.kv_plan = self._sized(page_size_bytes, layers, layout, self.block_cost)
        self.layout, self.num_layers = layout, layers
        return self.kv_plan

    def _sized(
        self, page_size_bytes: int | None, layers: int | None, layout: KvLayout | None, cost: BlockCost | None
    ) -> KvCachePlan:
        """The plan for pages of ``page_size_bytes`` on ``layers`` layers (a block of ``cost`` where not given),
        from the windows' figures: the one formula of how many blocks fit."""
        if page_size_bytes is None or layers is None:
            assert cost is not None
            page_size_bytes, layers = cost.block_bytes, 1
        layout = KvLayout.one_allocation() if layout is None else layout
        figures: dict[str, Any] = {}
        if self.pinned_bytes is None or self.profile_result is not None or self._stored_figures is not None:
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
        plan = plan_kv_cache(
            total=self.baseline.total,
            utilization=self.utilization,
            pinned_bytes=self.pinned_bytes,
            page_size_bytes=page_size_bytes,
            num_layers=layers,
            allocations=allocations,
            **rounding,
            **figures,
        )
        return replace(plan, device=self.device)

    def _transient_beside_blocks(self, cost: BlockCost, window_transient: int) -> int:
        """The headroom beside a plan that charges every block ``cost.block_bytes``: the rest of the first run's
        peak. Where the profile window was that run (:meth:`profile_blocks`), its transient held the run's blocks
        too, and they are counted per block."""
        if self._first_in_window:
            return cost.fixed_bytes(max(window_transient, cost.runs[0].peak))
        return max(window_transient, cost.fixed_bytes(cost.runs[0].peak))

    @property
    def _first_in_window(self) -> bool:
        if self.stored is not None:
            return bool(self.stored.figures.get("first_in_window", False))
        return self.first_run is not None

    def _expandable_segments(self) -> bool:
        """Whether a window (or the stored profile's) found torch's allocator mapping memory in expandable
        segments."""
        if self.stored is not None:
            return bool(self.stored.figures.get("expandable_segments", False))
        return any(w is not None and w.expandable_segments for w in (self.profile_result, self.graphs_result))

    def allocate(self, plan: KvCachePlan | None = None) -> KvCacheTensors:
        """Release the allocator's cache, then allocate the planned cache as one zeroed allocation with a view
        per layer (:func:`devmem.engine.allocate_kv_cache`) on this engine's device. ``plan``, where given, must be the
        one :meth:`plan` returned."""
        if plan is not None and not isinstance(plan, KvCachePlan):
            raise EngineMemoryError(
                f"plan must be the KvCachePlan this EngineMemory's plan() returned, or None, got {shown(plan)} of "
                f"type {type(plan).__name__}"
            )
        with self._step("allocate the KV cache"):
            return self._allocate(plan)

    def _allocate(self, plan: KvCachePlan | None) -> KvCacheTensors:
        if plan is not None and plan != self.kv_plan:
            where = "another device's" if plan.device not in (None, self.device) else "not this engine's"
            raise EngineMemoryError(
                f"device {self.device}: the plan given is {where} (made for device {plan.device}); allocate the "
                "plan this EngineMemory made"
            )
        if self.kv_plan is None or self.num_layers is None:
            raise EngineMemoryError(
                f"device {self.device}: nothing to allocate yet: call plan(page_size_bytes=..., num_layers=...) first"
            )
        if self.cache is not None:
            raise EngineMemoryError(f"device {self.device}: the KV cache was already allocated")
        if self.layout is not None and self.layout.by_engine:
            raise EngineMemoryError(
                f"device {self.device}: the plan assumed the engine allocates its own tensors ({self.layout}); "
                "allocate them yourself after release_allocator_cache(), or plan with KvLayout.one_allocation()"
            )
        self.released_bytes = self.release_allocator_cache()
        self.cache = allocate_kv_cache(self.kv_plan, self.num_layers, self.device, self.platform)
        return self.cache

    def release_allocator_cache(self) -> int:
        """Give torch's cached, unused blocks back (right before an engine allocates its own cache tensors)."""
        return _release(self.device, self.platform)

    def close(self) -> None:
        """Release the reservation (the cache itself is the engine's to drop); every step after it is refused
        (:meth:`explain` and :meth:`as_dict` still answer). Idempotent."""
        self.closed = True
        if self.reservation is not None:
            self.reservation.release()

    def __enter__(self) -> EngineMemory:
        if self.closed:
            raise EngineMemoryError(
                f"device {self.device}: this EngineMemory was closed (its reservation released); create a new one "
                "for another `with` block"
            )
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ---- for people and for logs ---------------------------------------------------------------------------
    def explain(self) -> str:
        """Lines for people: the start, each window, the plan with its layout, and the allocation."""
        b = self.baseline
        lines = [
            f"device {self.device} on {self.platform.name}: at start {format_size(b.free)} free of "
            f"{format_size(b.total)}"
            + (
                f"; pinned cache {format_size(self.pinned_bytes)}"
                if self.pinned_bytes is not None
                else f"; requested {format_size(self.requested)} (utilization {format_share(self.utilization)})"
            )
        ]
        if self.reservation is not None:
            lines.append(
                f"reserved {format_size(self.reservation.bytes)} on the host's ledger ({self.reservation.path})"
            )
        for name, window in (("profile", self.profile_result), ("graphs", self.graphs_result)):
            if window is None or not window.complete:
                continue
            lines.append(
                f"{name} window: consumed {format_size(window.total_consumed)} since start, transient "
                f"{format_size(window.transient_peak_bytes)} ({window.transient_rule})"
                + (
                    f", {format_size(window.kept_after_peak_bytes)} kept after its peak"
                    if window.kept_after_peak_bytes
                    else ""
                )
            )
        if self.block_cost is not None:
            lines.append(f"block cost: {self.block_cost.explain()} ({self.block_cost_source})")
        if self.kv_plan is not None:
            lines.append(self.kv_plan.explain())
            if self.layout is not None and not self.layout.by_engine:
                lines.append("allocated by devmem: one allocation with a view per layer (EngineMemory.allocate)")
        if self.cache is not None:
            lines.append(
                f"allocated {format_size(self.cache.nbytes)} after releasing {format_size(self.released_bytes or 0)} "
                "of cached allocator blocks"
            )
        return "\n".join(lines)

    def as_dict(self) -> dict[str, object]:
        """Every figure, in bytes, for JSON."""
        return {
            "device": self.device,
            "platform": self.platform.name,
            "total": self.baseline.total,
            "free_at_start": self.baseline.free,
            "utilization": self.utilization,
            "pinned_bytes": self.pinned_bytes,
            "requested": self.requested,
            "reserved_bytes": None if self.reservation is None else self.reservation.bytes,
            "profile": None if self.profile_result is None else self.profile_result.as_dict(),
            "graphs": None if self.graphs_result is None else self.graphs_result.as_dict(),
            "graph_capture_bytes": None if self.kv_plan is None else self.kv_plan.breakdown.get("graph_capture"),
            "plan": None if self.kv_plan is None else self.kv_plan.as_dict(),
            "allocated_bytes": None if self.cache is None else self.cache.nbytes,
            "released_bytes": self.released_bytes,
        }


def _adopted_baseline(baseline: object, reading: DeviceReading, platform: Platform) -> MemorySnapshot:
    """A baseline the engine took earlier (before the device context), checked against a reading of this engine's
    device to be of this device and platform."""
    if not isinstance(baseline, MemorySnapshot):
        raise EngineMemoryError(
            f"baseline must be a MemorySnapshot (MemorySnapshot.measure() before the model exists) or None, got "
            f"{shown(baseline)} of type {type(baseline).__name__}"
        )
    device = reading.index
    if baseline.device != device:
        raise EngineMemoryError(
            f"device={device} but the baseline was taken on device {baseline.device}: give the device the baseline "
            "measured, or measure the baseline on this device"
        )
    if baseline.platform not in (None, platform.name):
        raise EngineMemoryError(
            f"the baseline was read by the {baseline.platform!r} platform, this EngineMemory measures with "
            f"{platform.name!r}: take the baseline with the platform that profiles"
        )
    if baseline.total != reading.info.total:
        raise EngineMemoryError(
            f"the baseline's device total is {baseline.total} bytes but {platform.name!r} device {device} has "
            f"{reading.info.total}: the baseline was taken on another platform or device; measure it with the "
            "platform that profiles"
        )
    return baseline.read_by(platform)


def _block_run(blocks: int, result: object, window: ProfileResult) -> BlockRun:
    """A run's :class:`BlockRun`: the engine's own, or its held bytes with the peaks its window measured above
    what was allocated when the window opened (``None`` where the allocator keeps no statistics)."""
    if isinstance(result, BlockRun):
        if result.num_blocks != blocks:
            raise EngineMemoryError(
                f"run({blocks}) returned a BlockRun of {result.num_blocks} blocks: it must run the cache at the "
                "block count it is given"
            )
        return result
    if isinstance(result, bool) or not isinstance(result, numbers.Integral):
        raise EngineMemoryError(
            f"run({blocks}) must return the bytes its tensors held (an int) or a BlockRun, got {shown(result)} "
            f"of type {type(result).__name__}"
        )
    before, after = window.before_profile, window.after_profile
    if not window.torch_measured or before is None or after is None:
        return BlockRun(blocks, int(result))
    kept = after.torch_reserved - before.torch_reserved
    return BlockRun(blocks, int(result), window.torch_peak_increase, max(0, window.transient_peak_bytes + kept))


def _check_accept(accept: object) -> None:
    if accept is not None and not callable(accept):
        raise EngineMemoryError(
            f"accept must be a callable checking the engine's extra (True to take it) or None, got {shown(accept)} "
            f"of type {type(accept).__name__}"
        )


def _ran(returned: object) -> None:
    """Refuse what a forward returns when it is work not yet run (a coroutine, a generator): the window would
    measure nothing of it."""
    if inspect.iscoroutine(returned) or inspect.isgenerator(returned) or inspect.isasyncgen(returned):
        close = getattr(returned, "close", None)
        if callable(close):
            close()  # no "never awaited" warning beside the error
        raise EngineMemoryError(
            f"forward returned {type(returned).__name__} {shown(returned)}, work that has not run: profile_forward "
            "calls a synchronous forward; run an async or generator forward to its end inside "
            "`with memory.profile(weights_memory=...)`"
        )


def _release_run_leftovers(device: int, platform: Platform) -> None:
    """What a finished run of the engine leaves behind on the device: the BLAS workspaces of its compute stream
    (the engine's next stream gets its own) and the allocator's cached blocks."""
    module, _ = initialised_module(platform)
    if module is None:
        return
    import torch

    where = torch_device_for(platform, device)
    module.synchronize(where)
    clear = getattr(torch._C, f"_{where.type}_clearCublasWorkspaces", None)
    if clear is not None:
        clear()
    _release(device, platform)


#: The least a stored block may cost: a block holds the keys and values of at least one token on every layer, and
#: one head of 64 fp16 dimensions alone is 256 bytes of them per token and layer. A stored cost below it was not
#: measured (a block cost of 1 byte would plan millions of blocks).
MIN_STORED_BLOCK_BYTES = 256

#: The windows' figures a stored start holds, and whether each may be unknown (``None``).
_WINDOW_FIGURES = {
    "consumed": False,
    "weights": False,
    "transient_peak_bytes": False,
    "non_torch": False,
    "other_processes": True,
    "released_cache": False,
}

#: The fields of a stored :class:`BlockRun` and whether each may be unknown (``None``).
_RUN_FIGURES = {"num_blocks": False, "held_bytes": False, "peak_bytes": True, "reserved_peak_bytes": True}


def _stored_check(
    total: int, accept: Callable[[Mapping[str, Any]], bool] | None = None
) -> Callable[[dict[str, Any]], str | None]:
    """The check :meth:`ProfileStore.load` applies to the figures an :class:`EngineMemory` on a device of
    ``total`` bytes stored: their shape, types and ranges, and what such a device can hold; ``accept`` the
    engine's ``extra`` (beside a whole start)."""

    def check(figures: dict[str, Any]) -> str | None:
        problem = _cost_problem(figures, total)
        if problem is None and figures.get("windows") is not None:
            problem = _windows_problem(figures, total)
            if problem is None and accept is not None:
                try:
                    if not accept(figures.get("extra", {})):
                        problem = "the engine cannot read what it kept beside the figures (extra)"
                except ValueError as exc:  # the engine's accept saying why
                    problem = str(exc)
        return problem

    return check


def _cost_problem(figures: dict[str, Any], total: int) -> str | None:
    """Why ``figures`` hold no block cost a device of ``total`` bytes could have measured (``None``: they do)."""
    from devmem.engine.block_cost import growth_per_block
    from devmem.engine.profile_store import whole_figure

    runs = figures.get("runs")
    if not isinstance(runs, list) or len(runs) < 2 or not all(isinstance(r, dict) for r in runs):
        return f"runs is {shown(runs)}, not a list of at least two runs"
    for i, r in enumerate(runs):
        if set(r) - set(_RUN_FIGURES) or "num_blocks" not in r or "held_bytes" not in r:
            return f"runs[{i}] has the fields {sorted(r)}, not {list(_RUN_FIGURES)}"
        for name, may_be_none in _RUN_FIGURES.items():
            value = r.get(name)
            if not (value is None and may_be_none):
                problem = whole_figure(f"runs[{i}].{name}", value, low=int(name == "num_blocks"), high=total)
                if problem:
                    return f"{problem} (a run on a device of {total} bytes)"
    counts = [r["num_blocks"] for r in runs]
    if any(b <= a for a, b in zip(counts, counts[1:], strict=False)):
        return f"the runs' block counts {counts} do not ascend"
    problem = whole_figure("block_bytes", figures.get("block_bytes"), low=MIN_STORED_BLOCK_BYTES, high=total)
    if problem:
        return f"{problem} (a block on a device of {total} bytes)"
    block = figures["block_bytes"]
    if counts[-1] > total // block:
        return f"its largest run holds {counts[-1]} blocks of {block} bytes, more than the device's {total} bytes hold"
    measured = growth_per_block(BlockRun(**runs[-2]), BlockRun(**runs[-1]))
    if block < measured:
        return f"block_bytes is {block}, below the {measured} bytes its own last two runs grew by per block"
    if type(figures.get("linear")) is not bool:
        return f"linear is {shown(figures.get('linear'))}, not true or false"
    notes = figures.get("notes", [])
    if not isinstance(notes, list) or not all(isinstance(n, str) for n in notes):
        return f"notes is {shown(notes)}, not a list of text"
    return None


def _windows_problem(figures: dict[str, Any], total: int) -> str | None:
    """Why the windows' figures of a whole stored start are not ones a device of ``total`` bytes measured."""
    from devmem.engine.profile_store import whole_figure

    windows, extra = figures["windows"], figures.get("extra", {})
    if not isinstance(windows, dict) or not isinstance(extra, dict):
        return "its windows' figures or extra are not mappings"
    missing = [name for name in _WINDOW_FIGURES if name not in windows]
    if missing:  # one that may be unknown is stored as null, never left out
        return f"its windows' figures lack {', '.join(missing)}"
    for name, may_be_none in {**_WINDOW_FIGURES, "graph_capture": False}.items():
        value = windows.get(name, 0 if name == "graph_capture" else None)
        if not (value is None and may_be_none):
            problem = whole_figure(f"windows.{name}", value, high=total)
            if problem:
                return f"{problem} (bytes of a device of {total} bytes)"
    if windows["consumed"] < windows["weights"] or windows["consumed"] < windows["non_torch"]:
        return (
            f"windows.consumed is {windows['consumed']}, below the weights ({windows['weights']}) or the memory "
            f"outside torch ({windows['non_torch']}) it holds"
        )
    if windows.get("allocator", "caching") not in (None, "caching", "expandable"):
        return f"windows.allocator is {shown(windows['allocator'])}, not null, 'caching' or 'expandable'"
    for flag in ("first_in_window", "expandable_segments"):
        if type(figures.get(flag, False)) is not bool:
            return f"{flag} is {shown(figures[flag])}, not true or false"
    return None


def _stored_cost(stored: StoredProfile) -> BlockCost:
    """The block cost a stored profile holds (its figures passed :func:`_stored_check`)."""
    figures = stored.figures
    runs = tuple(BlockRun(**r) for r in figures["runs"])
    return BlockCost(figures["block_bytes"], runs, figures["linear"], tuple(figures.get("notes", ())))


def _stored_start(stored: StoredProfile) -> tuple[BlockCost, dict[str, Any], dict[str, Any]] | None:
    """(block cost, the windows' figures, the engine's extra) of a whole start stored by
    :meth:`EngineMemory.save_profile` (its figures passed :func:`_stored_check`), or ``None`` where it holds a
    block cost only."""
    windows = stored.figures.get("windows")
    if windows is None:
        return None
    figures = {name: windows[name] for name in _WINDOW_FIGURES}
    if "graph_capture" in windows:
        figures["graph_capture"] = windows["graph_capture"]
    figures["allocator"] = windows.get("allocator", "caching")  # what the window saw
    return _stored_cost(stored), figures, stored.figures.get("extra", {})


__all__ = [
    "BLOCK_COST_KIND",
    "EXPANDABLE_SEGMENT_GRANULARITY",
    "PROFILE_PASSES",
    "EngineMemory",
    "EngineMemoryError",
    "KvLayout",
]
