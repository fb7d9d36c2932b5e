"""``devmem doctor``: explain this machine's device memory to an operator, finding by finding (the findings are
:mod:`devmem.findings`'s, which the exporter reads too); ``--json`` gives them to programs.
"""

from __future__ import annotations

import argparse
import sys

from devmem.command.common import add_command, emit_json, out
from devmem.command.flags import device_index
from devmem.findings import Finding, diagnose
from devmem.platform import Platform
from devmem.resolution.plugins import current_platform


def render(findings: list[Finding], platform_name: str, width: int = 80, paint=None) -> str:
    """Findings as text for people, wrapped to ``width`` columns; ``paint(text, style)`` colours the marks."""
    from devmem.command.format import printable, wrap

    marks = {"ok": ("ok  ", "green"), "info": ("info", "dim"), "warning": ("WARN", "yellow")}
    lines = [f"platform: {platform_name}"]
    for f in findings:
        mark, style = marks.get(f.severity, (f.severity, "bold"))
        where = "machine" if f.device is None else f"device {f.device}"
        head = wrap(f"[{mark}] {where}: {printable(f.summary)}", width, "", "       ")
        if paint is not None:
            head[0] = head[0].replace(f"[{mark}]", f"[{paint(mark, style)}]", 1)
        lines += head
        if f.action:
            lines += wrap(f"what to do: {printable(f.action)}", width, "       ", "       ")
    return "\n".join(lines)


def cmd_doctor(args: argparse.Namespace, platform: Platform | None = None) -> int:
    """Findings on ``platform`` (the resolved one by default) for people or programs; 1 when any is a warning."""
    from devmem.command.format import Painter, wants_colour, width_for

    platform = platform or current_platform()
    findings = diagnose(platform, [args.device] if args.device is not None else None)
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
    doctor.add_argument("--device", type=device_index, default=None, help="only this device index")
    doctor.set_defaults(handler=cmd_doctor)
