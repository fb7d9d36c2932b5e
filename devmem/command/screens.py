"""What ``devmem info``, ``devmem top`` and ``--watch`` draw from one reading of the devices: info's block per device
(:func:`screen`), and top's facts once (:func:`top_facts`) above one line per device and per process
(:func:`top_screen`), each in the terminal's height where one is given (:func:`fit_height`)."""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING, Any

from devmem.command.devices import static_facts
from devmem.platform import DeviceReport, Platform
from devmem.units import format_size

if TYPE_CHECKING:
    from devmem.engine.reservations import DeviceReservations


#: From this many devices on, ``devmem info`` shows ``top``'s compact screen (one line per device and per process,
#: the facts they share once) unless ``--details`` asks for every device's block: two blocks of a device with
#: three engines on it are more than a 24-line terminal holds.
COMPACT_FROM = 2


def _process_cells(
    rows_: list, width: int | None, more: list | None = None
) -> tuple[tuple[str, ...], list[tuple[str, ...]], frozenset[int]]:
    """The process table's header, cells and right-aligned columns (NS PID only where a process has one); each
    command cut to the room a line of ``width`` columns leaves it (whole where ``width`` is ``None``). The
    processes of ``more`` are one last row: their count, their bytes, what they run."""
    from devmem.command.engines import cut_command
    from devmem.command.format import printable

    with_ns = any(row.namespace_pid is not None for row in rows_)
    header = ("PID", *(("NS PID",) if with_ns else ()), "USER", "DEVICE MEM", "COMMAND")
    cells = []
    for row in rows_:
        ns = (str(row.namespace_pid) if row.namespace_pid is not None else "-",) if with_ns else ()
        cells.append((str(row.pid), *ns, printable(row.user or "-"), format_size(row.used)))
    if more:
        cells.append(("", *(("",) if with_ns else ()), "", format_size(sum(r.used for r in more))))
    # the table's indent, and each column but the command's with the two spaces after it
    before = 2 + sum(max(len(row[i]) for row in [header, *cells]) + 2 for i in range(len(header) - 1))
    commands = []
    for row in rows_:
        role = f"[{row.role}] " if row.role else ""
        text = printable(row.command or "-")
        commands.append(role + (text if width is None else cut_command(text, max(8, width - before - len(role)))))
    if more:
        text = more_text(more, alone=not rows_)
        room = max(8, (width or len(text)) - before)
        commands.append(text if len(text) <= room else text[: room - 3] + "...")
    cells = [(*cell, command) for cell, command in zip(cells, commands, strict=True)]
    return header, cells, frozenset({0, len(header) - 2, *((1,) if with_ns else ())})


def _device_screen(
    device: dict[str, object],
    platform: Platform,
    width: int,
    paint,
    full_commands: bool = False,
    room: int | None = None,
) -> list[str]:
    """``devmem info``'s lines for one device: its figures, its static facts, its processes (each command on one
    line, cut to its column; whole, wrapped, with ``full_commands``). Where the lines would be more than
    ``room``, the processes past what fits are one row, their count and bytes."""
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
    below = reservation_table(reservations, width)
    if rows_:
        shown, more = rows_, []
        if room is not None and len(lines) + 1 + len(rows_) + len(below) > room:
            keep = max(0, room - len(lines) - 1 - len(below) - 1)  # the table's header, and the row of the rest
            shown, more = rows_[:keep], rows_[keep:]
        header, cells, right = _process_cells(shown, None if full_commands else width, more)
        lines += table(header, cells, width, right=right)
    return lines + below


