"""The ``nvml`` platform: discrete NVIDIA GPUs, whole or MIG instances, in or out of containers.

- ``device_memory_info``: NVML memory info v2, ``free = free`` and ``total = total - reserved`` (what
  ``cudaMemGetInfo`` reports), without creating a CUDA context; v1 on drivers without v2. Both are
  capped by every limit that binds this process: the environment's (MPS, HAMi-style), the cgroup's ``dmem.max``,
  the MPS control daemon's default limit (:mod:`devmem_nvidia.mps_control`), and those only the CUDA runtime
  shows where this process holds a context (:mod:`devmem_nvidia.runtime_caps`). The environment's limits and the
  daemon's default are taken once per device, at its first reading (a variable set later is not read). Where no
  limit can bind (none of those, no cgroup ``dmem`` controller) the call is one NVML call; the runtime is asked on
  every call only where it can show a cap, decided once per device at the first reading that sees this
  process's context there: the MPS daemon's pipe exists, or the runtime's total is below NVML's.
- ``get_process_memory_usage``: 0 without asking NVML where this process maps no NVIDIA device node (it has
  no context anywhere, so it is in none of NVML's lists: a PID listed there is another namespace's process); else
  this process's entry in NVML's compute (then graphics, then MPS-client) process list. NVML lists the PIDs the
  driver sees (host PIDs on some drivers, the caller's namespace PIDs on others); this process is looked up under
  its outer PID from ``NSpid`` (its own PID without one), else under the PID :meth:`NvmlPlatform.prepare`
  learned. Once this process has been seen mapping a device node the maps are not checked first again (a context
  stays mapped while the process runs): the compute list answers in one NVML call, and the other lists are read
  only where it does not hold this process. Otherwise ``None``, with the reason in ``process_memory_reason``
  (which says to call ``prepare`` where it has not run).
- ``prepare(device)``: the one step that may do device work. Where this process holds a CUDA context on the
  device but NVML does not list it under a PID it knows (a container without ``--pid=host`` on a driver that
  lists host PIDs), it allocates 42 MiB and then 26 MiB through the CUDA driver (``cuMemAlloc`` on the primary
  context, freed at once) and learns the driver-side PID as the one whose usage moved by exactly those sizes
  (:mod:`devmem_nvidia.pidns`). Readings never allocate.
"""

from __future__ import annotations

import logging
import os
import sys
from collections.abc import Mapping
from typing import Any, NamedTuple

from devmem import Detection, DevmemError, MemoryInfo, PlatformBase
from devmem.sdk import (
    REAL_FILES,
    DeviceMemory,
    DeviceReading,
    DmemLimits,
    Files,
    ForkSafeLock,
    MemoryLimit,
    ProcessMemory,
    ReasonKind,
    apply_limits,
    checked_memory,
    format_size,
)
from devmem_nvidia.driver import NO_DRIVER, driver_loaded
from devmem_nvidia.driver_limits import DriverLimits, read_driver_limits
from devmem_nvidia.limits import env_limits
from devmem_nvidia.mps_control import MpsDefaults, Runner, pipe_directory, run_control
from devmem_nvidia.nvml_access import (
    MemoryReading,
    NvmlCallError,
    NvmlSession,
    ProcessEntry,
    device_minor,
    device_name,
    find_process,
    read_memory,
    running_processes,
)
from devmem_nvidia.pidns import (
    AddressSpaceFiles,
    CudaDriverAllocator,
    DeviceAllocator,
    learn_driver_pid,
    maps_nvidia_device,
    namespace_pids,
)
from devmem_nvidia.runtime_caps import RuntimeView, runtime_limits, slack
from devmem_nvidia.visible import DeviceTable, VisibleDevice, mig_instances

log = logging.getLogger("devmem.nvidia")

#: ``/proc/<pid>/comm`` of the MPS server ``nvidia-cuda-mps-server``: the kernel keeps 15 characters of a command.
MPS_SERVER_COMM = "nvidia-cuda-mps-server"[:15]
#: What ``devmem info`` calls the MPS server (``process_roles``).
MPS_SERVER = "MPS server"
#: Figures at or above this are no bytes (the checked-readings rule, :func:`devmem.sdk.checked_memory`).
FIGURE_LIMIT = 1 << 64


