"""The ``nvml`` platform: discrete NVIDIA GPUs, whole or MIG instances, in or out of containers.

- ``device_memory_info``: NVML memory info v2, ``free = free`` and ``total = total - reserved`` (what
  ``cudaMemGetInfo`` reports), without creating a CUDA context; v1 on drivers without v2.
- ``get_process_memory_usage``: this process's entry in NVML's compute (then graphics) process list.
  NVML lists the PIDs the driver sees (host PIDs on some drivers, the caller's namespace PIDs on others); this
  process is looked up under its outer PID from ``NSpid`` (its own PID without one), else under the PID
  learned once from distinctive allocations (:mod:`devmem_nvidia.pidns`). A process that
  maps no NVIDIA device holds 0 bytes. Otherwise ``None``, with the reason in ``process_memory_reason``.
"""

from __future__ import annotations

import logging
import os
import sys
import threading
from collections.abc import Mapping
from typing import Any

from devmem.host import REAL_FILES, Files
from devmem.platform import DeviceMemory, PlatformBase, ProcessMemory, ReasonKind
from devmem.types import Detection, DevmemError, MemoryInfo
from devmem.units import format_size
from devmem_nvidia.driver import NO_DRIVER, driver_loaded
from devmem_nvidia.nvml_access import (
    MemoryReading,
    NvmlCallError,
    NvmlSession,
    device_minor,
    device_name,
    find_process,
    read_memory,
    running_processes,
    session_for,
)
from devmem_nvidia.pidns import (
    CudaDriverAllocator,
    DeviceAllocator,
    learn_driver_pid,
    maps_nvidia_device,
    namespace_pids,
)
from devmem_nvidia.visible import DeviceTable, VisibleDevice

log = logging.getLogger("devmem.nvidia")


def device_memory(session: NvmlSession, platform: str, device: int, dev: VisibleDevice) -> MemoryReading:
    """NVML's reading for a visible device, NVML errors raised as a :class:`DevmemError` that says what to do."""
    try:
        return read_memory(session, dev.handle)
    except NvmlCallError as exc:
        raise DevmemError(f"{platform}: cannot read the memory of device {device} ({dev.uuid}): {exc}. Check the "
                          "GPU with `nvidia-smi`; if it reports the same, the GPU or driver needs attention.") from exc


def integrated_devices(session: NvmlSession) -> list[str]:
    """Names of the NVML devices whose memory info is not supported: integrated parts (GB10, Jetson Thor)."""
    out = []
    for index in range(session.device_count()):
        handle = session.handle_by_index(index)
        try:
            read_memory(session, handle)
        except NvmlCallError as exc:
            if exc.error != "NotSupported":
                raise
            out.append(device_name(session, handle))
    return out


def detect_nvml(nvml: Any = None, files: Files = REAL_FILES, system: str = sys.platform) -> Detection:
    """NVML loads and lists at least one discrete GPU; integrated parts are left to the uma platform.

    Without ``nvml``, pynvml is imported only where an NVIDIA driver is loaded (:mod:`devmem_nvidia.driver`);
    where it is loaded but pynvml is missing, the detection's ``action`` says what to install.
    """
    if nvml is None and not driver_loaded(files, system):
        return Detection(False, NO_DRIVER)
    session = session_for(nvml)
    found, reason = session.probe()
    if not found:
        if session.action:  # pynvml failed to import, which is tried only where the driver is loaded
            return Detection(False, f"an NVIDIA driver is loaded, but {reason}", action=session.action)
        return Detection(False, reason)
    try:
        integrated = integrated_devices(session)
        count = session.device_count()
    except DevmemError as exc:
        return Detection(False, f"{reason}, but {exc}")
    if integrated and len(integrated) == count:
        return Detection(False, f"integrated: left to the uma platform ({', '.join(integrated)}: "
                                "NVML reports no device memory)")
    driver = session.driver_version()
    return Detection(True, reason + (f", driver {driver}" if driver else ""))


