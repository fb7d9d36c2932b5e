"""Things that load on first use, so importing a package or registering a platform stays cheap.

- :func:`~devmem.sdk.lazy_exports`: module attributes imported on first access (PEP 562), and
  :func:`~devmem.sdk.load_object` (both the core's :mod:`devmem._lazy`'s, lent to backends by :mod:`devmem.sdk`).
- :func:`deferred`: a callable that imports ``"module:attr"`` on its first call (a ``PlatformSpec.factory``).
- :func:`gated_detect`: a ``PlatformSpec.detect`` that answers from a cheap check (driver files) and imports the
  backend's real probe only where that check passes.
- :class:`DriverGate`: what a vendor's platforms share at registration (that cheap check, the reason given where
  it fails, the runtime markers); ``gate.spec(...)`` declares one platform behind it in one call.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from devmem._lazy import load_object
from devmem.records import Record
from devmem.types import Detection, PlatformSpec


def deferred(target: str) -> Callable[[], Any]:
    """A callable that imports ``target`` (``"module:attr"``) when called and returns ``attr()``."""

    def call() -> Any:
        return load_object(target)()

    call.__qualname__ = call.__name__ = f"deferred({target!r})"
    return call


def gated_detect(present: Callable[[], bool], absent: str, target: str) -> Callable[[], Detection]:
    """A detect that is ``Detection(False, absent)`` while ``present()`` is false (a cheap check such as "is the
    driver loaded"), and otherwise what the probe ``target`` (``"module:attr"``, imported only then) returns."""

    def detect() -> Detection:
        if not present():
            return Detection(False, absent)
        return load_object(target)()

    detect.__qualname__ = detect.__name__ = f"gated_detect({target!r})"
    return detect


class DriverGate(Record):
    """A vendor's cheap check that its driver may be here (``present``, reading files only), the reason a platform
    behind it gives where the check fails (``absent``), and the ``runtime_markers`` its platforms share."""

    present: Callable[[], bool]
    absent: str
    runtime_markers: tuple[str, ...] = ()

    def spec(self, name: str, priority: int, detect: str, factory: str, description: str) -> PlatformSpec:
        """The platform ``name`` behind this gate: its probe ``detect`` (``"module:attr"``) is imported only where
        the check passes (:func:`gated_detect`), its ``factory`` only when it is chosen (:func:`deferred`)."""
        return PlatformSpec(
            name=name,
            priority=priority,
            detect=gated_detect(self.present, self.absent, detect),
            factory=deferred(factory),
            description=description,
            runtime_markers=self.runtime_markers,
        )
