"""One reading of the devices, shared by ``devmem info``, ``devmem top`` and ``--watch``: each device's report with
the processes and reservations on it, its JSON, the facts that do not change between samples, and why the
platform was chosen. Each reading is bounded by ``DEVMEM_READ_TIMEOUT`` (:mod:`devmem._deadline`)."""

from __future__ import annotations

import functools
from collections.abc import Sequence
from typing import Any

from devmem._deadline import bounded_reading
from devmem._host import Files
from devmem._text import env_text
from devmem.command.common import yes
from devmem.platform import DeviceReport, Platform, read_device
from devmem.resolution.plugins import Candidate


def chosen_candidate(platform_name: str, cands: list[Candidate]) -> Candidate | None:
    """The candidate resolution chose, where ``platform_name`` is the resolved platform's."""
    return next((c for c in cands if c.chosen and c.name == platform_name), None)


def why_chosen(chosen: Candidate | None) -> str:
    if chosen is None:
        return "chosen"
    if env_text("DEVMEM_PLATFORM"):
        return f"forced by DEVMEM_PLATFORM; {chosen.reason}"
    return f"highest-priority detected platform ({chosen.priority}): {chosen.reason}"


def sample(platform: Platform, indices: Sequence[int], files: Files) -> list[dict[str, object]]:
    """One reading of every device in ``indices``: its report, with the processes on it (each device's bounded by
    ``DEVMEM_READ_TIMEOUT``)."""
    from devmem._processes import process_rows
    from devmem.engine.reservations import device_reservations

    def read(index: int) -> dict[str, object]:
        reading = read_device(platform, index)
        report = DeviceReport.from_reading(platform.name, reading)
        others = report.other_processes
        rows = None if others is None else process_rows(others, files, dict(reading.roles))
        reservations = device_reservations(platform, index, report, count_self=False)  # this command holds none
        return {"report": report, "processes": rows, "reservations": reservations}

    where = f"platform {platform.name!r}: reading device"
    return [bounded_reading(functools.partial(read, index), f"{where} {index}") for index in indices]


def device_json(device: dict[str, object]) -> dict[str, object]:
    report: DeviceReport = device["report"]  # type: ignore[assignment]
    rows: Any = device["processes"]
    reservations: Any = device["reservations"]
    return {
        **report.as_dict(),
        "available_to_new_process": report.free,
        "processes": None if rows is None else [row.as_dict() for row in rows],
        "reservations": None if reservations is None else reservations.as_dict(),
    }


def static_facts(r: DeviceReport, platform: Platform) -> list[tuple[str, str]]:
    """What a device's report says that does not change from one sample to the next."""
    rows: list[tuple[str, str]] = []
    if r.process is None and platform.torch_device is not None:
        rows.append(("per-process figures", f"unavailable: {r.process_reason}"))
    rows += [("integrated", yes(r.integrated)), ("pages instead of failing", yes(r.pages_instead_of_failing))]
    rows += [(f"{key} from", text) for key, text in r.sources.items()]
    return rows + [("note", note) for note in r.notes]
