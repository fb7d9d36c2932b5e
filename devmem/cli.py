"""The ``devmem`` command: what this machine really has, and why an engine's KV cache is the size it is.

Exit codes: 0 success, 1 a :class:`~devmem.DevmemError` (one line, no traceback), 2 a usage error.
Human output shows GiB; ``--json`` output shows exact bytes.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
from typing import Callable, Sequence

from devmem import __version__
from devmem.platform import DeviceReport, describe
from devmem.plugins import Candidate, current_platform, platform_candidates
from devmem.types import DevmemError, gib


def _emit_json(obj: object) -> None:
    print(json.dumps(obj, indent=2, sort_keys=False))


def _yes(flag: bool) -> str:
    return "yes" if flag else "no"


def _chosen(platform_name: str, cands: list[Candidate]) -> Candidate | None:
    return next((c for c in cands if c.name == platform_name and c.detected), None)


def _why(chosen: Candidate | None) -> str:
    if chosen is None:
        return "chosen"
    if os.environ.get("DEVMEM_PLATFORM", "").strip():
        return f"forced by DEVMEM_PLATFORM; {chosen.reason}"
    return f"highest-priority detected platform ({chosen.priority}): {chosen.reason}"


def _device_lines(r: DeviceReport) -> list[str]:
    rows: list[tuple[str, str]] = [
        ("free / total", f"{gib(r.free)} / {gib(r.total)}"),
        ("this process", gib(r.process) if r.process is not None else f"unknown ({r.process_reason})"),
    ]
    if r.other_processes is not None:
        rows.append(("other processes", f"{gib(sum(r.other_processes.values()))} in {len(r.other_processes)} process(es)"))
    rows += [("integrated", _yes(r.integrated)), ("pages instead of failing", _yes(r.pages_instead_of_failing))]
    rows += [(f"{key} from", text) for key, text in r.sources.items()]
    rows += [("note", note) for note in r.notes]
    width = max(len(k) for k, _ in rows)
    return [f"device {r.index}: {r.name}"] + [f"  {k:<{width}}  {v}" for k, v in rows]


def cmd_info(args: argparse.Namespace) -> int:
    platform = current_platform()
    chosen = _chosen(platform.name, platform_candidates())
    because = _why(chosen)
    count = platform.device_count()
    indices = [args.device] if args.device is not None else range(count)
    reports = [describe(platform, i) for i in indices]
    if args.json:
        _emit_json({
            "platform": platform.name,
            "chosen_because": because,
            "distribution": chosen.distribution if chosen else None,
            "device_count": count,
            "devices": [r.as_dict() for r in reports],
        })
        return 0
    print(f"platform: {platform.name} ({because})")
    for r in reports:
        print("\n".join(_device_lines(r)))
    return 0


def cmd_plugins(args: argparse.Namespace) -> int:
    cands = platform_candidates()
    if args.json:
        _emit_json([c.as_dict() for c in cands])
        return 0
    header = ("", "name", "priority", "distribution", "version", "detected", "reason")
    rows = [("*" if c.chosen else "", c.name, str(c.priority), c.distribution, c.version, _yes(c.detected), c.reason)
            for c in cands]
    widths = [max(len(row[i]) for row in [header, *rows]) for i in range(len(header) - 1)]
    for row in [header, *rows]:
        print("  ".join(cell.ljust(w) for cell, w in zip(row, widths)) + "  " + row[-1])
    return 0


def cmd_doctor(args: argparse.Namespace) -> int:
    from devmem.doctor import diagnose, render

    platform = current_platform()
    findings = diagnose(platform, [args.device] if args.device is not None else None)
    if args.json:
        _emit_json({"platform": platform.name, "findings": [f.as_dict() for f in findings]})
    else:
        print(render(findings, platform.name))
    return 0


def _size(text: str) -> int:
    from devmem.units import parse_size

    try:
        return parse_size(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _fraction(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = float("nan")
    if not 0 < value <= 1:
        raise argparse.ArgumentTypeError(f"{text!r} is not a utilization: give a number in (0, 1], e.g. 0.9")
    return value


def _count(text: str) -> int:
    if not text.isdigit() or int(text) == 0:
        raise argparse.ArgumentTypeError(f"{text!r} is not a layer count: give a whole number > 0")
    return int(text)


def cmd_plan(args: argparse.Namespace) -> int:
    from devmem.sizing import plan_kv_cache
    from devmem.types import NotEnoughMemoryError

    total = args.total
    if total is None and args.pinned is None:
        total = current_platform().device_memory_info(args.device).total
    try:
        plan = plan_kv_cache(
            total=total, utilization=args.utilization, pinned_bytes=args.pinned, weights=args.weights,
            activation_peak=args.activation_peak, non_torch=args.non_torch, cuda_graph=args.cuda_graph,
            page_size_bytes=args.page_size, num_layers=args.layers,
        )
    except NotEnoughMemoryError as exc:
        if not args.json:
            raise
        _emit_json({"error": str(exc), "breakdown": exc.breakdown})
        return 1
    if args.json:
        _emit_json(plan.as_dict())
    else:
        print(plan.explain())
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="devmem",
        description="Show what this machine's accelerators really have, and size KV caches from it.",
    )
    parser.add_argument("--version", action="version", version=f"devmem {__version__}")
    parser.add_argument("-v", "--verbose", action="store_true", help="log debug details of resolution")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")

    info = sub.add_parser("info", help="device memory per device (the default command)")
    info.add_argument("--json", action="store_true", help="machine-readable output with exact bytes")
    info.add_argument("--device", type=int, default=None, help="only this device index")
    info.set_defaults(handler=cmd_info)

    plugins = sub.add_parser("plugins", help="every registered platform, detected or not, and why")
    plugins.add_argument("--json", action="store_true", help="machine-readable output")
    plugins.set_defaults(handler=cmd_plugins)
    doctor = sub.add_parser("doctor", help="explain this machine's device memory, with what to do")
    doctor.add_argument("--json", action="store_true", help="machine-readable output")
    doctor.add_argument("--device", type=int, default=None, help="only this device index")
    doctor.set_defaults(handler=cmd_doctor)

    plan = sub.add_parser("plan", help="size a KV cache from figures you give (sizes like 16GiB, 1.5GB, 4096)")
    how = plan.add_mutually_exclusive_group()
    how.add_argument("--utilization", type=_fraction, default=0.9, help="share of the total to use (default 0.9)")
    how.add_argument("--pinned", type=_size, default=None, metavar="SIZE", help="a fixed KV-cache size")
    plan.add_argument("--total", type=_size, default=None, metavar="SIZE",
                      help="device memory (default: this machine's device --device)")
    plan.add_argument("--device", type=int, default=0, help="device whose total is used without --total")
    for flag, what in (("--weights", "model weights"), ("--activation-peak", "peak activation memory of a forward pass"),
                       ("--non-torch", "memory outside torch's allocator"), ("--cuda-graph", "CUDA graph estimate")):
        plan.add_argument(flag, type=_size, default=0, metavar="SIZE", help=f"{what} (default 0)")
    plan.add_argument("--page-size", type=_size, required=True, metavar="SIZE", help="KV bytes of one page on one layer")
    plan.add_argument("--layers", type=_count, required=True, help="layers holding a KV cache")
    plan.add_argument("--json", action="store_true", help="machine-readable output with exact bytes")
    plan.set_defaults(handler=cmd_plan)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.DEBUG if args.verbose else logging.WARNING, format="%(message)s")
    handler: Callable[[argparse.Namespace], int] | None = getattr(args, "handler", None)
    if handler is None:  # bare `devmem` is `devmem info`
        args = parser.parse_args([*(argv if argv is not None else sys.argv[1:]), "info"])
        handler = args.handler
    try:
        return handler(args)
    except DevmemError as exc:
        print(f"devmem: error: {exc}", file=sys.stderr)
        return 1
    except BrokenPipeError:  # `devmem | head`
        return 0
