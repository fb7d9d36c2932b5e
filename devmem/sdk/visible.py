"""Visible-device selection shared by every backend: a runtime's ``*_VISIBLE_DEVICES`` list applied to its devices.

Runtimes agree on the shape (comma-separated entries, each naming one or more devices by index or UUID; the
first entry that names nothing ends the list) and differ in how an entry is matched and what a repeat does.
A backend gives :func:`pick` its matching rule and reports the outcome as a :class:`VisibleDevices`.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Generic, TypeVar

from devmem._text import parse_int

T = TypeVar("T")


@dataclass(frozen=True)
class VisibleDevices(Generic[T]):
    """The visible devices in index order; ``rule`` says which variables made them; ``conflicts`` are sentences
    for people about variables that disagree or entries the runtime dropped."""

    devices: tuple[T, ...]
    rule: str
    conflicts: tuple[str, ...] = ()


@dataclass(frozen=True)
class Stop:
    """The entry that ended a list, and whether it repeated a device (else it named none)."""

    token: str
    repeat: bool


def index(token: str) -> int | None:
    """The device index an entry names in ASCII digits (``"0"``, ``"12"``), else ``None``: full-width or other
    Unicode digits, signs, underscores and more than :data:`devmem._text.MAX_DIGITS` digits name no index."""
    return parse_int(token)


def pick(
    tokens: Iterable[str], match: Callable[[str], Sequence[T] | None], *, repeats_end: bool
) -> tuple[list[T], Stop | None]:
    """The devices ``tokens`` name, in order, and the entry that ended the list (``None`` if none did).

    ``match(token)`` returns the devices an entry names, or ``None`` when it names none; the list ends there.
    A repeated device ends the list where ``repeats_end``, else it is skipped.
    """
    chosen: list[T] = []
    for token in tokens:
        picked = match(token)
        if picked is None:
            return chosen, Stop(token, repeat=False)
        if any(p in chosen for p in picked):
            if repeats_end:
                return chosen, Stop(token, repeat=True)
            picked = [p for p in picked if p not in chosen]
        chosen.extend(picked)
    return chosen, None


def dropped(var: str, raw: str, token: str, why: str, kept: int) -> str:
    """The sentence for an entry the runtime drops, with every entry after it."""
    return (
        f"{var}={raw!r}: entry {token!r} {why}; the runtime ignores it and every entry after it, "
        f"leaving {kept} device(s). Fix {var}"
    )
