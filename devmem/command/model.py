"""What the model-aware commands (``devmem plan --model`` and ``devmem fit``) share: the model's flags, loading it
from its folder, and the exit codes of a model that does not fit or is refused."""

from __future__ import annotations

import argparse
from collections.abc import Callable

from devmem.command.common import emit_json
from devmem.command.flags import positive, positive_size
from devmem.command.output import error_line

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


def model_command(handler: Callable[[argparse.Namespace], int]) -> Callable[[argparse.Namespace], int]:
    """``handler`` with a refused model (:class:`~devmem.planner.models.ModelConfigError`) as exit 3: one line on
    stderr, or with ``--json`` an object of kind ``model_refused`` on stdout."""

    def run(args: argparse.Namespace) -> int:
        from devmem.planner.models import ModelConfigError

        try:
            return handler(args)
        except ModelConfigError as exc:
            if args.json:
                emit_json(
                    {
                        "kind": "model_refused",
                        "error": str(exc),
                        "model_type": getattr(exc, "model_type", None),
                        "missing": list(getattr(exc, "missing", ())),
                    }
                )
            else:
                error_line(f"devmem: error: {exc}")
            return EXIT_MODEL_REFUSED

    return run


def add_model_flags(parser: argparse.ArgumentParser, *, required: bool = False) -> None:
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
        type=positive("tensor-parallel size"),
        default=None,
        help="tensor-parallel ranks the model is split over (default 1)",
    )
    parser.add_argument(
        "--kv-cache-dtype",
        "--kv-dtype",
        dest="kv_dtype",
        choices=KV_DTYPES,
        default=None,
        metavar="DTYPE",
        help=f"KV-cache dtype, as vLLM's --kv-cache-dtype: {', '.join(KV_DTYPES)} (default auto: the family's, as "
        "vLLM sets it)",
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
        type=positive("block size"),
        default=None,
        help=f"tokens per KV block (default {DEFAULT_BLOCK_SIZE})",
    )


def add_granularity_flag(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--allocation-granularity",
        type=positive_size,
        default=None,
        metavar="SIZE",
        help="what the cache's one allocation is rounded up to (2MiB for PyTorch's caching "
        "allocator, as devmem.engine.allocate_kv_cache allocates it); only whole units are used "
        "(default 1 byte)",
    )


def refuse_model_flags(args: argparse.Namespace) -> None:
    given = [name for name in _MODEL_FLAGS if getattr(args, name, None) is not None]
    if given:
        args.parser.error(f"--{given[0].replace('_', '-')} describes a model: give --model PATH with it")
    if args.page_size is None or args.layers is None:
        args.parser.error("give --page-size and --layers, or --model PATH to take them from a model's config")


def model_from_flags(args: argparse.Namespace):
    """The model of ``--model``; with ``--weights`` (per rank) its weights are those, so no key that only the
    estimate of the weights reads is needed."""
    from devmem.planner.models import load_model

    tp = args.tp or 1
    weights = getattr(args, "weights", None)
    given = (
        {} if weights is None else {"weights_bytes": weights * tp, "weights_source": "given with --weights, per rank"}
    )
    return load_model(args.model, kv_dtype=args.kv_dtype or "auto", tp=tp, dtype=args.dtype, **given)
