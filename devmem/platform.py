"""The platform contract: what every backend answers, the base class that checks indices once, and the report.

A backend subclasses :class:`PlatformBase` and implements its hooks (``device_count`` and the ``_``-prefixed
methods), which receive an index already checked. The public methods are the contract the core, the CLI and
the conformance kit call; each returns its value together with its reason, so no answer depends on which
call ran before. A platform also states what the core needs to know about it, instead of the core testing
its name:

- ``torch_device``: torch's device namespace for this platform's devices (its ``torch.device`` type), or
  ``None`` where the device is host memory that torch's device allocator does not manage;
- ``dist_backend``: the ``torch.distributed`` backend whose collectives take tensors on ``torch_device``
  (``None`` where none does).
"""

from __future__ import annotations

from collections.abc import Mapping
from enum import Enum
from typing import Any, Protocol, runtime_checkable

from devmem import arguments
from devmem._bounded import BoundedPlatform
from devmem._readings import process_bytes, process_id, whole_bytes
from devmem._text import shown
from devmem.errors import DevmemError, InvalidTypeError
from devmem.records import Record
from devmem.types import MemoryInfo


class ReasonKind(str, Enum):
    """Why a platform has no per-process figure, for programs (``devmem doctor`` picks its advice by kind)."""

    #: The platform never attributes device memory to processes.
    NOT_ATTRIBUTED = "not-attributed"
    #: The driver model itself cannot attribute memory to processes (e.g. a display driver model).
    DRIVER_MODEL = "driver-model"
    #: The driver lists processes under PIDs this process's PID namespace hides.
    PID_NAMESPACE = "pid-namespace"
    #: The driver lists this process but reports its figure as not available.
    NOT_AVAILABLE = "not-available"
    #: The vendor library failed to list the processes (an error, a permission).
    QUERY_FAILED = "query-failed"
    #: Nothing on this machine reports the figure (no library, an unknown device address).
    NO_SOURCE = "no-source"


class Reason(Record):
    """Why a figure is missing: ``kind`` for programs, ``text`` for people."""

    kind: ReasonKind
    text: str

    def __post_init__(self) -> None:
        object.__setattr__(self, "kind", ReasonKind(self.kind))
        if not isinstance(self.text, str) or not self.text:
            raise InvalidTypeError(f"Reason.text must be a non-empty string, got {self.text!r}")


class ProcessMemory(Record):
    """This process's device memory in bytes, or ``None`` with the :class:`Reason` it is unknown."""

    used: int | None
    reason: Reason | None = None

    def __post_init__(self) -> None:
        if self.used is None and self.reason is None:
            raise InvalidTypeError("ProcessMemory(None) needs a Reason saying why the figure is unknown")

    @classmethod
    def unknown(cls, kind: ReasonKind, text: str) -> ProcessMemory:
        return cls(None, Reason(kind, text))


class DeviceMemory(Record):
    """One reading of a device: free/total, where each figure came from (for people), and notes on it."""

    info: MemoryInfo
    sources: Mapping[str, str] = {}
    notes: tuple[str, ...] = ()


def checked_memory(free: Any, total: Any, sources: Mapping[str, str], what: str) -> DeviceMemory:
    """A :class:`DeviceMemory` of ``free``/``total`` as ``what`` (the call, for messages) reported them: each a whole
    number of bytes (:func:`devmem._readings.whole_bytes`), a negative total an error, a negative free taken as 0
    and a free above total as the total, each with a note saying what was reported (a device's reading, or a
    runtime's view beside it)."""
    free, total = whole_bytes(free, f"{what}: free"), whole_bytes(total, f"{what}: total")
    if total < 0:
        raise DevmemError(
            f"{what}: total is {total} bytes, below zero; the driver's figures are inconsistent "
            "(check the device with the vendor's tool)"
        )
    notes = []
    if free < 0:
        notes.append(f"{what} reported free = {free} bytes (below zero); taken as 0")
        free = 0
    elif free > total:
        notes.append(f"{what} reported free = {free} bytes, above its total of {total}; taken as the total")
        free = total
    return DeviceMemory(MemoryInfo(free=free, total=total), dict(sources), tuple(notes))


