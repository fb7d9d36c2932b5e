"""Small value types shared by the core and every backend (the errors are :mod:`devmem.errors`'s, re-exported)."""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import NamedTuple

from devmem import arguments
from devmem.errors import DevmemError, InvalidTypeError, InvalidValueError, NotEnoughMemoryError, PluginError
from devmem.records import Record

KiB = 1 << 10
MiB = 1 << 20
GiB = 1 << 30

_NAME = re.compile(r"^[a-z][a-z0-9_\-]*$")


def gib(nbytes: int | float) -> str:
    """Bytes as a GiB figure for people: ``gib(3 * 2**30) == '3.00 GiB'``."""
    if abs(nbytes) >= 1 << 70:  # a float quotient would overflow or lose the figure
        from devmem.units import format_size

        return format_size(nbytes)
    return f"{nbytes / GiB:.2f} GiB"


class MemoryInfo(NamedTuple):
    """Free and total device memory in bytes, as the allocator's runtime counts them."""

    free: int
    total: int


class Detection(Record):
    """The outcome of a backend's cheap probe: whether its hardware is here, and why (not).

    ``action`` is what the user can do to make a platform that is not found usable, where the backend
    knows it: its driver is loaded but its Python library is missing, say ("pip install ..."). ``devmem
    plugins`` shows it beside the reason and ``devmem doctor`` reports it as a warning.
    """

    detected: bool
    reason: str
    action: str = ""

    def __post_init__(self) -> None:
        arguments.flag("Detection.detected", self.detected, error=InvalidTypeError)
        if not isinstance(self.reason, str) or not self.reason:
            raise InvalidTypeError(f"Detection.reason must be a non-empty string, got {self.reason!r}")
        if not isinstance(self.action, str):
            raise InvalidTypeError(f"Detection.action must be a string, got {self.action!r}")


class PlatformSpec(Record):
    """What a backend's ``devmem_platforms`` hook yields: a named, prioritised, lazily built platform.

    ``detect()`` must be cheap (no device context, no torch import); ``factory()`` runs only when
    this platform is chosen, and returns a :class:`~devmem.Platform` or a minimal backend (which devmem adapts with
    :func:`devmem.as_platform`). Higher ``priority`` wins among detected candidates. ``runtime_markers`` are
    what ``/proc/self/maps`` shows once the platform's device runtime is loaded or initialised (a library,
    a device node): the conformance kit checks that detection maps none of them.
    """

    name: str
    priority: int
    detect: Callable[[], Detection]
    factory: Callable[[], object]
    description: str = ""
    runtime_markers: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not _NAME.match(self.name):
            raise InvalidValueError(
                f"PlatformSpec.name {self.name!r} is not allowed: use lowercase letters, digits, '-' or '_', "
                "starting with a letter"
            )
        priority = arguments.integer("PlatformSpec.priority", self.priority, what="an int", error=InvalidTypeError)
        object.__setattr__(self, "priority", priority)
        if not callable(self.detect) or not callable(self.factory):
            raise InvalidTypeError(f"PlatformSpec {self.name!r}: detect and factory must be callables")
        if isinstance(self.runtime_markers, str) or not all(isinstance(m, str) and m for m in self.runtime_markers):
            raise InvalidTypeError(
                f"PlatformSpec {self.name!r}: runtime_markers must be a tuple of non-empty strings, "
                f"got {self.runtime_markers!r}"
            )
        object.__setattr__(self, "runtime_markers", tuple(self.runtime_markers))


__all__ = [
    "Detection",
    "DevmemError",
    "GiB",
    "KiB",
    "MemoryInfo",
    "MiB",
    "NotEnoughMemoryError",
    "PlatformSpec",
    "PluginError",
    "gib",
]
