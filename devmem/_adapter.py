"""Minimal backends: a platform written to the six-member protocol devmem started from, made a full platform.

A backend may implement only ``name``, ``device_count()``, ``device_memory_info(d)``,
``get_process_memory_usage(d)``, ``is_integrated_gpu(d)`` and ``pages_instead_of_failing(d)``
(:data:`MINIMAL_CONTRACT`). :func:`as_platform` wraps such an object in :class:`MinimalPlatform`, which fills the
rest of :class:`devmem.Platform` with honest defaults: the figures are the backend's own, ``sources`` say they
were "reported by <backend>", a missing per-process figure carries a reason saying the backend gives none, no
process has a role, and ``torch_device``/``dist_backend`` are the backend's where it declares them (``None``
otherwise). Resolution and the conformance kit adapt a minimal backend this way; :class:`devmem.PlatformBase`
stays the full-featured path.

What the backend answers is checked here, once, by the rules of :mod:`devmem._readings` (the boundary every
full backend's figures pass): ``device_count()`` a whole number from 0 to :data:`MAX_DEVICES`; free and total
whole numbers of bytes (an ``int`` or a numpy integer, a float with no fraction; never a ``bool``, text or
``None``), a negative total an error, a negative free taken as 0 and a free above total as the total, each with a
note; the process figure a whole number of bytes or ``None`` (anything else is unknown, with a reason naming the
value); the two flags real ``bool`` values (a flag ``"no"`` is not taken as true). A value that breaks a rule is a
:class:`~devmem.DevmemError` naming the backend, the call and the value. Each call is given ``DEVMEM_READ_TIMEOUT``
seconds on the backend's one reused thread (:class:`devmem._deadline.Backend`), as every reading the command and
:class:`devmem.EngineMemory` make is: one that never returns is an error naming it, never a hang.
"""

from __future__ import annotations

from typing import Any

from devmem import arguments
from devmem._deadline import Backend
from devmem._readings import process_bytes
from devmem._text import described, shown
from devmem.platform import DeviceMemory, Platform, PlatformBase, ProcessMemory, ReasonKind, checked_memory
from devmem.types import DevmemError, PluginError

#: The most devices a backend may count: more than one PCI domain addresses (a count above it is no count).
MAX_DEVICES = 1 << 16

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
        where = f"{type(backend).__module__}.{type(backend).__qualname__}"
        name = backend.name
        if not isinstance(name, str) or not name.strip():
            raise PluginError(f"the minimal backend {where} has the name {shown(name)}: a name must be non-empty text")
        self.name = name
        for member in ("torch_device", "dist_backend"):
            value = getattr(backend, member, None)
            if value is not None and not isinstance(value, str):
                raise PluginError(f"{name} ({where}): {member} is {shown(value)}, not text or None")
            setattr(self, member, value)
        self._where = f"{name} ({where})"
        self._source = f"reported by {self._where}"
        self._calls = Backend(f"devmem-{name}"[:60])

    def __repr__(self) -> str:
        return f"MinimalPlatform({self.backend!r})"

    def _refused(self, call: str, value: object, rule: str) -> DevmemError:
        return DevmemError(
            f"the minimal backend {self._where}: {call} returned {shown(value)} of type {type(value).__name__}: "
            f"{rule}; fix the backend (devmem/_adapter.py says what each member answers)"
        )

    def _call(self, member: str, *args: int) -> Any:
        """``backend.member(*args)``, given ``DEVMEM_READ_TIMEOUT`` seconds to answer on the backend's one reused
        thread (:class:`devmem._deadline.Backend`: a call that never returns is a :class:`~devmem.DevmemError`
        naming it and the variable, wherever it was made, an engine's start included); what it raises (but a
        :class:`~devmem.DevmemError` or Ctrl-C) becomes a :class:`~devmem.DevmemError` naming the backend and the
        call: ``SystemExit``, ``GeneratorExit`` and other ``BaseException`` s too (a backend's reading does not end
        the process), and one whose text cannot be read."""
        call = f"{member}({', '.join(map(str, args))})"
        try:
            what = f"the minimal backend {self._where}: {call}"
            return self._calls(lambda: getattr(self.backend, member)(*args), what)
        except (DevmemError, KeyboardInterrupt):
            raise
        except BaseException as exc:
            raise DevmemError(f"the minimal backend {self._where}: {call} raised {described(exc)}") from exc

    def device_count(self) -> int:
        count = self._call("device_count")
        try:
            number = arguments.integer("device_count()", count, minimum=0, error=DevmemError)
        except DevmemError:
            number = -1
        if not 0 <= number <= MAX_DEVICES:
            raise self._refused("device_count()", count, f"the count of devices is a whole number 0..{MAX_DEVICES}")
        return number

    def _memory(self, device: int) -> DeviceMemory:
        call = f"device_memory_info({device})"
        pair = self._call("device_memory_info", device)
        if not isinstance(pair, (tuple, list)) or len(pair) != 2:
            raise self._refused(call, pair, "it answers a MemoryInfo or a (free, total) pair of bytes")
        try:
            return checked_memory(pair[0], pair[1], {"free": self._source, "total": self._source}, call)
        except DevmemError:
            raise self._refused(
                call, pair, "free and total are whole numbers of bytes (int), the total not below zero"
            ) from None

    def _notes(self, device: int) -> list[str]:  # the notes on its figures (a free above total, taken as it)
        return list(self._memory(device).notes)

    def _process_memory(self, device: int) -> ProcessMemory:
        used = self._call("get_process_memory_usage", device)
        if used is None:
            return ProcessMemory.unknown(
                ReasonKind.NOT_ATTRIBUTED,
                f"{self.name} gives no figure for this process and no reason (a minimal backend: "
                "get_process_memory_usage returned None)",
            )
        number = process_bytes(used)
        if number is None:
            return ProcessMemory.unknown(
                ReasonKind.QUERY_FAILED,
                f"{self._where}: get_process_memory_usage({device}) returned {shown(used)} of type "
                f"{type(used).__name__}, not a whole number of bytes or None",
            )
        return ProcessMemory(number)

    def _flag(self, call: str, value: object) -> bool:
        if type(value) is not bool:
            raise self._refused(call, value, "it answers True or False")
        return value

    def _is_integrated(self, device: int) -> bool:
        return self._flag(f"is_integrated_gpu({device})", self._call("is_integrated_gpu", device))

    def _pages_instead_of_failing(self, device: int) -> bool:
        return self._flag(f"pages_instead_of_failing({device})", self._call("pages_instead_of_failing", device))


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


__all__ = ["MAX_DEVICES", "MINIMAL_CONTRACT", "MinimalPlatform", "as_platform", "missing_members"]