class DeviceReading(Record):
    """One coherent snapshot of a device, from one set of vendor queries: its memory (free/total, where each came
    from, notes on them), this process's memory with its reason, the other processes and the roles of those that
    serve others, what the device is, and the notes an operator should know. :meth:`PlatformBase.read` gives it.
    """

    index: int
    name: str
    memory: DeviceMemory
    process: ProcessMemory
    other_processes: Mapping[int, int] | None
    roles: Mapping[int, str]
    integrated: bool
    pages_instead_of_failing: bool
    notes: tuple[str, ...] = ()

    @property
    def info(self) -> MemoryInfo:
        return self.memory.info


@runtime_checkable
class Platform(Protocol):
    """Device memory as an inference engine needs to see it. All figures are ``int`` bytes.

    Every method takes a device index and raises :class:`~devmem.DevmemError` naming the valid range for a bad
    one. :class:`PlatformBase` implements all of them over a backend's hooks.
    """

    name: str

    @property
    def torch_device(self) -> str | None:
        """torch's device namespace for this platform's devices (a class attribute in implementations)."""
        ...

    @property
    def dist_backend(self) -> str | None:
        """The torch.distributed backend for tensors on ``torch_device`` (a class attribute in implementations)."""
        ...

    def device_count(self) -> int:
        """Devices visible to this process (after the runtime's ``*_VISIBLE_DEVICES`` variables)."""
        ...

    def memory(self, device: int = 0) -> DeviceMemory:
        """One reading: free/total with where each came from and notes on it."""
        ...

    def device_memory_info(self, device: int = 0) -> MemoryInfo:
        """``memory(device).info``: ``free``, what a new allocation can obtain now; ``total``, what the runtime
        calls total."""
        ...

    def process_memory(self, device: int = 0) -> ProcessMemory:
        """This process's device memory together with the reason where it is unknown."""
        ...

    def get_process_memory_usage(self, device: int = 0) -> int | None:
        """``process_memory(device).used``."""
        ...

    def process_memory_reason(self, device: int = 0) -> str | None:
        """The text of ``process_memory(device).reason`` (``None`` where the figure is known)."""
        ...

    def is_integrated_gpu(self, device: int = 0) -> bool:
        """True when device memory is host memory."""
        ...

    def pages_instead_of_failing(self, device: int = 0) -> bool:
        """True when over-subscription is paged to host memory or taken from the OS instead of failing."""
        ...

    def device_name(self, device: int = 0) -> str:
        """A name for people."""
        ...

    def other_processes_memory(self, device: int = 0) -> dict[int, int] | None:
        """Other processes' bytes by PID, where known."""
        ...

    def process_roles(self, device: int = 0) -> dict[int, str]:
        """The role, for people, of each process on the device that serves others (a server holding memory on
        behalf of its client processes), by PID; other processes are not listed."""
        ...

    def memory_sources(self, device: int = 0) -> dict[str, str]:
        """``memory(device).sources``: where ``free`` and ``total`` came from, for people."""
        ...

    def notes(self, device: int = 0) -> list[str]:
        """Facts an operator should know about the device."""
        ...


#: Every member of :class:`Platform`, for error messages that name what a platform lacks.
CONTRACT = (
    "name",
    "torch_device",
    "dist_backend",
    "device_count",
    "memory",
    "device_memory_info",
    "process_memory",
    "get_process_memory_usage",
    "process_memory_reason",
    "is_integrated_gpu",
    "pages_instead_of_failing",
    "device_name",
    "other_processes_memory",
    "process_roles",
    "memory_sources",
    "notes",
)


