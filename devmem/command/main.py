"""The ``devmem`` command: what this machine really has, and why an engine's KV cache is the size it is.

Exit codes: 0 success (``doctor``: nothing to fix), 1 a :class:`~devmem.DevmemError` (one line, no traceback;
with ``--json`` also an object of kind ``error`` on stdout), a plan that does not fit, or ``doctor`` warnings, 2 a
usage error, 130 Ctrl-C; a reader that goes away changes none of them.
Human output scales its units (B..TiB) and wraps to the terminal's width (a pipe gets whole lines); ``--json``
output shows exact bytes.
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
from collections.abc import Callable, Sequence
from typing import Any, NoReturn

from devmem import __version__
from devmem.command.output import Output, OutputError, error_line
from devmem.platform import DeviceReport, Platform, read_device
from devmem.resolution.plugins import Candidate, current_platform, platform_candidates
from devmem.sdk.host import REAL_FILES, Files
from devmem.sdk.parsing import env_text
from devmem.types import DevmemError
from devmem.units import format_size

#: Every command's stdout: the verdict's exit code survives a reader that went away.
_out = Output()


def _emit_json(obj: object) -> None:
    _out.print(json.dumps(obj, indent=2, sort_keys=False))


def _print_wrapped(*lines: str) -> None:
    """Lines for people, each wrapped to the terminal's width under its own indentation (plus two); a pipe or a
    file gets them whole."""
    from devmem.command.format import width_for, wrap

    width = width_for(sys.stdout)
    out = []
    for line in "\n".join(lines).splitlines():
        indent = line[: len(line) - len(line.lstrip())]
        out += wrap(line.lstrip(), width, indent, indent + "  ")
    _out.print(*out)


def _yes(flag: bool) -> str:
    return "yes" if flag else "no"


def _chosen(platform_name: str, cands: list[Candidate]) -> Candidate | None:
    """The candidate resolution chose, where ``platform_name`` is the resolved platform's."""
    return next((c for c in cands if c.chosen and c.name == platform_name), None)


def _why(chosen: Candidate | None) -> str:
    if chosen is None:
        return "chosen"
    if env_text("DEVMEM_PLATFORM"):
        return f"forced by DEVMEM_PLATFORM; {chosen.reason}"
    return f"highest-priority detected platform ({chosen.priority}): {chosen.reason}"


# --- devmem info ---------------------------------------------------------------------------------------------


def _sample(platform: Platform, indices: Sequence[int], files: Files) -> list[dict[str, object]]:
    """One reading of every device in ``indices``: its report, with the processes on it."""
    from devmem.command.processes import process_rows
    from devmem.engine.reservations import device_reservations

    devices: list[dict[str, object]] = []
    for index in indices:
        reading = read_device(platform, index)
        report = DeviceReport.from_reading(platform.name, reading)
        others = report.other_processes
        rows = None if others is None else process_rows(others, files, dict(reading.roles))
        reservations = device_reservations(platform, index, report)
        devices.append({"report": report, "processes": rows, "reservations": reservations})
    return devices


def _device_json(device: dict[str, object]) -> dict[str, object]:
    report: DeviceReport = device["report"]  # type: ignore[assignment]
    rows: Any = device["processes"]
    reservations: Any = device["reservations"]
    return {
        **report.as_dict(),
        "available_to_new_process": report.free,
        "processes": None if rows is None else [row.as_dict() for row in rows],
        "reservations": None if reservations is None else reservations.as_dict(),
    }


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


def _static_facts(r: DeviceReport, platform: Platform) -> list[tuple[str, str]]:
    """What a device's report says that does not change from one sample to the next."""
    rows: list[tuple[str, str]] = []
    if r.process is None and platform.torch_device is not None:
        rows.append(("per-process figures", f"unavailable: {r.process_reason}"))
    rows += [("integrated", _yes(r.integrated)), ("pages instead of failing", _yes(r.pages_instead_of_failing))]
    rows += [(f"{key} from", text) for key, text in r.sources.items()]
    return rows + [("note", note) for note in r.notes]


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
    lines = [head, *key_values(rows + _static_facts(r, platform), width)]
    if rows_:
        header, cells, right = _process_cells(rows_)
        lines += table(header, cells, width, right=right)
    lines += reservation_table(reservations, width)
    return lines


def _screen(platform: Platform, because: str, devices: list[dict[str, object]], paint, width: int) -> str:
    from devmem.command.format import wrap

    lines = wrap(f"platform: {platform.name} ({because})", width, "", "  ")
    for device in devices:
        lines += _device_screen(device, platform, width, paint)
    return "\n".join(lines)


def cmd_info(args: argparse.Namespace, platform: Platform | None = None, files: Files = REAL_FILES) -> int:
    """``devmem info`` on ``platform`` (the resolved one by default); ``files`` is where /proc is read."""
    platform = platform or current_platform()
    chosen = _chosen(platform.name, platform_candidates())
    because = _why(chosen)
    count = platform.device_count()
    indices = [args.device] if args.device is not None else list(range(count))
    if args.watch is not None:
        return _watch(args, platform, because, indices, files)
    if args.count is not None:
        args.parser.error("--count applies to --watch: give --watch SECONDS with it")
    devices = _sample(platform, indices, files)
    if args.json:
        _emit_json(
            {
                "platform": platform.name,
                "chosen_because": because,
                "distribution": chosen.distribution if chosen else None,
                "device_count": count,
                "devices": [_device_json(d) for d in devices],
            }
        )
        return 0
    from devmem.command.format import Painter, wants_colour, width_for

    _out.print(_screen(platform, because, devices, Painter(wants_colour(sys.stdout)), width_for(sys.stdout)))
    return 0


