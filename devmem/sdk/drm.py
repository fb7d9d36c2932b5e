"""A process's memory on a DRM device, from the kernel's standard fdinfo accounting.

Linux keeps, for every open DRM file descriptor, key-value lines in ``/proc/<pid>/fdinfo/<fd>``
(Documentation/gpu/drm-usage-stats.rst): ``drm-driver``, ``drm-pdev`` (the PCI address),
``drm-client-id``, and the memory of each region as ``drm-total-<region>`` (older kernels:
``drm-memory-<region>``), in bytes or with a ``KiB``/``MiB`` unit. Every DRM driver that implements it
is read the same way; a backend names its driver and the regions it allocates from.
"""

from __future__ import annotations

from collections.abc import Iterable

from devmem._host import Files
from devmem._text import parse_int
from devmem.platform import ProcessMemory, ReasonKind
from devmem.types import KiB, MiB

FDINFO = "/proc/self/fdinfo"

_UNIT = {"": 1, "KiB": KiB, "MiB": MiB}


def size(value: str) -> int | None:
    """``"1024 KiB"`` -> 1048576; ``None`` for a value that is not a DRM size."""
    parts = value.split()
    number = parse_int(parts[0]) if 1 <= len(parts) <= 2 else None
    if number is None or (len(parts) > 1 and parts[1] not in _UNIT):
        return None
    return number * _UNIT[parts[1] if len(parts) > 1 else ""]


def fields(text: str) -> dict[str, str]:
    """The ``key: value`` lines of one fdinfo file."""
    out = {}
    for line in text.splitlines():
        key, sep, value = line.partition(":")
        if sep:
            out[key.strip()] = value.strip()
    return out


def _client_bytes(client: dict[str, str], regions: Iterable[str]) -> int | str:
    """The client's bytes over ``regions`` (a region it does not list holds 0), or, for a value that is not a
    DRM size, the offending line (the figure is unknown then, not 0)."""
    total = 0
    for region in regions:
        key = f"drm-total-{region}" if f"drm-total-{region}" in client else f"drm-memory-{region}"
        raw = client.get(key)
        if raw is None:
            continue
        value = size(raw)
        if value is None:
            return f"{key}: {raw}"
        total += value
    return total


def client_memory(files: Files, driver: str, pci_slot: str | None, regions: Iterable[str]) -> ProcessMemory:
    """What this process holds on the DRM device at ``pci_slot`` (kernel form, ``0000:c6:00.0``) driven by
    ``driver``: the sum of ``regions`` over its DRM clients there, each client once (a duplicated descriptor
    shares its client id). A process that has not opened the device holds nothing: 0."""
    if pci_slot is None:
        return ProcessMemory.unknown(
            ReasonKind.NO_SOURCE, "the device's PCI slot is unknown (no PCI_SLOT_NAME in its uevent file)"
        )
    try:
        fds = files.listdir(FDINFO)
    except OSError as exc:
        return ProcessMemory.unknown(ReasonKind.QUERY_FAILED, f"{FDINFO} cannot be listed: {exc}")
    regions = tuple(regions)
    seen: set[str] = set()
    total = 0
    for fd in fds:
        try:
            client = fields(files.read_text(f"{FDINFO}/{fd}"))
        except OSError:
            continue  # closed since it was listed
        if client.get("drm-driver") != driver or client.get("drm-pdev", "").lower() != pci_slot.lower():
            continue
        key = client.get("drm-client-id", f"fd{fd}")
        if key in seen:
            continue
        seen.add(key)
        held = _client_bytes(client, regions)
        if isinstance(held, str):
            return ProcessMemory.unknown(
                ReasonKind.NOT_AVAILABLE,
                f"{FDINFO}/{fd} has {held!r}, which is not a DRM "
                "size (a number of bytes, KiB or MiB): this process's figure is unknown",
            )
        total += held
    return ProcessMemory(total)
