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
from devmem.platform import DeviceReport, device_report
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
    reports = [device_report(platform, i) for i in indices]
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

    if args.model is not None:
        return cmd_plan_model(args)
    _refuse_model_flags(args)
    total = args.total
    if total is None and args.pinned is None:
        total = current_platform().device_memory_info(args.device).total
    growable = args.init_free is not None or args.free is not None
    if growable and args.pinned is not None:
        raise DevmemError("--pinned selects the pinned path and --init-free/--free the growable path; give one")
    if (args.init_free is None) != (args.free is None):
        raise DevmemError("the growable path needs both --init-free (free memory before the model loaded) and "
                          "--free (free memory now)")
    if args.committed and not growable:
        raise DevmemError("--committed applies to the growable path: give --init-free and --free with it")
    try:
        plan = plan_kv_cache(
            total=total, utilization=args.utilization, pinned_bytes=args.pinned,
            weights=0 if args.weights is None else args.weights,
            transient_peak_bytes=args.transient_peak, non_torch=args.non_torch, graph_capture=args.graph_capture,
            init_free_memory=args.init_free, free_memory=args.free, committed_bytes=args.committed,
            page_size_bytes=args.page_size, num_layers=args.layers,
            allocation_granularity=args.allocation_granularity or 1,
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


# --- model-aware planning: `devmem plan --model` and `devmem fit` ---------------------------------------------

_MODEL_FLAGS = ("tp", "kv_dtype", "dtype", "block_size", "context", "sequences")


def _positive(what: str) -> Callable[[str], int]:
    def parse(text: str) -> int:
        if not text.isdigit() or int(text) == 0:
            raise argparse.ArgumentTypeError(f"{text!r} is not a {what}: give a whole number > 0")
        return int(text)

    return parse


def _add_model_flags(parser: argparse.ArgumentParser, *, required: bool = False) -> None:
    from devmem.capacity import DEFAULT_BLOCK_SIZE
    from devmem.models import KV_DTYPES

    parser.add_argument("--model", default=None, required=required, metavar="PATH",
                        help="a model folder holding config.json (and its safetensors), or a config.json")
    parser.add_argument("--tp", type=_positive("tensor-parallel size"), default=None,
                        help="tensor-parallel ranks the model is split over (default 1)")
    parser.add_argument("--kv-dtype", choices=KV_DTYPES, default=None,
                        help="KV-cache dtype (default auto: the model's)")
    parser.add_argument("--dtype", choices=("bf16", "fp16", "fp32"), default=None,
                        help="the dtype the model is served in (default: the config's torch_dtype)")
    parser.add_argument("--block-size", type=_positive("block size"), default=None,
                        help=f"tokens per KV block (default {DEFAULT_BLOCK_SIZE})")


def _add_granularity_flag(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--allocation-granularity", type=_size, default=None, metavar="SIZE",
                        help="what the cache's one allocation is rounded up to (2MiB for PyTorch's caching "
                             "allocator, as devmem.allocate_kv_cache allocates it); only whole units are used "
                             "(default 1 byte)")


def _refuse_model_flags(args: argparse.Namespace) -> None:
    given = [name for name in _MODEL_FLAGS if getattr(args, name, None) is not None]
    if given:
        args.parser.error(f"--{given[0].replace('_', '-')} describes a model: give --model PATH with it")
    if args.page_size is None or args.layers is None:
        args.parser.error("give --page-size and --layers, or --model PATH to take them from a model's config")


def _load_model(args: argparse.Namespace):
    from devmem.models import load_model

    return load_model(args.model, kv_dtype=args.kv_dtype or "auto", tp=args.tp or 1, dtype=args.dtype)


def cmd_plan_model(args: argparse.Namespace) -> int:
    """``devmem plan --model``: the byte plan for this model's blocks, then what it holds in tokens."""
    from devmem.capacity import DEFAULT_BLOCK_SIZE, capacity, plan_for_model
    from devmem.types import NotEnoughMemoryError

    if args.page_size is not None or args.layers is not None:
        args.parser.error("--page-size and --layers come from the model's config with --model: leave them out")
    model = _load_model(args)
    block_size = args.block_size or DEFAULT_BLOCK_SIZE
    total = args.total
    if total is None and args.pinned is None:
        total = current_platform().device_memory_info(args.device).total
    granularity = args.allocation_granularity or 1
    sizing = {"total": total, "utilization": args.utilization, "pinned_bytes": args.pinned,
              "transient_peak_bytes": args.transient_peak, "non_torch": args.non_torch, "graph_capture": args.graph_capture,
              "allocation_granularity": granularity}
    if args.weights is not None:
        sizing["weights"] = args.weights
    try:
        plan = plan_for_model(model, block_size=block_size, **sizing)
    except NotEnoughMemoryError as exc:
        if not args.json:
            raise
        _emit_json({"model": model.as_dict(), "error": str(exc), "breakdown": exc.breakdown})
        return 1
    context, sequences = args.context, args.sequences
    if context is None and sequences is None:
        context, sequences = model.max_context, 1
    answer = capacity(model, plan.kv_cache_bytes, block_size=block_size, context=context, sequences=sequences,
                      allocation_granularity=granularity)
    if args.json:
        _emit_json({"model": model.as_dict(), "plan": plan.as_dict(), "capacity": answer.as_dict()})
    else:
        print("\n".join([*model.explain(), plan.explain(), *answer.lines()]))
    return 0


def cmd_fit(args: argparse.Namespace) -> int:
    """``devmem fit``: does (context, sequences) fit this machine's device? Exit 0 when it does, 1 when not."""
    from devmem.capacity import DEFAULT_BLOCK_SIZE, fit

    model = _load_model(args)
    platform = current_platform()
    info = platform.device_memory_info(args.device)
    result = fit(model, context=args.context, sequences=args.sequences, total=info.total, free=info.free,
                 utilization=args.utilization, block_size=args.block_size or DEFAULT_BLOCK_SIZE,
                 transient_peak_bytes=args.transient_peak, non_torch=args.non_torch, graph_capture=args.graph_capture,
                 allocation_granularity=args.allocation_granularity or 1)
    if args.json:
        _emit_json({"platform": platform.name, "device": args.device, "model": model.as_dict(),
                    "fit": result.as_dict()})
    else:
        print(f"device {args.device} ({platform.name}): total {gib(info.total)}, free {gib(info.free)}")
        print("\n".join([*model.explain(), *result.lines()]))
    return 0 if result.fits else 1


def _add_fit_parser(sub: argparse._SubParsersAction) -> None:
    fit = sub.add_parser("fit", help="do N sequences of a context fit this machine's device? (exit 0 yes, 1 no)")
    _add_model_flags(fit, required=True)
    fit.add_argument("--context", type=_positive("context length"), required=True, help="tokens per sequence")
    fit.add_argument("--sequences", type=_positive("sequence count"), required=True,
                     help="sequences running at once")
    fit.add_argument("--utilization", type=_fraction, default=0.9, help="share of the device to use (default 0.9)")
    fit.add_argument("--device", type=int, default=0, help="device index of the resolved platform (default 0)")
    for flag, what in (("--transient-peak", "memory a forward pass needs beyond what stays allocated, from profiling"),
                       ("--non-torch", "memory outside torch's allocator"),
                       ("--graph-capture", "memory of captured device graphs")):
        fit.add_argument(flag, type=_size, default=0, metavar="SIZE", help=f"{what} (default 0)")
    _add_granularity_flag(fit)
    fit.add_argument("--json", action="store_true", help="machine-readable output with exact bytes")
    fit.set_defaults(handler=cmd_fit, parser=fit)


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
    for flag, what in (("--weights", "model weights"),
                       ("--transient-peak", "memory a forward pass needs beyond what stays allocated (activations)"),
                       ("--non-torch", "memory outside torch's allocator"),
                       ("--graph-capture", "memory of captured device graphs (utilization path)"),
                       ("--committed", "growable path: bytes already committed to the KV cache")):
        plan.add_argument(flag, type=_size, default=None if flag == "--weights" else 0, metavar="SIZE",
                          help=f"{what} (default 0" + (", or the model's weights per rank with --model)"
                                                        if flag == "--weights" else ")"))
    for flag, what in (("--init-free", "free device memory before the model loaded"),
                       ("--free", "free device memory now, after the profile run")):
        plan.add_argument(flag, type=_size, default=None, metavar="SIZE",
                          help=f"growable path (with the other): {what}")
    plan.add_argument("--page-size", type=_size, default=None, metavar="SIZE",
                      help="KV bytes of one page on one layer (required without --model)")
    plan.add_argument("--layers", type=_count, default=None,
                      help="layers holding a KV cache (required without --model)")
    _add_granularity_flag(plan)
    _add_model_flags(plan)
    plan.add_argument("--context", type=_positive("context length"), default=None,
                      help="with --model: how many sequences of this many tokens fit")
    plan.add_argument("--sequences", type=_positive("sequence count"), default=None,
                      help="with --model: the longest context this many sequences can have at once")
    plan.add_argument("--json", action="store_true", help="machine-readable output with exact bytes")
    plan.set_defaults(handler=cmd_plan, parser=plan)
    _add_fit_parser(sub)
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