class PlatformBase:
    """The contract over a backend's hooks: every public method checks the index once, then asks a hook, and checks
    that the hook answered the contract's type (a :class:`~devmem.DevmemError` naming the platform and the value).

    Required hooks: ``device_count()``, ``_memory(device) -> DeviceMemory``, ``_is_integrated(device)``,
    ``_pages_instead_of_failing(device)``. Optional hooks (neutral defaults): ``_process_memory(device) ->
    ProcessMemory``, ``_device_name``, ``_device_uuid``, ``_other_processes_memory``, ``_process_roles``,
    ``_notes``. Hooks receive a valid index.

    ``device_uuid(d)`` is an optional member outside the :class:`Platform` protocol (a platform written against
    the protocol alone keeps satisfying it): a stable identity of the device that survives renumbering by a
    ``*_VISIBLE_DEVICES`` variable, or ``None`` where the platform has none (the reservation ledger then keys
    the device by platform, name and index).
    """

    name: str = "base"
    torch_device: str | None = None
    dist_backend: str | None = None

    # ---- hooks ----------------------------------------------------------------------------------
    def device_count(self) -> int:  # pragma: no cover - every subclass overrides it
        raise NotImplementedError

    def _memory(self, device: int) -> DeviceMemory:  # pragma: no cover - every subclass overrides it
        raise NotImplementedError

    def _is_integrated(self, device: int) -> bool:  # pragma: no cover - every subclass overrides it
        raise NotImplementedError

    def _pages_instead_of_failing(self, device: int) -> bool:  # pragma: no cover - every subclass overrides it
        raise NotImplementedError

    def _process_memory(self, device: int) -> ProcessMemory:
        return ProcessMemory.unknown(
            ReasonKind.NOT_ATTRIBUTED, f"{self.name} does not attribute device memory to processes"
        )

    def _device_name(self, device: int) -> str:
        return f"{self.name}:{device}"

    def _device_uuid(self, device: int) -> str | None:
        return None

    def _reset_process_peak(self, device: int) -> bool:
        return False

    def _process_peak(self, device: int) -> int | None:
        return None

    def _other_processes_memory(self, device: int) -> dict[int, int] | None:
        return None

    def _process_roles(self, device: int) -> dict[int, str]:
        return {}

    def _notes(self, device: int) -> list[str]:
        return []

    def _read(self, device: int) -> DeviceReading:
        """Every figure of ``device`` in one :class:`DeviceReading`. The default asks each hook once; a backend
        whose hooks share vendor queries overrides it to make each query once per reading."""
        return DeviceReading(
            index=device,
            name=self._device_name(device),
            memory=self._memory(device),
            process=self._process_memory(device),
            other_processes=self._other_processes_memory(device),
            roles=dict(_checked_roles(self, f"_process_roles({device})", self._process_roles(device))),
            integrated=self._is_integrated(device),
            pages_instead_of_failing=self._pages_instead_of_failing(device),
            notes=_checked_notes(self, f"_notes({device})", self._notes(device)),
        )

    def _prepare(self, device: int) -> None:
        """The hook of :meth:`prepare` (nothing by default)."""

    def prepare(self, device: int = 0) -> None:
        """Do, once, the device work that lets later readings attribute memory to this process (none by default).

        Called by whoever may do device work (the engine-facing object, when it is created); readings never do it.
        """
        self._prepare(self.check_device(device))

    # ---- the contract ---------------------------------------------------------------------------
    def check_device(self, device: int) -> int:
        """``device`` as an int if it is a valid index (an int or numpy integer), else :class:`DevmemError` naming
        the range (or the type, for a non-integer)."""
        count = self.device_count()
        if type(device) is int and type(count) is int and 0 <= device < count:  # the common case, without the checks
            return device
        try:
            count = arguments.integer("device_count()", count, minimum=0, error=DevmemError)
        except DevmemError:
            raise _wrong(self, "device_count()", count, "the count of devices is a whole number >= 0") from None
        valid = f"0..{count - 1}" if count else "none (no device is visible)"
        try:
            device = arguments.device_index(device, name=f"{self.name}: device", error=DevmemError)
        except DevmemError as exc:
            raise DevmemError(f"{exc}; valid indices: {valid}") from None
        if not 0 <= device < count:
            raise DevmemError(f"{self.name}: device index {shown(device)} is out of range; valid indices: {valid}")
        return int(device)

    def read(self, device: int = 0) -> DeviceReading:
        """One coherent :class:`DeviceReading` of ``device``: every figure from one set of vendor queries, each of
        the type the contract says (a :class:`~devmem.DevmemError` naming the platform and the value otherwise)."""
        index = self.check_device(device)
        return _checked_reading(self, index, self._read(index))

    def memory(self, device: int = 0) -> DeviceMemory:
        index = self.check_device(device)
        return _checked_memory(self, f"_memory({index})", self._memory(index))

    def device_memory_info(self, device: int = 0) -> MemoryInfo:
        return self.memory(device).info

    def memory_sources(self, device: int = 0) -> dict[str, str]:
        return dict(self.memory(device).sources)

    def process_memory(self, device: int = 0) -> ProcessMemory:
        index = self.check_device(device)
        return _checked_process(self, f"_process_memory({index})", self._process_memory(index))

    def get_process_memory_usage(self, device: int = 0) -> int | None:
        return self.process_memory(device).used

    def process_memory_reason(self, device: int = 0) -> str | None:
        reason = self.process_memory(device).reason
        return None if reason is None else reason.text

    def is_integrated_gpu(self, device: int = 0) -> bool:
        return self._is_integrated(self.check_device(device))

    def pages_instead_of_failing(self, device: int = 0) -> bool:
        return self._pages_instead_of_failing(self.check_device(device))

    def device_name(self, device: int = 0) -> str:
        return self._device_name(self.check_device(device))

    def device_uuid(self, device: int = 0) -> str | None:
        """A stable identity of the device (a UUID), or ``None`` where the platform has none."""
        return self._device_uuid(self.check_device(device))

    def reset_process_peak(self, device: int = 0) -> bool:
        """Start a new high-water mark of this process's memory on ``device`` (:meth:`process_peak`); ``False``
        where the platform keeps none. Profile windows call it when they open."""
        return self._reset_process_peak(self.check_device(device))

    def process_peak(self, device: int = 0) -> int | None:
        """The largest figure :meth:`get_process_memory_usage` could have answered since :meth:`reset_process_peak`
        (a lower bound), or ``None`` where the platform keeps no high-water mark. Profile windows take a forward
        pass's transient from it where torch's allocator keeps no statistics (host memory on the ``cpu`` platform);
        a platform whose memory torch allocates needs neither."""
        return self._process_peak(self.check_device(device))

    def other_processes_memory(self, device: int = 0) -> dict[int, int] | None:
        index = self.check_device(device)
        return _checked_others(self, f"_other_processes_memory({index})", self._other_processes_memory(index))

    def process_roles(self, device: int = 0) -> dict[int, str]:
        index = self.check_device(device)
        return dict(_checked_roles(self, f"_process_roles({index})", self._process_roles(index)))

    def notes(self, device: int = 0) -> list[str]:
        index = self.check_device(device)
        return list(_checked_notes(self, f"_notes({index})", self._notes(index)))


