"""What holds a device as admission counts it: each owner's reservation, each process's use, what no listed
process holds."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from devmem._processes import who
from devmem._text import printable
from devmem.engine.reservations._owners import Entry, Owner
from devmem.records import Record
from devmem.units import format_size

# ---- accounting ---------------------------------------------------------------------------------------


def short_command(command: str, limit: int = 80) -> str:
    """A command line on one line, cut to ``limit`` characters."""
    text = " ".join(command.split())
    return text if len(text) <= limit else text[: limit - 3] + "..."


class Holding(Record):
    """Who holds part of a device: an owner with its reservation (``reserved``), or a process that reserved
    nothing (``reserved`` ``None``). ``used`` is what it holds now where the platform says; ``pid`` is ``None``
    for memory the platform attributes to no process it lists."""

    pid: int | None
    command: str | None
    reserved: int | None
    used: int | None
    #: This process (the one reading the ledger).
    mine: bool = False

    @property
    def committed(self) -> int:
        """What admission counts for it: its reservation, or what it uses where that is larger."""
        return max(self.reserved or 0, self.used or 0)

    def describe(self) -> str:
        if self.pid is None:
            return (
                f"{format_size(self.used or 0)} in use that no listed process holds (the driver's own, or processes "
                "the platform does not list)"
            )
        who = f"this process (PID {self.pid})" if self.mine else f"PID {self.pid}"
        # another user's command: no escape sequence reaches a terminal
        command = f" ({printable(short_command(self.command))})" if self.command else ""
        if self.reserved is None:
            return f"{who}{command} uses {format_size(self.used or 0)} without a reservation"
        using = "" if self.used is None else f", using {format_size(self.used)}"
        return f"{who}{command} reserved {format_size(self.reserved)}{using}"

    def as_dict(self) -> dict[str, object]:
        over = None if self.used is None or self.reserved is None else self.used - self.reserved
        return {**self.__dict__, "committed": self.committed, "over": over}


class Accounting(Record):
    """What holds a device, as admission counts it against ``total``."""

    total: int
    holdings: tuple[Holding, ...]
    notes: tuple[str, ...] = ()

    @property
    def reserved(self) -> int:
        return sum(h.reserved or 0 for h in self.holdings)

    @property
    def committed(self) -> int:
        return sum(h.committed for h in self.holdings)

    @property
    def unreserved(self) -> int:
        return self.committed - self.reserved


def command_of(pid: int) -> str | None:
    """``pid``'s command line as psutil reads it (``None`` where it cannot)."""
    return who(pid)[1]


def named(holdings: Sequence[Holding]) -> list[Holding]:
    """``holdings`` with the command of each process that reserved nothing looked up (see :func:`account`)."""
    return [
        h.replace(command=command_of(h.pid)) if h.pid is not None and h.reserved is None and h.command is None else h
        for h in holdings
    ]


def account(
    total: int,
    free: int,
    live: Sequence[Entry],
    others: Mapping[int, int] | None,
    own_used: int | None,
    integrated: bool,
    me: Owner,
    own_counted: int | None = None,
    *,
    commands: bool = True,
) -> Accounting:
    """The holdings of a device with ``total`` and ``free`` bytes: each owner of ``live`` entries with its
    reservations and what it uses (``others``: other processes' bytes by PID, ``own_used``: this process's), each
    process in ``others`` that reserved nothing, and, where ``others`` is unknown on a discrete device, the
    device's used memory beyond the reservations. ``own_counted``: of this process's memory, what its holding
    counts (``own_used`` where ``None``; less where a new share covers part of what it holds). ``commands``:
    whether the command line of each process that reserved nothing is looked up (psutil, one process at a time);
    without, their ``command`` is ``None`` (:func:`named` looks up those shown)."""
    own_counted = own_used if own_counted is None else own_counted
    by_owner: dict[tuple[int, int, int], list[Entry]] = {}
    for e in live:
        by_owner.setdefault((e.owner.pid, e.owner.start_time, e.owner.pidns), []).append(e)
    holdings: list[Holding] = []
    matched: set[int] = set()
    mine = False
    for entries in by_owner.values():
        owner = entries[0].owner
        reserved = sum(e.bytes for e in entries)
        if owner.same_process(me):
            mine, used = True, own_counted
        else:
            pid = owner.visible_pid(me)
            used = None if others is None or pid is None else others.get(pid)
            if pid is not None:
                matched.add(pid)
        holdings.append(Holding(owner.pid, owner.command, reserved, used, owner.same_process(me)))
    notes: list[str] = []
    if others is not None:
        holdings += [
            Holding(pid, command_of(pid) if commands else None, None, used, False)
            for pid, used in sorted(others.items())
            if pid not in matched and used
        ]
        # memory in use that no listed process holds (the driver's own, processes it does not list) is no
        # reservation's either: it counts on top, so that shares summing to the total are not all admitted
        unlisted = (total - free) - (own_used or 0) - sum(others.values())
        if not integrated and unlisted > 0:
            holdings.append(Holding(None, None, None, unlisted))
    elif not integrated:  # who uses what is unknown: all memory in use counts on top of the reservations
        beyond = (total - free) - (own_used or 0)
        notes.append(
            "the platform lists no per-process figures: all memory in use on the device counts on top of the "
            "reservations"
        )
        if beyond > 0:
            holdings.append(Holding(None, None, None, beyond))
    else:
        notes.append("the platform lists no per-process figures (host memory): only reservations are counted")
    if not mine and own_counted:  # on every platform: where others are unlisted, too (`beyond` leaves it out)
        holdings.append(Holding(me.pid, me.command, None, own_counted, True))
    return Accounting(total, tuple(holdings), tuple(notes))