def screen(
    platform: Platform,
    because: str,
    devices: list[dict[str, object]],
    paint,
    width: int,
    full_commands: bool = False,
    height: int | None = None,
) -> str:
    """``devmem info``'s screen: the platform, then each device's block; in at most ``height`` lines where given
    (one device's processes past what fits summed up on one row, and past that,
    :func:`fit_height`'s cut)."""
    from devmem.command.format import wrap

    lines = wrap(f"platform: {platform.name} ({because})", width, "", "  ")
    room = None if height is None or len(devices) != 1 else height - len(lines)
    for device in devices:
        lines += _device_screen(device, platform, width, paint, full_commands, room)
    return "\n".join(lines if height is None else fit_height(lines, height, width))


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
    label = "MEMORY IN USE" if inner + 2 >= len("MEMORY IN USE") else "MEMORY"
    memory = f" {label:<{inner + 2}}" if inner >= 5 else ""
    head = f"{'DEV':>3} {'NAME':<{_TOP_NAME}}{memory}{'USE':>5}{'USED':>11}{'FREE':>11}{'TOTAL':>11}"
    return [head, _TOP_PROCESS.format(pid="PID", user="USER", used="DEVICE MEM") + "COMMAND"]


def _top_device_lines(
    device: dict[str, object], width: int, full_commands: bool, paint, limit: int | None = None
) -> list[str]:
    """``devmem top``'s lines for one device: a header line (figures, a bar, the share in use), then one line per
    process, its command cut to the column (whole, wrapped, with ``full_commands``). With a ``limit`` on its
    process lines, the processes past it are one line, their count and bytes (:func:`_more_line`)."""
    from devmem.command.engines import cut_command
    from devmem.command.format import printable, wrap

    r: DeviceReport = device["report"]  # type: ignore[assignment]
    rows_: list = device["processes"] or []  # type: ignore[assignment]
    used = r.total - r.free
    share = used / r.total if r.total else 0.0
    inner = width - _TOP_FIXED - 2
    bar = f" {_bar(share, inner)}" if inner >= 5 else ""
    name = printable(r.name)
    name = name if len(name) <= _TOP_NAME else name[: _TOP_NAME - 1] + "~"
    sizes = "".join(f"{format_size(n):>11}" for n in (used, r.free, r.total))
    lines = [paint(f"{r.index:>3} {name:<{_TOP_NAME}}", "bold") + f"{bar}{share:>5.0%}{sizes}"]
    shown, more = rows_, []
    if limit is not None and len(rows_) > limit:
        shown, more = rows_[: max(0, limit - 1)], rows_[max(0, limit - 1) :]
    for row in shown:
        head = _TOP_PROCESS.format(pid=row.pid, user=printable(row.user or "-"), used=format_size(row.used))
        ns = f"(ns pid {row.namespace_pid}) " if row.namespace_pid is not None else ""
        prefix = f"{f'[{row.role}] ' if row.role else ''}{ns}"
        text = printable(row.command or "-")
        if full_commands:
            lines += wrap(prefix + text, width, head, " " * len(head), break_long=True)
        else:
            lines.append(head + prefix + cut_command(text, max(8, width - len(head) - len(prefix))))
    if more and limit:
        lines.append(_more_line(more, width, not shown))
    return lines + _top_reservation_lines(device["reservations"], width, paint)  # type: ignore[arg-type]


def _more_line(rows: list, width: int, alone: bool) -> str:
    """Processes a screen has no lines for, on one line: their bytes, then ``3 more: vllm Qwen/Qwen3-8B, ...``
    (``4 processes: ...`` where they are ``alone``, none of the device's listed apart) with what they run
    (:func:`~devmem.command.engines.named_briefly`)."""
    head = _TOP_PROCESS.format(pid="", user="", used=format_size(sum(row.used for row in rows)))
    return head + _cut(more_text(rows, alone), max(8, width - len(head)))


def more_text(rows: list, alone: bool) -> str:
    """``3 more: vllm Qwen/Qwen3-8B, sglang ...`` (``4 processes: ...`` where they are ``alone``): the processes a
    screen sums up on one line, and what they run."""
    from devmem.command.engines import named_briefly
    from devmem.command.format import printable

    names = named_briefly([(row.pid, None if row.command is None else printable(row.command)) for row in rows])
    return f"{len(rows)} {'processes' if alone else 'more'}: {names}"


def _cut(text: str, room: int) -> str:
    return text if len(text) <= room else text[: max(0, room - 3)] + "..."


