"""What ``devmem doctor`` and the exporter find about this machine's device memory, finding by finding.

Each :class:`Finding` says what is the case, with the numbers, and what to do about it. The checks
use only the platform contract, so they work on every backend: advice for a missing per-process figure
is picked by its :class:`~devmem.platform.ReasonKind`, and the allocator check looks at the torch device
module the platform declares, only when this process has already imported torch. Findings about the
machine rather than one device (a backend whose driver is loaded but whose library is missing) have
``device`` ``None``. :func:`diagnose` reads the devices and finds; :func:`device_findings` finds from one reading.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from devmem._deadline import bounded_reading, device_count
from devmem.engine._torch_device import initialised_module
from devmem.platform import DeviceReport, Platform, ReasonKind, device_report
from devmem.resolution.plugins import Candidate, current_platform, platform_candidates
from devmem.types import MiB
from devmem.units import format_size

if TYPE_CHECKING:
    from devmem.engine.reservations import DeviceReservations

#: Free memory below this share of total is worth a warning.
LOW_FREE_FRACTION = 0.10
#: Allocator cache below this is not worth mentioning.
CACHE_WORTH_MENTIONING = 64 * MiB


@dataclass(frozen=True)
class Finding:
    """One thing an operator should know about one device (``device`` ``None``: about the machine)."""

    device: int | None
    #: What the finding is about, for programs (``"co-tenants"``, ``"low-free-memory"``, ...).
    kind: str
    severity: str  # "ok", "info" or "warning"
    summary: str
    action: str
    #: The figures of ``summary`` in exact bytes (``{"free": ..., "total": ...}``; co-tenants by PID).
    figures: dict[str, object] = field(default_factory=dict)

    def as_dict(self) -> dict[str, object]:
        return {**self.__dict__, "figures": dict(self.figures)}


def _pid_list(others: dict[int, int], limit: int = 5) -> str:
    ranked = sorted(others.items(), key=lambda kv: -kv[1])
    shown = ", ".join(f"pid {pid} ({format_size(used)})" for pid, used in ranked[:limit])
    return shown + (f" and {len(ranked) - limit} more" if len(ranked) > limit else "")


#: What to do about a missing per-process figure, by the kind of its reason.
ADVICE = {
    ReasonKind.DRIVER_MODEL: (
        "this driver model cannot attribute memory to processes: run one engine per device, "
        "or size with a pinned KV cache (kv_cache_memory_bytes) so co-tenants cannot skew "
        "the profile"
    ),
    ReasonKind.PID_NAMESPACE: (
        "the driver reports host PIDs that this container cannot see: run the container with "
        "--pid=host, or let devmem learn its driver-side PID (it does once the device "
        "runtime is initialised)"
    ),
}
FALLBACK_ADVICE = (
    "devmem falls back to the device-wide change of free memory, which counts co-tenants' "
    "allocations as this engine's: avoid starting engines at the same moment on this device"
)


def _accounting(r: DeviceReport, platform: Platform) -> Finding:
    if r.process == 0 and platform.torch_device is not None:
        return Finding(
            r.index,
            "per-process-accounting",
            "info",
            "this process holds no memory here (no device context), so per-process accounting cannot be "
            "confirmed from here",
            "call devmem.findings.diagnose() inside the engine once its device context exists",
        )
    if r.process is not None:
        return Finding(
            r.index,
            "per-process-accounting",
            "ok",
            f"per-process accounting works: this process holds {format_size(r.process)}",
            "nothing to do: KV budgets are sized from this process's own memory, so co-tenants do not shrink them",
            {"process": r.process},
        )
    kind = ReasonKind(r.process_reason_kind) if r.process_reason_kind else None
    return Finding(
        r.index,
        "per-process-accounting",
        "warning",
        f"per-process accounting is unavailable: {r.process_reason or 'unknown'}",
        ADVICE.get(kind, FALLBACK_ADVICE) if kind is not None else FALLBACK_ADVICE,
    )


def _others(count: int) -> str:
    return f"{count} other process holds" if count == 1 else f"{count} other processes hold"


def _co_tenants(r: DeviceReport) -> Finding | None:
    if not r.other_processes:
        return None
    total = sum(r.other_processes.values())
    return Finding(
        r.index,
        "co-tenants",
        "info",
        f"{_others(len(r.other_processes))} {format_size(total)}: {_pid_list(r.other_processes)}",
        "each engine's utilization is a share of the whole device: keep the shares of all engines "
        "on this device summing to at most 1.0",
        {"held": total, "processes": {str(pid): used for pid, used in r.other_processes.items()}},
    )


def _low_free(r: DeviceReport) -> Finding | None:
    if r.total <= 0 or r.free >= LOW_FREE_FRACTION * r.total:
        return None
    return Finding(
        r.index,
        "low-free-memory",
        "warning",
        f"only {format_size(r.free)} of {format_size(r.total)} is free ({100 * r.free / r.total:.1f}%)",
        "an engine asking for utilization u needs u * total free at start: lower u, or stop "
        "the processes holding memory",
        {"free": r.free, "total": r.total},
    )


def _unified(r: DeviceReport, platform: Platform) -> Finding | None:
    if not r.integrated:
        return None
    if platform.torch_device is None:
        return Finding(
            r.index,
            "no-accelerator",
            "info",
            f"no accelerator platform is in use: the device is host RAM, {format_size(r.free)} free "
            f"({r.sources.get('free', 'MemAvailable')})",
            "if this machine has an accelerator, `devmem plugins` shows which backends were found "
            "and why each was or was not detected",
            {"free": r.free, "total": r.total},
        )
    free_source = r.sources.get("free", "what the platform reports")
    return Finding(
        r.index,
        "unified-memory",
        "info",
        f"device memory is host memory; free is {format_size(r.free)} ({free_source})",
        "size from devmem, not the runtime's mem_get_info (which ignores reclaimable page cache); "
        "memory the allocator keeps cached is memory the OS does not have, so release it "
        "(devmem.engine.profiling.release_allocator_cache) before allocating the KV cache",
        {"free": r.free, "total": r.total},
    )


def _paging(r: DeviceReport) -> Finding | None:
    if not r.pages_instead_of_failing or r.integrated:
        return None
    return Finding(
        r.index,
        "pages-instead-of-failing",
        "warning",
        "the driver pages over-subscribed device memory to host RAM instead of failing the "
        "allocation, so the allocator never frees its cache and retries",
        "release the allocator cache before the KV allocation and keep utilization below 1.0; "
        "a slow engine here often means device memory is being paged",
    )


def _allocator_cache(device: int, platform: Platform) -> Finding | None:
    module, _ = initialised_module(platform)
    if module is None:
        return None
    try:
        cached = int(module.memory_reserved(device)) - int(module.memory_allocated(device))
    except Exception:  # a device torch does not know; nothing to say
        return None
    if cached < CACHE_WORTH_MENTIONING:
        return None
    return Finding(
        device,
        "allocator-cache",
        "warning",
        f"torch's caching allocator holds {format_size(cached)} of free blocks in this process",
        "call devmem.engine.profiling.release_allocator_cache() right before allocating the KV cache",
        {"cached": cached},
    )


def _reservations(device: int, view: DeviceReservations | None) -> list[Finding]:
    """Over-commitment, stale entries and owners above their reservation, from the device's ledger."""
    if view is None:
        return []
    a, found = view.accounting, []
    if a.committed > a.total:
        found.append(
            Finding(
                device,
                "reservations-over-committed",
                "warning",
                f"reservations and unreserved use add up to {format_size(a.committed)}, "
                f"{format_size(a.committed - a.total)} more than the device's {format_size(a.total)}",
                "an engine may run out of memory: stop a process that holds memory without a reservation, or "
                "restart engines with smaller reservations",
                {"committed": a.committed, "reserved": a.reserved, "unreserved": a.unreserved, "total": a.total},
            )
        )
    over = [h for h in a.holdings if h.reserved is not None and h.used is not None and h.used > h.reserved]
    if over:
        found.append(
            Finding(
                device,
                "above-reservation",
                "warning",
                "; ".join(
                    f"PID {h.pid} uses {format_size(h.used or 0)}, above its reservation of "
                    f"{format_size(h.reserved or 0)}"
                    for h in over
                ),
                "reserve what the engine really uses (its budget plus weights, activations and the context), or "
                "lower its budget",
                {str(h.pid): {"reserved": h.reserved, "used": h.used} for h in over},
            )
        )
    if view.stale:
        found.append(
            Finding(
                device,
                "stale-reservations",
                "info",
                f"{len(view.stale)} reservation(s) of processes that are gone remain in {view.path}: "
                + ", ".join(f"PID {e.owner.pid} ({format_size(e.bytes)})" for e in view.stale),
                "nothing to do: they hold no memory and block no one, and the next reservation on this device "
                "reclaims them",
                {str(e.owner.pid): e.bytes for e in view.stale},
            )
        )
    if view.problem:
        found.append(Finding(device, "ledger-corrupt", "warning", view.problem, "the next reservation rewrites it"))
    return found


