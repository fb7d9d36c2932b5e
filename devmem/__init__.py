"""devmem: how much device memory an inference engine may give its KV cache, on every kind of machine.

``import devmem`` imports neither torch nor any vendor library, and the sizing, model, profiling and distributed
helpers only on first use; resolving a platform imports a vendor library only where its driver is loaded.
"""

from typing import TYPE_CHECKING

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
from devmem.hookspecs import hookimpl
from devmem.lazy import lazy_exports
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
from devmem.plugins import Candidate, clear_cache, current_platform, platform_candidates
from devmem.types import Detection, GiB, MemoryInfo, MiB, PlatformSpec

if TYPE_CHECKING:  # the lazy names below, for type checkers
    from devmem.adapter import as_platform
    from devmem.distributed import agree_on_minimum
    from devmem.engine_memory import EngineMemory, EngineMemoryError, KvLayout
    from devmem.kvcache import ALLOCATOR_GRANULARITY, KvCacheTensors, allocate_kv_cache
    from devmem.models import ModelMemory, load_model
    from devmem.profiling import (
        MemorySnapshot,
        ProfileResult,
        check_startup_memory,
        memory_profiling,
        release_allocator_cache,
    )
    from devmem.reservations import LedgerError, Reservation, ReservationRefused, reserve
    from devmem.sizing import (
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
    "agree_on_minimum": "devmem.distributed",
    "EngineMemory": "devmem.engine_memory",
    "EngineMemoryError": "devmem.engine_memory",
    "KvLayout": "devmem.engine_memory",
    "as_platform": "devmem.adapter",
    "MemorySnapshot": "devmem.profiling",
    "ProfileResult": "devmem.profiling",
    "check_startup_memory": "devmem.profiling",
    "memory_profiling": "devmem.profiling",
    "release_allocator_cache": "devmem.profiling",
    "ALLOCATOR_GRANULARITY": "devmem.kvcache",
    "KvCacheTensors": "devmem.kvcache",
    "allocate_kv_cache": "devmem.kvcache",
    "ModelMemory": "devmem.models",
    "load_model": "devmem.models",
    "LedgerError": "devmem.reservations",
    "Reservation": "devmem.reservations",
    "ReservationRefused": "devmem.reservations",
    "reserve": "devmem.reservations",
    "KvCachePlan": "devmem.sizing",
    "PlanInputs": "devmem.sizing",
    "blocks_for_bytes": "devmem.sizing",
    "growable_kv_cache_bytes": "devmem.sizing",
    "plan_growable": "devmem.sizing",
    "plan_kv_cache": "devmem.sizing",
    "plan_pinned": "devmem.sizing",
    "plan_utilization": "devmem.sizing",
    "profiled_kv_cache_bytes": "devmem.sizing",
    "requested_memory": "devmem.sizing",
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
