"""devmem: how much device memory an inference engine may give its KV cache, on every kind of machine.

The top level holds what engines, operators and vendors use: :class:`EngineMemory` (the one engine-side
lifecycle), the reservation ledger, :func:`current_platform` and :func:`device_report`, a model's memory
(:func:`load_model`), sizes, every error, and what registers a backend. The steps :class:`EngineMemory` takes
(snapshots, profile windows, the KV allocation) are in :mod:`devmem.engine`, the pure sizing arithmetic in
:mod:`devmem.planner`, and what a backend builds on in :mod:`devmem.sdk`.

``import devmem`` imports neither torch nor any vendor library, and the sizing, model, profiling and distributed
helpers only on first use; resolving a platform imports a vendor library only where its driver is loaded.
"""

import importlib
from typing import TYPE_CHECKING, Any

from devmem._hookspecs import hookimpl
from devmem._lazy import lazy_exports
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
from devmem.platform import DeviceReport, Platform, PlatformBase, device_report
from devmem.resolution.plugins import Candidate, clear_cache, current_platform, platform_candidates
from devmem.types import Detection, GiB, MemoryInfo, MiB, PlatformSpec

if TYPE_CHECKING:  # the lazy names below, for type checkers
    from devmem._adapter import as_platform
    from devmem.engine.distributed import agree_on_minimum
    from devmem.engine.memory import EngineMemory, EngineMemoryError, KvLayout
    from devmem.engine.reservations import LedgerError, Reservation, ReservationRefused, reserve
    from devmem.planner.models import ModelMemory, load_model
    from devmem.planner.sizing import KvCachePlan
    from devmem.units import format_size, parse_size

#: Public names imported on first use (PEP 562), so ``import devmem`` stays cheap.
_LAZY = {
    "agree_on_minimum": "devmem.engine.distributed",
    "EngineMemory": "devmem.engine.memory",
    "EngineMemoryError": "devmem.engine.memory",
    "KvLayout": "devmem.engine.memory",
    "as_platform": "devmem._adapter",
    "ModelMemory": "devmem.planner.models",
    "load_model": "devmem.planner.models",
    "LedgerError": "devmem.engine.reservations",
    "Reservation": "devmem.engine.reservations",
    "ReservationRefused": "devmem.engine.reservations",
    "reserve": "devmem.engine.reservations",
    "KvCachePlan": "devmem.planner.sizing",
    "format_size": "devmem.units",
    "parse_size": "devmem.units",
}

_public_getattr, __dir__ = lazy_exports(globals(), _LAZY)


#: The subpackages reachable as attributes of ``import devmem`` alone (``devmem.engine.MemorySnapshot``).
_SUBPACKAGES = ("engine", "planner", "sdk", "testing")


def __getattr__(name: str) -> Any:
    if name in _SUBPACKAGES:
        return importlib.import_module(f"devmem.{name}")
    return _public_getattr(name)


__version__ = "0.2.0"

__all__ = [
    "Candidate",
    "Detection",
    "DeviceReport",
    "DevmemError",
    "EngineMemory",
    "EngineMemoryError",
    "GiB",
    "InvalidTypeError",
    "InvalidValueError",
    "KvCachePlan",
    "KvLayout",
    "LedgerError",
    "LibraryUnavailable",
    "MemoryInfo",
    "MiB",
    "ModelConfigError",
    "ModelMemory",
    "NotEnoughMemoryError",
    "Platform",
    "PlatformBase",
    "PlatformSpec",
    "PluginError",
    "Reservation",
    "ReservationRefused",
    "SizingError",
    "UnknownArchitectureError",
    "__version__",
    "agree_on_minimum",
    "as_platform",
    "clear_cache",
    "current_platform",
    "device_report",
    "format_size",
    "hookimpl",
    "load_model",
    "parse_size",
    "platform_candidates",
    "reserve",
]