class NvmlPlatform(PlatformBase):
    """Discrete NVIDIA GPUs through NVML. See the module docstring.

    ``nvml``: the pynvml module or a scripted one (``None``: import pynvml lazily, shared by the process);
    ``files``: the /proc boundary; ``environ``: where ``CUDA_VISIBLE_DEVICES``/``CUDA_DEVICE_ORDER`` come from;
    ``allocator``: the runtime boundary used to learn this process's driver-side PID (default: the CUDA
    driver, only where this process already has a context); ``learn_pid=False`` never allocates.
    """

    name = "nvml"
    torch_device = "cuda"
    dist_backend = "nccl"

    def __init__(self, *, nvml: Any = None, files: Files = REAL_FILES, environ: Mapping[str, str] | None = None,
                 allocator: DeviceAllocator | None = None, learn_pid: bool = True):
        self._session = session_for(nvml)
        self._files = files
        self._environ = os.environ if environ is None else environ
        self._table = DeviceTable(self._session, self._environ)
        self._allocator = allocator if allocator is not None else CudaDriverAllocator(files)
        self._learn_pid = learn_pid
        self._lock = threading.Lock()
        self._ns_pids: set[int] | None = None
        self._learned: int | None = None
        self._learn_note: str | None = None
        self._learn_tried: set[int] = set()
        self._names: dict[int, str] = {}

    # ---- devices -------------------------------------------------------------------------------
    def device_count(self) -> int:
        return len(self._table.devices())

    def visible_device(self, device: int = 0) -> VisibleDevice:
        """CUDA device ``device`` as NVML knows it: its handle, UUID, PCI bus id and MIG parent."""
        return self._table.devices()[self.check_device(device)]

    def _memory(self, device: int) -> DeviceMemory:
        reading = device_memory(self._session, self.name, device, self._table.devices()[device])
        if reading.reserved is None:
            sources = {"free": "NVML memory info v1 free",
                       "total": "NVML memory info v1 total (this driver has no v2; it includes the driver's "
                                "reservation)"}
        else:
            sources = {"free": "NVML memory info v2 free",
                       "total": f"NVML memory info v2 total - reserved ({format_size(reading.reserved)} kept by the "
                                "driver)"}
        return DeviceMemory(MemoryInfo(free=reading.free, total=reading.runtime_total), sources)

    def _is_integrated(self, device: int) -> bool:
        return False

    def _pages_instead_of_failing(self, device: int) -> bool:
        return False

    # ---- this process --------------------------------------------------------------------------
    def _driver_pids(self) -> set[int]:
        """The PID to look for: the learned one, else the outermost from NSpid, else our own."""
        if self._learned is not None:
            return {self._learned}
        if self._ns_pids is None:
            self._ns_pids = {(namespace_pids(self._files) or [os.getpid()])[0]}
        return self._ns_pids

    def _unknown(self, device: int, kind: ReasonKind, text: str) -> ProcessMemory:
        log.debug("devmem: %s: no per-process figure for device %d: %s", self.name, device, text)
        return ProcessMemory.unknown(kind, text)

    def _holds_context(self, dev: VisibleDevice, device: int) -> bool:
        """Whether this process may hold memory on ``dev``: it maps the device and has a context there."""
        minor = device_minor(self._session, dev.parent_handle if dev.mig else dev.handle)
        if maps_nvidia_device(self._files, minor) is False:
            return False
        return self._allocator.has_context(device) is not False

    def _try_learning(self, device: int) -> None:
        """Learn the driver-side PID on ``device``, at most once per device once the runtime can allocate there."""
        with self._lock:
            if not self._learn_pid or self._learned is not None or device in self._learn_tried:
                return
            ready, why = self._allocator.available(device)
            if not ready:
                self._learn_note = f"cannot learn the driver-side PID yet: {why}"
                return
            self._learn_tried.add(device)
            handle = self._table.devices()[device].handle

            def usage() -> dict[int, int | None]:
                return {pid: e.used for pid, e in running_processes(self._session, handle).items()}

            try:
                self._learned, self._learn_note = learn_driver_pid(usage, self._allocator, device)
            except NvmlCallError as exc:
                self._learn_note = f"cannot learn the driver-side PID: {exc}"

    def _process_memory(self, device: int) -> ProcessMemory:
        dev = self._table.devices()[device]
        try:
            entry = find_process(self._session, dev.handle, self._driver_pids())
            if entry is None and self._holds_context(dev, device):
                self._try_learning(device)
                if self._learned is not None:
                    entry = find_process(self._session, dev.handle, {self._learned})
                if entry is None:
                    return self._unknown(device, ReasonKind.PID_NAMESPACE, self._not_listed(dev))
        except NvmlCallError as exc:
            return self._unknown(device, ReasonKind.QUERY_FAILED,
                                 f"NVML could not list the processes on this device: {exc}")
        if entry is None:
            return ProcessMemory(0)  # no mapping of this device, or no context on it: this process holds nothing there
        if entry.used is None:
            where = f"MIG instance {dev.uuid}" if dev.mig else "this device"
            return self._unknown(device, ReasonKind.NOT_AVAILABLE,
                                 f"NVML lists this process on {where} but reports its memory as not "
                                 "available (some MIG and container setups need more privileges)")
        return ProcessMemory(entry.used)

    def _not_listed(self, dev: VisibleDevice) -> str:
        pids = namespace_pids(self._files) or [os.getpid()]
        learned = f"; {self._learn_note}" if self._learn_note else ""
        return (f"this process (PID {pids[-1]}) uses {dev.uuid} but is not in NVML's process list: NVML lists the "
                f"PIDs the driver sees (host PIDs on this driver) and this PID namespace hides them{learned}. "
                "Run the container with --pid=host to get per-process figures")

    def _other_processes_memory(self, device: int) -> dict[int, int] | None:
        dev = self._table.devices()[device]
        try:
            entries = running_processes(self._session, dev.handle)
        except NvmlCallError:
            return None
        own = set(self._driver_pids())
        if not own & entries.keys() and self._holds_context(dev, device):
            self._try_learning(device)
            own = set(self._driver_pids())
            if not own & entries.keys():
                return None  # this process is somewhere in the list under a PID we do not know
        others = {pid: e.used for pid, e in entries.items() if pid not in own}
        if any(used is None for used in others.values()):
            return None
        return {pid: int(used) for pid, used in others.items() if used is not None}

    # ---- for people ----------------------------------------------------------------------------
    def _device_name(self, device: int) -> str:
        dev = self._table.devices()[device]
        if device not in self._names:
            try:
                self._names[device] = device_name(self._session, dev.handle)
            except NvmlCallError:
                return f"NVIDIA {dev.uuid}"
        return self._names[device]

    def _notes(self, device: int) -> list[str]:
        dev = self._table.devices()[device]
        out = []
        if dev.mig:
            out.append(f"MIG instance {dev.uuid} of {dev.parent_uuid}: memory figures are the instance's")
        if "CUDA_VISIBLE_DEVICES" in self._environ or "CUDA_DEVICE_ORDER" in self._environ:
            out.append(f"CUDA device {device} is {dev.uuid} at PCI {dev.pci_bus_id}")
        ns = namespace_pids(self._files)
        if self._learned is not None:
            out.append(f"PID namespace: the driver sees this process as PID {self._learned} ({self._learn_note})")
        elif len(ns) > 1:
            out.append(f"PID namespace: this process is PID {ns[-1]} here and PID {ns[0]} outside (NSpid)")
        driver = self._session.driver_version()
        if driver:
            out.append(f"NVIDIA driver {driver}")
        return out
