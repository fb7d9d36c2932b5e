"""A scripted machine: devices, processes, host memory, files and failures, all in bytes.

One :class:`Scenario` drives every scripted vendor library (a vendor package's fakes of its library and of the
runtime's ``mem_get_info``) and the scripted files (``/proc/meminfo``, ``/proc/self/status``, a driver's sysfs),
so a test can say "a co-tenant allocates 8 GiB while I profile" in one line::

    sc = Scenario(devices=[MyDevice(name="X1", total=16 * GiB)])
    platform = MyPlatform(lib=ScriptedMyLib(sc), files=sc.fs)
    sc.allocate(8 * GiB, pid=sc.other_pid)

The core knows no vendor. A vendor package contributes its parts through one mechanism: a
:class:`ScriptedDevice` subclass for its per-device fields, whose ``driver_type`` names a :class:`ScriptedDriver`
subclass holding the machine-level facts of its driver stack (version, libraries installed, ...) and writing the
files that driver exposes (sysfs, ``/proc/driver``, DRM fdinfo, its lines of ``/proc/self/maps``).

Mutate a scenario through its methods or attributes at any time; every fake reads it live.
"""

from __future__ import annotations

import fnmatch
import os
from collections import Counter
from dataclasses import dataclass, field
from typing import ClassVar, TypeVar

from devmem.types import GiB, KiB


@dataclass
class ScriptedDriver:
    """A vendor's driver stack on a scripted machine: the machine-level facts its scripted libraries read, and
    the files it exposes.

    A vendor package subclasses it as a dataclass, adds its facts as fields (a driver version, a driver model,
    ...), and overrides :meth:`files` and :meth:`mapped`. A scenario holds one per kind (:meth:`Scenario.driver`);
    its devices' ``driver_type`` says which kinds the machine has.
    """

    #: Names of the vendor libraries installed with this driver (a scripted library can refuse to load without its own).
    libraries: set[str] = field(default_factory=set)

    def files(self, scenario: Scenario) -> dict[str, str]:
        """Path -> text of the files this driver exposes on ``scenario``, read live."""
        return {}

    def mapped(self, scenario: Scenario) -> list[str]:
        """The lines this driver's libraries and device nodes add to this process's ``/proc/self/maps``."""
        return []


@dataclass(kw_only=True)
class ScriptedDevice:
    """One device as its driver reports it, in bytes.

    ``total`` is the driver's total; ``reserved`` is memory the driver keeps for itself, so the runtime's total
    is ``total - reserved``. ``base_used`` is memory in use that no listed process owns. An ``integrated`` device
    computes in host memory: its allocations take :class:`HostMemory`.

    A vendor subclasses it for its own fields, names its :class:`ScriptedDriver` in ``driver_type``, the call
    name under which :attr:`Scenario.failures` fails the runtime's ``mem_get_info`` in ``runtime_call``, and may
    override :meth:`shared_free` and :meth:`draw` where its driver caps and counts shared memory.
    """

    driver_type: ClassVar[type[ScriptedDriver] | None] = None
    runtime_call: ClassVar[str] = "mem_get_info"

    name: str
    total: int
    reserved: int = 0
    base_used: int = 0
    #: The device's UUID as its driver reports it ("" where it reports none).
    uuid: str = ""
    #: PCI address, ``domain:bus:device.function`` (``00000000:19:00.0``).
    pci_bus_id: str = "00000000:01:00.0"
    integrated: bool = False

    def shared_free(self, host_available: int) -> int:
        """What a new allocation can obtain on this integrated device while the host has ``host_available``."""
        return host_available

    def draw(self, nbytes: int) -> None:
        """This integrated device's allocation took ``nbytes`` of host memory (negative: gave them back)."""


Driver = TypeVar("Driver", bound=ScriptedDriver)


