"""What ``devmem info``, ``devmem top`` and ``--watch`` draw from one reading of the devices: info's block per device
(:func:`screen`), and top's facts once (:func:`top_facts`) above one line per device and per process
(:func:`top_screen`)."""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING, Any

from devmem.command.devices import static_facts
from devmem.platform import DeviceReport, Platform
from devmem.units import format_size

if TYPE_CHECKING:
    from devmem.engine.reservations import DeviceReservations


def _process_cells(rows_: list) -> tuple[tuple[str, ...], list[tuple[str, ...]], frozenset[int]]:
    """The process table's header, cells and right-aligned columns (NS PID only where a process has one)."""
    from devmem.command.format import printable

    with_ns = any(row.namespace_pid is not None for row in rows_)
    header = ("PID", *(("NS PID",) if with_ns else ()), "USER", "DEVICE MEM", "COMMAND")
    cells = []
    for row in rows_:
        command = printable(row.command or "-")
        if row.role:
            command = f"[{row.role}] {command}"
        ns = (str(row.namespace_pid) if row.namespace_pid is not None else "-",) if with_ns else ()
        cells.append((str(row.pid), *ns, printable(row.user or "-"), format_size(row.used), command))
    return header, cells, frozenset({0, len(header) - 2, *((1,) if with_ns else ())})


def _device_screen(device: dict[str, object], platform: Platform, width: int, paint) -> list[str]:
    """``devmem info``'s lines for one device: its figures, its static facts, its processes."""
    from devmem.command.format import key_values, printable, table
    from devmem.command.reservations import reservation_rows, reservation_table

    r: DeviceReport = device["report"]  # type: ignore[assignment]
    rows_: list = device["processes"]  # type: ignore[assignment]
    used = r.total - r.free
    rows: list[tuple[str, str]] = [
        ("free / total", f"{format_size(r.free)} free of {format_size(r.total)} ({format_size(used)} in use)"),
        ("a new process", f"can allocate up to {format_size(r.free)} (free now)"),
    ]
    if r.process:  # the CLI's own figure means something only where it holds memory (host RAM, not a GPU)
        rows.append(("this process", f"{format_size(r.process)} (this devmem command itself)"))
    if rows_ is not None:
        held = sum(row.used for row in rows_)
        rows.append(("processes", f"{len(rows_)} hold {format_size(held)}" if rows_ else "none hold memory"))
    else:
        rows.append(("processes", f"not listed by the {r.platform} platform"))
    reservations: Any = device["reservations"]
    rows += reservation_rows(reservations, paint)
    head = paint(f"device {r.index}: {printable(r.name)}", "bold")
    lines = [head, *key_values(rows + static_facts(r, platform), width)]
    if rows_:
        header, cells, right = _process_cells(rows_)
        lines += table(header, cells, width, right=right)
    lines += reservation_table(reservations, width)
    return lines


def screen(platform: Platform, because: str, devices: list[dict[str, object]], paint, width: int) -> str:
    from devmem.command.format import wrap

    lines = wrap(f"platform: {platform.name} ({because})", width, "", "  ")
    for device in devices:
        lines += _device_screen(device, platform, width, paint)
    return "\n".join(lines)


#: Columns of a device line other than its bar: index and name, percentage, used, free and total.
_TOP_NAME = 16
_TOP_FIXED = 3 + 1 + _TOP_NAME + 1 + 5 + 3 * 11
#: A process line's columns before its command: indent, PID, user, device memory.
_TOP_PROCESS = "    {pid:>7}  {user:<8.8}  {used:>10}  "


def _bar(fraction: float, inner: int) -> str:
    filled = max(0, min(inner, round(fraction * inner)))
    return "[" + "#" * filled + "." * (inner - filled) + "]"


def _top_header(width: int) -> list[str]:
    inner = width - _TOP_FIXED - 2
    memory = f" {'MEMORY IN USE':<{inner + 2}}" if inner >= 5 else ""
    head = f"{'DEV':>3} {'NAME':<{_TOP_NAME}}{memory}{'USE':>5}{'USED':>11}{'FREE':>11}{'TOTAL':>11}"
    return [head, _TOP_PROCESS.format(pid="PID", user="USER", used="DEVICE MEM") + "COMMAND"]