def _process_limits(counts: list[int], room: int) -> list[int | None]:
    """The most process lines each device may have (those past it summed up on one of them) so that the
    devices' ``counts`` of processes take at most ``room`` lines: the same for every device, and one more for the
    first devices cut while lines are left; ``None`` where all fit."""
    if sum(counts) <= room:
        return [None] * len(counts)
    limit = next((k for k in range(max(counts), 0, -1) if sum(min(n, k) for n in counts) <= room), 0)
    left = room - sum(min(n, limit) for n in counts)
    limits: list[int | None] = []
    for n in counts:
        extra = 1 if n > limit and left > 0 and limit > 0 else 0
        left -= extra
        limits.append(limit + extra)
    return limits


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
    platform: Platform,
    because: str,
    devices: list[dict[str, object]],
    width: int,
    command: str = "devmem top",
    short: bool = False,
) -> list[str]:
    """The title and what does not change between samples, once for all devices that share it; each on one line,
    cut to ``width``, where ``short``."""
    from devmem.command.format import wrap

    by_text: dict[str, list[int]] = {}
    for device in devices:
        r: DeviceReport = device["report"]  # type: ignore[assignment]
        facts = static_facts(r, platform)
        if device["processes"] is None:
            facts.append(("processes", f"not listed by the {r.platform} platform"))
        by_text.setdefault("; ".join(f"{k}: {v}" for k, v in facts), []).append(r.index)
    texts = [f"{command} on {platform.name} ({because})"]
    for text, indices in by_text.items():
        who = "every device" if len(by_text) == 1 else "device " + ", ".join(map(str, indices))
        texts.append(f"{who}: {text}")
    if short:
        return [_cut(text, width) for text in texts]
    return [line for text in texts for line in wrap(text, width, "", "  ")]


def top_screen(
    args: argparse.Namespace, devices: list[dict[str, object]], width: int, paint, height: int | None = None
) -> list[str]:
    """The part of ``top`` redrawn each sample: the column headers (processes' only where one is listed), then
    each device's lines, in at most ``height`` lines where given: the processes of a device past what fits summed
    up on one line, and past that, :func:`fit_height`'s cut."""
    verbose = bool(getattr(args, "verbose", False))
    lines = _top_header(width)[: 2 if any(device["processes"] for device in devices) else 1]
    limits: list[int | None] = [None] * len(devices)
    if height is not None:
        below: list[int] = [len(_top_reservation_lines(d["reservations"], width, paint)) for d in devices]  # type: ignore[arg-type]
        counts: list[int] = [len(d["processes"] or []) for d in devices]  # type: ignore[arg-type]
        limits = _process_limits(counts, height - len(lines) - len(devices) - sum(below))
        lines = lines[:1] if all(limit == 0 for limit in limits) else lines  # no process line: no header for it
    for device, limit in zip(devices, limits, strict=True):
        lines += _top_device_lines(device, width, verbose, paint, limit)
    return lines if height is None else fit_height(lines, height, width)


def compact_screen(
    args: argparse.Namespace,
    platform: Platform,
    because: str,
    devices: list[dict[str, object]],
    width: int,
    paint,
    room: int | None,
    command: str = "devmem top",
    other: int = 0,
) -> tuple[list[str], list[str]]:
    """The compact screen's facts (:func:`top_facts`) and body (:func:`top_screen`) in at most ``room`` lines
    with the ``other`` lines the caller adds (the time of a sample, a hint): the facts each on one line where
    wrapped they would leave the devices too little room."""
    facts = top_facts(platform, because, devices, width, command)
    if room is None:
        return facts, top_screen(args, devices, width, paint)
    if len(facts) + other + len(top_screen(args, devices, width, paint)) > room:
        facts = top_facts(platform, because, devices, width, command, short=True)
    return facts, top_screen(args, devices, width, paint, max(1, room - len(facts) - other))


def fit_height(lines: list[str], height: int, width: int) -> list[str]:
    """``lines`` in at most ``height`` lines (one at least): where there are more, the first ``height - 1`` and a
    line saying how many more there are and how to see them."""
    if len(lines) <= max(1, height):
        return lines
    keep = max(0, height - 1)
    return lines[:keep] + [_cut(f"... {len(lines) - keep} more lines (a taller terminal, -i N or --json)", width)]
