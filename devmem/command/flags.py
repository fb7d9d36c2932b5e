"""The values the ``devmem`` commands' flags take, each refused with what is allowed: sizes (that remember how their
text was read, to echo it), device indices, utilizations, counts and watch intervals. Every number is read by the
ASCII parsers of :mod:`devmem._text` (``int()`` and ``float()`` also read Unicode digits and underscores), and a
value refused is echoed cut short (:func:`devmem._text.shown`)."""

from __future__ import annotations

import argparse
from collections.abc import Callable

from devmem._text import shown
from devmem.command.output import error_line


class _ReadSize(int):
    """A size flag's bytes that remember how the text was read (``80G`` -> ``80 GiB = 85899345920 bytes``)."""

    text: str
    how: str


def size(text: str) -> int:
    from devmem.units import read_size

    try:
        nbytes, how = read_size(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None
    read = _ReadSize(nbytes)
    read.text, read.how = text, how
    return read


#: Flags for a device-sized figure: a bare number below this many bytes is surely missing its unit.
_DEVICE_SIZED = {"--total": 1 << 20, "--pinned": 1 << 20, "--init-free": 1 << 20, "--free": 1 << 20}


def sizes_read(args: argparse.Namespace) -> dict[str, dict[str, object]]:
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


def sizes_read_lines(read: dict[str, dict[str, object]]) -> list[str]:
    """How each size that people read two ways was read: vLLM's letters (``80G``) and powers of 10 (``80GB``);
    sizes without a unit in one line (bytes); ``GiB`` says it itself."""
    lines = [
        f"{flag} {r['text']} read as {r['read_as']}"
        for flag, r in read.items()
        if not str(r["text"]).strip().isdigit() and not str(r["text"]).strip().lower().endswith("ib")
    ]
    bare = [f"{flag} {str(r['text']).strip()}" for flag, r in read.items() if str(r["text"]).strip().isdigit()]
    return lines + ([f"sizes without a unit are bytes: {', '.join(bare)}"] if bare else [])


def positive_size(text: str) -> int:
    value = size(text)
    if value == 0:
        raise argparse.ArgumentTypeError(f"{shown(text)} is zero bytes: give a size > 0")
    return value


def device_index(text: str) -> int:
    from devmem._text import parse_int

    value = parse_int(text)
    if value is None:
        raise argparse.ArgumentTypeError(
            f"{shown(text)} is not a device index: give a whole number >= 0 in ASCII digits"
        )
    return value


def device_list(text: str) -> list[int]:
    """Device indices as nvidia-smi's ``-i`` takes them: one (``1``) or a comma list (``0,2``), each once."""
    from devmem._text import parse_int

    indices = [parse_int(part) for part in text.split(",")]
    if not indices or any(i is None for i in indices):
        raise argparse.ArgumentTypeError(
            f"{shown(text)} is not a device index or a list of them: give whole numbers >= 0 in ASCII digits, "
            "separated by commas (0, or 0,2)"
        )
    return list(dict.fromkeys(i for i in indices if i is not None))


def add_device_flag(parser: argparse.ArgumentParser) -> None:
    """``--device``, with nvidia-smi's ``-i``/``--id`` spellings: the devices a report covers (every one by
    default); ``args.device`` is their list, or ``None``."""
    parser.add_argument(
        "-i",
        "--id",
        "--device",
        dest="device",
        type=device_list,
        default=None,
        metavar="N[,N...]",
        help="only these device indices (nvidia-smi's -i: 1, or 0,2)",
    )


def _decimal(text: str) -> float:
    """``text`` as a decimal in ASCII (``float()`` also reads full-width and other Unicode digits, and
    underscores), ``nan`` for anything else."""
    from devmem._text import parse_decimal

    value = parse_decimal(text)
    return float("nan") if value is None else value


def fraction(text: str) -> float:
    value = _decimal(text)
    if not 0 < value <= 1:
        raise argparse.ArgumentTypeError(f"{shown(text)} is not a utilization: give a number in (0, 1], e.g. 0.9")
    return value


def positive(what: str) -> Callable[[str], int]:
    def parse(text: str) -> int:
        from devmem._text import parse_int

        value = parse_int(text)
        if not value:
            raise argparse.ArgumentTypeError(f"{shown(text)} is not a {what}: give a whole number > 0")
        return value

    return parse


def interval(text: str) -> float:
    value = _decimal(text)
    if not 0.05 <= value <= 86400:
        raise argparse.ArgumentTypeError(
            f"{shown(text)} is not a watch interval: give seconds from 0.05 to 86400, e.g. 2 or 0.5"
        )
    return value


def interval_ms(text: str) -> float:
    """A watch interval in milliseconds (nvidia-smi's ``-lms``), as seconds."""
    value = _decimal(text)
    if not 50 <= value <= 86_400_000:
        raise argparse.ArgumentTypeError(
            f"{shown(text)} is not a watch interval in milliseconds: give 50 to 86400000, e.g. 500"
        )
    return value / 1000
