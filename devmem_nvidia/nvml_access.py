"""NVML access shared by devmem's NVIDIA backends (nvml, wsl2, uma): no platform policy here.

Everything takes an :class:`NvmlSession`, devmem's :class:`~devmem.sdk.sessions.VendorSession` for NVML: it wraps the
``pynvml`` module (or a scripted one from ``devmem_nvidia.testing``), initialises NVML once (thread-safe) and turns
NVML errors into :class:`NvmlCallError`, a :class:`~devmem.DevmemError`.

Public names:

- ``NvmlSession(nvml=None)``: a :class:`~devmem.sdk.sessions.VendorSession` (``NvmlSession.shared()``, the process-wide
  session of the real pynvml; ``NvmlSession.for_module(nvml)``, that one or a new one around an injected module;
  ``.module``, ``.has(name)``, ``.call(name, *args)``, ``.failure``, ``.action``, ``.shutdown()``), plus
  ``.call_newest(names, *args)``, ``.probe() -> (ok, reason)``, ``.device_count()``, ``.handle_by_index(i)``,
  ``.driver_version()``
- ``NvmlUnavailable(LibraryUnavailable)``: pynvml is missing or ``nvmlInit`` failed; ``.action`` says what to
  install where pynvml is missing (``NvmlSession.action`` too)
- ``NvmlCallError(DevmemError)``: ``.call``, ``.error`` (``"NotSupported"``, ``"GpuIsLost"``, ...), ``.not_supported``
- ``error_name(exc) -> str``
- ``MemoryReading(total, free, used, reserved, version)`` and ``read_memory(session, handle) -> MemoryReading``
  (v2 first, v1 where v2 is missing; ``runtime_total`` is ``total - reserved``)
- ``ProcessEntry(pid, used, gpu_instance_id, compute_instance_id, lists)`` and
  ``PROCESS_LISTS`` (compute, graphics, MPS clients; each newest NVML call first),
  ``running_processes(session, handle) -> dict[int, ProcessEntry]`` (every list, deduplicated by PID),
  ``find_process(session, handle, pids) -> ProcessEntry | None`` (compute list first, the others only if needed)
- ``device_uuid(session, handle)``, ``device_pci_bus_id(session, handle)``, ``device_name(session, handle)``,
  ``device_minor(session, handle)``, ``driver_model(session, handle) -> int | None``, ``normalise_bus_id(text)``
- The visible-device mapping (``CUDA_VISIBLE_DEVICES``/``CUDA_DEVICE_ORDER`` -> handles) is in
  :mod:`devmem_nvidia.visible`; PID-namespace handling in :mod:`devmem_nvidia.pidns`.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable
from typing import Any, NamedTuple

from devmem import DevmemError
from devmem.sdk import LibraryUnavailable, VendorSession, process_id, process_list, shown
from devmem.sdk import process_bytes as checked_process_bytes

log = logging.getLogger("devmem.nvidia")

#: ``usedGpuMemory`` when NVML cannot attribute memory (WDDM, some MIG and container setups).
NOT_AVAILABLE = (1 << 64) - 1

#: Errors meaning "this variant of the call does not exist here": try the next older one.
_MISSING_VARIANT = {"FunctionNotFound", "ArgumentVersionMismatch", "NotSupported", "LibraryMismatch"}

COMPUTE_CALLS = (
    "nvmlDeviceGetComputeRunningProcesses_v3",
    "nvmlDeviceGetComputeRunningProcesses",
    "nvmlDeviceGetComputeRunningProcesses_v2",
)
GRAPHICS_CALLS = (
    "nvmlDeviceGetGraphicsRunningProcesses_v3",
    "nvmlDeviceGetGraphicsRunningProcesses",
    "nvmlDeviceGetGraphicsRunningProcesses_v2",
)
MPS_CALLS = (
    "nvmlDeviceGetMPSComputeRunningProcesses_v3",
    "nvmlDeviceGetMPSComputeRunningProcesses",
    "nvmlDeviceGetMPSComputeRunningProcesses_v2",
)
#: NVML's process lists, in the order they are searched: CUDA processes, graphics contexts, MPS clients.
PROCESS_LISTS = (("compute", COMPUTE_CALLS), ("graphics", GRAPHICS_CALLS), ("mps", MPS_CALLS))


NOT_INSTALLED = "the Python package nvidia-ml-py (module pynvml) is not installed"
INSTALL_PYNVML = (
    "pip install nvidia-ml-py (a dependency of devmem-kv: it is missing only after an install with --no-deps)"
)


class NvmlUnavailable(LibraryUnavailable):
    """pynvml cannot be imported or NVML cannot be initialised (no driver, no library). ``action`` is what to do
    about it where that is known (:data:`INSTALL_PYNVML` where pynvml is missing)."""


class NvmlCallError(DevmemError):
    """An NVML call failed; ``error`` is the short NVML error name (``"NotSupported"``, ``"GpuIsLost"``)."""

    def __init__(self, call: str, error: str, detail: str = ""):
        self.call = call
        self.error = error
        super().__init__(f"{call} failed: {error}" + (f" ({detail})" if detail and detail != error else ""))

    @property
    def not_supported(self) -> bool:
        return self.error in _MISSING_VARIANT


def error_name(exc: BaseException) -> str:
    """``NVMLError_NotSupported`` -> ``"NotSupported"``; pynvml's version-mismatch error -> ``"LibraryMismatch"``."""
    name = type(exc).__name__
    if name == "NVMLLibraryMismatchError":
        return "LibraryMismatch"
    return name.removeprefix("NVMLError_") if name.startswith("NVMLError_") else name