# ---- what a backend's hooks answer, checked where the contract hands it on ------------------------------
def _wrong(platform: PlatformBase, call: str, value: object, rule: str) -> DevmemError:
    where = f"{platform.name} ({type(platform).__module__}.{type(platform).__qualname__})"
    return DevmemError(
        f"the platform {where}: {call} gave {shown(value)} of type {type(value).__name__}: {rule}; fix the backend"
    )


def _checked_memory(platform: PlatformBase, call: str, memory: object) -> DeviceMemory:
    info = getattr(memory, "info", None)
    figures = info if isinstance(info, MemoryInfo) else ()
    if not (
        isinstance(memory, DeviceMemory)
        and len(figures) == 2
        and all(type(f) is int for f in figures)
        and 0 <= figures[0] <= figures[1] < 1 << 64
    ):
        raise _wrong(
            platform,
            call,
            memory,
            "a DeviceMemory of whole bytes, free from 0 to its total (devmem.sdk.checked_memory makes one)",
        )
    return memory


def _checked_process(platform: PlatformBase, call: str, process: object) -> ProcessMemory:
    used = getattr(process, "used", None)
    if not isinstance(process, ProcessMemory) or not (used is None or (type(used) is int and 0 <= used < 1 << 63)):
        raise _wrong(platform, call, process, "a ProcessMemory (its whole bytes, or None with a reason)")
    return process