# --- devmem top: one line per device, one per process, the static facts once --------------------------------

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
    from devmem.command.format import printable, wrap

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
        program, _, rest = printable(row.command or "-").partition(" ")
        if not full_commands and program.startswith("/"):  # the program's name, not its path, when cut
            program = program.rsplit("/", 1)[-1]
        command = f"{f'[{row.role}] ' if row.role else ''}{ns}{program}{' ' if rest else ''}{rest}"
        room = max(8, width - len(head))
        if full_commands:
            lines += wrap(command, width, head, " " * len(head), break_long=True)
        else:
            lines.append(head + (command if len(command) <= room else command[: room - 3] + "..."))
    return lines


def _top_facts(platform: Platform, because: str, devices: list[dict[str, object]], width: int) -> list[str]:
    """The title and what does not change between samples, once for all devices that share it."""
    from devmem.command.format import wrap

    by_text: dict[str, list[int]] = {}
    for device in devices:
        r: DeviceReport = device["report"]  # type: ignore[assignment]
        facts = _static_facts(r, platform)
        if device["processes"] is None:
            facts.append(("processes", f"not listed by the {r.platform} platform"))
        by_text.setdefault("; ".join(f"{k}: {v}" for k, v in facts), []).append(r.index)
    lines = wrap(f"devmem top on {platform.name} ({because})", width, "", "  ")
    for text, indices in by_text.items():
        who = "every device" if len(by_text) == 1 else "device " + ", ".join(map(str, indices))
        lines += wrap(f"{who}: {text}", width, "", "  ")
    return lines


def _top_screen(args: argparse.Namespace, devices: list[dict[str, object]], width: int, paint) -> list[str]:
    """The part of ``top`` redrawn each sample: the column headers (processes' only where one is listed), then
    each device's lines."""
    lines = _top_header(width)[: 2 if any(device["processes"] for device in devices) else 1]
    for device in devices:
        lines += _top_device_lines(device, width, bool(getattr(args, "verbose", False)), paint)
    return lines


class _Stop(Exception):
    """SIGTERM during ``--watch``: stop as Ctrl-C does."""


def _watch(args: argparse.Namespace, platform: Platform, because: str, indices: list[int], files: Files) -> int:
    """Sample every ``args.watch`` seconds until ``args.count`` samples, Ctrl-C, SIGTERM or the reader going away
    (exit 0): one JSON line per sample with ``--json``, else the screen, redrawn in place on a terminal that can
    (the static facts of ``top`` are written once, above the part redrawn)."""
    import signal
    import time
    from datetime import datetime, timezone

    from devmem.command.format import Painter, redraw_ok, terminal_width, wants_colour, width_for

    def stop(signum, frame):
        raise _Stop

    previous = signal.signal(signal.SIGTERM, stop)
    in_place = not args.json and redraw_ok(sys.stdout)
    paint = Painter(wants_colour(sys.stdout))
    compact = getattr(args, "compact", False)
    width = width_for(sys.stdout) if not compact else min(terminal_width(), width_for(sys.stdout))
    redraw_from = None  # the screen line below the static facts, once they are written
    samples = 0
    try:
        while not _out.lost and samples != args.count:
            samples += 1
            started = time.monotonic()
            devices = _sample(platform, indices, files)
            if args.json:
                stamp = datetime.now(timezone.utc).isoformat(timespec="milliseconds")
                line = {"time": stamp, "platform": platform.name, "devices": [_device_json(d) for d in devices]}
                _out.write(json.dumps(line) + "\n")
            elif compact:
                stamp = datetime.now().astimezone().strftime("%Y-%m-%d %H:%M:%S %Z")
                body = [f"{stamp}  every {args.watch:g} s, Ctrl-C to stop", *_top_screen(args, devices, width, paint)]
                if redraw_from is None:
                    facts = _top_facts(platform, because, devices, width)
                    redraw_from = len(facts) + 1
                    head = ("\x1b[H\x1b[2J" if in_place else "") + "\n".join(facts) + "\n"
                    _out.write(head)
                if in_place:
                    _out.write(f"\x1b[{redraw_from};1H\x1b[J" + "\n".join(body) + "\n")
                else:
                    _out.write("\n".join(body) + "\n\n")
            else:
                stamp = datetime.now().astimezone().strftime("%Y-%m-%d %H:%M:%S %Z")
                screen = f"{stamp}  every {args.watch:g} s, Ctrl-C to stop\n" + _screen(
                    platform, because, devices, paint, width
                )
                _out.write(("\x1b[H\x1b[2J" + screen + "\n") if in_place else screen + "\n\n")
            if samples != args.count:
                time.sleep(max(0.0, args.watch - (time.monotonic() - started)))
        return 0
    except (KeyboardInterrupt, _Stop):
        return 0
    finally:
        signal.signal(signal.SIGTERM, previous)