class NvmlSession(VendorSession):
    """The NVML library (a :class:`~devmem.sdk.sessions.VendorSession`): ``nvml`` is the ``pynvml`` module or an
    object with the same names (``devmem_nvidia.testing.ScriptedNvml``); ``None`` imports ``pynvml`` on first use.
    NVML is thread-safe: calls are not serialised.
    """

    init_function = "nvmlInit"
    shutdown_function = "nvmlShutdown"
    unavailable = NvmlUnavailable

    def __init__(self, nvml: Any = None):
        super().__init__(nvml)
        self._variants: dict[tuple[str, ...], str] = {}
        self.memory_v1_only = False  # set once the driver has refused memory info v2
        self.memory_v2: Any = None  # the library's nvmlMemory_v2, looked up once

    def load_library(self) -> Any:
        try:
            import pynvml
        except Exception as exc:  # ImportError, or an OSError/AttributeError from a broken binding: never escape
            if isinstance(exc, ModuleNotFoundError) and exc.name == "pynvml":
                raise NvmlUnavailable(NOT_INSTALLED, INSTALL_PYNVML) from exc
            raise NvmlUnavailable(f"import pynvml failed: {exc}") from exc
        return pynvml

    def describe_error(self, exc: BaseException) -> str:
        return f"{error_name(exc)}: {exc}"

    def call_error(self, name: str, exc: BaseException) -> NvmlCallError:
        """NVML's errors by name, anything else (a RuntimeError from a broken binding, a ctypes error) by type."""
        return NvmlCallError(name, error_name(exc), str(exc))

    def missing_function(self, name: str) -> NvmlCallError:
        return NvmlCallError(name, "FunctionNotFound", "this pynvml has no such function")

    def probe(self) -> tuple[bool, str]:
        """``(True, "N device(s)")`` when NVML initialises and counts devices, else ``(False, why)``."""
        try:
            count = self.device_count()
        except DevmemError as exc:
            return False, str(exc)
        return count > 0, f"NVML reports {count} device(s)"

    def call_newest(self, names: tuple[str, ...], *args: Any) -> Any:
        """The first of ``names`` (newest first) that exists; remembers the one that worked."""
        known = self._variants.get(names)
        if known is not None:
            return self.call(known, *args)
        last: NvmlCallError | None = None
        for name in names:
            try:
                result = self.call(name, *args)
            except NvmlCallError as exc:
                if not exc.not_supported:
                    raise
                last = exc
                continue
            self._variants[names] = name
            return result
        assert last is not None
        raise last

    def device_count(self) -> int:
        return int(self.call("nvmlDeviceGetCount"))

    def handle_by_index(self, index: int) -> Any:
        return self.call("nvmlDeviceGetHandleByIndex", index)

    def driver_version(self) -> str | None:
        try:
            return _text(self.call("nvmlSystemGetDriverVersion"))
        except DevmemError:
            return None


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def _int(value: Any) -> int:
    return int(getattr(value, "value", value))


