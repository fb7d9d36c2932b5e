""":class:`devmem.EngineMemory`'s mode for an engine whose cache devmem cannot see into (it allocates the cache and its
per-block tensors itself): the runs of the engine at growing block counts, each measured in a window of its own, the
block cost found from them (:mod:`devmem.engine.block_cost`), and the whole start kept under a key
(:class:`~devmem.engine.profile_store.StoredStart`) so that a restart plans at once (docs/sizing.md, "Engines that
size their own cache"). ``EngineMemory.profile_blocks``, ``measure_block_cost``, ``blocks_that_fit``,
``load_profile`` and ``save_profile`` are these functions.
"""

from __future__ import annotations

import numbers
import time
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from devmem._text import shown
from devmem.engine import _door
from devmem.engine._torch_device import _device_of, initialised_module
from devmem.engine.block_cost import MAX_RUNS, BlockCost, BlockRun, _measure, checked_sizes
from devmem.engine.layout import KvLayout
from devmem.engine.phases import Phase
from devmem.engine.profile_store import BLOCK_COST_KIND, ProfileStore, StoredProfile, StoredStart
from devmem.engine.profiling import ProfileResult, _release, _window
from devmem.errors import DevmemError, NotEnoughMemoryError
from devmem.platform import Platform

if TYPE_CHECKING:
    from devmem.engine.memory import EngineMemory

Accept = Callable[[Mapping[str, Any]], bool]


def profile_blocks(
    memory: EngineMemory, run: Callable[[int], BlockRun | int], num_blocks: int, *, weights_memory: int = 0
) -> BlockRun:
    """The profile window around ``run(num_blocks)``, for an engine that builds its own cache: its first block run
    (:func:`measure_block_cost` starts from it). ``run(n)`` builds the engine with ``n`` blocks, runs its
    worst-case forward, takes it down again and returns the bytes its tensors held (an ``int``; the window measures
    the allocator's peaks) or a :class:`~devmem.engine.block_cost.BlockRun` it measured. A run that returns nothing
    usable fails the window, as one that raised does: it may be opened again."""
    _door.callable_("run", run, "a callable taking a block count")
    blocks = _door.count("num_blocks", num_blocks)
    weights = memory._weights(weights_memory)
    with memory._step("profile_blocks"):
        with memory._profile_window(weights) as window:
            result = run(blocks)
        _release_run_leftovers(memory.device, memory.platform)
        try:
            memory.first_run = _block_run(blocks, result, window)
        except DevmemError as exc:
            window.error = f"{type(exc).__name__}: {exc}"
            raise
    return memory.first_run