def device_memory(session: NvmlSession, platform: str, device: int, dev: VisibleDevice) -> MemoryReading:
    """NVML's reading for a visible device, NVML errors raised as a :class:`DevmemError` that says what to do."""
    try:
        return read_memory(session, dev.handle)
    except NvmlCallError as exc:
        raise DevmemError(
            f"{platform}: cannot read the memory of device {device} ({dev.uuid}): {exc}. Check the "
            "GPU with `nvidia-smi`; if it reports the same, the GPU or driver needs attention."
        ) from exc


class DeviceSurvey(NamedTuple):
    """What detection learns from reading every NVML device's memory once."""

    integrated: list[str]  # names of devices whose memory info is not supported (GB10, Jetson Thor)
    restricted: list[str]  # GPUs whose own memory is denied while their MIG instances are readable, for people
    device_count: int


def survey_devices(session: NvmlSession) -> DeviceSurvey:
    """Read each NVML device's memory: ``NotSupported`` marks an integrated part; any other refusal is
    tolerated on a GPU whose MIG instances can be read (a MIG container, where NVML answers ``NoPermission``
    for the parent GPU), and raised otherwise."""
    integrated, restricted = [], []
    count = session.device_count()
    for index in range(count):
        handle = session.handle_by_index(index)
        try:
            read_memory(session, handle)
        except NvmlCallError as exc:
            if exc.error == "NotSupported":
                integrated.append(device_name(session, handle))
                continue
            instances = mig_instances(session, handle, "", "")
            if not instances:
                raise
            for instance in instances:
                read_memory(session, instance.handle)
            restricted.append(
                f"GPU {index}'s own memory is not readable ({exc.error}); its {len(instances)} MIG "
                "instance(s) are sized from their own readings"
            )
    return DeviceSurvey(integrated, restricted, count)


def detect_nvml(nvml: Any = None, files: Files = REAL_FILES, system: str = sys.platform) -> Detection:
    """NVML loads and lists at least one discrete GPU; integrated parts are left to the uma platform.

    Without ``nvml``, pynvml is imported only where an NVIDIA driver is loaded (:mod:`devmem_nvidia.driver`);
    where it is loaded but pynvml is missing, the detection's ``action`` says what to install.
    """
    if nvml is None and not driver_loaded(files, system):
        return Detection(False, NO_DRIVER)
    session = NvmlSession.for_module(nvml)
    found, reason = session.probe()
    if not found:
        if session.action:  # pynvml failed to import, which is tried only where the driver is loaded
            return Detection(False, f"an NVIDIA driver is loaded, but {reason}", action=session.action)
        return Detection(False, reason)
    try:
        survey = survey_devices(session)
    except DevmemError as exc:
        return Detection(False, f"{reason}, but {exc}")
    if survey.integrated and len(survey.integrated) == survey.device_count:
        return Detection(
            False,
            f"integrated: left to the uma platform ({', '.join(survey.integrated)}: NVML reports no device memory)",
        )
    driver = session.driver_version()
    return Detection(True, "; ".join([reason + (f", driver {driver}" if driver else ""), *survey.restricted]))


def memory_sources(reserved: int | None) -> dict[str, str]:
    """Where NVML memory info's figures come from, for people (``reserved`` is ``None`` for v1)."""
    if reserved is None:
        return {
            "free": "NVML memory info v1 free",
            "total": "NVML memory info v1 total (this driver has no v2; it includes the driver's reservation)",
        }
    return {
        "free": "NVML memory info v2 free",
        "total": f"NVML memory info v2 total - reserved ({format_size(reserved)} kept by the driver)",
    }


def kernel_slot(bus_id: str) -> str:
    """NVML's ``00000000:19:00.0`` -> the kernel's ``0000:19:00.0`` (what cgroup ``dmem`` regions name)."""
    domain, _, rest = bus_id.strip().lower().partition(":")
    return f"{domain[-4:].zfill(4)}:{rest}"


