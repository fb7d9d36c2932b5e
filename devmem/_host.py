"""Host memory: the filesystem boundary (:class:`Files`), /proc/meminfo and cgroup limits, for every backend
that reads the host (the built-in ``cpu`` platform, :mod:`devmem.cpu`, and the unified-memory ones), and the C
heap's free pages given back before a measurement (:func:`trim_c_heap`)."""

from __future__ import annotations

import functools
import logging
import os
from collections.abc import Callable
from typing import Protocol

from devmem._text import parse_int
from devmem.types import DevmemError, KiB

log = logging.getLogger("devmem.host")

_NO_LIMIT = 1 << 60  # cgroup v1 reports "no limit" as a page-aligned LONG_MAX


class Files(Protocol):
    """The filesystem boundary backends read through (real, or scripted by devmem.testing)."""

    def read_text(self, path: str) -> str: ...

    def exists(self, path: str) -> bool: ...

    def listdir(self, path: str) -> list[str]: ...


class HostFiles:
    """The real filesystem."""

    def read_text(self, path: str) -> str:
        with open(path, encoding="utf-8", errors="replace") as f:
            return f.read()

    def exists(self, path: str) -> bool:
        return os.path.exists(path)

    def listdir(self, path: str) -> list[str]:
        return sorted(os.listdir(path))

    def write_text(self, path: str, text: str) -> None:
        """Write ``text`` to ``path`` (a control file such as ``/proc/self/clear_refs``); optional for a
        :class:`Files`: callers look it up with ``getattr`` and go without where it is missing."""
        with open(path, "w", encoding="ascii") as f:
            f.write(text)


REAL_FILES: Files = HostFiles()


def parse_meminfo(text: str) -> dict[str, int]:
    """``/proc/meminfo`` as a dict of bytes (``{"MemAvailable": 123..., ...}``): a figure in ``kB`` (the kernel's
    KiB) or without a unit (a count, ``HugePages_Total``); a line whose figure is not a whole number
    (:func:`devmem._text.parse_int`) or whose unit is another (``MB``: no kernel writes it) is skipped."""
    out: dict[str, int] = {}
    for line in text.splitlines():
        key, sep, rest = line.partition(":")
        fields = rest.split()
        value = parse_int(fields[0]) if sep and fields else None
        if value is None or len(fields) > 2 or fields[1:] not in ([], ["kB"]):
            continue
        out[key.strip()] = value * (KiB if fields[1:] else 1)
    return out


def read_meminfo(files: Files = REAL_FILES) -> dict[str, int]:
    """Read and parse ``/proc/meminfo``; raises :class:`DevmemError` when it has no MemTotal."""
    try:
        info = parse_meminfo(files.read_text("/proc/meminfo"))
    except OSError as exc:
        raise DevmemError(f"cannot read /proc/meminfo: {exc}") from exc
    if "MemTotal" not in info:
        raise DevmemError("/proc/meminfo has no MemTotal line in kB (the kernel's unit)")
    if "MemAvailable" not in info:  # kernels before 3.14
        info["MemAvailable"] = info.get("MemFree", 0) + info.get("Cached", 0) + info.get("Buffers", 0)
    return info


def page_cache_bytes(meminfo: dict[str, int]) -> int:
    """Reclaimable memory that MemAvailable counts and MemFree does not."""
    return max(0, meminfo["MemAvailable"] - meminfo.get("MemFree", 0))


def read_stripped(files: Files, path: str) -> str | None:
    """A file's text without surrounding whitespace, or ``None`` where it cannot be read."""
    try:
        return files.read_text(path).strip()
    except OSError:
        return None


def read_int(files: Files, path: str) -> int | None:
    """A file holding one whole number (sysfs, cgroup), or ``None`` where it is unreadable or not a number."""
    text = read_stripped(files, path)
    return None if text is None else parse_int(text)


def _stat_field(files: Files, path: str, key: str) -> int:
    try:
        for line in files.read_text(path).splitlines():
            name, _, value = line.partition(" ")
            number = parse_int(value) if name == key else None
            if number is not None:
                return number
    except OSError:
        pass
    return 0


def cgroup_memory(files: Files = REAL_FILES) -> tuple[int, int] | None:
    """``(limit, unreclaimable usage)`` of this process's tightest cgroup memory limit, or ``None``.

    Usage excludes the inactive file cache, which the kernel reclaims before it enforces the limit.
    """
    try:
        lines = files.read_text("/proc/self/cgroup").splitlines()
    except OSError:
        return None
    best: tuple[int, int] | None = None
    for line in lines:
        entry = line.split(":", 2)
        if len(entry) != 3:  # not "id:controllers:path": nothing to read from it
            continue
        _, controllers, path = entry
        if controllers == "":  # cgroup v2: check this group and every ancestor
            parts = [p for p in path.split("/") if p]
            for depth in range(len(parts), -1, -1):
                base = "/sys/fs/cgroup/" + "/".join(parts[:depth])
                limit = read_int(files, f"{base.rstrip('/')}/memory.max")
                usage = read_int(files, f"{base.rstrip('/')}/memory.current")
                if limit is None or usage is None:
                    continue
                used = usage - _stat_field(files, f"{base.rstrip('/')}/memory.stat", "inactive_file")
                if best is None or limit - used < best[0] - best[1]:
                    best = (limit, max(0, used))
        elif "memory" in controllers.split(","):
            base = "/sys/fs/cgroup/memory"
            limit = read_int(files, f"{base}/memory.limit_in_bytes")
            usage = read_int(files, f"{base}/memory.usage_in_bytes")
            if limit is None or usage is None or limit >= _NO_LIMIT:
                continue
            used = usage - _stat_field(files, f"{base}/memory.stat", "total_inactive_file")
            if best is None or limit - used < best[0] - best[1]:
                best = (limit, max(0, used))
    return best


def trim_c_heap() -> bool:
    """Give the pages the C allocator keeps free (``malloc_trim(0)``, glibc) back to the system; whether it ran.

    On host memory the C heap is to the process's figure what torch's cached blocks are to a GPU's: memory freed
    before a measurement but still resident, which the allocator may return in the middle of the next window and
    make that window's growth look smaller than its work. C libraries without ``malloc_trim`` (musl, macOS) keep
    no such pages resident in the same way; nothing is done there.
    """
    trim = _malloc_trim()
    if trim is None:
        return False
    trim(0)
    return True


@functools.cache
def _malloc_trim() -> Callable[[int], int] | None:
    """The C library's ``malloc_trim``, looked up once; ``None`` where it has none."""
    import ctypes

    try:
        trim = ctypes.CDLL(None).malloc_trim
    except (AttributeError, OSError):
        return None
    trim.argtypes, trim.restype = [ctypes.c_size_t], ctypes.c_int
    return trim
