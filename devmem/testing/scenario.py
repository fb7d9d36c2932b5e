"""A scripted machine: devices, processes, host memory, files and failures, all in bytes.

One :class:`Scenario` drives every scripted vendor library (pynvml, amdsmi, the CUDA runtime's
``mem_get_info``) and the scripted files (``/proc/meminfo``, ``/proc/self/status``, sysfs), so a test
can say "a co-tenant allocates 8 GiB while I profile" in one line::

    sc = Scenario(devices=[ScriptedDevice()])
    platform = NvmlPlatform(nvml=ScriptedNvml(sc))
    sc.allocate(8 * GiB, pid=sc.other_pid)

Mutate it through its methods or attributes at any time; every fake reads it live.
"""

from __future__ import annotations

import fnmatch
import os
from collections import Counter
from dataclasses import dataclass, field

from devmem.types import GiB, KiB

#: Readings of an H200 (driver 580.159.04) with no process on it.
H200_TOTAL = 150754820096
H200_RESERVED = 644939776


@dataclass
class ScriptedDevice:
    """One device as its driver reports it.

    ``total`` is the driver's total (NVML v1 ``total``, amdsmi VRAM total); ``reserved`` is memory the
    driver keeps for itself (NVML v2 ``reserved``), so the runtime's total is ``total - reserved``.
    ``base_used`` is memory in use that no listed process owns.
    """

    name: str = "NVIDIA H200"
    vendor: str = "nvidia"
    total: int = H200_TOTAL
    reserved: int = H200_RESERVED
    base_used: int = 0
    uuid: str = "GPU-5d4e3c2b-1a09-4f8e-9d7c-6b5a4f3e2d1c"
    pci_bus_id: str = "00000000:19:00.0"
    integrated: bool = False
    compute_capability: tuple[int, int] = (9, 0)
    #: MIG instances carved out of this device (each a ScriptedDevice with a ``MIG-`` uuid).
    mig: list[ScriptedDevice] = field(default_factory=list)
    #: AMD: market name, gfx target, GTT pool (unified memory) and the sysfs card number.
    market_name: str = ""
    gfx_target: str = ""
    gtt_total: int = 0
    gtt_used: int = 0
    card: int = 0
    #: MIG instances only: PID -> bytes the driver attributes to it inside this instance.
    processes: dict[int, int] = field(default_factory=dict)


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


def _kernel_bus_id(bus_id: str) -> str:
    """``00000000:C6:00.0`` (NVML's form) -> ``0000:c6:00.0`` (the kernel's)."""
    domain, _, rest = bus_id.strip().lower().partition(":")
    return f"{int(domain, 16):04x}:{rest}"