def cmd_plugins(args: argparse.Namespace) -> int:
    cands = platform_candidates()
    if args.json:
        _emit_json([c.as_dict() for c in cands])
        return 0
    from devmem.command.format import printable, table, width_for, wrap

    header = ("", "name", "priority", "distribution", "version", "detected", "reason")
    rows: list[tuple[str, ...]] = [
        (
            "*" if c.chosen else "",
            printable(c.name),
            str(c.priority),
            printable(c.distribution),
            printable(c.version),
            _yes(c.detected),
            printable("; ".join(filter(None, (c.reason, c.note, f"to use it: {c.action}" if c.action else "")))),
        )
        for c in cands
    ]
    width = width_for(sys.stdout)
    fixed = sum(max(len(row[i]) for row in [header, *rows]) + 2 for i in range(len(header) - 1))
    if width - fixed >= 40:
        _out.print(*table(header, rows, width, indent=""))
        return 0
    # a narrow terminal: each reason on its own lines under its row, across the whole width
    head, *short = table(header[:-1] + ("",), [row[:-1] + ("",) for row in rows], width, indent="")
    lines = [head.rstrip()]
    for line, row in zip(short, rows, strict=True):
        lines += [line.rstrip(), *wrap(row[-1], width, "      ", "      ")]
    _out.print(*lines)
    return 0


def cmd_doctor(args: argparse.Namespace, platform: Platform | None = None) -> int:
    """Findings on ``platform`` (the resolved one by default) for people or programs; 1 when any is a warning."""
    from devmem.command.doctor import diagnose, render
    from devmem.command.format import Painter, wants_colour, width_for

    platform = platform or current_platform()
    findings = diagnose(platform, [args.device] if args.device is not None else None)
    warnings = sum(f.severity == "warning" for f in findings)
    if args.json:
        _emit_json({"platform": platform.name, "warnings": warnings, "findings": [f.as_dict() for f in findings]})
    else:
        _out.print(render(findings, platform.name, width_for(sys.stdout), Painter(wants_colour(sys.stdout))))
    return 1 if warnings else 0


class _ReadSize(int):
    """A size flag's bytes that remember how the text was read (``80G`` -> ``80 GiB = 85899345920 bytes``)."""

    text: str
    how: str


