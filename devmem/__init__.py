"""devmem: how much device memory an inference engine may give its KV cache, on every kind of machine.

``import devmem`` imports neither torch nor any vendor library; resolving a platform imports only the
vendor libraries that the registered backends probe.
"""

from devmem.distributed import agree_on_minimum
from devmem.hookspecs import hookimpl
from devmem.platform import DeviceReport, Platform, PlatformBase, describe
from devmem.plugins import Candidate, clear_cache, current_platform, platform_candidates
from devmem.profiling import (
    MemorySnapshot,
    ProfileResult,
    check_startup_memory,
    memory_profiling,
    release_allocator_cache,
)
from devmem.sizing import (
    KvCachePlan,
    SizingError,
    blocks_for_bytes,
    measure_kv_cache_bytes,
    plan_kv_cache,
    profiled_kv_cache_bytes,
    requested_memory,
)
from devmem.types import (
    Detection,
    DevmemError,
    GiB,
    MemoryInfo,
    MiB,
    NotEnoughMemoryError,
    PlatformSpec,
    PluginError,
)
from devmem.units import format_size, parse_size

__version__ = "0.1.0"

__all__ = [
    "Candidate",
    "DeviceReport",
    "Detection",
    "DevmemError",
    "GiB",
    "KvCachePlan",
    "MemoryInfo",
    "MemorySnapshot",
    "MiB",
    "NotEnoughMemoryError",
    "Platform",
    "PlatformBase",
    "PlatformSpec",
    "PluginError",
    "ProfileResult",
    "SizingError",
    "__version__",
    "agree_on_minimum",
    "blocks_for_bytes",
    "check_startup_memory",
    "clear_cache",
    "current_platform",
    "describe",
    "format_size",
    "hookimpl",
    "measure_kv_cache_bytes",
    "memory_profiling",
    "parse_size",
    "plan_kv_cache",
    "platform_candidates",
    "profiled_kv_cache_bytes",
    "release_allocator_cache",
    "requested_memory",
]