#: Words by which a platform note restates a finding's fact (the finding already says it, with what to do).
RESTATED_BY = {"pages-instead-of-failing": "over-subscribed"}


def _restates(note: str, report: DeviceReport, found: list[Finding]) -> bool:
    """True when ``note`` repeats a finding: the reason of the per-process figure, or a fact in RESTATED_BY."""
    return note == report.process_reason or any(RESTATED_BY.get(f.kind, "\0") in note for f in found)


def _unusable(candidates: list[Candidate]) -> list[Finding]:
    """A warning for each platform that is not detected although its backend knows what would make it usable."""
    return [
        Finding(
            None,
            "platform-unusable",
            "warning",
            f"platform {c.name!r} (from {c.distribution}) cannot be used: {c.reason}",
            c.action,
        )
        for c in candidates
        if not c.detected and c.action
    ]


def diagnose(
    platform: Platform | None = None,
    devices: list[int] | None = None,
    candidates: list[Candidate] | None = None,
    *,
    count_self: bool = True,
) -> list[Finding]:
    """Every finding for ``devices`` (all by default) of ``platform`` (the current one by default), each once,
    after those about the registered platforms ``candidates`` (by default this machine's,
    :func:`devmem.platform_candidates`). ``count_self=False`` (the ``devmem doctor`` command) leaves this
    process's own memory out of the reservations' accounting."""
    from devmem.engine.reservations import device_reservations

    platform = platform or current_platform()
    findings = _unusable(platform_candidates() if candidates is None else candidates)

    def read(device: int) -> tuple[DeviceReport, DeviceReservations | None]:
        report = device_report(platform, device)
        return report, device_reservations(platform, device, report, count_self=count_self)

    for device in devices if devices is not None else range(device_count(platform)):
        where = f"platform {platform.name!r}: reading device {device}"
        report, reservations = bounded_reading(functools.partial(read, device), where)  # DEVMEM_READ_TIMEOUT
        findings += device_findings(platform, report, reservations)
    return findings


def device_findings(platform: Platform, report: DeviceReport, reservations: DeviceReservations | None) -> list[Finding]:
    """Every finding about the device of ``report`` (one reading of it), with its ledger's ``reservations``
    (``None`` where it has none), each once."""
    device = report.index
    found = [_accounting(report, platform)]
    found += [
        f
        for f in (
            _co_tenants(report),
            _low_free(report),
            _unified(report, platform),
            _paging(report),
            _allocator_cache(device, platform),
        )
        if f is not None
    ]
    found += _reservations(device, reservations)
    found += [
        Finding(device, "platform-note", "info", note, "")
        for note in dict.fromkeys(report.notes)
        if not _restates(note, report, found)
    ]
    return found