class NvmlPlatform(PlatformBase):
    """Discrete NVIDIA GPUs through NVML. See the module docstring.

    ``nvml``: the pynvml module or a scripted one (``None``: import pynvml lazily, shared by the process);
    ``files``: the /proc boundary; ``environ``: where ``CUDA_VISIBLE_DEVICES``/``CUDA_DEVICE_ORDER`` come from;
    ``allocator``: the runtime boundary :meth:`prepare` learns this process's driver-side PID through (default:
    the CUDA driver, only where this process already has a context); ``learn_pid=False``: ``prepare`` never
    allocates; ``cuda``: the ``libcuda`` whose ``cuMemGetInfo`` shows caps NVML cannot see (``None``: the real
    one with real NVML, only where this process has loaded it and holds a context; see
    :mod:`devmem_nvidia.runtime_caps`);
    ``mps_control``: how to ask the MPS control daemon for its default limit (``None``: its program, with real
    NVML; see :mod:`devmem_nvidia.mps_control`).
    """

    name = "nvml"
    torch_device = "cuda"
    dist_backend = "nccl"

    def __init__(
        self,
        *,
        nvml: Any = None,
        files: Files = REAL_FILES,
        environ: Mapping[str, str] | None = None,
        allocator: DeviceAllocator | None = None,
        learn_pid: bool = True,
        cuda: Any = None,
        mps_control: Runner | None = None,
    ):
        self._session = NvmlSession.for_module(nvml)
        files = AddressSpaceFiles(files)  # /proc/self/maps read again only once the address space changed
        self._runtime = RuntimeView(cuda, files, real=nvml is None)
        self._files = files
        self._dmem = DmemLimits(files)
        self._environ = os.environ if environ is None else environ
        self._mps_defaults = MpsDefaults(
            mps_control if mps_control is not None else run_control if nvml is None else None, self._environ, files
        )
        self._table = DeviceTable(self._session, self._environ)
        self._allocator = allocator if allocator is not None else CudaDriverAllocator(files)
        self._learn_pid = learn_pid
        self._lock = ForkSafeLock()
        self._ns_pids: set[int] | None = None
        self._learned: int | None = None
        self._learn_note: str | None = None
        self._learn_tried: set[int] = set()
        self._names: dict[int, str] = {}
        #: Per device (its UUID), whether each PID of its last process list is the MPS server as its comm said
        #: (``None``: this PID namespace shows no such process).
        self._servers: dict[str, dict[int, bool | None]] = {}
        #: Per device, what does not change while this process runs, taken at its first reading: the environment's
        #: limits (the CUDA runtime reads them once, at its start), the MPS daemon's default limit, and the PCI slot
        #: cgroup dmem regions name.
        self._fixed: dict[int, tuple[list[MemoryLimit], str]] = {}
        #: Per device, whether no limit can bind beside NVML's reading (none fixed, no cgroup dmem controller): then
        #: ``device_memory_info`` is NVML's reading alone, unless the runtime's view is needed (below).
        self._plain: dict[int, bool] = {}
        #: Per device, whether the driver reported memory limits it enforces (read at every reading where it did).
        self._partitioned: dict[int, bool] = {}
        #: Per device, the driver's limits as last read (a reading whose call fails keeps their hard limit).
        self._enforced: dict[int, DriverLimits] = {}
        #: Per device where this process holds a context, whether the runtime's view can show a cap NVML cannot
        #: (an MPS client, or a runtime total below NVML's), decided at the first reading that saw the context.
        self._runtime_needed: dict[int, bool] = {}
        #: NVML memory info's sources, by the reservation they name.
        self._sources: dict[int | None, dict[str, str]] = {}
        self._minors: dict[str, int | None] = {}  # by device UUID: the minor of its /dev/nvidia node
        #: Whether this process has been seen mapping an NVIDIA device node: it may hold a context, so a reading
        #: asks NVML without checking the maps first (a context, once made, stays mapped while the process runs).
        self._seen_mapping = False

    # ---- devices -------------------------------------------------------------------------------
    def device_count(self) -> int:
        return len(self._table.devices())

    def visible_device(self, device: int = 0) -> VisibleDevice:
        """CUDA device ``device`` as NVML knows it: its handle, UUID, PCI bus id and MIG parent."""
        return self._table.devices()[self.check_device(device)]

    def _device(self, device: int) -> tuple[int, VisibleDevice]:
        """``device`` checked (:meth:`check_device`, skipped for a plain int in range) and its visible device."""
        devices = self._table.devices()
        if type(device) is not int or not 0 <= device < len(devices):
            device = self.check_device(device)
        return device, devices[device]

    def device_memory_info(self, device: int = 0) -> MemoryInfo:
        """``memory(device).info`` from one NVML call where no limit can bind (see ``_plain``) and the runtime's
        view is not needed; the whole reading otherwise."""
        device, dev = self._device(device)
        if self._plain.get(device) and not self._needs_runtime(device):
            reading = device_memory(self._session, self.name, device, dev)
            free, total = reading.free, reading.runtime_total
            if type(free) is int and type(total) is int and 0 <= free <= total < FIGURE_LIMIT:
                return MemoryInfo(free, total)
            return checked_memory(free, total, {}, "NVML memory info").info
        return self._memory(device).info

    def _needs_runtime(self, device: int) -> bool:
        """Whether a reading of ``device`` must ask the runtime: as decided once for this process's context there,
        else whether it may hold one (CUDA in use here: :meth:`_memory` then reads the runtime and decides)."""
        decided = self._runtime_needed.get(device)
        return self._runtime.may_read() if decided is None else decided

    def _decide_runtime(self, device: int, runtime: MemoryInfo, nvml: MemoryInfo) -> None:
        """Whether, for the context this process holds on ``device``, the runtime can show a cap NVML cannot: under
        MPS (the control daemon's pipe exists: its limit binds a client's free), or where the runtime's total is
        below NVML's (an interposed library, fixed for the process). Decided once per device."""
        if device in self._runtime_needed:
            return
        try:
            mps = self._files.exists(f"{pipe_directory(self._environ)}/control")
        except DevmemError:
            mps = True  # a pipe directory that is no path: keep asking the runtime, as before
        self._runtime_needed[device] = mps or runtime.total < nvml.total - slack(nvml.total)

    def _fixed_limits(self, device: int, dev: VisibleDevice) -> tuple[list[MemoryLimit], str]:
        """What does not change per reading of ``device``: its environment and MPS-daemon limits, its PCI slot."""
        limits = env_limits(self._environ, device) + self._mps_defaults.limit(device, len(self._table.devices()))
        # read again at every reading: its use moves, and a call that failed is asked again
        partitioned = self._driver_limits(dev) is not None
        self._partitioned[device] = partitioned
        self._plain[device] = not limits and not partitioned and not self._dmem.controller_present()
        return limits, kernel_slot(dev.pci_bus_id)

    def _driver_limits(self, dev: VisibleDevice) -> DriverLimits | None:
        """The limits the driver enforces on ``dev`` and reports (NVML memory limits, driver r615+), where set."""
        found = read_driver_limits(self._session, dev.handle)
        return None if found is None or (not found.failed and found.note() is None) else found

    def _memory(self, device: int) -> DeviceMemory:
        dev = self._table.devices()[device]
        reading = device_memory(self._session, self.name, device, dev)
        sources = self._sources.get(reading.reserved)
        if sources is None:
            sources = self._sources[reading.reserved] = memory_sources(reading.reserved)
        memory = checked_memory(reading.free, reading.runtime_total, sources, "NVML memory info")
        fixed = self._fixed.get(device)
        if fixed is None:
            fixed = self._fixed[device] = self._fixed_limits(device, dev)
        limits = fixed[0] + self._dmem(fixed[1])
        enforced = self._driver_limits(dev) if self._partitioned.get(device) else None
        if enforced is not None and enforced.failed:  # the partition stays: its hard limit as read before
            last = self._enforced.get(device)
            enforced = None if last is None else DriverLimits(last.hard, last.soft, None)
        elif enforced is not None:
            self._enforced[device] = enforced
        if enforced is not None:
            memory = DeviceMemory(memory.info, memory.sources, (*memory.notes, str(enforced.note())))
            limits += [lim for lim in (enforced.limit(),) if lim is not None]
        runtime = self._runtime.checked(device)
        if runtime is not None:
            self._decide_runtime(device, runtime.info, memory.info)
            memory = DeviceMemory(memory.info, memory.sources, memory.notes + runtime.notes)
            limits += runtime_limits(
                runtime.info,
                memory.info,
                lambda: self._free_again(device, dev),
                lambda: self._process_memory(device).used,
                limits,
            )
        if not limits:
            return memory
        process = self._process_memory(device).used if any(lim.used is None for lim in limits) else None
        return apply_limits(memory, limits, process)

    def _free_again(self, device: int, dev: VisibleDevice) -> int:
        """NVML's free read again, even within one reading: whether it moved since the first read."""
        with self._session.fresh():
            return device_memory(self._session, self.name, device, dev).free

    def _read(self, device: int) -> DeviceReading:
        """Every figure of ``device`` from one set of NVML queries (:meth:`~devmem.sdk.VendorSession.one_reading`):
        the memory reading once, each process list once, shared by the process figure, the other processes, the
        roles and the notes."""
        with self._session.one_reading():
            memory = self._memory(device)
            return DeviceReading(
                index=device,
                name=self._device_name(device),
                memory=memory,
                process=self._process_memory(device),
                other_processes=self._other_processes_memory(device),
                roles=self._process_roles(device),
                integrated=False,
                pages_instead_of_failing=False,
                notes=tuple(self._device_notes(device, memory)),
            )

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
        if maps_nvidia_device(self._files, self._minor(dev)) is False:
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

    def _prepare(self, device: int) -> None:
        """Learn this process's driver-side PID on ``device`` where NVML does not list it under a PID it knows
        and it holds a CUDA context there: allocates 42 MiB, then 26 MiB, through the CUDA driver, each freed at
        once (see the module docstring). Done at most once per device; a no-op where the PID is known, where this
        process holds no context, or with ``learn_pid=False``. NVML errors are kept in the reason, never raised.
        """
        dev = self._table.devices()[device]
        if not self._holds_context(dev, device):  # nothing to learn, and NVML's process lists left unasked
            return
        try:
            listed = find_process(self._session, dev.handle, self._driver_pids()) is not None
        except NvmlCallError:
            return
        if not listed:
            self._try_learning(device)

    def _minor(self, dev: VisibleDevice) -> int | None:
        """The minor of the ``/dev/nvidia<minor>`` node of ``dev`` (its parent GPU's for a MIG instance; ``None``
        where NVML does not say), asked once: it does not change while the driver is loaded."""
        if dev.uuid not in self._minors:
            self._minors[dev.uuid] = device_minor(self._session, dev.parent_handle if dev.mig else dev.handle)
        return self._minors[dev.uuid]

    def _maps_any_device(self) -> bool:
        """Whether this process may hold a CUDA context: it maps an NVIDIA device node, or its maps cannot be read
        (then NVML is asked). Known for good once it does."""
        if maps_nvidia_device(self._files) is False:
            return False
        self._seen_mapping = True
        return True

    def get_process_memory_usage(self, device: int = 0) -> int | None:
        found = self._usage(*self._device(device))
        return found if isinstance(found, int) else found.used

    def _process_memory(self, device: int) -> ProcessMemory:
        found = self._usage(device, self._table.devices()[device])
        return found if isinstance(found, ProcessMemory) else ProcessMemory(found)

    def _usage(self, device: int, dev: VisibleDevice) -> int | ProcessMemory:
        """This process's bytes on ``dev``, or a :class:`ProcessMemory` with the reason they are unknown.

        A process that maps no NVIDIA device node at all holds no context anywhere and is in no NVML list: 0,
        without asking NVML (a PID NVML lists is then another namespace's process of the same number). Until this
        process is first seen mapping a device node that is checked on every call (``/proc/self/statm`` read in
        place, the maps only where the address space changed); from then on NVML's compute list answers in one
        call, and the other lists are read only where it does not hold this process and it maps this device's
        node (any node counts for the first check, so a node a container names by another number never hides
        a context)."""
        if not self._seen_mapping and not self._maps_any_device():
            return 0
        mapped: list[bool | None] = []

        def maps_device() -> bool | None:
            if not mapped:
                mapped.append(maps_nvidia_device(self._files, self._minor(dev)))
            return mapped[0]

        try:
            entry = find_process(
                self._session, dev.handle, self._driver_pids(), further=lambda: maps_device() is not False
            )
            if entry is None and maps_device() is False:
                return 0
            if entry is None and self._allocator.has_context(device) is not False:
                return self._unknown(device, ReasonKind.PID_NAMESPACE, self._not_listed(dev, device))
            elif entry is None and maps_device() is True and self._hidden_by_namespace(dev):
                return self._unknown(
                    device,
                    ReasonKind.PID_NAMESPACE,
                    (
                        "this process maps the device without an active primary CUDA context (a context of its own, or "
                        "another runtime), and NVML lists PIDs this PID namespace does not show: one of them may be "
                        "this process, so its figure is unknown rather than 0. Run the container with --pid=host"
                    ),
                )
        except NvmlCallError as exc:
            return self._unknown(
                device, ReasonKind.QUERY_FAILED, f"NVML could not list the processes on this device: {exc}"
            )
        if entry is None:
            return 0  # no context on this device: this process holds nothing there
        if entry.used is None:
            where = f"MIG instance {dev.uuid}" if dev.mig else "this device"
            return self._unknown(
                device,
                ReasonKind.NOT_AVAILABLE,
                f"NVML lists this process on {where} but reports its memory as not "
                "available (some MIG and container setups need more privileges)",
            )
        return entry.used

    def _hidden_by_namespace(self, dev: VisibleDevice) -> bool:
        """NVML lists PIDs that ``/proc`` here does not show (the driver's PID namespace is another one): this
        process, which maps the device, may be among them under a PID it cannot know."""
        listed = running_processes(self._session, dev.handle)
        return any(not self._files.exists(f"/proc/{pid}") for pid in listed)

    def _not_listed(self, dev: VisibleDevice, device: int) -> str:
        pids = namespace_pids(self._files) or [os.getpid()]
        if self._learn_note:
            learned = f"; {self._learn_note}"
        elif self._learn_pid and device not in self._learn_tried:
            learned = (
                f"; call platform.prepare({device}) once (it allocates 42 MiB and 26 MiB on the device to learn "
                "this process's driver-side PID)"
            )
        else:
            learned = ""
        return (
            f"this process (PID {pids[-1]}) uses {dev.uuid} but is not in NVML's process list: NVML lists the "
            f"PIDs the driver sees (host PIDs on this driver) and this PID namespace hides them{learned}. "
            "Run the container with --pid=host to get per-process figures"
        )

    def _other_processes_memory(self, device: int) -> dict[int, int] | None:
        dev = self._table.devices()[device]
        try:
            entries = running_processes(self._session, dev.handle)
        except NvmlCallError:
            return None
        own = set(self._driver_pids())
        if not own & entries.keys() and self._holds_context(dev, device):
            return None  # this process is somewhere in the list under a PID we do not know
        others = {pid: e.used for pid, e in entries.items() if pid not in own}
        if any(used is None for used in others.values()):
            return None
        return {pid: int(used) for pid, used in others.items() if used is not None}

    def _mps_servers(self, entries: dict[int, ProcessEntry], device: str) -> list[ProcessEntry]:
        """Under MPS NVML lists the clients in its MPS list and the server (``nvidia-cuda-mps-server``, which
        holds the clients' shared context) in the compute list only. The server is the process whose
        ``/proc/<pid>/comm`` names it; where this PID namespace does not show a process, a compute-only entry
        while MPS clients exist. A PID's comm is read when it joins the process list of ``device`` (a UUID), not
        again while it stays in it: a reading names hundreds of processes, the server among them once."""
        clients = any("mps" in e.lists for e in entries.values())
        known = self._servers.get(device, {})
        now: dict[int, bool | None] = {}
        servers = []
        for pid, e in sorted(entries.items()):
            if pid in known:
                named = now[pid] = known[pid]
            else:
                try:
                    named = self._files.read_text(f"/proc/{pid}/comm").strip() == MPS_SERVER_COMM
                except OSError:
                    named = None
                now[pid] = named
            if named if named is not None else clients and e.lists == ("compute",):
                servers.append(e)
        self._servers[device] = now
        return servers

    def _process_roles(self, device: int) -> dict[int, str]:
        try:
            entries = running_processes(self._session, self._table.devices()[device].handle)
        except NvmlCallError:
            return {}
        return {e.pid: MPS_SERVER for e in self._mps_servers(entries, self._table.devices()[device].uuid)}

    def _mps_notes(self, dev: VisibleDevice) -> list[str]:
        """Which PIDs are MPS clients on this device and which the server (:meth:`_mps_servers`)."""
        try:
            entries = running_processes(self._session, dev.handle)
        except NvmlCallError:
            return []
        clients = sorted(pid for pid, e in entries.items() if "mps" in e.lists)
        if not clients:
            return []
        servers = self._mps_servers(entries, dev.uuid)
        own = self._driver_pids() & set(clients)
        text = f"MPS: {len(clients)} client(s) on this device (PIDs {', '.join(map(str, clients))})" + (
            ", this process among them" if own else ""
        )
        for e in servers:
            held = "memory not available" if e.used is None else format_size(e.used)
            text += f"; PID {e.pid} is the MPS server ({held}, shared by its clients)"
        return [text]

    # ---- for people ----------------------------------------------------------------------------
    def _device_name(self, device: int) -> str:
        dev = self._table.devices()[device]
        if device not in self._names:
            try:
                self._names[device] = device_name(self._session, dev.handle)
            except NvmlCallError:
                return f"NVIDIA {dev.uuid}"
        return self._names[device]

    def _device_uuid(self, device: int) -> str | None:
        return self._table.devices()[device].uuid  # nvmlDeviceGetUUID: GPU-... or, for a MIG instance, MIG-...

    def _notes(self, device: int) -> list[str]:
        return self._device_notes(device, self._memory(device))

    def _device_notes(self, device: int, memory: DeviceMemory) -> list[str]:
        """The notes on ``device``, whose memory reading is ``memory``."""
        dev = self._table.devices()[device]
        out = []
        if dev.mig:
            out.append(f"MIG instance {dev.uuid} of {dev.parent_uuid}: memory figures are the instance's")
            try:
                read_memory(self._session, dev.parent_handle)
            except NvmlCallError as exc:
                out.append(
                    f"the parent GPU's memory is not readable here ({exc.error}; usual inside a container "
                    "given a MIG instance): devmem sizes the instance from its own reading"
                )
        if "CUDA_VISIBLE_DEVICES" in self._environ or "CUDA_DEVICE_ORDER" in self._environ:
            out.append(f"CUDA device {device} is {dev.uuid} at PCI {dev.pci_bus_id}")
        ns = namespace_pids(self._files)
        if self._learned is not None:
            out.append(f"PID namespace: the driver sees this process as PID {self._learned} ({self._learn_note})")
        elif len(ns) > 1:
            out.append(f"PID namespace: this process is PID {ns[-1]} here and PID {ns[0]} outside (NSpid)")
        out += memory.notes
        out += self._mps_notes(dev)
        driver = self._session.driver_version()
        if driver:
            out.append(f"NVIDIA driver {driver}")
        return out
