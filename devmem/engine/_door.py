"""The checks at :class:`devmem.EngineMemory`'s door: each argument checked once, when it enters, by the validator of
its kind (:mod:`devmem.arguments`), and refused as an :class:`~devmem.errors.EngineArgumentError` carrying the
argument's name and the value given. What is behind the door trusts what passed it."""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, TypeVar

from devmem import arguments
from devmem._adapter import MinimalPlatform
from devmem._bounded import BoundedPlatform
from devmem._text import shown
from devmem.errors import ArgumentError, EngineArgumentError
from devmem.platform import DeviceReading, Platform
from devmem.resolution.plugins import platform_argument
from devmem.units import format_size

if TYPE_CHECKING:
    from devmem.engine.profiling import MemorySnapshot

T = TypeVar("T")


def checked(name: str, value: object, validate: Callable[[], T]) -> T:
    """What ``validate()`` makes of the argument ``name`` given as ``value``, its refusal an
    :class:`~devmem.errors.EngineArgumentError` carrying both."""
    try:
        return validate()
    except ArgumentError as exc:
        raise EngineArgumentError(str(exc), argument=name, value=value) from None


def refused(name: str, value: object, message: str) -> EngineArgumentError:
    """The refusal of the argument ``name`` given as ``value``, said by ``message``."""
    return EngineArgumentError(message, argument=name, value=value)


def byte_count(name: str, value: object, *, positive: bool = False) -> int:
    return checked(name, value, lambda: arguments.byte_count(name, value, positive=positive))


def count(name: str, value: object) -> int:
    return checked(name, value, lambda: arguments.count(name, value))


def flag(name: str, value: object) -> bool:
    return checked(name, value, lambda: arguments.flag(name, value))


def utilization(value: object) -> Any:
    return checked("utilization", value, lambda: arguments.utilization(value))


def device(value: object) -> int:
    return checked("device", value, lambda: arguments.device_index(value))


def platform(value: object) -> Platform:
    """The platform argument resolved, every reading of it given ``DEVMEM_READ_TIMEOUT`` seconds
    (:class:`~devmem._bounded.BoundedPlatform`; a minimal backend's calls are bounded already)."""
    resolved = checked("platform", value, lambda: platform_argument(value))
    if isinstance(resolved, (BoundedPlatform, MinimalPlatform)):
        return resolved
    return BoundedPlatform(resolved)


def instance(name: str, value: object, kind: type | tuple[type, ...], what: str, *, optional: bool = False) -> Any:
    """``value`` where it is a ``kind`` (or ``None``, where ``optional``), else refused saying ``what`` it must be."""
    if (optional and value is None) or isinstance(value, kind):
        return value
    raise refused(name, value, f"{name} must be {what}, got {shown(value)} of type {type(value).__name__}")


def callable_(name: str, value: object, what: str, *, optional: bool = False) -> Any:
    """``value`` where it can be called (or is ``None``, where ``optional``), else refused saying ``what`` it is."""
    if (optional and value is None) or callable(value):
        return value
    raise refused(name, value, f"{name} must be {what}, got {shown(value)} of type {type(value).__name__}")


def within_total(name: str, value: int, total: int, device: int, hint: str = "give at most the total") -> int:
    """``value`` (bytes, checked) where it is no more than device ``device``'s ``total``, else refused."""
    if value > total:
        raise refused(
            name,
            value,
            f"{name}={value} ({format_size(value)}) is more than device {device}'s total memory, {total} "
            f"({format_size(total)}): {hint}",
        )
    return value


def adopted_baseline(baseline: MemorySnapshot, reading: DeviceReading, platform: Platform) -> MemorySnapshot:
    """A baseline the engine took earlier (before the device context), checked against a reading of this engine's
    device to be of this device and platform."""
    device = reading.index
    if baseline.device != device:
        why = f"device={device} but the baseline was taken on device {baseline.device}: give the device the baseline "
        raise refused("baseline", baseline, why + "measured, or measure the baseline on this device")
    if baseline.platform not in (None, platform.name):
        raise refused(
            "baseline",
            baseline,
            f"the baseline was read by the {baseline.platform!r} platform, this "
            f"EngineMemory measures with {platform.name!r}: take the baseline with the platform that "
            "profiles",
        )
    if baseline.total != reading.info.total:
        raise refused(
            "baseline",
            baseline,
            f"the baseline's device total is {baseline.total} bytes but "
            f"{platform.name!r} device {device} has {reading.info.total}: the baseline was taken on "
            "another platform or device; measure it with the platform that profiles",
        )
    return baseline.read_by(platform)


def ran(returned: object) -> None:
    """Refuse what a forward returns when it is work not yet run (a coroutine, a generator): the window would
    measure nothing of it."""
    if inspect.iscoroutine(returned) or inspect.isgenerator(returned) or inspect.isasyncgen(returned):
        close = getattr(returned, "close", None)
        if callable(close):
            close()  # no "never awaited" warning beside the error
        raise refused(
            "forward",
            returned,
            f"forward returned {type(returned).__name__} {shown(returned)}, "
            "work that has not run: profile_forward calls a synchronous forward; run an async or "
            "generator forward to its end inside `with memory.profile(weights_memory=...)`",
        )
