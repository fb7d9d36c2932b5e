"""Every error devmem raises, in one place: each is a :class:`DevmemError`, and also a ``ValueError`` or
``TypeError`` where callers would catch that.

The modules that raise them re-export them (``devmem.types.DevmemError``, ``devmem.planner.sizing.SizingError``,
``devmem.planner.models.ModelConfigError``, ``devmem.sdk.sessions.LibraryUnavailable``, ...), so every older import
path keeps working; ``devmem`` exports them all.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence


class DevmemError(Exception):
    """Base of every error devmem raises."""


class InvalidValueError(DevmemError, ValueError):
    """A value given to devmem is outside what it accepts (a size string, a limit); the message names the value
    and what is allowed."""


class InvalidTypeError(DevmemError, TypeError):
    """A value given to devmem is of a type it does not accept (a field of a record, an argument)."""


class PluginError(DevmemError):
    """A platform asked for by name is unknown, broken or not detected, or two platforms tie."""


class LibraryUnavailable(DevmemError):
    """A vendor library cannot be loaded or initialised; the message is the reason, for people, and ``action``
    what to do about it where that is known (``""`` otherwise)."""

    def __init__(self, reason: str, action: str = ""):
        super().__init__(reason)
        self.action = action


class NotEnoughMemoryError(DevmemError, ValueError):
    """The KV-cache budget came out at or below zero.

    ``breakdown`` maps each figure of the message (``"requested"``, ``"weights"``, ...) to bytes,
    so an engine can report it in its own words.
    """

    def __init__(self, message: str, breakdown: Mapping[str, int | float | None] | None = None):
        super().__init__(message)
        self.breakdown: dict[str, int | float | None] = dict(breakdown or {})


class ArgumentError(InvalidValueError):
    """An argument of a public entry point is outside what it accepts (checked on entry, before any work runs).

    ``argument`` names it and ``value`` is what was given, where the entry point that refused it set them
    (``None`` otherwise; :class:`devmem.EngineMemory` always does)."""

    def __init__(self, message: str, *, argument: str | None = None, value: object = None):
        super().__init__(message)
        self.argument, self.value = argument, value


class ArgumentTypeError(ArgumentError, TypeError):
    """An argument of a public entry point is of a type it does not accept (a ``TypeError`` too)."""


class SizingError(ArgumentError):
    """An input to the sizing arithmetic is outside what it accepts."""


class EngineMemoryError(DevmemError):
    """What :class:`devmem.EngineMemory` refuses: an argument (:class:`EngineArgumentError`) or a step the phase the
    object is in does not allow (:class:`StepRefused`)."""


class EngineArgumentError(EngineMemoryError, ArgumentError):
    """An argument of :class:`devmem.EngineMemory` (or of what it is given: a layout, a declaration) refused at the
    door, before the step runs: ``argument`` names it, ``value`` is what was given."""


class StepRefused(EngineMemoryError, RuntimeError):
    """A step of :class:`devmem.EngineMemory` that the phase the object is in does not allow (out of order, taken
    twice, while another is under way, after ``close()``, in a forked child): ``step`` names the step asked for,
    ``phase`` the phase (a :class:`devmem.engine.phases.Phase`)."""

    def __init__(self, message: str, step: str, phase: object):
        super().__init__(message)
        self.step, self.phase = step, phase

    def __reduce__(self) -> tuple[object, ...]:
        return type(self), (str(self), self.step, self.phase)


class ProfileStoreError(DevmemError, ValueError):
    """A profile store argument (its folder, a kind, a key) is not usable."""


class LedgerError(DevmemError):
    """The reservation ledger cannot be used: its directory is not writable, or its lock was not obtained in time."""


class ReservationRefused(NotEnoughMemoryError):
    """A reservation does not fit. ``holders`` lists who holds the device (``devmem.engine.reservations.Holding``);
    ``breakdown`` has ``total``, ``requested``, ``reserved``, ``unreserved`` and ``available`` (what would fit)."""

    def __init__(self, message: str, breakdown: Mapping[str, int], holders: Sequence[object]):
        super().__init__(message, breakdown)
        self.holders = list(holders)


class SnapshotMismatchError(DevmemError, ValueError):
    """Two snapshots that do not describe the same device through the same platform were combined."""


class ModelConfigError(DevmemError, ValueError):
    """A model config, or an argument about it (dtype, tensor parallelism), is not one devmem can size."""


class UnknownArchitectureError(ModelConfigError):
    """The config lacks keys devmem needs, or uses ones it does not model; ``missing`` names them."""

    def __init__(self, message: str, model_type: str | None, missing: tuple[str, ...]):
        super().__init__(message)
        self.model_type, self.missing = model_type, missing


__all__ = [
    "DevmemError",
    "InvalidTypeError",
    "InvalidValueError",
    "LibraryUnavailable",
    "ModelConfigError",
    "NotEnoughMemoryError",
    "PluginError",
    "SizingError",
    "ArgumentError",
    "ArgumentTypeError",
    "EngineMemoryError",
    "EngineArgumentError",
    "StepRefused",
    "SnapshotMismatchError",
    "ProfileStoreError",
    "LedgerError",
    "ReservationRefused",
    "UnknownArchitectureError",
]
