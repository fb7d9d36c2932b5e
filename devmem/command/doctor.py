"""``devmem doctor``: explain this machine's device memory to an operator, finding by finding (the findings are
:mod:`devmem.findings`'s, which the exporter reads too); ``--json`` gives them to programs.
"""

from __future__ import annotations

import argparse
import sys

from devmem.command.common import add_command, emit_json, out
from devmem.command.flags import add_device_flag
from devmem.findings import Finding, diagnose
from devmem.platform import Platform
from devmem.resolution.plugins import current_platform
from devmem.units import format_size


def render(findings: list[Finding], platform_name: str, width: int = 80, paint=None) -> str:
    """Findings as text for people, wrapped to ``width`` columns; ``paint(text, style)`` colours the marks.

    Quiet where a node is healthy: a finding that is the same on several devices is said once for them
    (``devices 0-7: ...``), and info findings of one kind that differ by device are one line
    (:data:`ACROSS_DEVICES`), or one line per device with what to do said once; warnings keep each device's
    own words. ``--json`` keeps one finding per device."""
    from devmem.command.format import printable, wrap

    marks = {"ok": ("ok  ", "green"), "info": ("info", "dim"), "warning": ("WARN", "yellow")}
    lines = [f"platform: {platform_name}"]
    for severity, where, summaries, action in _said(findings):
        mark, style = marks.get(severity, (severity, "bold"))
        for summary in summaries:
            head = wrap(f"[{mark}] {where}: {printable(summary)}", width, "", "       ")
            if paint is not None:
                head[0] = head[0].replace(f"[{mark}]", f"[{paint(mark, style)}]", 1)
            lines += head
            where = where if len(summaries) == 1 else ""
        if action:
            lines += wrap(f"what to do: {printable(action)}", width, "       ", "       ")
    return "\n".join(lines)


def _said(findings: list[Finding]) -> list[tuple[str, str, list[str], str]]:
    """What :func:`render` says, in order: (severity, where, summaries, what to do) for each finding about the
    machine, and for each kind and severity of finding about devices."""
    order: list[Finding | tuple[str, str]] = []
    groups: dict[tuple[str, str], list[Finding]] = {}
    for f in findings:
        key = (f.kind, f.severity)
        if f.device is None:
            order.append(f)
        elif key not in groups:
            groups[key] = [f]
            order.append(key)
        else:
            groups[key].append(f)
    said: list[tuple[str, str, list[str], str]] = []
    for item in order:
        if isinstance(item, Finding):
            said.append((item.severity, "machine", [item.summary], item.action))
            continue
        group = groups[item]
        first, devices = group[0], [f.device for f in group if f.device is not None]
        if len({(f.summary, f.action) for f in group}) == 1:
            said.append((first.severity, _devices(devices), [first.summary], first.action))
        elif first.severity == "warning" or len({f.action for f in group}) > 1:
            said += [(f.severity, _devices([d]), [f.summary], f.action) for f, d in zip(group, devices, strict=True)]
        elif first.kind in ACROSS_DEVICES:
            said.append((first.severity, _devices(devices), [ACROSS_DEVICES[first.kind](group)], first.action))
        else:
            summaries = [f"device {f.device}: {f.summary}" for f in group]
            said.append((first.severity, _devices(devices), summaries, first.action))
    return said


def _devices(indices: list[int]) -> str:
    """``device 3``, ``devices 0-7``, ``devices 0-3, 6``."""
    if len(indices) == 1:
        return f"device {indices[0]}"
    runs: list[list[int]] = []
    for index in sorted(set(indices)):
        if runs and index == runs[-1][-1] + 1:
            runs[-1].append(index)
        else:
            runs.append([index])
    return "devices " + ", ".join(f"{r[0]}-{r[-1]}" if len(r) > 2 else ", ".join(map(str, r)) for r in runs)


def _co_tenants_across(group: list[Finding]) -> str:
    """Co-tenants on several devices, on one line: how many on each and what they hold."""
    counts = sorted(len(f.figures.get("processes", {})) for f in group)  # type: ignore[arg-type]
    held = sorted(int(f.figures.get("held", 0)) for f in group)  # type: ignore[call-overload]
    how_many = f"{counts[0]}" if counts[0] == counts[-1] else f"{counts[0]} to {counts[-1]}"
    plural = "process holds" if counts[-1] == 1 else "processes hold"
    size = format_size(held[0]) if held[0] == held[-1] else f"{format_size(held[0])} to {format_size(held[-1])}"
    return f"{how_many} other {plural} {size} on each (`devmem info` lists them)"


#: How findings of a kind that differ by device are said on one line.
ACROSS_DEVICES = {"co-tenants": _co_tenants_across}


def cmd_doctor(args: argparse.Namespace, platform: Platform | None = None) -> int:
    """Findings on ``platform`` (the resolved one by default) for people or programs; 1 when any is a warning."""
    from devmem.command.format import Painter, wants_colour, width_for

    platform = platform or current_platform()
    findings = diagnose(platform, args.device, count_self=False)
    warnings = sum(f.severity == "warning" for f in findings)
    if args.json:
        emit_json({"platform": platform.name, "warnings": warnings, "findings": [f.as_dict() for f in findings]})
    else:
        out.print(render(findings, platform.name, width_for(sys.stdout), Painter(wants_colour(sys.stdout))))
    return 1 if warnings else 0


def add_parser(sub: argparse._SubParsersAction) -> None:
    """``devmem doctor`` and its flags."""
    doctor = add_command(
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
    add_device_flag(doctor)
    doctor.set_defaults(handler=cmd_doctor)
