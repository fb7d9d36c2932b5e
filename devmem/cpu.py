"""The built-in ``cpu`` backend (entry point ``cpu = "devmem.cpu"``): host RAM as the device.

It is the embedded default on a machine with no accelerator, so the ``devmem`` command and the conformance kit
run for real everywhere. It builds on the host readers of :mod:`devmem._host` (lent to backends by :mod:`devmem.sdk`).
"""

from __future__ import annotations

import logging
import os
import sys

from devmem._hookspecs import hookimpl
from devmem._host import REAL_FILES, Files, cgroup_memory, page_cache_bytes, read_meminfo
from devmem._text import parse_int
from devmem.platform import DeviceMemory, PlatformBase, ProcessMemory
from devmem.types import Detection, KiB, MemoryInfo, PlatformSpec
from devmem.units import format_size

log = logging.getLogger("devmem.cpu")


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