def _top_device_lines(device: dict[str, object], width: int, full_commands: bool, paint) -> list[str]:
    """``devmem top``'s lines for one device: a header line (figures, a bar, the share in use), then one line per
    process, its command cut to the column and its program named without its path (whole, wrapped, with
    ``full_commands``)."""
    from devmem.command.format import printable, without_program_path, wrap

    r: DeviceReport = device["report"]  # type: ignore[assignment]
    rows_: list | None = device["processes"]  # type: ignore[assignment]
    used = r.total - r.free
    share = used / r.total if r.total else 0.0
    inner = width - _TOP_FIXED - 2
    bar = f" {_bar(share, inner)}" if inner >= 5 else ""
    name = printable(r.name)
    name = name if len(name) <= _TOP_NAME else name[: _TOP_NAME - 1] + "~"
    sizes = "".join(f"{format_size(n):>11}" for n in (used, r.free, r.total))
    lines = [paint(f"{r.index:>3} {name:<{_TOP_NAME}}", "bold") + f"{bar}{share:>5.0%}{sizes}"]
    for row in rows_ or []:
        head = _TOP_PROCESS.format(pid=row.pid, user=printable(row.user or "-"), used=format_size(row.used))
        ns = f"(ns pid {row.namespace_pid}) " if row.namespace_pid is not None else ""
        text = printable(row.command or "-")
        command = f"{f'[{row.role}] ' if row.role else ''}{ns}{text if full_commands else without_program_path(text)}"
        room = max(8, width - len(head))
        if full_commands:
            lines += wrap(command, width, head, " " * len(head), break_long=True)
        else:
            lines.append(head + (command if len(command) <= room else command[: room - 3] + "..."))
    return lines + _top_reservation_lines(device["reservations"], width, paint)  # type: ignore[arg-type]


def _top_reservation_lines(view: DeviceReservations | None, width: int, paint) -> list[str]:
    """A device's reservations under its processes: the ledger's summary on one line, then one row per holder
    (owner, reserved, used now, over or under), as ``devmem info`` lists them; nothing without a ledger."""
    from devmem.command.format import wrap
    from devmem.command.reservations import reservation_rows, reservation_table

    summary = dict(reservation_rows(view, paint)).get("reservations")
    if view is None or summary is None or not view.accounting.holdings:
        return []
    return wrap(f"reservations: {summary}", width, "    ", "      ") + reservation_table(view, width)


def top_facts(
    platform: Platform, because: str, devices: list[dict[str, object]], width: int, command: str = "devmem top"
) -> list[str]:
    """The title and what does not change between samples, once for all devices that share it."""
    from devmem.command.format import wrap

    by_text: dict[str, list[int]] = {}
    for device in devices:
        r: DeviceReport = device["report"]  # type: ignore[assignment]
        facts = static_facts(r, platform)
        if device["processes"] is None:
            facts.append(("processes", f"not listed by the {r.platform} platform"))
        by_text.setdefault("; ".join(f"{k}: {v}" for k, v in facts), []).append(r.index)
    lines = wrap(f"{command} on {platform.name} ({because})", width, "", "  ")
    for text, indices in by_text.items():
        who = "every device" if len(by_text) == 1 else "device " + ", ".join(map(str, indices))
        lines += wrap(f"{who}: {text}", width, "", "  ")
    return lines


def top_screen(args: argparse.Namespace, devices: list[dict[str, object]], width: int, paint) -> list[str]:
    """The part of ``top`` redrawn each sample: the column headers (processes' only where one is listed), then
    each device's lines."""
    lines = _top_header(width)[: 2 if any(device["processes"] for device in devices) else 1]
    for device in devices:
        lines += _top_device_lines(device, width, bool(getattr(args, "verbose", False)), paint)
    return lines
