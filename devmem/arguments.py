"""One validator per kind of argument, shared by the library, the command and the integrations.

Each takes the argument's name and value, and returns the value in its checked form (a Python ``int``, an exact
``Fraction``) or raises a :class:`~devmem.DevmemError` naming the argument, the value and what is allowed, before
any work runs. ``error`` picks the class raised: at an entry point an :class:`ArgumentError` (itself a ``DevmemError``
and a ``ValueError``) or one of its subclasses (``SizingError`` for the sizing arithmetic); for a record's field the
record's own error class. Nothing else in devmem checks an integer, a share or a device index by hand.
"""

from __future__ import annotations

import math
import numbers
import operator
from typing import TYPE_CHECKING

from devmem._text import shown
from devmem.errors import ArgumentError as ArgumentError  # re-exported: its home is devmem.errors
from devmem.errors import DevmemError

if TYPE_CHECKING:
    from fractions import Fraction

#: No figure of memory reaches this (16 EiB); a larger one is garbage, not a size.
MAX_BYTES = 1 << 64


def byte_count(
    name: str,
    value: object,
    *,
    positive: bool = False,
    error: type[DevmemError] = ArgumentError,
    type_error: type[DevmemError] | None = None,
) -> int:
    """``value`` as an int of bytes in ``[0, 2**64)`` (``(0, 2**64)`` when ``positive``); numpy integers are
    accepted, ``bool``, floats and strings are not (a size written as text goes through
    :func:`devmem.parse_size` first). ``type_error``: the class raised for a value of another type (``error``
    where ``None``; :class:`~devmem.errors.ArgumentTypeError` where a caller would catch ``TypeError``)."""
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        hint = " (parse a size written as text with devmem.parse_size)" if isinstance(value, str) else ""
        raise (type_error or error)(
            f"{name} must be a whole number of bytes (int), got {shown(value)} of type {type(value).__name__}{hint}"
        )
    value = int(value)
    if value < 0 or (positive and value == 0):
        raise error(f"{name} must be {'> 0' if positive else '>= 0'} bytes, got {shown(value)}")
    if value >= MAX_BYTES:
        raise error(f"{name} must be below 2**64 bytes (16 EiB), got {shown(value)}")
    return value


def integer(
    name: str,
    value: object,
    *,
    minimum: int | None = None,
    what: str = "a whole number",
    error: type[DevmemError] = ArgumentError,
) -> int:
    """``value`` as an int of magnitude below ``2**64``, at least ``minimum`` where given (a record's field, a
    granularity, a priority): numpy integers accepted, ``bool`` and floats not. ``what`` names the kind in the
    message (``"a whole number of blocks"``)."""
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise error(f"{name} must be {what} (int), got {shown(value)} of type {type(value).__name__}")
    value = int(value)
    if minimum is not None and value < minimum:
        raise error(f"{name} must be {what} >= {minimum}, got {shown(value)}")
    if abs(value) >= MAX_BYTES:
        raise error(f"{name} must be below 2**64, got {shown(value)}")
    return value


def count(name: str, value: object, *, error: type[DevmemError] = ArgumentError) -> int:
    """``value`` as an int > 0 (a number of layers, tensors, ranks): numpy integers accepted, ``bool`` not."""
    if isinstance(value, bool) or not isinstance(value, numbers.Integral) or not 0 < int(value) < MAX_BYTES:
        raise error(f"{name} must be an int > 0, got {shown(value)}")
    return int(value)


def real(name: str, value: object, *, error: type[DevmemError] = ArgumentError) -> Fraction:
    """An exact rational of a finite real number; a float means the decimal it prints as (0.9 is 9/10)."""
    from fractions import Fraction  # here: ``import devmem`` (whose records check integers) stays clear of it

    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise error(f"{name} must be a real number, got {shown(value)} of type {type(value).__name__}")
    if isinstance(value, numbers.Rational):  # numpy integers too: keep Python ints inside
        return Fraction(int(value.numerator), int(value.denominator))
    if not math.isfinite(float(value)):
        raise error(f"{name} must be finite, got {shown(value)}")
    return Fraction(repr(float(value)))


def utilization(value: object, *, name: str = "utilization", error: type[DevmemError] = ArgumentError) -> Fraction:
    """A share of the device's total memory in ``(0, 1]``, exactly (see :func:`real`)."""
    u = real(name, value, error=error)
    if not 0 < u <= 1:
        raise error(f"{name} must be in (0, 1], got {shown(value)}")
    return u


def device_index(value: object, *, name: str = "device", error: type[DevmemError] = ArgumentError) -> int:
    """A device index: an int (or numpy integer) >= 0. Whether the device exists is the platform's to say
    (:meth:`devmem.Platform.check_device`); a torch device (``torch.device("cpu")``) is not an index."""
    try:
        if isinstance(value, bool):
            raise TypeError
        index = operator.index(value)  # type: ignore[arg-type]
    except TypeError:
        raise error(
            f"{name} must be a device index (an int >= 0, as devmem's platform counts devices), got "
            f"{shown(value)} of type {type(value).__name__}"
        ) from None
    if index < 0:
        raise error(f"{name} must be a device index >= 0, got {shown(value)}")
    return int(index)


def flag(name: str, value: object, *, error: type[DevmemError] = ArgumentError) -> bool:
    """``value`` as ``True`` or ``False``: a switch that is not a bool (``1``, ``"no"``) is refused, not read as
    its truth value."""
    if not isinstance(value, bool):
        raise error(f"{name} must be True or False, got {shown(value)} of type {type(value).__name__}")
    return value


__all__ = [
    "MAX_BYTES",
    "ArgumentError",
    "byte_count",
    "count",
    "device_index",
    "flag",
    "integer",
    "real",
    "utilization",
]
