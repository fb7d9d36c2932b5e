"""``devmem fit``: do N sequences of a context fit this machine's device? (exit 0 yes, 1 no)."""

from __future__ import annotations

import argparse

from devmem._deadline import bounded_reading
from devmem.command.common import add_command, emit_json, print_wrapped
from devmem.command.flags import device_index, fraction, positive, size
from devmem.command.model import (
    EXIT_DOES_NOT_FIT,
    MODEL_EXIT_CODES,
    add_granularity_flag,
    add_model_flags,
    model_command,
    model_from_flags,
)
from devmem.resolution.plugins import current_platform
from devmem.units import format_size


def cmd_fit(args: argparse.Namespace) -> int:
    """``devmem fit``: does (context, sequences) fit this machine's device? Exit 0 when it does, 1 when not."""
    from devmem.planner.capacity import DEFAULT_BLOCK_SIZE, fit

    model = model_from_flags(args)
    platform = current_platform()
    info = bounded_reading(  # DEVMEM_READ_TIMEOUT: a backend that never answers does not hang the verdict
        lambda: platform.device_memory_info(args.device), f"platform {platform.name!r}: reading device {args.device}"
    )
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
        emit_json(
            {
                **verdict,
                "platform": platform.name,
                "device": args.device,
                "model": model.as_dict(),
                "fit": result.as_dict(),
            }
        )
    else:
        print_wrapped(
            f"device {args.device} ({platform.name}): total {format_size(info.total)}, free {format_size(info.free)}",
            model.explain(),
            result.explain(),
        )
    return 0 if result.fits else EXIT_DOES_NOT_FIT


def add_parser(sub: argparse._SubParsersAction) -> None:
    """``devmem fit`` and its flags."""
    fit = add_command(
        sub,
        "fit",
        "do N sequences of a context fit this machine's device? (exit 0 yes, 1 no)",
        "Whether SEQUENCES sequences of CONTEXT tokens of a model fit in this machine's device at the given "
        "utilization, read from the model's config.json (no weights are loaded).",
        "  devmem fit --model ./Qwen3-8B --context 32768 --sequences 8\n"
        "  devmem fit --model ./Qwen3-8B/config.json --context 131072 --sequences 1 --tp 2 --json",
        MODEL_EXIT_CODES.format(ok="it fits", no="it does not fit (or another error devmem explains in one line)"),
    )
    add_model_flags(fit, required=True)
    fit.add_argument("--context", type=positive("context length"), required=True, help="tokens per sequence")
    fit.add_argument("--sequences", type=positive("sequence count"), required=True, help="sequences running at once")
    fit.add_argument("--utilization", type=fraction, default=0.9, help="share of the device to use (default 0.9)")
    fit.add_argument("--device", type=device_index, default=0, help="device index of the resolved platform (default 0)")
    for flag, what in (
        ("--transient-peak", "memory a forward pass needs beyond what stays allocated, from profiling"),
        ("--non-torch", "memory outside torch's allocator"),
        ("--graph-capture", "memory of captured device graphs"),
    ):
        fit.add_argument(flag, type=size, default=0, metavar="SIZE", help=f"{what} (default 0)")
    add_granularity_flag(fit)
    fit.add_argument("--json", action="store_true", help="machine-readable output with exact bytes")
    fit.set_defaults(handler=model_command(cmd_fit))