class ScriptedFiles:
    """The filesystem boundary (``read_text``, ``exists``, ``listdir``) served from a scenario.

    ``/proc/meminfo`` and ``/proc/self/status`` are computed live; other paths come from
    ``scenario.files`` (path -> text), from the drivers' own files (``/proc/driver/nvidia/version`` with
    an NVIDIA device outside WDDM, ``/sys/module/amdgpu`` with an AMD one), and from the AMD devices' sysfs
    entries and this process's amdgpu DRM fdinfo (``/proc/self/fdinfo/<100 + device>``, present while it
    holds memory there).
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
        if any(dev.vendor == "nvidia" for dev in sc.devices) and not sc.wddm:  # the kernel driver's own file
            table["/proc/driver/nvidia/version"] = (
                f"NVRM version: NVIDIA UNIX Open Kernel Module  {sc.driver_version}\n"
            )
        if any(dev.vendor == "amd" for dev in sc.devices):  # amdgpu loaded
            table["/sys/module/amdgpu/initstate"] = "live\n"
        for dev in sc.devices:
            if dev.vendor != "amd":
                continue
            base = f"/sys/class/drm/card{dev.card}/device"
            used = sc.device_used(sc.devices.index(dev))
            table[f"{base}/vendor"] = "0x1002\n"
            table[f"{base}/uevent"] = f"DRIVER=amdgpu\nPCI_SLOT_NAME={_kernel_bus_id(dev.pci_bus_id)}\n"
            table[f"{base}/mem_info_vram_total"] = f"{dev.total}\n"
            table[f"{base}/mem_info_vram_used"] = f"{used if not dev.integrated else dev.base_used}\n"
            if dev.gtt_total:
                table[f"{base}/mem_info_gtt_total"] = f"{dev.gtt_total}\n"
                table[f"{base}/mem_info_gtt_used"] = f"{dev.gtt_used}\n"
            index = sc.devices.index(dev)
            held = sc.usage.get(sc.own_driver_pid, {}).get(index, 0)
            if held:  # this process's DRM client on the card, as amdgpu's fdinfo shows it
                region = "gtt" if dev.integrated and dev.gtt_total else "vram"
                rows = {
                    "drm-driver": "amdgpu",
                    "drm-client-id": str(100 + index),
                    "drm-pdev": _kernel_bus_id(dev.pci_bus_id),
                    f"drm-memory-{region}": f"{held // KiB} KiB",
                }
                table[f"/proc/self/fdinfo/{100 + index}"] = "".join(f"{k}:\t{v}\n" for k, v in rows.items())
        return table

    def read_text(self, path: str) -> str:
        table = self._table()
        if path not in table:
            raise FileNotFoundError(path)
        return table[path]

    def exists(self, path: str) -> bool:
        path = path.rstrip("/")
        return path in self._table() or any(p.startswith(path + "/") for p in self._table())

    def listdir(self, path: str) -> list[str]:
        prefix = path.rstrip("/") + "/"
        names = {p[len(prefix) :].split("/", 1)[0] for p in self._table() if p.startswith(prefix)}
        if not names:
            raise FileNotFoundError(path)
        return sorted(names)


@dataclass
class Scenario:
    """A whole machine: devices, who holds what on them, host memory, files and injected failures.

    - ``usage[pid][device]`` is what the driver attributes to ``pid`` on ``device``.
    - ``pid`` is this process's PID as it sees itself; ``driver_pid`` the PID the driver reports for
      it (they differ in a container whose PID namespace the driver does not see); ``nspid_visible``
      says whether ``/proc/self/status`` lists ``driver_pid`` on its ``NSpid`` line.
    - ``failures`` maps a vendor call name (``"nvmlDeviceGetMemoryInfo"``, ``"amdsmi_get_gpu_process_list"``)
      to an error name (``"NotSupported"``, ``"Unknown"``, ``"GpuIsLost"``, ``"NoPermission"``): the
      scripted library raises that error from that call.
    - ``wddm``: Windows display driver model (native Windows or WSL2): no per-process figures.
    - ``libraries``: vendor libraries present on the machine (``"nvml"``, ``"amdsmi"``, ``"cuda"``).
    """

    devices: list[ScriptedDevice] = field(default_factory=lambda: [ScriptedDevice()])
    host: HostMemory = field(default_factory=HostMemory)
    usage: dict[int, dict[int, int]] = field(default_factory=dict)
    pid: int = field(default_factory=os.getpid)
    driver_pid: int | None = None
    nspid_visible: bool = True
    other_pid: int = 4242
    failures: dict[str, str] = field(default_factory=dict)
    wddm: bool = False
    libraries: set[str] = field(default_factory=lambda: {"nvml", "cuda"})
    driver_version: str = "580.159.04"
    files: dict[str, str] = field(default_factory=dict)
    #: Environment the backend sees (CUDA_VISIBLE_DEVICES, ...); tests pass it as ``environ=``.
    environ: dict[str, str] = field(default_factory=dict)
    #: PID -> kind of device context, as nvidia-smi's Type column: "C" (default), "G", "C+G", or "M" (an MPS client).
    process_kinds: dict[int, str] = field(default_factory=dict)

    # ---- who holds what -------------------------------------------------------------------------
    @property
    def own_driver_pid(self) -> int:
        return self.pid if self.driver_pid is None else self.driver_pid

    def allocate(self, nbytes: int, device: int = 0, pid: int | None = None) -> None:
        """``pid`` (this process by default) allocates ``nbytes`` on ``device``."""
        pid = self.own_driver_pid if pid is None else pid
        dev = self.devices[device]
        if self.device_free(device) < nbytes:
            raise MemoryError(f"scripted device {device} has {self.device_free(device)} bytes free, asked {nbytes}")
        if dev.integrated:
            self.host.take(nbytes)
            if dev.gtt_total:
                dev.gtt_used += nbytes
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
            if dev.gtt_total:
                dev.gtt_used -= nbytes

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
            avail = self.host.available
            if dev.gtt_total:
                avail = min(avail, dev.gtt_total - dev.gtt_used)
            return avail
        return dev.total - dev.reserved - self.device_used(device)

    # ---- the CUDA runtime's view ----------------------------------------------------------------
    def mem_get_info(self, device: int = 0) -> tuple[int, int]:
        """``cudaMemGetInfo`` / ``torch.cuda.mem_get_info``: on unified memory it counts only MemFree."""
        self.check("cudaMemGetInfo")
        dev = self.devices[device]
        if dev.integrated:
            return self.host.free, self.host.total
        return self.device_free(device), dev.total - dev.reserved

    def failure(self, call: str) -> str | None:
        """The error name :attr:`failures` scripts for ``call``: by its name, or by a glob (``"nvmlDevice*"``)."""
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
        return f"Name:\tpython3\nPid:\t{self.pid}\nNSpid:\t" + "\t".join(map(str, ns)) + "\n"

    def proc_self_maps(self) -> str:
        """The NVIDIA lines of ``/proc/self/maps``: ``libcuda`` and ``/dev/nvidia<minor>`` for each NVIDIA
        device (minor = its position among NVIDIA devices) where this process holds memory."""
        nvidia = [i for i, d in enumerate(self.devices) if d.vendor == "nvidia"]
        pid = self.own_driver_pid
        held = [
            minor
            for minor, i in enumerate(nvidia)
            if self.usage.get(pid, {}).get(i) or any(m.processes.get(pid) for m in self.devices[i].mig)
        ]
        if not held:
            return "55d0c0a00000-55d0c0a21000 r--p 00000000 08:01 1048 /usr/bin/python3.11\n"
        lines = [
            "7f1c40000000-7f1c40200000 r-xp 00000000 08:01 2048 /usr/lib/x86_64-linux-gnu/libcuda.so.580.159.04",
            "7f1c50000000-7f1c50001000 rw-s 00000000 00:05 512 /dev/nvidiactl",
        ]
        lines += [
            f"7f1c6{minor}000000-7f1c6{minor}001000 rw-s 00000000 00:05 {600 + minor} /dev/nvidia{minor}"
            for minor in held
        ]
        return "\n".join(lines) + "\n"

    @property
    def fs(self) -> ScriptedFiles:
        return ScriptedFiles(self)
