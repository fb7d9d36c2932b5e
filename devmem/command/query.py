"""``devmem --query-gpu=index,memory.used --format=csv``: nvidia-smi's query form, for scripts.

Rows as nvidia-smi writes them: a header naming each field with its unit (``memory.used [MiB]``), then one line per
device, the values separated by ``", "``, sizes in whole MiB with their unit (``--format=csv,noheader,nounits``
leaves out the header and the units). Sizes are devmem's: ``memory.total`` is what the runtime can use (for
NVIDIA, nvidia-smi's total less what the driver reserves), ``memory.used`` is that total less ``memory.free``.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable

from devmem._text import shown
from devmem.platform import DeviceReport
from devmem.types import MiB


def _mib(nbytes: int) -> int:
    return nbytes // MiB


#: The fields devmem answers, by nvidia-smi's names: (unit, value of a device's report and the device count).
FIELDS: dict[str, tuple[str | None, Callable[[DeviceReport, int], object]]] = {
    "index": (None, lambda r, count: r.index),
    "name": (None, lambda r, count: r.name),
    "count": (None, lambda r, count: count),
    "memory.total": ("MiB", lambda r, count: _mib(r.total)),
    "memory.used": ("MiB", lambda r, count: _mib(r.total - r.free)),
    "memory.free": ("MiB", lambda r, count: _mib(r.free)),
}

#: The words ``--format`` takes, as nvidia-smi's does.
FORMAT_WORDS = ("csv", "noheader", "nounits")


def query_fields(text: str) -> list[str]:
    """``--query-gpu``'s value: field names separated by commas, each one of :data:`FIELDS`."""
    fields = [field.strip() for field in text.split(",")]
    unknown = [field for field in fields if field not in FIELDS]
    if unknown or not fields:
        raise argparse.ArgumentTypeError(
            f"{shown(unknown[0] if unknown else text)} is not a field devmem answers: give some of "
            f"{', '.join(FIELDS)}, separated by commas (--query-gpu=index,memory.used)"
        )
    return fields


def output_format(text: str) -> frozenset[str]:
    """``--format``'s value: ``csv``, with ``noheader`` and ``nounits`` as nvidia-smi takes them."""
    words = frozenset(word.strip() for word in text.split(","))
    if "csv" not in words or not words <= set(FORMAT_WORDS):
        raise argparse.ArgumentTypeError(
            f"{shown(text)} is not an output format: give csv, with noheader and nounits as you need them "
            "(--format=csv,noheader,nounits)"
        )
    return words


def lines(
    devices: list[dict[str, object]], count: int, fields: list[str], words: frozenset[str], first: bool
) -> list[str]:
    """The header line (``index, memory.used [MiB]``; where ``first`` and not ``noheader``), then one line per
    device of ``devices`` (one reading each, of a platform with ``count`` devices): each field's value, sizes in
    whole MiB (with `` MiB`` unless ``nounits``)."""
    from devmem.command.format import printable

    units = "nounits" not in words
    out = [", ".join(f"{f} [{FIELDS[f][0]}]" if units and FIELDS[f][0] else f for f in fields)]
    out = out if first and "noheader" not in words else []
    for device in devices:
        report: DeviceReport = device["report"]  # type: ignore[assignment]
        values = []
        for field in fields:
            unit, value = FIELDS[field]
            text = printable(str(value(report, count)))
            values.append(f"{text} {unit}" if unit and units else text)
        out.append(", ".join(values))
    return out
