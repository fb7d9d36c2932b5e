"""The cgroup v2 ``dmem`` controller (Linux 6.14+): device-memory limits per DRM region, vendor-neutral.

A cgroup's ``dmem.max`` and ``dmem.current`` hold one line per region, ``<region> <bytes>`` (``max`` for no
limit), a region being ``drm/<PCI slot>/<name>`` (``drm/0000:03:00.0/vram0``). A limit binds every process in
the cgroup and its descendants, so this process is bound by the tightest one on the path from its cgroup
(``/proc/self/cgroup``, the ``0::`` line) up to the root.
"""

from __future__ import annotations

from devmem._host import REAL_FILES, Files, read_stripped
from devmem._text import parse_int
from devmem.sdk.limits import MemoryLimit

CGROUP_ROOT = "/sys/fs/cgroup"


def parse_regions(text: str) -> dict[str, int | None]:
    """``dmem.max``/``dmem.current`` text -> ``{region: bytes}``; ``None`` for ``max`` (no limit). Lines that are
    not ``<region> <whole number | max>`` are skipped."""
    out: dict[str, int | None] = {}
    for line in text.splitlines():
        parts = line.split()
        if len(parts) != 2:
            continue
        region, value = parts
        number = parse_int(value)
        if value == "max" or number is not None:
            out[region] = number
    return out


def cgroup_dirs(files: Files = REAL_FILES) -> list[str]:
    """This process's cgroup v2 directory and each ancestor up to the root (deepest first); ``[]`` without v2."""
    text = read_stripped(files, "/proc/self/cgroup")
    for line in (text or "").splitlines():
        hierarchy, _, rest = line.partition(":")
        controllers, _, path = rest.partition(":")
        if hierarchy == "0" and controllers == "":
            parts = [p for p in path.split("/") if p and p not in (".", "..")]
            return [CGROUP_ROOT + "".join("/" + p for p in parts[:depth]) for depth in range(len(parts), -1, -1)]
    return []


def dmem_limits(pci_slot: str, regions: tuple[str, ...] = (), files: Files = REAL_FILES) -> list[MemoryLimit]:
    """The ``dmem.max`` limits that bind this process on the DRM device at ``pci_slot`` (kernel form,
    ``0000:03:00.0``), for the regions whose name starts with one of ``regions`` (all regions when empty).
    Each limit carries its cgroup's ``dmem.current`` for that region as ``used``; ``None`` where the file, or its
    line for the region, cannot be read, so that :func:`devmem.sdk.limits.apply_limits` counts this process's own
    figure instead (or says that free may be overstated), never 0 bytes in use."""
    prefix = f"drm/{pci_slot.lower()}/"
    out = []
    for base in cgroup_dirs(files):
        limits = parse_regions(read_stripped(files, f"{base}/dmem.max") or "")
        current = parse_regions(read_stripped(files, f"{base}/dmem.current") or "")
        for region, limit in sorted(limits.items()):
            name = region[len(prefix) :]
            if limit is None or not region.startswith(prefix) or (regions and not name.startswith(regions)):
                continue
            out.append(MemoryLimit(limit, "cgroup dmem limit", f"{base}/dmem.max {region}", current.get(region)))
    return out


class DmemLimits:
    """:func:`dmem_limits` for a platform, reading nothing where the kernel has no ``dmem`` controller.

    Whether the controller exists (``dmem`` in ``/sys/fs/cgroup/cgroup.controllers``, the root of this process's
    cgroup namespace) is read once: it does not change while the system runs. Where it exists, every call reads
    the limits and their counts afresh (a cgroup's limit can change at any time). Without it a reading costs no
    file access instead of one per cgroup level (about 90 us a call on the H200)."""

    def __init__(self, files: Files = REAL_FILES):
        self._files = files
        self._controller: bool | None = None

    def controller_present(self) -> bool:
        if self._controller is None:
            text = read_stripped(self._files, f"{CGROUP_ROOT}/cgroup.controllers")
            self._controller = text is not None and "dmem" in text.split()
        return self._controller

    def __call__(self, pci_slot: str, regions: tuple[str, ...] = ()) -> list[MemoryLimit]:
        return dmem_limits(pci_slot, regions, self._files) if self.controller_present() else []


__all__ = ["CGROUP_ROOT", "DmemLimits", "cgroup_dirs", "dmem_limits", "parse_regions"]