def _size(text: str) -> int:
    from devmem.units import read_size

    try:
        nbytes, how = read_size(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None
    size = _ReadSize(nbytes)
    size.text, size.how = text, how
    return size


#: Flags for a device-sized figure: a bare number below this many bytes is surely missing its unit.
_DEVICE_SIZED = {"--total": 1 << 20, "--pinned": 1 << 20, "--init-free": 1 << 20, "--free": 1 << 20}


def _sizes_read(args: argparse.Namespace) -> dict[str, dict[str, object]]:
    """Every size flag given, by flag: the text, how it was read, the bytes (for the human output); the flags'
    values become plain ints. A bare number far smaller than any device, where a device's memory is meant
    (``--total 80``), is warned about on stderr at once."""
    read = {}
    for name, value in vars(args).items():
        if isinstance(value, _ReadSize):
            setattr(args, name, int(value))
            flag = f"--{name.replace('_', '-')}"
            read[flag] = {"text": value.text, "read_as": value.how, "bytes": int(value)}
            bare = value.text.strip()
            if bare.isdigit() and int(value) < _DEVICE_SIZED.get(flag, 0):
                error_line(
                    f"devmem: warning: {flag} {bare} has no unit, so it is {int(value)} bytes, far less than any "
                    f"device's memory: write {bare}GiB (or vLLM's {bare}G) for gibibytes"
                )
    return read


def _sizes_read_lines(read: dict[str, dict[str, object]]) -> list[str]:
    """How each size that people read two ways was read: vLLM's letters (``80G``) and powers of 10 (``80GB``);
    sizes without a unit in one line (bytes); ``GiB`` says it itself."""
    lines = [
        f"{flag} {r['text']} read as {r['read_as']}"
        for flag, r in read.items()
        if not str(r["text"]).strip().isdigit() and not str(r["text"]).strip().lower().endswith("ib")
    ]
    bare = [f"{flag} {str(r['text']).strip()}" for flag, r in read.items() if str(r["text"]).strip().isdigit()]
    return lines + ([f"sizes without a unit are bytes: {', '.join(bare)}"] if bare else [])


def _machine_total(args: argparse.Namespace) -> tuple[int | None, list[str]]:
    """The total to plan with: ``--total``, else (without ``--pinned``) this machine's device ``--device``, with a
    line that says where it came from."""
    if args.total is not None or args.pinned is not None:
        return args.total, []
    platform = current_platform()
    total = platform.device_memory_info(args.device).total
    name = platform.device_name(args.device)
    return total, [
        f"total: {format_size(total)} is device {args.device} ({name}) of the {platform.name} platform: --total "
        "was not given"
    ]


def _check_pinned(args: argparse.Namespace, weights: int) -> None:
    """On the pinned path with ``--total``: the pinned cache and what else stays on the device must fit in it."""
    from devmem.types import NotEnoughMemoryError

    if args.pinned is None or args.total is None:
        return
    parts = {
        "pinned": args.pinned,
        "weights": weights,
        "transient_peak": args.transient_peak,
        "non_torch": args.non_torch,
    }
    breakdown = {"total": args.total, **parts, "needed": sum(parts.values())}
    if args.pinned > args.total:
        raise NotEnoughMemoryError(
            f"--pinned {format_size(args.pinned)} ({args.pinned} bytes) is larger than "
            f"--total {format_size(args.total)} ({args.total} bytes)",
            breakdown,
        )
    if weights > args.total:
        raise NotEnoughMemoryError(
            f"the weights, {format_size(weights)} ({weights} bytes), are larger than --total "
            f"{format_size(args.total)} ({args.total} bytes)",
            breakdown,
        )
    if breakdown["needed"] > args.total:
        shown = " + ".join(f"{k.replace('_', ' ')} {format_size(v)}" for k, v in parts.items() if v)
        raise NotEnoughMemoryError(
            f"the pinned plan needs {shown} = {format_size(breakdown['needed'])} "
            f"({breakdown['needed']} bytes), more than --total {format_size(args.total)} "
            f"({args.total} bytes)",
            breakdown,
        )


def _positive_size(text: str) -> int:
    value = _size(text)
    if value == 0:
        raise argparse.ArgumentTypeError(f"{text!r} is zero bytes: give a size > 0")
    return value


def _index(text: str) -> int:
    from devmem.sdk.parsing import parse_int

    value = parse_int(text)
    if value is None:
        raise argparse.ArgumentTypeError(f"{text!r} is not a device index: give a whole number >= 0 in ASCII digits")
    return value


def _fraction(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = float("nan")
    if not 0 < value <= 1:
        raise argparse.ArgumentTypeError(f"{text!r} is not a utilization: give a number in (0, 1], e.g. 0.9")
    return value


def cmd_plan(args: argparse.Namespace) -> int:
    from devmem.planner.sizing import plan_kv_cache
    from devmem.types import NotEnoughMemoryError

    if args.model is not None:
        return _model_command(cmd_plan_model)(args)
    _refuse_model_flags(args)
    read = _sizes_read(args)
    total, total_lines = _machine_total(args)
    growable = args.init_free is not None or args.free is not None
    if growable and args.pinned is not None:
        raise DevmemError("--pinned selects the pinned path and --init-free/--free the growable path; give one")
    if (args.init_free is None) != (args.free is None):
        raise DevmemError(
            "the growable path needs both --init-free (free memory before the model loaded) and "
            "--free (free memory now)"
        )
    if args.committed and not growable:
        raise DevmemError("--committed applies to the growable path: give --init-free and --free with it")
    try:
        _check_pinned(args, args.weights or 0)
        plan = plan_kv_cache(
            total=total,
            utilization=args.utilization,
            pinned_bytes=args.pinned,
            weights=0 if args.weights is None else args.weights,
            transient_peak_bytes=args.transient_peak,
            non_torch=args.non_torch,
            graph_capture=args.graph_capture,
            init_free_memory=args.init_free,
            free_memory=args.free,
            committed_bytes=args.committed,
            page_size_bytes=args.page_size,
            num_layers=args.layers,
            allocation_granularity=args.allocation_granularity or 1,
        )
    except NotEnoughMemoryError as exc:
        if not args.json:
            raise
        _emit_json({"kind": "does_not_fit", "error": str(exc), "breakdown": exc.breakdown})
        return 1
    if args.json:
        _emit_json(plan.as_dict())
    else:
        _print_wrapped(plan.explain(), *total_lines, *_sizes_read_lines(read))
    return 0


# --- model-aware planning: `devmem plan --model` and `devmem fit` ---------------------------------------------

_MODEL_FLAGS = ("tp", "kv_dtype", "dtype", "block_size", "context", "sequences")
#: ``plan --model`` and ``fit``: 1 when the target does not fit (or no KV cache fits), 3 when the model is refused
#: (a config devmem cannot read or size, a broken model folder); with ``--json`` both print an object whose
#: ``kind`` is ``does_not_fit`` or ``model_refused``.
EXIT_DOES_NOT_FIT, EXIT_MODEL_REFUSED = 1, 3
MODEL_EXIT_CODES = (
    "exit codes:\n  0  {ok}\n  1  {no} (with --json: an object with kind does_not_fit)\n"
    "  2  a usage error\n  3  the model is refused: its config cannot be read or sized, one line naming the "
    "value (with --json: an object with kind model_refused)"
)


def _model_command(handler: Callable[[argparse.Namespace], int]) -> Callable[[argparse.Namespace], int]:
    """``handler`` with a refused model (:class:`~devmem.planner.models.ModelConfigError`) as exit 3: one line on
    stderr, or with ``--json`` an object of kind ``model_refused`` on stdout."""

    def run(args: argparse.Namespace) -> int:
        from devmem.planner.models import ModelConfigError

        try:
            return handler(args)
        except ModelConfigError as exc:
            if args.json:
                _emit_json(
                    {
                        "kind": "model_refused",
                        "error": str(exc),
                        "model_type": getattr(exc, "model_type", None),
                        "missing": list(getattr(exc, "missing", ())),
                    }
                )
            else:
                print(f"devmem: error: {exc}", file=sys.stderr)
            return EXIT_MODEL_REFUSED

    return run


def _positive(what: str) -> Callable[[str], int]:
    def parse(text: str) -> int:
        from devmem.sdk.parsing import parse_int

        value = parse_int(text)
        if not value:
            raise argparse.ArgumentTypeError(f"{text!r} is not a {what}: give a whole number > 0")
        return value

    return parse


def _add_model_flags(parser: argparse.ArgumentParser, *, required: bool = False) -> None:
    from devmem.planner.capacity import DEFAULT_BLOCK_SIZE
    from devmem.planner.models import KV_DTYPES

    parser.add_argument(
        "--model",
        default=None,
        required=required,
        metavar="PATH",
        help="a model folder holding config.json (and its safetensors), or a config.json",
    )
    parser.add_argument(
        "--tp",
        type=_positive("tensor-parallel size"),
        default=None,
        help="tensor-parallel ranks the model is split over (default 1)",
    )
    parser.add_argument(
        "--kv-dtype",
        choices=KV_DTYPES,
        default=None,
        metavar="DTYPE",
        help=f"KV-cache dtype: {', '.join(KV_DTYPES)} (default auto: the model's)",
    )
    parser.add_argument(
        "--dtype",
        choices=("bf16", "fp16", "fp32"),
        default=None,
        metavar="DTYPE",
        help="the dtype the model is served in: bf16, fp16, fp32 (default: the config's torch_dtype)",
    )
    parser.add_argument(
        "--block-size",
        type=_positive("block size"),
        default=None,
        help=f"tokens per KV block (default {DEFAULT_BLOCK_SIZE})",
    )


def _add_granularity_flag(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--allocation-granularity",
        type=_positive_size,
        default=None,
        metavar="SIZE",
        help="what the cache's one allocation is rounded up to (2MiB for PyTorch's caching "
        "allocator, as devmem.allocate_kv_cache allocates it); only whole units are used "
        "(default 1 byte)",
    )


def _refuse_model_flags(args: argparse.Namespace) -> None:
    given = [name for name in _MODEL_FLAGS if getattr(args, name, None) is not None]
    if given:
        args.parser.error(f"--{given[0].replace('_', '-')} describes a model: give --model PATH with it")
    if args.page_size is None or args.layers is None:
        args.parser.error("give --page-size and --layers, or --model PATH to take them from a model's config")


def _load_model(args: argparse.Namespace):
    from devmem.planner.models import load_model

    return load_model(args.model, kv_dtype=args.kv_dtype or "auto", tp=args.tp or 1, dtype=args.dtype)


def cmd_plan_model(args: argparse.Namespace) -> int:
    """``devmem plan --model``: the byte plan for this model's blocks, then what it holds in tokens."""
    from devmem.planner.capacity import DEFAULT_BLOCK_SIZE, capacity, plan_for_model
    from devmem.types import NotEnoughMemoryError

    if args.page_size is not None or args.layers is not None:
        args.parser.error("--page-size and --layers come from the model's config with --model: leave them out")
    read = _sizes_read(args)
    model = _load_model(args)
    block_size = args.block_size or DEFAULT_BLOCK_SIZE
    total, total_lines = _machine_total(args)
    granularity = args.allocation_granularity or 1
    sizing = {
        "total": total,
        "utilization": args.utilization,
        "pinned_bytes": args.pinned,
        "transient_peak_bytes": args.transient_peak,
        "non_torch": args.non_torch,
        "graph_capture": args.graph_capture,
        "allocation_granularity": granularity,
    }
    if args.weights is not None:
        sizing["weights"] = args.weights
    try:
        _check_pinned(args, model.weights_bytes_per_rank if args.weights is None else args.weights)
        plan = plan_for_model(model, block_size=block_size, **sizing)
    except NotEnoughMemoryError as exc:
        if not args.json:
            raise
        _emit_json({"kind": "does_not_fit", "model": model.as_dict(), "error": str(exc), "breakdown": exc.breakdown})
        return EXIT_DOES_NOT_FIT
    context, sequences = args.context, args.sequences
    if context is None and sequences is None:
        context, sequences = model.max_context, 1
    answer = capacity(
        model,
        plan.kv_cache_bytes,
        block_size=block_size,
        context=context,
        sequences=sequences,
        allocation_granularity=granularity,
    )
    if args.json:
        _emit_json({"model": model.as_dict(), "plan": plan.as_dict(), "capacity": answer.as_dict()})
    else:
        verdict = []
        if args.context is not None and args.sequences is not None:
            held = answer.sequences_at_context or 0
            verdict = [
                f"{args.sequences} sequence(s) of {args.context} tokens: "
                + ("fit" if held >= args.sequences else f"do not fit ({held} do); `devmem fit` says what they need")
            ]
        _print_wrapped(
            model.explain(), plan.explain(), answer.explain(), *verdict, *total_lines, *_sizes_read_lines(read)
        )
    return 0


def cmd_fit(args: argparse.Namespace) -> int:
    """``devmem fit``: does (context, sequences) fit this machine's device? Exit 0 when it does, 1 when not."""
    from devmem.planner.capacity import DEFAULT_BLOCK_SIZE, fit

    model = _load_model(args)
    platform = current_platform()
    info = platform.device_memory_info(args.device)
    result = fit(
        model,
        context=args.context,
        sequences=args.sequences,
        total=info.total,
        free=info.free,
        utilization=args.utilization,
        block_size=args.block_size or DEFAULT_BLOCK_SIZE,
        transient_peak_bytes=args.transient_peak,
        non_torch=args.non_torch,
        graph_capture=args.graph_capture,
        allocation_granularity=args.allocation_granularity or 1,
    )
    if args.json:
        verdict = {} if result.fits else {"kind": "does_not_fit", "error": f"does not fit: {'; '.join(result.reasons)}"}
        _emit_json(
            {
                **verdict,
                "platform": platform.name,
                "device": args.device,
                "model": model.as_dict(),
                "fit": result.as_dict(),
            }
        )
    else:
        _print_wrapped(
            f"device {args.device} ({platform.name}): total {format_size(info.total)}, free {format_size(info.free)}",
            model.explain(),
            result.explain(),
        )
    return 0 if result.fits else EXIT_DOES_NOT_FIT


ENVIRONMENT = """environment:
  DEVMEM_PLATFORM=NAME       use this platform (by name; `devmem plugins` lists them)
  DEVMEM_LOAD_PLUGINS=A,B    load only these plugins' entry points (cpu is always loaded)
  CUDA_VISIBLE_DEVICES, CUDA_DEVICE_ORDER, HIP_VISIBLE_DEVICES, ROCR_VISIBLE_DEVICES
                             which devices a process sees, and their order, as the device runtime applies them
  DEVMEM_LEDGER_DIR=DIR      the reservation ledger's directory (default /dev/shm/devmem)
  NO_COLOR=1                 no colour (colour is used only on a terminal, not under TERM=dumb)
  COLUMNS=N                  wrap human output to N columns (default: the terminal's width; output to
                             a pipe or a file is not wrapped)"""

EXIT_CODES = """exit codes:
  0  success
  1  an error devmem explains in one line (a bad device index, a plan that does not fit)
  2  a usage error (an unknown flag, a value that is not a size)
  130  interrupted (Ctrl-C); top and --watch stop with 0
with --json, an error of exit 1 is also a JSON object on stdout: {"kind": "error", "error": "..."}"""


class _HelpFormatter(argparse.RawDescriptionHelpFormatter):
    """Descriptions and epilogs fitted to the terminal: a paragraph is wrapped, an indented line (an example, a
    table row) keeps its start and wraps under its text column."""

    def _fill_text(self, text: str, width: int, indent: str) -> str:
        import re

        from devmem.command.format import wrap

        lines: list[str] = []
        for line in text.splitlines():
            column = re.match(r"\s+\S+(?: \S+)*\s{2,}", line) if line[:1].isspace() else None
            start = line[: len(line) - len(line.lstrip())]
            hanging = " " * len(column.group(0)) if column else start + ("    " if len(start) <= 2 else "")
            lines += wrap(line.strip(), width, indent + start, indent + hanging, break_long=True) if line else [""]
        return "\n".join(lines)


class _Parser(argparse.ArgumentParser):
    """A usage error is its problem in one line (two on a narrow terminal) that points to ``--help``, not the
    usage block first (exit 2)."""

    def error(self, message: str) -> NoReturn:
        error_line(f"{self.prog}: error: {message} (see `{self.prog} --help`)")
        sys.exit(2)

    def _print_message(self, message: str, file: Any = None) -> None:
        """``--help`` and ``--version`` through the CLI's stdout writer: a full disk is an error, not exit 0."""
        if message and (file is None or file is sys.stdout):
            _out.write(message)
        elif message:
            error_line(message.rstrip("\n"))


def _sub(
    sub: argparse._SubParsersAction,
    name: str,
    summary: str,
    description: str,
    examples: str,
    exit_codes: str = EXIT_CODES,
    **kwargs: Any,
) -> argparse.ArgumentParser:
    """A sub-command whose help has a description, examples, the environment variables and the exit codes."""
    parser = sub.add_parser(
        name,
        help=summary,
        description=description,
        parents=[_common()],
        epilog=f"examples:\n{examples}\n\n{ENVIRONMENT}\n\n{exit_codes}",
        formatter_class=_HelpFormatter,
        **kwargs,
    )
    parser.set_defaults(parser=parser)
    return parser


def _common() -> argparse.ArgumentParser:
    """``-v`` after a sub-command too (``devmem info -v``); SUPPRESS keeps ``devmem -v info`` working."""
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument(
        "-v",
        "--verbose",
        action="store_true",
        default=argparse.SUPPRESS,
        help="log debug details of platform resolution",
    )
    return common


def _interval(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = float("nan")
    if not 0.05 <= value <= 86400:
        raise argparse.ArgumentTypeError(
            f"{text!r} is not a watch interval: give seconds from 0.05 to 86400, e.g. 2 or 0.5"
        )
    return value


def _add_info_flags(parser: argparse.ArgumentParser, *, watch_default: float | None) -> None:
    parser.add_argument(
        "--json",
        action="store_true",
        help="machine-readable output with exact bytes (one line per sample with --watch)",
    )
    parser.add_argument("--device", type=_index, default=None, help="only this device index")
    if watch_default is None:
        parser.add_argument(
            "--watch",
            type=_interval,
            nargs="?",
            const=2.0,
            default=None,
            metavar="SECONDS",
            help="sample again every SECONDS (default 2) until Ctrl-C; redraws in place on a terminal",
        )
    else:
        parser.add_argument(
            "--watch",
            "--interval",
            type=_interval,
            default=watch_default,
            metavar="SECONDS",
            help=f"seconds between samples (default {watch_default:g})",
        )
    parser.add_argument(
        "-n",
        "--count",
        type=_positive("sample count"),
        default=None,
        metavar="N",
        help="stop after N samples (exit 0)" + (" (with --watch)" if watch_default is None else ""),
    )
    parser.set_defaults(handler=cmd_info)


INFO_DESCRIPTION = """\
Per device: free and total memory, what a new process can allocate, every process holding memory on it
(PID, user, command and bytes as the driver reports them; NS PID is the PID inside the process's own
container where it differs; a process the platform names, such as a server holding memory for its
clients, is marked with its role), and where each figure came from.
User and command are "-" for a PID this PID namespace cannot see. Where engines reserved memory on a
device (devmem.reserve), each reservation is listed: owner, reserved, used now, over or under.
Sizes scale from B to TiB; --json gives exact bytes. `devmem` alone is `devmem info`, so `devmem --json` works too."""


def _add_fit_parser(sub: argparse._SubParsersAction) -> None:
    fit = _sub(
        sub,
        "fit",
        "do N sequences of a context fit this machine's device? (exit 0 yes, 1 no)",
        "Whether SEQUENCES sequences of CONTEXT tokens of a model fit in this machine's device at the given "
        "utilization, read from the model's config.json (no weights are loaded).",
        "  devmem fit --model ./Qwen3-8B --context 32768 --sequences 8\n"
        "  devmem fit --model ./Qwen3-8B/config.json --context 131072 --sequences 1 --tp 2 --json",
        MODEL_EXIT_CODES.format(ok="it fits", no="it does not fit (or another error devmem explains in one line)"),
    )
    _add_model_flags(fit, required=True)
    fit.add_argument("--context", type=_positive("context length"), required=True, help="tokens per sequence")
    fit.add_argument("--sequences", type=_positive("sequence count"), required=True, help="sequences running at once")
    fit.add_argument("--utilization", type=_fraction, default=0.9, help="share of the device to use (default 0.9)")
    fit.add_argument("--device", type=_index, default=0, help="device index of the resolved platform (default 0)")
    for flag, what in (
        ("--transient-peak", "memory a forward pass needs beyond what stays allocated, from profiling"),
        ("--non-torch", "memory outside torch's allocator"),
        ("--graph-capture", "memory of captured device graphs"),
    ):
        fit.add_argument(flag, type=_size, default=0, metavar="SIZE", help=f"{what} (default 0)")
    _add_granularity_flag(fit)
    fit.add_argument("--json", action="store_true", help="machine-readable output with exact bytes")
    fit.set_defaults(handler=_model_command(cmd_fit))


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(
        prog="devmem",
        description="Show what this machine's accelerators really have, and size KV caches from it. "
        "Without a command, `devmem` runs `devmem info` (and takes its options).",
        epilog=f"{ENVIRONMENT}\n\n{EXIT_CODES}\n\n`devmem COMMAND --help` shows each command's examples.",
        formatter_class=_HelpFormatter,
    )
    parser.add_argument("--version", action="version", version=f"devmem {__version__}")
    parser.add_argument("-v", "--verbose", action="store_true", help="log debug details of platform resolution")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")

    info = _sub(
        sub,
        "info",
        "device memory and the processes holding it, per device (the default command)",
        INFO_DESCRIPTION,
        "  devmem                       # the same as devmem info\n"
        "  devmem info --device 0\n"
        "  devmem info --watch 1        # redraw every second until Ctrl-C\n"
        "  devmem --json | jq '.devices[0].processes'\n"
        "  DEVMEM_PLATFORM=cpu devmem info",
    )
    _add_info_flags(info, watch_default=None)
    top = _sub(
        sub,
        "top",
        "memory and processes, one line each, every SECONDS (default 2) until Ctrl-C",
        "One line per device (used, free and total, a bar and the share in use) and one per process on it "
        "(PID, user, device memory, the command cut to the column; whole with -v), sampled every SECONDS. "
        "What does not change between samples (integrated or not, paging, where each figure comes from, "
        "driver notes) is written once, above. Redrawn in place on a terminal (not under TERM=dumb); "
        "through a pipe the samples follow each other. Ctrl-C or SIGTERM stops it with exit 0, and so "
        "does a reader going away. `devmem info` shows one device per block with every detail.",
        "  devmem top                            # every 2 s\n"
        "  devmem top 1                          # every second, as watch -n 1 or nvidia-smi -l 1\n"
        "  devmem top -v --device 0              # whole command lines\n"
        "  devmem top --json > samples.jsonl     # one JSON line per sample",
    )
    top.add_argument(
        "interval",
        nargs="?",
        type=_interval,
        default=None,
        metavar="SECONDS",
        help="seconds between samples (the same as --interval)",
    )
    _add_info_flags(top, watch_default=2.0)
    top.set_defaults(compact=True)

    plugins = _sub(
        sub,
        "plugins",
        "every registered platform, detected or not, and why",
        "Every platform the installed plugins offer, its priority, whether it was detected here and why, "
        "and which one `devmem info` uses (*). DEVMEM_PLATFORM overrides the choice.",
        "  devmem plugins\n  devmem plugins --json\n  DEVMEM_LOAD_PLUGINS=NAME devmem plugins",
    )
    plugins.add_argument("--json", action="store_true", help="machine-readable output")
    plugins.set_defaults(handler=cmd_plugins)

    doctor = _sub(
        sub,
        "doctor",
        "explain this machine's device memory, with what to do (exit 1 on warnings)",
        "Checks each device (per-process accounting, co-tenants, low free memory, unified memory, paging, "
        "torch's allocator cache) and says, once per finding, what is the case and what to do. "
        "--json gives each finding a machine-readable kind, a severity and its figures in bytes.",
        "  devmem doctor\n  devmem doctor --device 1\n"
        "  devmem doctor --json | jq '.findings[] | select(.severity == \"warning\")'",
        "exit codes:\n  0  nothing to fix (ok and info findings only)\n  1  at least one warning "
        "(or an error devmem explains in one line)\n  2  a usage error",
    )
    doctor.add_argument("--json", action="store_true", help="machine-readable output with exact bytes")
    doctor.add_argument("--device", type=_index, default=None, help="only this device index")
    doctor.set_defaults(handler=cmd_doctor)

    plan = _sub(
        sub,
        "plan",
        "size a KV cache from figures you give, or from a model's config",
        "The KV-cache size an engine would choose, with the arithmetic: the utilization path (default: "
        "a share of the total minus what else stays on the device), the pinned path (--pinned: a fixed "
        "size, checked against --total when given) or the growable path (--init-free and --free).\n\n"
        "The page size is the KV bytes of one block on one layer: 2 (K and V) x block size x KV heads x "
        "head dim x dtype bytes, e.g. 2 x 16 x 8 x 128 x 2 = 65536 for Qwen3-8B in bf16. Or give "
        "--model DIR (a folder with config.json) and devmem reads it from the config, with the layers "
        "and the weights per rank.\n\n"
        "Sizes: 4096 (bytes), 16GiB / 512MiB (powers of 2), 1.5GB (powers of 10), and vLLM's spellings: "
        "80G = 80 GiB and 80g = 80 GB (upper case is a power of 2, lower case a power of 10, as vLLM "
        "reads them). Each size given with a unit is echoed with how it was read.",
        "  devmem plan --total 80G --weights 16GiB --page-size 65536 --layers 36\n"
        "  devmem plan --pinned 20GiB --total 80GiB --page-size 64KiB --layers 36\n"
        "  devmem plan --model ./Qwen3-8B --total 80GiB --context 32768\n"
        "  devmem plan --model ./Qwen3-8B --pinned 20GiB --json\n"
        "  devmem plan --total 120GiB --init-free 100GiB --free 80GiB --page-size 65536 --layers 36",
        "exit codes:\n  0  a plan\n  1  the figures leave no room for a KV cache, or the pinned plan does not fit "
        "--total (the message shows the arithmetic; with --model --json: an object with kind does_not_fit)\n"
        "  2  a usage error\n  3  with --model: the model is refused, its config cannot be read or sized (one line "
        "naming the value; with --json: an object with kind model_refused)",
    )
    how = plan.add_mutually_exclusive_group()
    how.add_argument(
        "--utilization", type=_fraction, default=0.9, metavar="U", help="share of the total to use (default 0.9)"
    )
    how.add_argument(
        "--pinned",
        type=_positive_size,
        default=None,
        metavar="SIZE",
        help="a fixed KV-cache size (checked against --total when given)",
    )
    plan.add_argument(
        "--total",
        type=_positive_size,
        default=None,
        metavar="SIZE",
        help="device memory (default: this machine's device --device)",
    )
    plan.add_argument("--device", type=_index, default=0, help="device whose total is used without --total")
    for flag, what in (
        ("--weights", "model weights"),
        ("--transient-peak", "memory a forward pass needs beyond what stays allocated (activations)"),
        ("--non-torch", "memory outside torch's allocator"),
        ("--graph-capture", "memory of captured device graphs (utilization path)"),
        ("--committed", "growable path: bytes already committed to the KV cache"),
    ):
        plan.add_argument(
            flag,
            type=_size,
            default=None if flag == "--weights" else 0,
            metavar="SIZE",
            help=f"{what} (default 0"
            + (", or the model's weights per rank with --model)" if flag == "--weights" else ")"),
        )
    for flag, what in (
        ("--init-free", "free device memory before the model loaded"),
        ("--free", "free device memory now, after the profile run"),
    ):
        plan.add_argument(
            flag, type=_size, default=None, metavar="SIZE", help=f"growable path (with the other): {what}"
        )
    plan.add_argument(
        "--page-size",
        type=_positive_size,
        default=None,
        metavar="SIZE",
        help="KV bytes of one page on one layer (required without --model; see above)",
    )
    plan.add_argument(
        "--layers",
        type=_positive("layer count"),
        default=None,
        help="layers holding a KV cache (required without --model)",
    )
    _add_granularity_flag(plan)
    _add_model_flags(plan)
    plan.add_argument(
        "--context",
        type=_positive("context length"),
        default=None,
        help="with --model: how many sequences of this many tokens fit",
    )
    plan.add_argument(
        "--sequences",
        type=_positive("sequence count"),
        default=None,
        help="with --model: the longest context this many sequences can have at once",
    )
    plan.add_argument("--json", action="store_true", help="machine-readable output with exact bytes")
    plan.set_defaults(handler=cmd_plan)
    _add_fit_parser(sub)
    from devmem.command import exporter

    exporter.add_exporter_flags(
        _sub(sub, "exporter", exporter.SUMMARY, exporter.DESCRIPTION, exporter.EXAMPLES, exporter.EXIT_CODES)
    )
    return parser


def _with_command(parser: argparse.ArgumentParser, argv: list[str]) -> list[str]:
    """``argv`` with ``info`` in front where it names no command: ``devmem --json`` is ``devmem info --json``.

    Left as it is: a command anywhere, ``--help``/``--version``, and a first word that is neither a command
    nor a value (argparse then names the valid commands)."""
    commands = set(parser._subparsers._group_actions[0].choices)  # type: ignore[union-attr, arg-type]
    if any(a in commands for a in argv) or any(a in ("-h", "--help", "--version") for a in argv):
        return argv
    words = [a for a in argv if not a.startswith("-")]
    if words and not words[0].replace(".", "", 1).isdigit():
        return argv
    return ["info", *argv]


#: Ctrl-C outside ``top``'s and ``--watch``'s sampling (those stop with 0): no traceback, the shell's 128 + SIGINT.
EXIT_INTERRUPTED = 130


def main(argv: Sequence[str] | None = None) -> int:
    try:
        return _run(argv)
    except KeyboardInterrupt:
        return EXIT_INTERRUPTED


def _run(argv: Sequence[str] | None) -> int:
    parser = build_parser()
    try:
        args = parser.parse_args(_with_command(parser, list(sys.argv[1:] if argv is None else argv)))
    except DevmemError as exc:  # --help or --version could not be written
        error_line(f"devmem: error: {exc}")
        return 1
    logging.basicConfig(level=logging.DEBUG if args.verbose else logging.WARNING, format="%(message)s")
    if getattr(args, "interval", None) is not None:
        args.watch = args.interval
    try:
        return args.handler(args)
    except DevmemError as exc:
        error_line(f"devmem: error: {exc}")
        if getattr(args, "json", False) and not isinstance(exc, OutputError):
            _emit_json({"kind": "error", "error": str(exc)})  # a program reading stdout gets a document too
        return 1
