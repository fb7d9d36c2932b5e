"""devmem: how much device memory an inference engine may give its KV cache, on every kind of machine.

``import devmem`` imports neither torch nor any vendor library, and the sizing, model, profiling and distributed
helpers only on first use; resolving a platform imports a vendor library only where its driver is loaded.
"""

from typing import TYPE_CHECKING

from devmem import old_paths
from devmem.errors import (
    DevmemError,
    InvalidTypeError,
    InvalidValueError,
    LibraryUnavailable,
    ModelConfigError,
    NotEnoughMemoryError,
    PluginError,
    SizingError,
    UnknownArchitectureError,
)
from devmem.platform import (
    DeviceMemory,
    DeviceReading,
    DeviceReport,
    Platform,
    PlatformBase,
    ProcessMemory,
    Reason,
    ReasonKind,
    device_report,
    prepare_device,
    read_device,
)
from devmem.resolution.plugins import Candidate, clear_cache, current_platform, platform_candidates
from devmem.sdk.hookspecs import hookimpl
from devmem.sdk.lazy import lazy_exports
from devmem.types import Detection, GiB, MemoryInfo, MiB, PlatformSpec

old_paths.install()  # modules that moved into subpackages keep their old import paths

if TYPE_CHECKING:  # the lazy names below, for type checkers
    from devmem.adapter import as_platform
    from devmem.engine.distributed import agree_on_minimum
    from devmem.engine.kvcache import ALLOCATOR_GRANULARITY, KvCacheTensors, allocate_kv_cache
    from devmem.engine.memory import EngineMemory, EngineMemoryError, KvLayout
    from devmem.engine.profiling import (
        MemorySnapshot,
        ProfileResult,
        check_startup_memory,
        memory_profiling,
        release_allocator_cache,
    )
    from devmem.engine.reservations import LedgerError, Reservation, ReservationRefused, reserve
    from devmem.planner.models import ModelMemory, load_model
    from devmem.planner.sizing import (
        KvCachePlan,
        PlanInputs,
        blocks_for_bytes,
        growable_kv_cache_bytes,
        plan_growable,
        plan_kv_cache,
        plan_pinned,
        plan_utilization,
        profiled_kv_cache_bytes,
        requested_memory,
    )
    from devmem.units import format_size, parse_size

#: Public names imported on first use (PEP 562), so ``import devmem`` stays cheap.
_LAZY = {
    "agree_on_minimum": "devmem.engine.distributed",
    "EngineMemory": "devmem.engine.memory",
    "EngineMemoryError": "devmem.engine.memory",
    "KvLayout": "devmem.engine.memory",
    "as_platform": "devmem.adapter",
    "MemorySnapshot": "devmem.engine.profiling",
    "ProfileResult": "devmem.engine.profiling",
    "check_startup_memory": "devmem.engine.profiling",
    "memory_profiling": "devmem.engine.profiling",
    "release_allocator_cache": "devmem.engine.profiling",
    "ALLOCATOR_GRANULARITY": "devmem.engine.kvcache",
    "KvCacheTensors": "devmem.engine.kvcache",
    "allocate_kv_cache": "devmem.engine.kvcache",
    "ModelMemory": "devmem.planner.models",
    "load_model": "devmem.planner.models",
    "LedgerError": "devmem.engine.reservations",
    "Reservation": "devmem.engine.reservations",
    "ReservationRefused": "devmem.engine.reservations",
    "reserve": "devmem.engine.reservations",
    "KvCachePlan": "devmem.planner.sizing",
    "PlanInputs": "devmem.planner.sizing",
    "blocks_for_bytes": "devmem.planner.sizing",
    "growable_kv_cache_bytes": "devmem.planner.sizing",
    "plan_growable": "devmem.planner.sizing",
    "plan_kv_cache": "devmem.planner.sizing",
    "plan_pinned": "devmem.planner.sizing",
    "plan_utilization": "devmem.planner.sizing",
    "profiled_kv_cache_bytes": "devmem.planner.sizing",
    "requested_memory": "devmem.planner.sizing",
    "format_size": "devmem.units",
    "parse_size": "devmem.units",
}


__getattr__, __dir__ = lazy_exports(globals(), _LAZY)


__version__ = "0.1.0"

__all__ = [
    "ALLOCATOR_GRANULARITY",
    "Candidate",
    "Detection",
    "DeviceMemory",
    "DeviceReading",
    "DeviceReport",
    "DevmemError",
    "EngineMemory",
    "EngineMemoryError",
    "GiB",
    "InvalidTypeError",
    "InvalidValueError",
    "KvCachePlan",
    "KvCacheTensors",
    "KvLayout",
    "LedgerError",
    "LibraryUnavailable",
    "MemoryInfo",
    "MemorySnapshot",
    "MiB",
    "ModelConfigError",
    "ModelMemory",
    "NotEnoughMemoryError",
    "PlanInputs",
    "Platform",
    "PlatformBase",
    "PlatformSpec",
    "PluginError",
    "ProcessMemory",
    "ProfileResult",
    "Reason",
    "ReasonKind",
    "Reservation",
    "ReservationRefused",
    "SizingError",
    "UnknownArchitectureError",
    "__version__",
    "agree_on_minimum",
    "allocate_kv_cache",
    "as_platform",
    "blocks_for_bytes",
    "check_startup_memory",
    "clear_cache",
    "current_platform",
    "device_report",
    "format_size",
    "growable_kv_cache_bytes",
    "hookimpl",
    "load_model",
    "memory_profiling",
    "parse_size",
    "plan_growable",
    "plan_kv_cache",
    "plan_pinned",
    "plan_utilization",
    "platform_candidates",
    "prepare_device",
    "profiled_kv_cache_bytes",
    "read_device",
    "release_allocator_cache",
    "requested_memory",
    "reserve",
]