# ---- memory --------------------------------------------------------------------------------------
class MemoryReading(NamedTuple):
    """One NVML memory-info reading in bytes; ``reserved`` is ``None`` when only v1 answered."""

    total: int
    free: int
    used: int
    reserved: int | None
    version: int

    @property
    def runtime_total(self) -> int:
        """What the CUDA runtime calls total: ``total - reserved`` (v2), or v1's total."""
        return self.total - (self.reserved or 0)


def read_memory(session: NvmlSession, handle: Any) -> MemoryReading:
    """NVML memory info, v2 first (it separates the driver's reservation), v1 where v2 is missing."""
    if not session.memory_v1_only:
        version = session.memory_v2
        if version is None:
            version = session.memory_v2 = getattr(session.module, "nvmlMemory_v2", None)
        if version is None:
            session.memory_v1_only = True
        else:
            try:
                m = session.call("nvmlDeviceGetMemoryInfo", handle, version)
            except NvmlCallError as exc:
                if not exc.not_supported:
                    raise
                log.debug("devmem: NVML memory info v2 unavailable (%s); using v1", exc.error)
            else:
                return MemoryReading(m.total, m.free, m.used, m.reserved, 2)
    m = session.call("nvmlDeviceGetMemoryInfo", handle)
    session.memory_v1_only = True
    return MemoryReading(m.total, m.free, m.used, None, 1)


# ---- processes -----------------------------------------------------------------------------------
class ProcessEntry(NamedTuple):
    """A process NVML lists on a device. ``used`` is ``None`` where NVML cannot attribute memory."""

    pid: int
    used: int | None
    gpu_instance_id: int | None = None
    compute_instance_id: int | None = None
    lists: tuple[str, ...] = ("compute",)


def process_bytes(value: Any) -> int | None:
    """A per-process ``usedGpuMemory`` as bytes, or ``None`` where NVML means "not available": ``None`` (converted
    by nvidia-ml-py), the unsigned sentinel ``2**64 - 1`` or anything at or above ``2**63`` (a sentinel seen
    through a signed type), a negative number (``-1``), or something that is not a whole number (the checked
    readings' rule, :func:`devmem.sdk.process_bytes`)."""
    return checked_process_bytes(value)


def _entry(p: Any, kind: str) -> ProcessEntry | None:
    try:
        pid = process_id(p.pid)
        if pid is None:
            raise ValueError(f"pid {shown(p.pid)} is no process id")
        used = process_bytes(p.usedGpuMemory)
        gi = getattr(p, "gpuInstanceId", None)
        ci = getattr(p, "computeInstanceId", None)
        return ProcessEntry(
            pid,
            used,
            None if gi in (None, 0xFFFFFFFF) else int(gi),
            None if ci in (None, 0xFFFFFFFF) else int(ci),
            (kind,),
        )
    except (AttributeError, TypeError, ValueError) as exc:  # one odd entry never breaks the list
        log.debug("devmem: skipping an NVML %s process entry %r: %s", kind, p, exc)
        return None


def _pid(p: Any) -> int | None:
    """The entry's PID for matching against known PIDs: a plain ``int`` as it is (one out of range matches no
    known PID), anything else through :func:`devmem.sdk.process_id`."""
    pid = getattr(p, "pid", None)
    return pid if type(pid) is int else process_id(pid)


def _entries(raw: Iterable[Any], kind: str) -> list[ProcessEntry]:
    return [e for e in (_entry(p, kind) for p in raw) if e is not None]


def _process_list(session: NvmlSession, calls: tuple[str, ...], handle: Any) -> list[Any]:
    """One of NVML's process lists (newest call first), through :func:`devmem.sdk.process_list`: an answer
    that is no list (``None``, a number) raises :class:`NvmlCallError`, as a failed call would."""
    raw = session.call_newest(calls, handle)
    entries = process_list(raw)
    if entries is None:
        raise NvmlCallError(calls[0], "NotAList", f"answered {shown(raw)}, not a list of processes")
    return entries


def _merge(a: ProcessEntry, b: ProcessEntry) -> ProcessEntry:
    """NVML lists a process with several kinds of context in several lists, with the same total: keep one."""
    used = a.used if b.used is None else b.used if a.used is None else max(a.used, b.used)
    return ProcessEntry(a.pid, used, a.gpu_instance_id, a.compute_instance_id, a.lists + b.lists)


