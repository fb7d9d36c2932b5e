"""Host memory: the filesystem boundary, /proc/meminfo and cgroup limits, and the built-in ``cpu`` platform.

The ``cpu`` platform treats host RAM as the device. It is the embedded default on a machine with no
accelerator, so the ``devmem`` command and the conformance kit run for real everywhere.
"""

from __future__ import annotations

import logging
import os
import sys
from typing import Protocol

from devmem.platform import DeviceMemory, PlatformBase, ProcessMemory
from devmem.sdk.hookspecs import hookimpl
from devmem.sdk.parsing import parse_int
from devmem.types import Detection, DevmemError, KiB, MemoryInfo, PlatformSpec
from devmem.units import format_size

log = logging.getLogger("devmem.sdk.host")

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
    (:func:`devmem.sdk.parsing.parse_int`) or whose unit is another (``MB``: no kernel writes it) is skipped."""
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


class CpuPlatform(PlatformBase):
    """Host RAM as the device: free is MemAvailable, total is MemTotal, both within any cgroup limit."""

    name = "cpu"
    torch_device = None  # host memory: torch's device allocators do not manage it
    dist_backend = "gloo"

    def __init__(self, *, files: Files = REAL_FILES):
        self._files = files

    def device_count(self) -> int:
        return 1

    def _figures(self) -> tuple[dict[str, int], tuple[int, int] | None]:
        if sys.platform.startswith("linux") or self._files is not REAL_FILES:
            return read_meminfo(self._files), cgroup_memory(self._files)
        import psutil  # non-Linux hosts

        vm = psutil.virtual_memory()
        return {"MemTotal": vm.total, "MemAvailable": vm.available, "MemFree": vm.free}, None

    def _memory(self, device: int) -> DeviceMemory:
        meminfo, cgroup = self._figures()
        total, free = meminfo["MemTotal"], meminfo["MemAvailable"]
        sources = {
            "free": f"MemAvailable, includes {format_size(page_cache_bytes(meminfo))} reclaimable page cache",
            "total": "MemTotal",
        }
        if cgroup is not None:
            limit, used = cgroup
            total = min(total, limit)
            free = min(free, limit - used)
            if limit < meminfo["MemTotal"]:
                sources["total"] = f"cgroup memory limit ({format_size(limit)}, below MemTotal)"
                sources["free"] += ", capped by the cgroup limit"
        return DeviceMemory(MemoryInfo(free=max(0, min(free, total)), total=total), sources)

    def _process_memory(self, device: int) -> ProcessMemory:
        """The memory only this process holds: ``RssAnon + RssShmem`` of ``/proc/self/status`` (else statm's resident
        less its shared pages, else psutil's). File-backed pages (the libraries a forward first touches) are left
        out: they are page cache, which ``free`` (``MemAvailable``) already counts as available, shared by every
        process that maps them."""
        status = self._status_kib()
        if "RssAnon" in status and "RssShmem" in status:
            return ProcessMemory((status["RssAnon"] + status["RssShmem"]) * KiB)
        try:
            statm = self._files.read_text("/proc/self/statm").split()
            resident, shared = parse_int(statm[1]), parse_int(statm[2])
            if resident is not None and shared is not None:
                return ProcessMemory(max(0, resident - shared) * os.sysconf("SC_PAGE_SIZE"))
        except (OSError, IndexError, ValueError, AttributeError):  # no statm, or no sysconf off Linux
            pass
        import psutil

        info = psutil.Process().memory_info()
        return ProcessMemory(max(0, int(info.rss) - int(getattr(info, "shared", 0))))

    def _reset_process_peak(self, device: int) -> bool:
        """Reset the kernel's high-water mark of this process's resident memory (``5`` to
        ``/proc/self/clear_refs``, Linux 4.0 on; it is also what ``getrusage`` reports as ``maxrss``)."""
        write = getattr(self._files, "write_text", None)
        if write is None or "VmHWM" not in self._status_kib():
            return False
        try:
            write("/proc/self/clear_refs", "5")
        except (OSError, ValueError) as exc:  # a read-only /proc, a kernel without it
            log.debug("devmem: cannot reset this process's memory high-water mark: %s", exc)
            return False
        return True

    def _process_peak(self, device: int) -> int | None:
        """The largest ``RssAnon + RssShmem`` since the last reset, from below: the high-water mark ``VmHWM`` less
        the file pages held now (they only grow while a forward first touches code, so at the peak there were
        no more), and never below the figure now."""
        status = self._status_kib()
        if not {"VmHWM", "RssFile", "RssAnon", "RssShmem"} <= status.keys():
            return None
        now = status["RssAnon"] + status["RssShmem"]
        return max(now, status["VmHWM"] - status["RssFile"]) * KiB

    def _status_kib(self) -> dict[str, int]:
        """The memory lines of ``/proc/self/status`` in kB (``RssAnon``, ``RssFile``, ``RssShmem``, ``VmHWM``); the
        lines that are missing or not whole numbers are left out."""
        try:
            status = self._files.read_text("/proc/self/status")
        except (OSError, ValueError):
            return {}
        out: dict[str, int] = {}
        for line in status.splitlines():
            name, _, value = line.partition(":")
            if name in ("RssAnon", "RssFile", "RssShmem", "VmHWM"):
                kib = parse_int(value.strip().removesuffix("kB"))
                if kib is not None:
                    out[name] = kib
        return out

    def _is_integrated(self, device: int) -> bool:
        return True

    def _pages_instead_of_failing(self, device: int) -> bool:
        return True

    def _device_name(self, device: int) -> str:
        return "host memory"


def _detect_cpu() -> Detection:
    return Detection(True, "host memory is always available")


@hookimpl
def devmem_platforms():
    yield PlatformSpec(
        name="cpu",
        priority=0,
        detect=_detect_cpu,
        factory=CpuPlatform,
        description="host RAM as the device (built in; the default without an accelerator)",
    )