class ScriptedLibrary:
    """What every scripted vendor library shares: it answers from ``scenario``, counts calls by name in ``calls``,
    raises the failures the scenario scripts, and refuses calls before its init.

    A vendor's library subclasses it, sets :attr:`NOT_INITIALISED` to its error name for that, implements
    :meth:`error` (an error name -> the vendor's exception) and starts each call with ``self._enter("fn_name")``.
    """

    NOT_INITIALISED = "Uninitialized"

    def __init__(self, scenario: Scenario):
        self.scenario = scenario
        self.calls: Counter[str] = Counter()
        self.initialised = 0

    def error(self, name: str) -> Exception:  # pragma: no cover - every vendor library overrides it
        raise NotImplementedError("a scripted library maps an error name to its vendor's exception")

    def _enter(self, name: str, *, needs_init: bool = True) -> None:
        self.calls[name] += 1
        error = self.scenario.failure(name)
        if error is not None:
            raise self.error(error)
        if needs_init and self.initialised <= 0:
            raise self.error(self.NOT_INITIALISED)


class ScriptedClock:
    """A monotonic clock that moves only when something sleeps on it or calls :meth:`advance`.

    Pass the same one to the scripted library and to the platform (``clock=clk, sleep=clk.sleep``);
    ``slept`` records every wait.
    """

    def __init__(self, start: float = 1000.0):
        self.now = start
        self.slept: list[float] = []

    def __call__(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.slept.append(seconds)
        self.now += max(0.0, seconds)

    def advance(self, seconds: float) -> None:
        self.now += seconds


@dataclass
class HostMemory:
    """Host RAM as /proc/meminfo reports it: ``available = free + page_cache`` unless set."""

    total: int = 24 * GiB
    free: int = 20 * GiB
    page_cache: int = 2 * GiB
    available_override: int | None = None

    @property
    def available(self) -> int:
        if self.available_override is not None:
            return self.available_override
        return min(self.total, self.free + self.page_cache)

    def take(self, nbytes: int) -> None:
        """Allocate ``nbytes`` of host memory, reclaiming page cache when free memory runs out."""
        from_free = min(self.free, nbytes)
        self.free -= from_free
        rest = nbytes - from_free
        if rest > self.page_cache:
            raise MemoryError(f"scripted host cannot supply {nbytes} bytes")
        self.page_cache -= rest

    def give(self, nbytes: int) -> None:
        self.free = min(self.total - self.page_cache, self.free + nbytes)

    def meminfo_text(self) -> str:
        rows = {
            "MemTotal": self.total,
            "MemFree": self.free,
            "MemAvailable": self.available,
            "Buffers": 0,
            "Cached": self.page_cache,
            "SwapCached": 0,
            "SwapTotal": 0,
            "SwapFree": 0,
        }
        return "".join(f"{key + ':':<16}{value // KiB:>8} kB\n" for key, value in rows.items())


def drm_fdinfo(driver: str, client_id: int, pdev: str, memory: dict[str, int]) -> str:
    """One DRM client's ``/proc/<pid>/fdinfo/<fd>`` text as the kernel prints it (drm-usage-stats):
    ``drm-driver``, ``drm-client-id``, ``drm-pdev`` (kernel PCI form, ``0000:c6:00.0``) and, for each region of
    ``memory`` (region -> bytes), ``drm-memory-<region>`` in KiB. :mod:`devmem.sdk.drm` reads it."""
    rows = {"drm-driver": driver, "drm-client-id": str(client_id), "drm-pdev": pdev}
    rows.update({f"drm-memory-{region}": f"{nbytes // KiB} KiB" for region, nbytes in memory.items()})
    return "".join(f"{key}:\t{value}\n" for key, value in rows.items())


class ScriptedFiles:
    """The filesystem boundary (``read_text``, ``exists``, ``listdir``) served from a scenario.

    ``/proc/meminfo``, ``/proc/self/status``, ``/proc/self/maps`` and ``/proc/self/statm`` (whose size field follows
    the maps) are computed live; other paths come from
    ``scenario.files`` (path -> text) and from the files of the scenario's drivers (:meth:`ScriptedDriver.files`),
    which take precedence over ``scenario.files``; ``scenario.files`` may replace ``/proc/self/maps``.
    """

    def __init__(self, scenario: Scenario):
        self.scenario = scenario

    def _table(self) -> dict[str, str]:
        sc = self.scenario
        table = dict(sc.files)
        table["/proc/meminfo"] = sc.host.meminfo_text()
        table["/proc/self/status"] = sc.proc_self_status()
        table["/proc/self/fdinfo/0"] = "pos:\t0\nflags:\t02\n"  # stdin: a process always has descriptors
        table.setdefault("/proc/self/maps", sc.proc_self_maps())
        # the address space's size in pages grows with each mapping, as the kernel's does
        table["/proc/self/statm"] = f"{len(table['/proc/self/maps'])} 1024 512 1 0 2048 0\n"
        for driver in sc.active_drivers():
            table.update(driver.files(sc))
        return table

    def read_text(self, path: str) -> str:
        table = self._table()
        if path not in table:
            raise FileNotFoundError(path)
        return table[path]

    def exists(self, path: str) -> bool:
        path = path.rstrip("/")
        return path in self._table() or any(p.startswith(path + "/") for p in self._table())

    def write_text(self, path: str, text: str) -> None:
        """``/proc/self/clear_refs``: ``5`` resets ``VmHWM`` to the resident figure, as the kernel does (where the
        scenario scripts them); every other path is refused, as on a read-only ``/proc``."""
        if path != "/proc/self/clear_refs" or "VmHWM" not in self.scenario.status_memory_kib:
            raise PermissionError(13, "Permission denied", path)
        if text.strip() == "5":
            memory = self.scenario.status_memory_kib
            memory["VmHWM"] = sum(memory.get(name, 0) for name in ("RssAnon", "RssFile", "RssShmem"))

    def listdir(self, path: str) -> list[str]:
        prefix = path.rstrip("/") + "/"
        names = {p[len(prefix) :].split("/", 1)[0] for p in self._table() if p.startswith(prefix)}
        if not names:
            raise FileNotFoundError(path)
        return sorted(names)


@dataclass
class Scenario:
    """A whole machine: devices, who holds what on them, host memory, drivers, files and injected failures.

    - ``usage[pid][device]`` is what the driver attributes to ``pid`` on ``device``.
    - ``pid`` is this process's PID as it sees itself; ``driver_pid`` the PID the driver reports for
      it (they differ in a container whose PID namespace the driver does not see); ``nspid_visible``
      says whether ``/proc/self/status`` lists ``driver_pid`` on its ``NSpid`` line.
    - ``failures`` maps a vendor call name, or a glob of names, to an error name (``"NotSupported"``,
      ``"Unknown"``, ...): the scripted library raises that error from that call (see :meth:`failure`).
    - ``drivers``: the vendors' driver stacks with their machine-level facts; one of each kind its devices
      name is added with its defaults where not given (:meth:`driver`).
    """

    devices: list[ScriptedDevice] = field(default_factory=list)
    host: HostMemory = field(default_factory=HostMemory)
    usage: dict[int, dict[int, int]] = field(default_factory=dict)
    pid: int = field(default_factory=os.getpid)
    driver_pid: int | None = None
    nspid_visible: bool = True
    other_pid: int = 4242
    failures: dict[str, str] = field(default_factory=dict)
    drivers: list[ScriptedDriver] = field(default_factory=list)
    files: dict[str, str] = field(default_factory=dict)
    #: ``/proc/self/status`` lines of this process's memory in kB (``{"RssAnon": 2048, ...}``); none by default.
    status_memory_kib: dict[str, int] = field(default_factory=dict)
    #: Environment the backend sees (a runtime's visible-devices variable, ...); tests pass it as ``environ=``.
    environ: dict[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.active_drivers()

    # ---- devices and drivers ------------------------------------------------------------------------
    def driver(self, kind: type[Driver]) -> Driver:
        """The scenario's driver of ``kind``: the one in :attr:`drivers`, or one with its defaults, added now."""
        for driver in self.drivers:
            if isinstance(driver, kind):
                return driver
        made = kind()
        self.drivers.append(made)
        return made

    def active_drivers(self) -> list[ScriptedDriver]:
        """:attr:`drivers`, with a default one added for each kind a device names and none given."""
        for dev in self.devices:
            if dev.driver_type is not None:
                self.driver(dev.driver_type)
        return list(self.drivers)

    def indices(self, kind: type[ScriptedDevice]) -> list[int]:
        """Positions in :attr:`devices` of the devices of ``kind`` (a vendor's :class:`ScriptedDevice` subclass)."""
        return [i for i, dev in enumerate(self.devices) if isinstance(dev, kind)]

    # ---- who holds what -------------------------------------------------------------------------
    @property
    def own_driver_pid(self) -> int:
        return self.pid if self.driver_pid is None else self.driver_pid

    def held(self, device: int = 0, pid: int | None = None) -> int:
        """Bytes the driver attributes to ``pid`` (this process by default) on ``device``."""
        return self.usage.get(self.own_driver_pid if pid is None else pid, {}).get(device, 0)

    def allocate(self, nbytes: int, device: int = 0, pid: int | None = None) -> None:
        """``pid`` (this process by default) allocates ``nbytes`` on ``device``."""
        pid = self.own_driver_pid if pid is None else pid
        dev = self.devices[device]
        if self.device_free(device) < nbytes:
            raise MemoryError(f"scripted device {device} has {self.device_free(device)} bytes free, asked {nbytes}")
        if dev.integrated:
            self.host.take(nbytes)
            dev.draw(nbytes)
        per_device = self.usage.setdefault(pid, {})
        per_device[device] = per_device.get(device, 0) + nbytes

    def release(self, nbytes: int, device: int = 0, pid: int | None = None) -> None:
        """``pid`` (this process by default) frees ``nbytes`` on ``device``."""
        pid = self.own_driver_pid if pid is None else pid
        held = self.usage.get(pid, {}).get(device, 0)
        if nbytes > held:
            raise ValueError(f"pid {pid} holds {held} bytes on device {device}, cannot release {nbytes}")
        self.usage[pid][device] = held - nbytes
        if not self.usage[pid][device]:
            del self.usage[pid][device]
        dev = self.devices[device]
        if dev.integrated:
            self.host.give(nbytes)
            dev.draw(-nbytes)

    def processes(self, device: int = 0) -> dict[int, int]:
        """PID -> bytes on ``device`` as the driver lists them."""
        return {pid: per[device] for pid, per in self.usage.items() if per.get(device)}

    def device_used(self, device: int = 0) -> int:
        """Bytes in use on ``device`` excluding the driver's reservation."""
        return self.devices[device].base_used + sum(self.processes(device).values())

    def device_free(self, device: int = 0) -> int:
        """What a new allocation can obtain on ``device``."""
        dev = self.devices[device]
        if dev.integrated:
            return dev.shared_free(self.host.available)
        return dev.total - dev.reserved - self.device_used(device)

    # ---- the runtime's view ---------------------------------------------------------------------
    def mem_get_info(self, device: int = 0) -> tuple[int, int]:
        """The runtime's ``(free, total)`` (torch's ``mem_get_info``): ``total - reserved`` and what an allocation
        can obtain; on an integrated device the host's MemFree and MemTotal (not counting the page cache).
        :attr:`failures` fails it under the device's ``runtime_call``."""
        dev = self.devices[device]
        self.check(dev.runtime_call)
        if dev.integrated:
            return self.host.free, self.host.total
        return self.device_free(device), dev.total - dev.reserved

    def failure(self, call: str) -> str | None:
        """The error name :attr:`failures` scripts for ``call``: by its name, or by a glob (``"lib_get_*"``)."""
        for pattern, error in self.failures.items():
            if pattern == call or (any(c in pattern for c in "*?[") and fnmatch.fnmatchcase(call, pattern)):
                return error
        return None

    def check(self, call: str) -> None:
        """Raise the scripted failure of ``call``, if any (as a plain RuntimeError for the runtime)."""
        error = self.failure(call)
        if error is not None:
            raise RuntimeError(f"{call}: {error}")

    # ---- files --------------------------------------------------------------------------------
    def proc_self_status(self) -> str:
        ns = [self.pid]
        if self.driver_pid is not None and self.nspid_visible and self.driver_pid != self.pid:
            ns = [self.driver_pid, self.pid]
        memory = "".join(f"{name}:\t{kib:8d} kB\n" for name, kib in self.status_memory_kib.items())
        return f"Name:\tpython3\nPid:\t{self.pid}\nNSpid:\t" + "\t".join(map(str, ns)) + "\n" + memory

    def proc_self_maps(self) -> str:
        """``/proc/self/maps``: the interpreter, then each driver's lines (:meth:`ScriptedDriver.mapped`)."""
        lines = ["55d0c0a00000-55d0c0a21000 r--p 00000000 08:01 1048 /usr/bin/python3.11"]
        for driver in self.active_drivers():
            lines += driver.mapped(self)
        return "\n".join(lines) + "\n"

    @property
    def fs(self) -> ScriptedFiles:
        return ScriptedFiles(self)