def running_processes(session: NvmlSession, handle: Any) -> dict[int, ProcessEntry]:
    """Every process on the device (compute, graphics and MPS-client lists), one entry per PID.

    A list whose every variant is unsupported counts as empty; other NVML errors raise :class:`NvmlCallError`.
    """
    by_pid: dict[int, ProcessEntry] = {}
    for kind, calls in PROCESS_LISTS:
        try:
            raw = _process_list(session, calls, handle)
        except NvmlCallError as exc:
            if not exc.not_supported:
                raise
            continue
        for e in _entries(raw, kind):
            by_pid[e.pid] = _merge(by_pid[e.pid], e) if e.pid in by_pid else e
    return by_pid


def _bytes_key(e: ProcessEntry) -> int:
    return -1 if e.used is None else e.used


def find_process(
    session: NvmlSession, handle: Any, pids: Iterable[int], further: Callable[[], bool] | None = None
) -> ProcessEntry | None:
    """The entry of any of ``pids`` (``None`` if NVML lists none of them).

    The compute list first, then the graphics and MPS-client lists only when not found, and only where
    ``further()`` (asked at most once) says they may hold one of ``pids`` (a process that maps none of the
    device's nodes is in no list): one NVML call in the common case (a CUDA process, or none on the device), and
    only the matching entries are converted, which keeps the overhead low. Raises :class:`NvmlCallError` when
    no list it reads can be read.
    """
    wanted = pids if isinstance(pids, (set, frozenset)) else set(pids)
    unsupported: NvmlCallError | None = None
    answered = False
    for index, (kind, calls) in enumerate(PROCESS_LISTS):
        if index == 1 and further is not None and not further():
            return None
        try:
            raw = _process_list(session, calls, handle)
        except NvmlCallError as exc:
            if not exc.not_supported:
                raise
            unsupported = exc
            continue
        answered = True
        best: ProcessEntry | None = None
        for p in raw:
            if _pid(p) in wanted:
                e = _entry(p, kind)
                if e is not None and (best is None or _bytes_key(e) > _bytes_key(best)):
                    best = e
        if best is not None:
            return best
    if not answered and unsupported is not None:
        raise unsupported
    return None


# ---- identity --------------------------------------------------------------------------------------
def device_uuid(session: NvmlSession, handle: Any) -> str:
    return _text(session.call("nvmlDeviceGetUUID", handle))


def device_name(session: NvmlSession, handle: Any) -> str:
    return _text(session.call("nvmlDeviceGetName", handle))


def device_pci_bus_id(session: NvmlSession, handle: Any) -> str:
    """The PCI bus id in NVML's 8-digit-domain form, upper case (``00000000:19:00.0``)."""
    return normalise_bus_id(_text(session.call("nvmlDeviceGetPciInfo", handle).busId))


def normalise_bus_id(bus_id: str) -> str:
    """``0000:19:00.0`` or ``00000000:19:00.0`` -> ``00000000:19:00.0`` (domain widened, upper case)."""
    bus_id = bus_id.strip().upper()
    domain, sep, rest = bus_id.partition(":")
    if sep and rest.count(":") == 1:
        return f"{domain.zfill(8)}:{rest}"
    return bus_id


def device_minor(session: NvmlSession, handle: Any) -> int | None:
    """The ``/dev/nvidia<N>`` minor number; ``None`` where NVML does not say (Windows, some VMs)."""
    try:
        return int(session.call("nvmlDeviceGetMinorNumber", handle))
    except NvmlCallError:
        return None


def driver_model(session: NvmlSession, handle: Any) -> int | None:
    """The current driver model (``NVML_DRIVER_WDDM`` = 0, ...) on Windows; ``None`` elsewhere (not supported)."""
    try:
        current = session.call("nvmlDeviceGetDriverModel", handle)
    except NvmlCallError:
        return None
    return _int(current[0] if isinstance(current, (list, tuple)) else current)


__all__ = [
    "COMPUTE_CALLS",
    "GRAPHICS_CALLS",
    "INSTALL_PYNVML",
    "MPS_CALLS",
    "NOT_INSTALLED",
    "NOT_AVAILABLE",
    "MemoryReading",
    "NvmlCallError",
    "NvmlSession",
    "NvmlUnavailable",
    "PROCESS_LISTS",
    "ProcessEntry",
    "device_minor",
    "device_name",
    "device_pci_bus_id",
    "device_uuid",
    "driver_model",
    "error_name",
    "find_process",
    "normalise_bus_id",
    "process_bytes",
    "read_memory",
    "running_processes",
]
