"""``devmem plan``: a KV cache sized from figures given, or from a model's config (``--model``), with the
arithmetic."""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING

from devmem._deadline import bounded_reading
from devmem.command.common import add_command, emit_json, print_wrapped
from devmem.command.flags import device_index, fraction, positive, positive_size, size, sizes_read, sizes_read_lines
from devmem.command.model import (
    EXIT_DOES_NOT_FIT,
    add_granularity_flag,
    add_model_flags,
    model_command,
    model_from_flags,
    refuse_model_flags,
)
from devmem.resolution.plugins import current_platform
from devmem.types import DevmemError
from devmem.units import format_size

if TYPE_CHECKING:
    from devmem.planner.capacity import Capacity


def _machine_total(args: argparse.Namespace) -> tuple[int | None, list[str]]:
    """The total to plan with: ``--total``, else (without ``--pinned``) this machine's device ``--device``, with a
    line that says where it came from."""
    if args.total is not None or args.pinned is not None:
        return args.total, []
    platform = current_platform()
    total, name = bounded_reading(  # DEVMEM_READ_TIMEOUT: a backend that never answers does not hang the plan
        lambda: (platform.device_memory_info(args.device).total, platform.device_name(args.device)),
        f"platform {platform.name!r}: reading device {args.device}",
    )
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


def cmd_plan(args: argparse.Namespace) -> int:
    from devmem.planner.sizing import plan_kv_cache
    from devmem.types import NotEnoughMemoryError

    if args.model is not None:
        return model_command(cmd_plan_model)(args)
    refuse_model_flags(args)
    read = sizes_read(args)
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
        emit_json({"kind": "does_not_fit", "error": str(exc), "breakdown": exc.breakdown})
        return 1
    if args.json:
        emit_json(plan.as_dict())
    else:
        print_wrapped(plan.explain(), *total_lines, *sizes_read_lines(read))
    return 0


def cmd_plan_model(args: argparse.Namespace) -> int:
    """``devmem plan --model``: the byte plan for this model's blocks, then what it holds in tokens."""
    from devmem.planner.capacity import DEFAULT_BLOCK_SIZE, capacity, plan_for_model
    from devmem.types import NotEnoughMemoryError

    if args.page_size is not None or args.layers is not None:
        args.parser.error("--page-size and --layers come from the model's config with --model: leave them out")
    read = sizes_read(args)
    model = model_from_flags(args)
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
    context, sequences = args.context, args.sequences
    if context is None and sequences is None:
        context, sequences = model.max_context, 1

    def capacity_of(kv_cache_bytes: int) -> Capacity:
        return capacity(
            model,
            kv_cache_bytes,
            block_size=block_size,
            context=context,
            sequences=sequences,
            allocation_granularity=granularity,
        )

    try:
        _check_pinned(args, model.weights_bytes_per_rank if args.weights is None else args.weights)
        plan = plan_for_model(model, block_size=block_size, **sizing)
    except NotEnoughMemoryError as exc:
        if args.json:
            emit_json({"kind": "does_not_fit", "model": model.as_dict(), "error": str(exc), "breakdown": exc.breakdown})
            return EXIT_DOES_NOT_FIT
        # the per-token arithmetic still holds: what a token costs, and that no token or context fits
        none = capacity_of(0)
        print_wrapped(
            model.explain(),
            "KV cache: none fits (the error says why)",
            none.explain(),
            *_verdict(args, none),
            *total_lines,
            *sizes_read_lines(read),
        )
        raise
    answer = capacity_of(plan.kv_cache_bytes)
    if args.json:
        emit_json({"model": model.as_dict(), "plan": plan.as_dict(), "capacity": answer.as_dict()})
    else:
        print_wrapped(
            model.explain(),
            plan.explain(),
            answer.explain(),
            *_verdict(args, answer),
            *total_lines,
            *sizes_read_lines(read),
        )
    return 0


def _verdict(args: argparse.Namespace, answer: Capacity) -> list[str]:
    """Whether ``--sequences`` of ``--context`` tokens fit, where both were given."""
    if args.context is None or args.sequences is None:
        return []
    held = answer.sequences_at_context or 0
    return [
        f"{args.sequences} sequence(s) of {args.context} tokens: "
        + ("fit" if held >= args.sequences else f"do not fit ({held} do); `devmem fit` says what they need")
    ]


def add_parser(sub: argparse._SubParsersAction) -> None:
    """``devmem plan`` and its flags."""
    plan = add_command(
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
        "--utilization", type=fraction, default=0.9, metavar="U", help="share of the total to use (default 0.9)"
    )
    how.add_argument(
        "--pinned",
        type=positive_size,
        default=None,
        metavar="SIZE",
        help="a fixed KV-cache size (checked against --total when given)",
    )
    plan.add_argument(
        "--total",
        type=positive_size,
        default=None,
        metavar="SIZE",
        help="device memory (default: this machine's device --device)",
    )
    plan.add_argument("--device", type=device_index, default=0, help="device whose total is used without --total")
    for flag, what in (
        ("--weights", "model weights"),
        ("--transient-peak", "memory a forward pass needs beyond what stays allocated (activations)"),
        ("--non-torch", "memory outside torch's allocator"),
        ("--graph-capture", "memory of captured device graphs (utilization path)"),
        ("--committed", "growable path: bytes already committed to the KV cache"),
    ):
        plan.add_argument(
            flag,
            type=size,
            default=None if flag == "--weights" else 0,
            metavar="SIZE",
            help=f"{what} (default 0"
            + (", or the model's weights per rank with --model)" if flag == "--weights" else ")"),
        )
    for flag, what in (
        ("--init-free", "free device memory before the model loaded"),
        ("--free", "free device memory now, after the profile run"),
    ):
        plan.add_argument(flag, type=size, default=None, metavar="SIZE", help=f"growable path (with the other): {what}")
    plan.add_argument(
        "--page-size",
        type=positive_size,
        default=None,
        metavar="SIZE",
        help="KV bytes of one page on one layer (required without --model; see above)",
    )
    plan.add_argument(
        "--layers",
        type=positive("layer count"),
        default=None,
        help="layers holding a KV cache (required without --model)",
    )
    add_granularity_flag(plan)
    add_model_flags(plan)
    plan.add_argument(
        "--context",
        type=positive("context length"),
        default=None,
        help="with --model: how many sequences of this many tokens fit",
    )
    plan.add_argument(
        "--sequences",
        type=positive("sequence count"),
        default=None,
        help="with --model: the longest context this many sequences can have at once",
    )
    plan.add_argument("--json", action="store_true", help="machine-readable output with exact bytes")
    plan.set_defaults(handler=cmd_plan)
