"""The engine side: :class:`EngineMemory` (:mod:`.memory`), the one lifecycle an engine drives, and the steps it
takes, each usable alone by an engine with a lifecycle of its own.

- Before the context: :func:`prepare_device` (the one step that may do device work so later readings attribute
  memory to this process), :func:`read_device` (one coherent reading), :func:`prepare_and_read` (both, the index
  checked once), :class:`MemorySnapshot` (the baseline)
  and :func:`check_startup_memory` (fail at start when free memory is below the request).
- Graphs captured after the cache (:mod:`.graphs`): :class:`GraphsAfterCache` tells the plan of them,
  :class:`GraphCheck` is what their capture kept against the charge.
- Profiling (:mod:`.profiling`, :mod:`.segment_history`): :func:`memory_profiling`, a window that yields a
  :class:`ProfileResult`; a black-box cache's block cost (:mod:`.block_cost`, :func:`measure_block_cost`), and
  measured profiles kept on disk (:mod:`.profile_store`).
- The KV cache (:mod:`.kvcache`): :func:`release_allocator_cache` right before :func:`allocate_kv_cache`, which
  returns :class:`KvCacheTensors` rounded to :data:`ALLOCATOR_GRANULARITY`.
- Sharing: :func:`agree_on_minimum` (ranks agree, :mod:`.distributed`) and the host's per-device reservations
  (:mod:`.reservations`: :func:`reserve`, :class:`Reservation`, :class:`ReservationRefused`, :class:`LedgerError`).

The pure arithmetic that turns the figures into a plan is :mod:`devmem.planner`. Every name loads on first use.
"""

from typing import TYPE_CHECKING

from devmem._lazy import lazy_exports

if TYPE_CHECKING:  # the lazy names below, for type checkers
    from devmem.engine.block_cost import BlockCost, BlockRun, measure_block_cost
    from devmem.engine.distributed import agree_on_minimum
    from devmem.engine.graphs import GraphCheck, GraphsAfterCache
    from devmem.engine.kvcache import ALLOCATOR_GRANULARITY, KvCacheTensors, allocate_kv_cache
    from devmem.engine.layout import KvLayout
    from devmem.engine.memory import EngineMemory, EngineMemoryError
    from devmem.engine.phases import Phase
    from devmem.engine.profiling import (
        MemorySnapshot,
        ProfileResult,
        check_startup_memory,
        memory_profiling,
        release_allocator_cache,
    )
    from devmem.engine.reservations import LedgerError, Reservation, ReservationRefused, reserve
    from devmem.platform import prepare_and_read, prepare_device, read_device

_NAMES = {
    "EngineMemory": "devmem.engine.memory",
    "EngineMemoryError": "devmem.engine.memory",
    "KvLayout": "devmem.engine.layout",
    "Phase": "devmem.engine.phases",
    "GraphsAfterCache": "devmem.engine.graphs",
    "GraphCheck": "devmem.engine.graphs",
    "prepare_and_read": "devmem.platform",
    "prepare_device": "devmem.platform",
    "read_device": "devmem.platform",
    "MemorySnapshot": "devmem.engine.profiling",
    "ProfileResult": "devmem.engine.profiling",
    "check_startup_memory": "devmem.engine.profiling",
    "memory_profiling": "devmem.engine.profiling",
    "release_allocator_cache": "devmem.engine.profiling",
    "BlockCost": "devmem.engine.block_cost",
    "BlockRun": "devmem.engine.block_cost",
    "measure_block_cost": "devmem.engine.block_cost",
    "ALLOCATOR_GRANULARITY": "devmem.engine.kvcache",
    "KvCacheTensors": "devmem.engine.kvcache",
    "allocate_kv_cache": "devmem.engine.kvcache",
    "agree_on_minimum": "devmem.engine.distributed",
    "LedgerError": "devmem.engine.reservations",
    "Reservation": "devmem.engine.reservations",
    "ReservationRefused": "devmem.engine.reservations",
    "reserve": "devmem.engine.reservations",
}

__all__ = [
    "ALLOCATOR_GRANULARITY",
    "BlockCost",
    "BlockRun",
    "EngineMemory",
    "EngineMemoryError",
    "GraphCheck",
    "GraphsAfterCache",
    "KvCacheTensors",
    "KvLayout",
    "LedgerError",
    "MemorySnapshot",
    "Phase",
    "ProfileResult",
    "Reservation",
    "ReservationRefused",
    "agree_on_minimum",
    "allocate_kv_cache",
    "check_startup_memory",
    "measure_block_cost",
    "memory_profiling",
    "prepare_and_read",
    "prepare_device",
    "read_device",
    "release_allocator_cache",
    "reserve",
]

__getattr__, __dir__ = lazy_exports(globals(), _NAMES)
