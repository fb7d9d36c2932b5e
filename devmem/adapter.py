"""Minimal backends: a platform written to the six-member protocol devmem started from, made a full platform.

A backend may implement only ``name``, ``device_count()``, ``device_memory_info(d)``,
``get_process_memory_usage(d)``, ``is_integrated_gpu(d)`` and ``pages_instead_of_failing(d)``
(:data:`MINIMAL_CONTRACT`). :func:`as_platform` wraps such an object in :class:`MinimalPlatform`, which fills the
rest of :class:`devmem.Platform` with honest defaults: the figures are the backend's own, ``sources`` say they
were "reported by <backend>", a missing per-process figure carries a reason saying the backend gives none, no
process has a role, and ``torch_device``/``dist_backend`` are the backend's where it declares them (``None``
otherwise). Resolution and the conformance kit adapt a minimal backend this way; :class:`devmem.PlatformBase`
stays the full-featured path.
"""

from __future__ import annotations

from typing import Any

from devmem.platform import DeviceMemory, Platform, PlatformBase, ProcessMemory, ReasonKind
from devmem.types import MemoryInfo, PluginError

#: The members a minimal backend implements.
MINIMAL_CONTRACT = (
    "name",
    "device_count",
    "device_memory_info",
    "get_process_memory_usage",
    "is_integrated_gpu",
    "pages_instead_of_failing",
)


class MinimalPlatform(PlatformBase):
    """A full :class:`devmem.Platform` over ``backend``, an object with the members of :data:`MINIMAL_CONTRACT`.

    Each index is checked (against the backend's ``device_count()``) before the backend is asked, so a bad index
    is a :class:`~devmem.DevmemError` naming the valid range whatever the backend does with it.
    """

    def __init__(self, backend: Any):
        self.backend = backend
        self.name = str(backend.name)
        self.torch_device = getattr(backend, "torch_device", None)
        self.dist_backend = getattr(backend, "dist_backend", None)
        self._source = f"reported by {self.name} ({type(backend).__module__}.{type(backend).__qualname__})"

    def __repr__(self) -> str:
        return f"MinimalPlatform({self.backend!r})"

    def device_count(self) -> int:
        return self.backend.device_count()

    def _memory(self, device: int) -> DeviceMemory:
        free, total = self.backend.device_memory_info(device)
        return DeviceMemory(MemoryInfo(free, total), {"free": self._source, "total": self._source})

    def _process_memory(self, device: int) -> ProcessMemory:
        used = self.backend.get_process_memory_usage(device)
        if used is None:
            return ProcessMemory.unknown(
                ReasonKind.NOT_ATTRIBUTED,
                f"{self.name} gives no figure for this process and no reason (a minimal backend: "
                "get_process_memory_usage returned None)",
            )
        return ProcessMemory(used)

    def _is_integrated(self, device: int) -> bool:
        return self.backend.is_integrated_gpu(device)

    def _pages_instead_of_failing(self, device: int) -> bool:
        return self.backend.pages_instead_of_failing(device)


def missing_members(backend: object) -> list[str]:
    """The members of :data:`MINIMAL_CONTRACT` that ``backend`` lacks (``[]`` for a usable backend)."""
    return [m for m in MINIMAL_CONTRACT if not hasattr(backend, m)]


def as_platform(backend: Any) -> Platform:
    """``backend`` itself where it is a full :class:`devmem.Platform`, else a :class:`MinimalPlatform` over it.

    Raises :class:`~devmem.PluginError` naming what it lacks where it has not even the six minimal members.
    """
    if isinstance(backend, Platform):
        return backend
    missing = missing_members(backend)
    if missing:
        raise PluginError(
            f"{backend!r} lacks {', '.join(missing)}: a devmem backend implements at least "
            f"{', '.join(MINIMAL_CONTRACT)} (or subclasses devmem.PlatformBase, which has every member)"
        )
    return MinimalPlatform(backend)


__all__ = ["MINIMAL_CONTRACT", "MinimalPlatform", "as_platform", "missing_members"]