def _checked_others(platform: PlatformBase, call: str, others: object) -> dict[int, int] | None:
    if others is None:
        return None
    if not isinstance(others, Mapping) or not all(
        process_id(pid) is not None and process_bytes(used) is not None for pid, used in others.items()
    ):
        raise _wrong(platform, call, others, "None, or a mapping of process ids to whole bytes >= 0")
    return {int(pid): int(used) for pid, used in others.items()}


def _checked_roles(platform: PlatformBase, call: str, roles: object) -> Mapping[int, str]:
    if not isinstance(roles, Mapping) or not all(isinstance(r, str) for r in roles.values()):
        raise _wrong(platform, call, roles, "a mapping of process ids to roles (text)")
    return roles


def _checked_notes(platform: PlatformBase, call: str, notes: object) -> tuple[str, ...]:
    if not isinstance(notes, (list, tuple)) or not all(isinstance(n, str) for n in notes):
        raise _wrong(platform, call, notes, "a list of text")
    return tuple(notes)


def _checked_reading(platform: PlatformBase, device: int, reading: object) -> DeviceReading:
    """``reading``, what ``platform``'s ``_read(device)`` gave, with every field of the contract's type."""
    call = f"_read({device})"
    if not isinstance(reading, DeviceReading):
        raise _wrong(platform, call, reading, "a DeviceReading")
    _checked_memory(platform, f"{call}.memory", reading.memory)
    _checked_process(platform, f"{call}.process", reading.process)
    others = _checked_others(platform, f"{call}.other_processes", reading.other_processes)
    _checked_roles(platform, f"{call}.roles", reading.roles)
    _checked_notes(platform, f"{call}.notes", reading.notes)
    if not isinstance(reading.name, str):
        raise _wrong(platform, f"{call}.name", reading.name, "the device's name (text)")
    for flag in ("integrated", "pages_instead_of_failing"):
        if type(getattr(reading, flag)) is not bool:
            raise _wrong(platform, f"{call}.{flag}", getattr(reading, flag), "True or False")
    raw = reading.other_processes
    if raw is None or all(type(k) is int and type(v) is int for k, v in raw.items()):
        return reading
    return reading.replace(other_processes=others)  # numpy integers or whole floats: Python ints