def measure_block_cost(
    memory: EngineMemory,
    run: Callable[[int], BlockRun | int],
    sizes: Sequence[int] = (),
    *,
    store: ProfileStore | None = None,
    key: Mapping[str, Any] | None = None,
    granularity: int = 1,
    layout: KvLayout | None = None,
) -> BlockCost:
    """What one block costs: ``run(n)`` builds the cache with ``n`` blocks, runs the engine's worst-case forward and
    returns a :class:`~devmem.engine.block_cost.BlockRun`, or the bytes its tensors held (an ``int``: each such run
    is then measured in a window of its own, and what it leaves behind released). It runs at ``sizes``
    (ascending; after :func:`profile_blocks`' run where there was one, at least two in all), then towards the
    blocks the share holds until the growth is linear (:func:`devmem.engine.block_cost.measure_block_cost`; runs
    it places are whole multiples of ``granularity``). After the profile window; the plan then charges every block
    what it measured, and the rest of the first run's peak as headroom, allocated as ``layout`` says (its default
    for the plan).

    With a ``store`` and a ``key`` (everything that changes the cost: the model, the engine's config, the device,
    the versions), a cost measured before under that key is read back instead of run, and a new one is kept with
    the windows' figures (:func:`save_profile`); ``explain()`` says where the figures came from.
    """
    _door.callable_("run", run, "a callable taking a block count")
    if (store is None) != (key is None) or not isinstance(store, (ProfileStore, type(None))):
        raise _door.refused(
            "store", store, f"store and key go together: a ProfileStore and a mapping, got {shown(store)}"
        )
    _door.instance("key", key, Mapping, "a mapping", optional=True)
    quantum = _door.count("granularity", granularity)
    _door.instance("layout", layout, KvLayout, "a KvLayout", optional=True)
    made = () if memory.first_run is None else (memory.first_run,)
    checked = _door.checked("sizes", sizes, lambda: checked_sizes(sizes, made))
    if len(made) + len(checked) > MAX_RUNS:
        raise _door.refused("sizes", sizes, f"sizes asks for more runs than the {MAX_RUNS} measure_block_cost makes")
    with memory._step("measure_block_cost"):
        memory._cost_layout = layout
        stored = (
            None if store is None else store.load(BLOCK_COST_KIND, key or {}, StoredStart.check(memory.baseline.total))
        )
        if stored is not None:  # one key, one profile: its windows too, where whole
            record = StoredStart.read(stored)
            if record.windows is None:
                memory.block_cost, memory.block_cost_source = record.cost, f"stored profile {stored.path}"
            else:
                _adopt(memory, stored, record, f"stored profile {stored.path}")
            return record.cost
        weights = memory.profile_result.weights_memory if memory.profile_result is not None else 0

        def measured(blocks: int) -> BlockRun:
            with _window(memory.baseline, weights, memory.platform, memory.device) as window:
                result = run(blocks)
            _release_run_leftovers(memory.device, memory.platform)
            return _block_run(blocks, result, window)

        cost = _measure(measured, checked, memory.blocks_that_fit, made, MAX_RUNS, quantum)
        memory.block_cost, memory.block_cost_source = cost, "measured now"
    if store is not None and key is not None:
        save_profile(memory, store, key)
    return memory.block_cost


def blocks_that_fit(memory: EngineMemory, cost: BlockCost) -> int:
    """The blocks the plan would give with a block of ``cost`` (0 where none fits): how the runs of
    :func:`measure_block_cost` are steered, by the plan's own arithmetic."""
    _door.instance("cost", cost, BlockCost, "a BlockCost")
    try:
        return memory._sized(None, None, memory._cost_layout, cost).num_blocks
    except NotEnoughMemoryError:
        return 0


def load_profile(
    memory: EngineMemory,
    store: ProfileStore,
    key: Mapping[str, Any],
    *,
    kind: str = BLOCK_COST_KIND,
    accept: Accept | None = None,
) -> Mapping[str, Any] | None:
    """Before the profile window: where ``store`` holds a whole start measured under ``key`` (the windows' figures
    and the block cost, :func:`save_profile`), take them instead of running the engine, so that the plan follows at
    once; returns what the engine kept beside them (``extra``). ``None`` where nothing usable is stored: run the
    windows then. The figures are checked (:meth:`StoredStart.check
    <devmem.engine.profile_store.StoredStart.check>`); ``accept``, where given, checks the engine's ``extra``
    (``False``, or a ``ValueError`` saying why, refuses it). A stored profile that fails is named in one warning
    and set aside (:mod:`devmem.engine.profile_store`)."""
    _checked_store(store, key)
    _door.callable_("accept", accept, "a callable checking the engine's extra (True to take it) or None", optional=True)
    with memory._step("load_profile") as following:
        stored = store.load(kind, key, StoredStart.check(memory.baseline.total, accept))
        record = None if stored is None else StoredStart.read(stored)
        if stored is None or record is None or record.windows is None:
            following.phase = Phase.CREATED  # nothing to plan from: the windows run
            return None
        _adopt(memory, stored, record, f"stored profile {stored.path} (measured {time.ctime(stored.created)})")
        return record.extra


