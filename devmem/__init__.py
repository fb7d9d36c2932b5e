"""devmem: how much device memory an inference engine may give its KV cache, on every kind of machine.

``import devmem`` imports neither torch nor any vendor library; resolving a platform imports only the
vendor libraries that the registered backends probe.
"""

from devmem.hookspecs import hookimpl
from devmem.platform import DeviceReport, Platform, PlatformBase, describe
from devmem.plugins import Candidate, clear_cache, current_platform, platform_candidates
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

__version__ = "0.1.0"

__all__ = [
    "Candidate",
    "DeviceReport",
    "Detection",
    "DevmemError",
    "GiB",
    "MemoryInfo",
    "MiB",
    "NotEnoughMemoryError",
    "Platform",
    "PlatformBase",
    "PlatformSpec",
    "PluginError",
    "__version__",
    "clear_cache",
    "current_platform",
    "describe",
    "hookimpl",
    "platform_candidates",
]
