"""The reservation lines of ``devmem info`` and ``devmem top``: who reserved how much of a device, and what each
uses now. Kept apart from the screen's layout, which adds :func:`reservation_rows` to a device's key-value rows
and :func:`reservation_table` under its process table."""

from __future__ import annotations

from devmem.engine.reservations import DeviceReservations
from devmem.units import format_size


def _over(used: int | None, reserved: int | None) -> str:
    if used is None or reserved is None:
        return "-"
    if used > reserved:
        return f"{format_size(used - reserved)} over"
    return f"{format_size(reserved - used)} under"


def reservation_rows(view: DeviceReservations | None, paint) -> list[tuple[str, str]]:
    """``(key, value)`` rows summing up a device's ledger; none for a device without one."""
    from devmem.command.format import printable

    if view is None:
        return []
    a = view.accounting
    owners = [h for h in a.holdings if h.reserved is not None]
    summary = f"{len(owners)} hold {format_size(a.reserved)} of {format_size(a.total)}"
    if a.unreserved:
        summary += f"; {format_size(a.unreserved)} is used without a reservation"
    if a.committed > a.total:
        summary += "; " + paint(f"over-committed by {format_size(a.committed - a.total)}", "yellow")
    if view.stale:
        summary += f"; {len(view.stale)} stale (owners gone, reclaimed at the next reservation)"
    rows = [("reservations", summary), ("ledger", printable(view.path)), *(("note", printable(n)) for n in a.notes)]
    return rows + ([("note", printable(view.problem))] if view.problem else [])


def reservation_table(view: DeviceReservations | None, width: int) -> list[str]:
    """One row per holder (owner, reserved, used now, over or under); nothing for a device without a ledger."""
    from devmem.command.engines import cut_command
    from devmem.command.format import printable, table

    if view is None or not view.accounting.holdings:
        return []
    header = ("PID", "RESERVED", "USED NOW", "OVER/UNDER", "RESERVED BY")
    figures = [
        (
            "-" if h.pid is None else str(h.pid),
            "-" if h.reserved is None else format_size(h.reserved),
            "-" if h.used is None else format_size(h.used),
            "no reservation" if h.reserved is None else _over(h.used, h.reserved),
        )
        for h in view.accounting.holdings
    ]
    # a command is cut to the room its column has (as top cuts it, its program named without its path), not
    # broken inside a path
    used = 2 + sum(max(len(row[i]) for row in [header, *figures]) + 2 for i in range(len(header) - 1))
    room = max(24, width - used)
    commands = [None if h.command is None else " ".join(h.command.split()) for h in view.accounting.holdings]
    cells: list[tuple[str, ...]] = [
        (*row, "-" if c is None else printable(c if len(c) <= room else cut_command(c, room)))
        for row, c in zip(figures, commands, strict=True)
    ]
    return table(header, cells, width, right=frozenset({0, 1, 2}))