class DeviceReport(Record):
    """Everything a platform can say about one device, for people and for JSON."""

    index: int
    name: str
    platform: str
    free: int
    total: int
    process: int | None
    process_reason: str | None
    other_processes: dict[int, int] | None
    integrated: bool
    pages_instead_of_failing: bool
    sources: dict[str, str] = {}
    notes: list[str] = []
    #: The :class:`ReasonKind` value of ``process_reason`` (``None`` where the figure is known).
    process_reason_kind: str | None = None

    @classmethod
    def from_reading(cls, platform: str, reading: DeviceReading) -> DeviceReport:
        """The report of one :class:`DeviceReading` of a device of the platform named ``platform``."""
        reason = reading.process.reason
        return cls(
            index=reading.index,
            name=reading.name,
            platform=platform,
            free=reading.info.free,
            total=reading.info.total,
            process=reading.process.used,
            process_reason=None if reason is None else reason.text,
            process_reason_kind=None if reason is None else reason.kind.value,
            other_processes=None if reading.other_processes is None else dict(reading.other_processes),
            integrated=reading.integrated,
            pages_instead_of_failing=reading.pages_instead_of_failing,
            sources=dict(reading.memory.sources),
            notes=list(reading.notes),
        )

    def explain(self) -> str:
        """For people: the device and its figures, this process's share or why it is unknown, where each figure
        came from, and the notes."""
        from devmem.units import format_size

        process = format_size(self.process) if self.process is not None else f"unknown ({self.process_reason})"
        lines = [
            f"device {self.index}: {self.name} ({self.platform}): free {format_size(self.free)} of "
            f"{format_size(self.total)}",
            f"this process: {process}",
            *(f"{figure}: {source}" for figure, source in self.sources.items()),
            *(f"note: {note}" for note in self.notes),
        ]
        return "\n".join(lines)

    def as_dict(self) -> dict[str, object]:
        d = dict(self.__dict__)
        if self.other_processes is not None:
            d["other_processes"] = {str(pid): used for pid, used in self.other_processes.items()}
        return d


def read_device(platform: Platform, device: int = 0) -> DeviceReading:
    """One :class:`DeviceReading` of ``device``: ``platform.read(device)`` where the platform has it (every
    :class:`PlatformBase`), else composed from the members of the contract."""
    read = getattr(platform, "read", None)
    if read is not None:
        return read(device)
    return DeviceReading(
        index=device,
        name=platform.device_name(device),
        memory=platform.memory(device),
        process=platform.process_memory(device),
        other_processes=platform.other_processes_memory(device),
        roles=platform.process_roles(device),
        integrated=platform.is_integrated_gpu(device),
        pages_instead_of_failing=platform.pages_instead_of_failing(device),
        notes=tuple(platform.notes(device)),
    )


def prepare_device(platform: Platform, device: int = 0) -> None:
    """``platform.prepare(device)`` where the platform has it (every :class:`PlatformBase`): the one step that may
    do device work so that later readings can attribute memory to this process. Call it where device work is
    expected (when an engine's memory object is created); readings never do it."""
    prepare = getattr(platform, "prepare", None)
    if prepare is not None:
        prepare(device)


def prepare_and_read(platform: Platform, device: int = 0) -> DeviceReading:
    """:func:`prepare_device`, then :func:`read_device`, with the index checked once: what an engine-facing object
    does when it is created (its reading serves its baseline and its reservation alike). The reading is checked
    against the contract as :meth:`PlatformBase.read` checks it (what :func:`device_report` reads): a backend's
    answer outside it (free above the total, a negative figure) is refused the same way. Where the device is host
    memory the C heap's free pages are given back before the reading (:func:`~devmem._host.trim_c_heap`), so that
    a baseline does not count pages a later window may see returned. On a
    :class:`~devmem._bounded.BoundedPlatform` all of it is one call, given its deadline."""
    if isinstance(platform, BoundedPlatform):
        return platform.call(f"prepare_and_read({device!r})", prepare_and_read, platform.platform, device)
    from devmem._host import trim_c_heap  # engines only: not on the command's import path

    if not isinstance(platform, PlatformBase):
        prepare_device(platform, device)
        if platform.is_integrated_gpu(device):
            trim_c_heap()
        return read_device(platform, device)
    index = platform.check_device(device)
    if type(platform).prepare is PlatformBase.prepare:
        platform._prepare(index)
    else:  # a backend that overrides prepare itself (written before the _prepare hook) checks the index again
        platform.prepare(index)
    if platform._is_integrated(index):
        trim_c_heap()
    return _checked_reading(platform, index, platform._read(index))


def device_report(platform: Platform, device: int = 0) -> DeviceReport:
    """A :class:`DeviceReport` of ``device`` from one reading (:func:`read_device`)."""
    return DeviceReport.from_reading(platform.name, read_device(platform, device))