def save_profile(
    memory: EngineMemory,
    store: ProfileStore,
    key: Mapping[str, Any],
    extra: Mapping[str, Any] | None = None,
    *,
    kind: str = BLOCK_COST_KIND,
    accept: Accept | None = None,
) -> Mapping[str, Any]:
    """Keep this start's figures (the windows' and the block cost) under ``key``, with the engine's own ``extra``
    (JSON), for :func:`load_profile` at the next start. Where another engine of this key stored first, its figures
    are taken instead (one key, one cost), and its ``extra`` is returned; else ``extra``."""
    _checked_store(store, key)
    _door.callable_("accept", accept, "a callable checking the engine's extra (True to take it) or None", optional=True)
    what = "a mapping of what the engine keeps beside the figures (JSON) or None"
    _door.instance("extra", extra, Mapping, what, optional=True)
    with memory._step("save_profile"):
        assert memory.block_cost is not None  # the phases that allow it measured or read one
        ours = dict(extra or {})
        record = StoredStart(
            memory.block_cost, memory.window_figures(), memory._first_in_window, memory._expandable_segments(), ours
        )
        figures = record.figures()
        kept, mine = store.save_first(kind, key, figures, time.time(), StoredStart.check(memory.baseline.total, accept))
        if kept is None:
            return ours
        if memory._kept is not None and (kept.path, kept.created) == (memory._kept.path, memory._kept.created):
            store.save(kind, key, figures, kept.created)  # its own profile, stored before: kept again with extra
            return ours
        if not mine:  # another engine of this key stored first: one key, one profile (as a restart reads)
            theirs = StoredStart.read(kept)  # its extra describes its cost
            source = f"{memory.block_cost_source}; another engine of this key stored its profile first ({kept.path})"
            if theirs.windows is None:  # it holds a block cost only: its cost, beside our own windows
                memory.block_cost, memory.block_cost_source = theirs.cost, f"{source}: used its cost"
                return ours
            _adopt(memory, kept, theirs, f"{source}: used that")
            return theirs.extra
        memory._kept = kept
        memory.block_cost_source = f"{memory.block_cost_source}, stored in {kept.path}"
        return ours


def _checked_store(store: object, key: object) -> None:
    if not isinstance(store, ProfileStore) or not isinstance(key, Mapping):
        raise _door.refused(
            "store" if not isinstance(store, ProfileStore) else "key",
            store if not isinstance(store, ProfileStore) else key,
            f"store and key must be a ProfileStore and a mapping, got {shown(store)}",
        )


def _adopt(memory: EngineMemory, stored: StoredProfile, record: StoredStart, source: str) -> None:
    """Plan from ``record``, a whole start read from ``stored``: its windows' figures replace the windows."""
    memory.stored, memory._record, memory.block_cost = stored, record, record.cost
    memory.block_cost_source = source


def _block_run(blocks: int, result: object, window: ProfileResult) -> BlockRun:
    """A run's :class:`BlockRun`: the engine's own, or its held bytes with the peaks its window measured above
    what was allocated when the window opened (``None`` where the allocator keeps no statistics)."""
    if isinstance(result, BlockRun):
        if result.num_blocks != blocks:
            raise _door.refused(
                "run",
                result,
                f"run({blocks}) returned a BlockRun of {result.num_blocks} blocks: it must run the cache at the "
                "block count it is given",
            )
        return result
    if isinstance(result, bool) or not isinstance(result, numbers.Integral):
        raise _door.refused(
            "run",
            result,
            f"run({blocks}) must return the bytes its tensors held (an int) or a BlockRun, got {shown(result)} "
            f"of type {type(result).__name__}",
        )
    before, after = window.before_profile, window.after_profile
    if not window.torch_measured or before is None or after is None:
        return BlockRun(blocks, int(result))
    kept = after.torch_reserved - before.torch_reserved
    return BlockRun(blocks, int(result), window.torch_peak_increase, max(0, window.transient_peak_bytes + kept))


def _release_run_leftovers(device: int, platform: Platform) -> None:
    """What a finished run of the engine leaves behind on the device: the BLAS workspaces of its compute stream
    (the engine's next stream gets its own) and the allocator's cached blocks (garbage was collected as its
    window closed)."""
    module, _ = initialised_module(platform)
    if module is None:
        return
    import torch

    where = _device_of(platform, device)
    module.synchronize(where)
    clear = getattr(torch._C, f"_{where.type}_clearCublasWorkspaces", None)
    if clear is not None:
        clear()
    _release(device, platform, collect=False)


__all__ = ["blocks_that_fit", "load_profile", "measure_block_cost", "profile_blocks", "save_profile"]
