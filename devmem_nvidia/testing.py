"""A scripted ``pynvml``: the same function names, constants, error classes and result attributes as
nvidia-ml-py, answering from a :class:`~devmem.testing.Scenario`; and NVIDIA's parts of a scenario: the
device (:class:`ScriptedNvidiaGpu`) and the driver (:class:`ScriptedNvidiaDriver`), the CUDA driver library
(:class:`ScriptedLibcuda`) and presets from real readings.

Inject it where a backend takes its NVML module (``NvmlPlatform(nvml=ScriptedNvml(sc))``). It mirrors
nvidia-ml-py 13.x (checked against its source):

- errors: ``NVMLError(value)`` maps to its subclass (``NVMLError_NotSupported``, ``NVMLError_GpuIsLost``, ...);
  the unversioned process-list calls raise ``NVMLLibraryMismatchError`` when the ``_v3`` symbol is missing;
  every call before ``nvmlInit`` raises ``NVMLError_Uninitialized``.
- ``nvmlDeviceGetMemoryInfo(handle)`` returns v1 (``total/free/used``, with the driver's reservation
  counted as used), ``nvmlDeviceGetMemoryInfo(handle, nvmlMemory_v2)`` v2 (``version/total/reserved/free/used``).
- process lists return objects with ``pid/usedGpuMemory/gpuInstanceId/computeInstanceId``; where the
  driver cannot attribute memory (WDDM) ``usedGpuMemory`` is ``None``, as nvidia-ml-py converts
  ``NVML_VALUE_NOT_AVAILABLE_ulonglong``; ``ScriptedNvml(sc, convert_not_available=False)`` returns the
  raw sentinel instead, as older bindings do.
- ``Scenario.failures`` maps a pynvml function name (``"nvmlDeviceGetMemoryInfo_v2"`` names the v2 memory
  call) or a glob of names (``"nvmlDevice*"``) to an error name (``"NotSupported"``, ``"Unknown"``,
  ``"GpuIsLost"``, ``"FunctionNotFound"`` for a symbol the driver lacks, ...).
- a failure key ``"<name or glob>@<uuid>"`` fails the memory-info calls only for the device with that UUID
  (``"nvmlDeviceGetMemoryInfo*@GPU-..."``: a MIG container, where the parent GPU is denied and its instances
  are readable; see :func:`mig_container_scenario`).
- integrated parts (``ScriptedNvidiaGpu.integrated``, e.g. GB10) raise ``NotSupported`` from memory info,
  as the GB10's driver does.

``calls`` counts every call by name, so tests can pin down how often NVML is asked.
"""

from __future__ import annotations

import ctypes
import fnmatch
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from devmem import GiB, MiB
from devmem.testing import Scenario, ScriptedDevice, ScriptedDriver, ScriptedLibrary

#: Readings of an H200 (driver 580.159.04) with no process on it.
H200_TOTAL = 150754820096
H200_RESERVED = 644939776
H200_DRIVER = "580.159.04"


@dataclass
class ScriptedNvidiaDriver(ScriptedDriver):
    """The NVIDIA driver on a scripted machine.

    - ``version``: what ``nvmlSystemGetDriverVersion`` and ``/proc/driver/nvidia/version`` say.
    - ``wddm``: Windows display driver model (native Windows or WSL2): no per-process figures, no
      ``/proc/driver/nvidia``.
    - ``libraries``: ``"nvml"`` (libnvidia-ml) and ``"cuda"`` (libcuda) where installed.
    - ``process_kinds``: PID -> kind of device context, as nvidia-smi's Type column: ``"C"`` (default), ``"G"``,
      ``"C+G"``, or ``"M"`` (an MPS client).

    Its files: ``/proc/driver/nvidia/version`` (outside WDDM, with an NVIDIA device present), and in
    ``/proc/self/maps`` libcuda and ``/dev/nvidia<minor>`` for each NVIDIA device (minor = its position among
    them) where this process holds memory.
    """

    version: str = H200_DRIVER
    wddm: bool = False
    libraries: set[str] = field(default_factory=lambda: {"nvml", "cuda"})
    process_kinds: dict[int, str] = field(default_factory=dict)

    def files(self, scenario: Scenario) -> dict[str, str]:
        if self.wddm or not scenario.indices(ScriptedNvidiaGpu):
            return {}
        return {"/proc/driver/nvidia/version": f"NVRM version: NVIDIA UNIX Open Kernel Module  {self.version}\n"}

    def mapped(self, scenario: Scenario) -> list[str]:
        pid = scenario.own_driver_pid
        held = [
            minor
            for minor, i in enumerate(scenario.indices(ScriptedNvidiaGpu))
            if scenario.held(i) or any(m.processes.get(pid) for m in _gpu(scenario, i).mig)
        ]
        if not held:
            return []
        lines = [
            f"7f1c40000000-7f1c40200000 r-xp 00000000 08:01 2048 /usr/lib/x86_64-linux-gnu/libcuda.so.{self.version}",
            "7f1c50000000-7f1c50001000 rw-s 00000000 00:05 512 /dev/nvidiactl",
        ]
        return lines + [
            f"7f1c6{minor}000000-7f1c6{minor}001000 rw-s 00000000 00:05 {600 + minor} /dev/nvidia{minor}"
            for minor in held
        ]


@dataclass(kw_only=True)
class ScriptedNvidiaGpu(ScriptedDevice):
    """An NVIDIA GPU (an H200 unless told otherwise): ``total`` is NVML v1 ``total``, ``reserved`` NVML v2
    ``reserved``; the runtime's ``mem_get_info`` is ``cudaMemGetInfo``."""

    driver_type = ScriptedNvidiaDriver
    runtime_call = "cudaMemGetInfo"

    name: str = "NVIDIA H200"
    total: int = H200_TOTAL
    reserved: int = H200_RESERVED
    uuid: str = "GPU-5d4e3c2b-1a09-4f8e-9d7c-6b5a4f3e2d1c"
    pci_bus_id: str = "00000000:19:00.0"
    compute_capability: tuple[int, int] = (9, 0)
    #: MIG instances carved out of this device (each a ScriptedNvidiaGpu with a ``MIG-`` uuid).
    mig: list[ScriptedNvidiaGpu] = field(default_factory=list)
    #: MIG instances only: PID -> bytes the driver attributes to it inside this instance.
    processes: dict[int, int] = field(default_factory=dict)
    #: What ``nvmlDeviceGetMemoryLimits_v1`` reports (driver r615+): ``(hardLimit, softLimit, currentUsed)``;
    #: ``None``: the driver has no such call (``FunctionNotFound``), as every driver before r615.
    memory_limits: tuple[int, int, int] | None = None


def _gpu(scenario: Scenario, index: int) -> ScriptedNvidiaGpu:
    dev = scenario.devices[index]
    if not isinstance(dev, ScriptedNvidiaGpu):
        raise TypeError(f"scenario device {index} is a {type(dev).__name__}, not a ScriptedNvidiaGpu")
    return dev


# ---- constants, as nvidia-ml-py defines them -------------------------------------------------------
NVML_SUCCESS = 0
_ERRORS = {
    "UNINITIALIZED": 1,
    "INVALID_ARGUMENT": 2,
    "NOT_SUPPORTED": 3,
    "NO_PERMISSION": 4,
    "ALREADY_INITIALIZED": 5,
    "NOT_FOUND": 6,
    "INSUFFICIENT_SIZE": 7,
    "INSUFFICIENT_POWER": 8,
    "DRIVER_NOT_LOADED": 9,
    "TIMEOUT": 10,
    "IRQ_ISSUE": 11,
    "LIBRARY_NOT_FOUND": 12,
    "FUNCTION_NOT_FOUND": 13,
    "CORRUPTED_INFOROM": 14,
    "GPU_IS_LOST": 15,
    "RESET_REQUIRED": 16,
    "OPERATING_SYSTEM": 17,
    "LIB_RM_VERSION_MISMATCH": 18,
    "IN_USE": 19,
    "MEMORY": 20,
    "NO_DATA": 21,
    "VGPU_ECC_NOT_SUPPORTED": 22,
    "INSUFFICIENT_RESOURCES": 23,
    "FREQ_NOT_SUPPORTED": 24,
    "ARGUMENT_VERSION_MISMATCH": 25,
    "DEPRECATED": 26,
    "NOT_READY": 27,
    "GPU_NOT_FOUND": 28,
    "INVALID_STATE": 29,
    "RESET_TYPE_NOT_SUPPORTED": 30,
    "UNKNOWN": 999,
}
NVML_VALUE_NOT_AVAILABLE_ulonglong = ctypes.c_ulonglong(-1)
NVML_VALUE_NOT_AVAILABLE_uint = ctypes.c_uint(-1)
nvmlMemory_v2 = 0x02000028
NVML_DRIVER_WDDM = 0
NVML_DRIVER_WDM = 1
NVML_DRIVER_MCDM = 2
NVML_DEVICE_MIG_DISABLE = 0
NVML_DEVICE_MIG_ENABLE = 1
NVML_FEATURE_DISABLED = 0
NVML_FEATURE_ENABLED = 1
_INVALID_ID = 0xFFFFFFFF  # gpuInstanceId/computeInstanceId of a process on a GPU without MIG


class NVMLError(Exception):
    """Like pynvml's: ``NVMLError(value)`` returns the subclass for ``value``; ``.value`` is the code."""

    _valClassMapping: dict[int, type] = {}
    _errcode_to_string: dict[int, str] = {}
    value: int

    def __new__(cls, value: int):
        if cls is NVMLError:
            cls = NVMLError._valClassMapping.get(value, cls)
        obj = Exception.__new__(cls)
        obj.value = value
        return obj

    def __init__(self, value: int):
        super().__init__(value)

    def __str__(self) -> str:
        return NVMLError._errcode_to_string.get(self.value, f"NVML Error with code {self.value}")

    def __eq__(self, other: object) -> bool:
        return isinstance(other, NVMLError) and self.value == other.value

    __hash__ = Exception.__hash__


class NVMLLibraryMismatchError(Exception):
    """pynvml raises this from an unversioned call whose newest symbol the library lacks."""


def _class_name(const: str) -> str:
    return "NVMLError_" + "".join(part.capitalize() for part in const.split("_"))


def _error_class(const: str, code: int) -> type:
    def __new__(cls, *args):
        return NVMLError.__new__(cls, code)

    def __init__(self, *args):
        Exception.__init__(self, code)

    return type(_class_name(const), (NVMLError,), {"__new__": __new__, "__init__": __init__, "__module__": __name__})


#: NVMLError subclasses by short name, made here at import (their constructors take no code, hence ``Any``).
_ERROR_CLASSES: dict[str, Any] = {}
for _const, _code in _ERRORS.items():
    _cls = _error_class(_const, _code)
    globals()[_cls.__name__] = _cls
    globals()[f"NVML_ERROR_{_const}"] = _code
    NVMLError._valClassMapping[_code] = _cls
    NVMLError._errcode_to_string[_code] = _const.replace("_", " ").title()
    _ERROR_CLASSES[_cls.__name__.removeprefix("NVMLError_")] = _cls
NVMLError._errcode_to_string[_ERRORS["GPU_IS_LOST"]] = "GPU is lost"
NVMLError._errcode_to_string[_ERRORS["NOT_SUPPORTED"]] = "Not Supported"


def nvml_error(name: str) -> NVMLError:
    """``nvml_error("NotSupported")`` -> an ``NVMLError_NotSupported`` instance."""
    if name not in _ERROR_CLASSES:
        raise ValueError(f"unknown NVML error name {name!r}; known: {', '.join(sorted(_ERROR_CLASSES))}")
    return _ERROR_CLASSES[name]()


# ---- result objects with pynvml's attribute names -----------------------------------------------
class c_nvmlMemory_t:
    def __init__(self, total: int, free: int, used: int):
        self.total, self.free, self.used = total, free, used


class c_nvmlMemory_v2_t:
    def __init__(self, version: int, total: int, reserved: int, free: int, used: int):
        self.version, self.total, self.reserved, self.free, self.used = version, total, reserved, free, used


class nvmlPciInfo_t:
    def __init__(self, bus_id: str):
        domain, bus, rest = bus_id.split(":")
        self.busId = bus_id.encode()
        self.busIdLegacy = f"{int(domain, 16):04X}:{bus}:{rest}".encode()
        self.domain, self.bus, self.device = int(domain, 16), int(bus, 16), int(rest.split(".")[0], 16)
        self.pciDeviceId = 0x233510DE
        self.pciSubSystemId = 0


class c_nvmlGetMemoryLimits_v1_t(ctypes.Structure):
    _fields_ = [
        ("nameSpace", ctypes.c_char_p),
        ("softLimit", ctypes.c_ulonglong),
        ("hardLimit", ctypes.c_ulonglong),
        ("currentUsed", ctypes.c_ulonglong),
    ]


class nvmlFriendlyObject:
    def __init__(self, **fields: Any):
        self.__dict__.update(fields)

    def __str__(self) -> str:
        return str(self.__dict__)


@dataclass(frozen=True)
class ScriptedHandle:
    """An NVML device handle: a scenario device, or one of its MIG instances."""

    device: int
    mig: int | None = None


def _uuid_bytes(uuid: str) -> bytes:
    """The 16 bytes of a ``GPU-``/``MIG-`` UUID, as the CUDA driver answers them."""
    return bytes.fromhex(uuid.partition("-")[2].replace("-", ""))


def _bus_key(bus_id: str) -> str:
    domain, _, rest = bus_id.strip().upper().partition(":")
    return f"{domain.zfill(8)}:{rest}"


class ScriptedNvml(ScriptedLibrary):
    """``pynvml`` answering from ``scenario`` (read live on every call). See the module docstring."""

    nvmlMemory_v2 = nvmlMemory_v2
    c_nvmlGetMemoryLimits_v1_t = c_nvmlGetMemoryLimits_v1_t
    NVML_SUCCESS = NVML_SUCCESS
    NVML_VALUE_NOT_AVAILABLE_ulonglong = NVML_VALUE_NOT_AVAILABLE_ulonglong
    NVML_VALUE_NOT_AVAILABLE_uint = NVML_VALUE_NOT_AVAILABLE_uint
    NVML_DRIVER_WDDM = NVML_DRIVER_WDDM
    NVML_DRIVER_WDM = NVML_DRIVER_WDM
    NVML_DRIVER_MCDM = NVML_DRIVER_MCDM
    NVML_DEVICE_MIG_DISABLE = NVML_DEVICE_MIG_DISABLE
    NVML_DEVICE_MIG_ENABLE = NVML_DEVICE_MIG_ENABLE
    NVMLError = NVMLError
    NVMLLibraryMismatchError = NVMLLibraryMismatchError

    def __init__(self, scenario: Scenario, *, convert_not_available: bool = True):
        super().__init__(scenario)
        self.convert_not_available = convert_not_available

    # ---- plumbing ------------------------------------------------------------------------------
    def error(self, name: str) -> Exception:
        return nvml_error(name)

    def _enter(self, name: str, *, needs_init: bool = True, handle: Any = None) -> None:
        """The shared plumbing, with failures scripted for one device too: ``"call@UUID"``."""
        self.calls[name] += 1
        for pattern, error in self.scenario.failures.items():
            pattern, _, uuid = pattern.partition("@")
            if uuid and (handle is None or self._device(handle).uuid != uuid):
                continue
            if pattern == name or (any(c in pattern for c in "*?[") and fnmatch.fnmatchcase(name, pattern)):
                raise self.error(error)
        if needs_init and self.initialised <= 0:
            raise self.error(self.NOT_INITIALISED)

    def _nvidia(self) -> list[int]:
        return self.scenario.indices(ScriptedNvidiaGpu)

    @property
    def _driver(self) -> ScriptedNvidiaDriver:
        return self.scenario.driver(ScriptedNvidiaDriver)

    def _device(self, handle: Any) -> ScriptedNvidiaGpu:
        if not isinstance(handle, ScriptedHandle):
            raise nvml_error("InvalidArgument")
        dev = _gpu(self.scenario, handle.device)
        return dev if handle.mig is None else dev.mig[handle.mig]

    def _usage(self, handle: ScriptedHandle) -> dict[int, int]:
        if handle.mig is None:
            return self.scenario.processes(handle.device)
        instance = _gpu(self.scenario, handle.device).mig[handle.mig]
        return {pid: used for pid, used in instance.processes.items() if used}

    def _used(self, handle: ScriptedHandle) -> int:
        dev = self._device(handle)
        used = dev.base_used + sum(self._usage(handle).values())
        if handle.mig is None:
            used += sum(m.base_used + sum(m.processes.values()) for m in dev.mig)
        return used

    # ---- library -------------------------------------------------------------------------------
    def nvmlInit(self) -> None:
        self.nvmlInitWithFlags(0)

    def nvmlInitWithFlags(self, flags: int) -> None:
        self._enter("nvmlInit", needs_init=False)
        if "nvml" not in self._driver.libraries:
            raise nvml_error("LibraryNotFound")
        if not self._nvidia():
            raise nvml_error("DriverNotLoaded")
        self.initialised += 1

    def nvmlShutdown(self) -> None:
        self._enter("nvmlShutdown")
        self.initialised -= 1

    def nvmlSystemGetDriverVersion(self) -> str:
        self._enter("nvmlSystemGetDriverVersion")
        return self._driver.version

    # ---- handles -------------------------------------------------------------------------------
    def nvmlDeviceGetCount(self) -> int:
        self._enter("nvmlDeviceGetCount")
        return len(self._nvidia())

    def nvmlDeviceGetHandleByIndex(self, index: int) -> ScriptedHandle:
        self._enter("nvmlDeviceGetHandleByIndex")
        nvidia = self._nvidia()
        if not 0 <= index < len(nvidia):
            raise nvml_error("InvalidArgument")
        return ScriptedHandle(nvidia[index])

    def _all_handles(self) -> list[ScriptedHandle]:
        out = []
        for i in self._nvidia():
            out.append(ScriptedHandle(i))
            out.extend(ScriptedHandle(i, m) for m in range(len(_gpu(self.scenario, i).mig)))
        return out

    def nvmlDeviceGetHandleByUUID(self, uuid: str | bytes) -> ScriptedHandle:
        self._enter("nvmlDeviceGetHandleByUUID")
        uuid = uuid.decode() if isinstance(uuid, bytes) else uuid
        for h in self._all_handles():
            if self._device(h).uuid == uuid:
                return h
        raise nvml_error("NotFound")

    def nvmlDeviceGetHandleByPciBusId(self, bus_id: str | bytes) -> ScriptedHandle:
        self._enter("nvmlDeviceGetHandleByPciBusId")
        bus_id = _bus_key(bus_id.decode() if isinstance(bus_id, bytes) else bus_id)
        for i in self._nvidia():
            if _bus_key(self.scenario.devices[i].pci_bus_id) == bus_id:
                return ScriptedHandle(i)
        raise nvml_error("NotFound")

    def nvmlDeviceGetIndex(self, handle: ScriptedHandle) -> int:
        self._enter("nvmlDeviceGetIndex")
        return self._nvidia().index(handle.device)

    def nvmlDeviceGetMinorNumber(self, handle: ScriptedHandle) -> int:
        self._enter("nvmlDeviceGetMinorNumber")
        return self._nvidia().index(handle.device)

    def nvmlDeviceGetName(self, handle: ScriptedHandle) -> str:
        self._enter("nvmlDeviceGetName")
        return self._device(handle).name

    def nvmlDeviceGetUUID(self, handle: ScriptedHandle) -> str:
        self._enter("nvmlDeviceGetUUID")
        return self._device(handle).uuid

    def nvmlDeviceGetPciInfo_v3(self, handle: ScriptedHandle) -> nvmlPciInfo_t:
        self._enter("nvmlDeviceGetPciInfo_v3")
        return nvmlPciInfo_t(_bus_key(self.scenario.devices[handle.device].pci_bus_id))

    def nvmlDeviceGetPciInfo(self, handle: ScriptedHandle) -> nvmlPciInfo_t:
        self._enter("nvmlDeviceGetPciInfo")
        return self.nvmlDeviceGetPciInfo_v3(handle)

    def nvmlDeviceGetCudaComputeCapability(self, handle: ScriptedHandle) -> tuple[int, int]:
        self._enter("nvmlDeviceGetCudaComputeCapability")
        major, minor = _gpu(self.scenario, handle.device).compute_capability
        return major, minor

    # ---- memory --------------------------------------------------------------------------------
    def nvmlDeviceGetMemoryInfo(self, handle: ScriptedHandle, version: int | None = None):
        self._enter("nvmlDeviceGetMemoryInfo_v2" if version else "nvmlDeviceGetMemoryInfo", handle=handle)
        dev = self._device(handle)
        if dev.integrated:
            raise nvml_error("NotSupported")
        used = self._used(handle)
        if not version:
            return c_nvmlMemory_t(dev.total, dev.total - dev.reserved - used, dev.reserved + used)
        if version != nvmlMemory_v2:
            raise nvml_error("ArgumentVersionMismatch")
        return c_nvmlMemory_v2_t(version, dev.total, dev.reserved, dev.total - dev.reserved - used, used)

    def nvmlDeviceGetMemoryLimits_v1(self, device: ScriptedHandle, limits: Any) -> None:
        self._enter("nvmlDeviceGetMemoryLimits_v1", handle=device)
        figures = self._device(device).memory_limits
        if figures is None:
            raise nvml_error("FunctionNotFound")
        limits.hardLimit, limits.softLimit, limits.currentUsed = figures

    # ---- processes -----------------------------------------------------------------------------
    def _processes(self, name: str, handle: ScriptedHandle, kind: str) -> list[nvmlFriendlyObject]:
        self._enter(name)
        self._device(handle)
        sentinel = None if self.convert_not_available else NVML_VALUE_NOT_AVAILABLE_ulonglong.value
        kinds = self._driver.process_kinds
        out = []
        for pid, used in sorted(self._usage(handle).items()):
            if kind not in kinds.get(pid, "C").split("+"):
                continue
            gi, ci = (handle.mig + 1, 0) if handle.mig is not None else (_INVALID_ID, _INVALID_ID)
            out.append(
                nvmlFriendlyObject(
                    pid=pid,
                    usedGpuMemory=sentinel if self._driver.wddm else used,
                    gpuInstanceId=gi,
                    computeInstanceId=ci,
                )
            )
        return out

    def nvmlDeviceGetComputeRunningProcesses_v3(self, handle: ScriptedHandle) -> list[nvmlFriendlyObject]:
        return self._processes("nvmlDeviceGetComputeRunningProcesses_v3", handle, "C")

    def nvmlDeviceGetComputeRunningProcesses_v2(self, handle: ScriptedHandle) -> list[nvmlFriendlyObject]:
        return self._processes("nvmlDeviceGetComputeRunningProcesses_v2", handle, "C")

    def nvmlDeviceGetComputeRunningProcesses(self, handle: ScriptedHandle) -> list[nvmlFriendlyObject]:
        return self._unversioned(
            "nvmlDeviceGetComputeRunningProcesses", self.nvmlDeviceGetComputeRunningProcesses_v3, handle
        )

    def nvmlDeviceGetGraphicsRunningProcesses_v3(self, handle: ScriptedHandle) -> list[nvmlFriendlyObject]:
        return self._processes("nvmlDeviceGetGraphicsRunningProcesses_v3", handle, "G")

    def nvmlDeviceGetGraphicsRunningProcesses_v2(self, handle: ScriptedHandle) -> list[nvmlFriendlyObject]:
        return self._processes("nvmlDeviceGetGraphicsRunningProcesses_v2", handle, "G")

    def nvmlDeviceGetGraphicsRunningProcesses(self, handle: ScriptedHandle) -> list[nvmlFriendlyObject]:
        return self._unversioned(
            "nvmlDeviceGetGraphicsRunningProcesses", self.nvmlDeviceGetGraphicsRunningProcesses_v3, handle
        )

    def nvmlDeviceGetMPSComputeRunningProcesses_v3(self, handle: ScriptedHandle) -> list[nvmlFriendlyObject]:
        return self._processes("nvmlDeviceGetMPSComputeRunningProcesses_v3", handle, "M")

    def nvmlDeviceGetMPSComputeRunningProcesses_v2(self, handle: ScriptedHandle) -> list[nvmlFriendlyObject]:
        return self._processes("nvmlDeviceGetMPSComputeRunningProcesses_v2", handle, "M")

    def nvmlDeviceGetMPSComputeRunningProcesses(self, handle: ScriptedHandle) -> list[nvmlFriendlyObject]:
        self._enter("nvmlDeviceGetMPSComputeRunningProcesses")  # pynvml forwards to _v3 without converting errors
        return self.nvmlDeviceGetMPSComputeRunningProcesses_v3(handle)

    def _unversioned(self, name: str, newest: Callable[[ScriptedHandle], Any], handle: ScriptedHandle) -> Any:
        self._enter(name)
        try:
            return newest(handle)
        except _ERROR_CLASSES["FunctionNotFound"] as exc:
            raise NVMLLibraryMismatchError(
                f"Unversioned function called and the pyNVML version does not match the NVML lib version; use {name}_v2"
            ) from exc

    # ---- driver model and MIG -----------------------------------------------------------------
    def nvmlDeviceGetDriverModel_v2(self, handle: ScriptedHandle) -> list[int]:
        self._enter("nvmlDeviceGetDriverModel_v2")
        self._device(handle)
        if not self._driver.wddm:
            raise nvml_error("NotSupported")  # Linux drivers have no driver model
        return [NVML_DRIVER_WDDM, NVML_DRIVER_WDDM]

    def nvmlDeviceGetDriverModel(self, handle: ScriptedHandle) -> list[int]:
        self._enter("nvmlDeviceGetDriverModel")
        return self.nvmlDeviceGetDriverModel_v2(handle)

    def nvmlDeviceGetCurrentDriverModel(self, handle: ScriptedHandle) -> int:
        return self.nvmlDeviceGetDriverModel(handle)[0]

    def nvmlDeviceGetMigMode(self, handle: ScriptedHandle) -> list[int]:
        self._enter("nvmlDeviceGetMigMode")
        mode = NVML_DEVICE_MIG_ENABLE if self._device(handle).mig else NVML_DEVICE_MIG_DISABLE
        return [mode, mode]

    def nvmlDeviceIsMigDeviceHandle(self, handle: ScriptedHandle) -> ctypes.c_uint:
        self._enter("nvmlDeviceIsMigDeviceHandle")
        return ctypes.c_uint(int(handle.mig is not None))  # pynvml returns the c_uint itself

    def nvmlDeviceGetMaxMigDeviceCount(self, handle: ScriptedHandle) -> int:
        self._enter("nvmlDeviceGetMaxMigDeviceCount")
        return 7 if self._device(handle).mig else 0

    def nvmlDeviceGetMigDeviceHandleByIndex(self, handle: ScriptedHandle, index: int) -> ScriptedHandle:
        self._enter("nvmlDeviceGetMigDeviceHandleByIndex")
        if not 0 <= index < len(self._device(handle).mig):
            raise nvml_error("NotFound")
        return ScriptedHandle(handle.device, index)

    def nvmlDeviceGetDeviceHandleFromMigDeviceHandle(self, handle: ScriptedHandle) -> ScriptedHandle:
        self._enter("nvmlDeviceGetDeviceHandleFromMigDeviceHandle")
        if handle.mig is None:
            raise nvml_error("InvalidArgument")
        return ScriptedHandle(handle.device)

    def nvmlDeviceGetGpuInstanceId(self, handle: ScriptedHandle) -> int:
        self._enter("nvmlDeviceGetGpuInstanceId")
        if handle.mig is None:
            raise nvml_error("InvalidArgument")
        return handle.mig + 1

    def nvmlDeviceGetComputeInstanceId(self, handle: ScriptedHandle) -> int:
        self._enter("nvmlDeviceGetComputeInstanceId")
        if handle.mig is None:
            raise nvml_error("InvalidArgument")
        return 0


for _cls in _ERROR_CLASSES.values():
    setattr(ScriptedNvml, _cls.__name__, _cls)
for _const, _code in _ERRORS.items():
    setattr(ScriptedNvml, f"NVML_ERROR_{_const}", _code)


class ScriptedAllocator:
    """The runtime boundary a backend allocates through to learn its driver-side PID, on ``scenario``.

    ``allocate(device, nbytes)`` charges ``nbytes`` to this process's driver PID on scenario device
    ``device``; ``free(token)`` gives them back. ``moves`` scripts what the driver shows instead, e.g.
    ``{26 * MiB: 28 * MiB}`` for a driver that rounds an allocation up.
    """

    def __init__(self, scenario: Scenario, *, moves: dict[int, int] | None = None, available: bool = True):
        self.scenario = scenario
        self.moves = dict(moves or {})
        self.is_available = available
        self.allocations: list[int] = []

    def available(self, device: int) -> tuple[bool, str]:
        if self.is_available:
            return True, "scripted runtime"
        return False, "the scripted runtime has no CUDA context"

    def has_context(self, device: int) -> bool:
        return self.is_available

    def allocate(self, device: int, nbytes: int) -> tuple[int, int]:
        shown = self.moves.get(nbytes, nbytes)
        self.scenario.allocate(shown, device)
        self.allocations.append(nbytes)
        return device, shown

    def free(self, token: tuple[int, int]) -> None:
        device, shown = token
        self.scenario.release(shown, device)


class ScriptedLibcuda:
    """The CUDA driver library (``libcuda``) answering from ``scenario``, called as devmem calls the real one
    through ctypes: each function returns a ``CUresult`` and writes its results through ``ctypes.byref``.

    Devices are the scenario's NVIDIA GPUs, after integer entries of ``CUDA_VISIBLE_DEVICES`` in
    ``scenario.environ``. This process's primary context on a device is active while it holds memory there.
    ``Scenario.failures`` maps a function name to a ``CUresult`` name (``"CUDA_ERROR_UNKNOWN"``). ``contexts_created``
    counts primary contexts a caller brought into being (retaining one that was not active). ``mps_limits`` and
    ``interposed_limits`` (scenario device index -> bytes) cap what ``cuMemGetInfo`` reports: an MPS daemon's
    pinned limit (free only) and an interposed vGPU library's limit (total and free); ``current``: the device
    whose primary context is current on the calling thread (as torch leaves it), if active; ``mps_uncounted``: bytes of
    this process's NVML figure that MPS does not count against the limit (1939312 on the H200).
    """

    CODES = {
        "CUDA_SUCCESS": 0,
        "CUDA_ERROR_INVALID_VALUE": 1,
        "CUDA_ERROR_NOT_INITIALIZED": 3,
        "CUDA_ERROR_NO_DEVICE": 100,
        "CUDA_ERROR_INVALID_DEVICE": 101,
        "CUDA_ERROR_INVALID_CONTEXT": 201,
        "CUDA_ERROR_SYSTEM_DRIVER_MISMATCH": 803,
        "CUDA_ERROR_UNKNOWN": 999,
    }

    def __init__(
        self,
        scenario: Scenario,
        *,
        mps_limits: dict[int, int] | None = None,
        interposed_limits: dict[int, int] | None = None,
        mps_uncounted: int = 0,
        current: int | None = None,
    ):
        self.scenario = scenario
        self.current = current
        self.mps_limits = mps_limits or {}
        self.mps_uncounted = mps_uncounted
        self.interposed_limits = interposed_limits or {}
        self.initialised = False
        self.contexts_created = 0
        self.calls: Counter[str] = Counter()
        self._stack: list[int] = []
        self._names = {code: name for name, code in self.CODES.items()}

    def _enter(self, name: str) -> int:
        self.calls[name] += 1
        error = self.scenario.failures.get(name)
        if error is not None:
            return self.CODES[error]
        if name != "cuInit" and not self.initialised:
            return self.CODES["CUDA_ERROR_NOT_INITIALIZED"]
        return 0

    def _ordinals(self) -> list[int]:
        nvidia = self.scenario.indices(ScriptedNvidiaGpu)
        raw = self.scenario.environ.get("CUDA_VISIBLE_DEVICES")
        if raw is None:
            return nvidia
        out = []
        for token in (t.strip() for t in raw.split(",")):
            if not token.isdigit() or int(token) >= len(nvidia) or nvidia[int(token)] in out:
                break
            out.append(nvidia[int(token)])
        return out

    def _active(self, dev: int) -> bool:
        return bool(self.scenario.held(dev))

    def cuInit(self, flags: int) -> int:
        code = self._enter("cuInit")
        if code == 0 and "cuda" not in self.scenario.driver(ScriptedNvidiaDriver).libraries:
            code = self.CODES["CUDA_ERROR_SYSTEM_DRIVER_MISMATCH"]
        if code == 0 and not self._ordinals():
            code = self.CODES["CUDA_ERROR_NO_DEVICE"]
        self.initialised = code == 0
        return code

    def cuGetErrorName(self, code: int, out: Any) -> int:
        if code not in self._names:
            return self.CODES["CUDA_ERROR_INVALID_VALUE"]
        out._obj.value = self._names[code].encode()
        return 0

    def cuDeviceGetCount(self, count: Any) -> int:
        code = self._enter("cuDeviceGetCount")
        if code == 0:
            count._obj.value = len(self._ordinals())
        return code

    def cuDeviceGet(self, dev: Any, ordinal: int) -> int:
        code = self._enter("cuDeviceGet")
        if code == 0 and not 0 <= ordinal < len(self._ordinals()):
            code = self.CODES["CUDA_ERROR_INVALID_DEVICE"]
        if code == 0:
            dev._obj.value = self._ordinals()[ordinal]
        return code

    def cuDeviceTotalMem_v2(self, size: Any, dev: int) -> int:
        code = self._enter("cuDeviceTotalMem_v2")
        if code == 0:
            size._obj.value = self.scenario.devices[dev].total - self.scenario.devices[dev].reserved
        return code

    def cuDeviceGetName(self, buf: Any, length: int, dev: int) -> int:
        code = self._enter("cuDeviceGetName")
        if code == 0:
            buf.value = self.scenario.devices[dev].name.encode()[: length - 1]
        return code

    def cuDeviceGetPCIBusId(self, buf: Any, length: int, dev: int) -> int:
        code = self._enter("cuDeviceGetPCIBusId")
        if code == 0:
            domain, _, rest = self.scenario.devices[dev].pci_bus_id.partition(":")
            buf.value = f"{int(domain, 16):04X}:{rest}".encode()
        return code

    def cuDeviceGetUuid(self, raw: Any, dev: int) -> int:
        code = self._enter("cuDeviceGetUuid")
        if code == 0:
            raw[:] = _uuid_bytes(self.scenario.devices[dev].uuid)
        return code

    def cuDeviceGetUuid_v2(self, raw: Any, dev: int) -> int:
        code = self._enter("cuDeviceGetUuid_v2")
        if code == 0:
            raw[:] = _uuid_bytes(self.scenario.devices[dev].uuid)
        return code

    def cuDeviceGetAttribute(self, value: Any, attribute: int, dev: int) -> int:
        code = self._enter("cuDeviceGetAttribute")
        if code == 0:
            value._obj.value = int(self.scenario.devices[dev].integrated) if attribute == 18 else 0
        return code

    def cuDevicePrimaryCtxGetState(self, dev: int, flags: Any, active: Any) -> int:
        code = self._enter("cuDevicePrimaryCtxGetState")
        if code == 0:
            flags._obj.value, active._obj.value = 0, int(self._active(dev))
        return code

    def cuDevicePrimaryCtxRetain(self, ctx: Any, dev: int) -> int:
        code = self._enter("cuDevicePrimaryCtxRetain")
        if code == 0:
            if not self._active(dev):
                self.contexts_created += 1
            ctx._obj.value = 0x1000 + dev
        return code

    def cuDevicePrimaryCtxRelease_v2(self, dev: int) -> int:
        return self._enter("cuDevicePrimaryCtxRelease_v2")

    def cuCtxPushCurrent_v2(self, ctx: Any) -> int:
        code = self._enter("cuCtxPushCurrent_v2")
        if code == 0:
            self._stack.append(int(ctx.value) - 0x1000)
        return code

    def cuCtxPopCurrent_v2(self, ctx: Any) -> int:
        code = self._enter("cuCtxPopCurrent_v2")
        if code == 0 and not self._stack:
            code = self.CODES["CUDA_ERROR_INVALID_CONTEXT"]
        if code == 0:
            ctx._obj.value = 0x1000 + self._stack.pop()
        return code

    def cuCtxGetCurrent(self, ctx: Any) -> int:
        code = self._enter("cuCtxGetCurrent")
        if code == 0:
            current = self._stack[-1] if self._stack else self.current
            ctx._obj.value = None if current is None or not self._active(current) else 0x1000 + current
        return code

    def cuCtxGetDevice(self, dev: Any) -> int:
        code = self._enter("cuCtxGetDevice")
        current = self._stack[-1] if self._stack else self.current
        if code == 0 and (current is None or not self._active(current)):
            code = self.CODES["CUDA_ERROR_INVALID_CONTEXT"]
        if code == 0:
            dev._obj.value = current
        return code

    def cuMemGetInfo_v2(self, free: Any, total: Any) -> int:
        code = self._enter("cuMemGetInfo_v2")
        current = self._stack[-1] if self._stack else self.current
        if code == 0 and (current is None or not self._active(current)):
            code = self.CODES["CUDA_ERROR_INVALID_CONTEXT"]
        if code == 0 and current is not None:
            free._obj.value, total._obj.value = self._mem_get_info(current)
        return code

    def _mem_get_info(self, dev: int) -> tuple[int, int]:
        """The scenario's runtime view, capped as the MPS server enforces a daemon's pinned limit (``free`` is
        the limit less this process's usage, ``total`` stays the device's) or as an interposed vGPU library
        reports its limit (``total`` is the limit)."""
        free, total = self.scenario.mem_get_info(dev)
        own = self.scenario.usage.get(self.scenario.own_driver_pid, {}).get(dev, 0)
        if dev in self.mps_limits:
            free = max(0, min(free, self.mps_limits[dev] - (own - self.mps_uncounted)))
        if dev in self.interposed_limits:
            total = self.interposed_limits[dev]
            free = max(0, min(free, total - own))
        return free, total


def scripted_cuda_platform(scenario: Scenario, **kwargs: Any) -> Any:
    """``CudaPlatform`` on ``scenario``: its scripted libcuda, files and environment."""
    from devmem_nvidia.cuda_platform import CudaPlatform

    kwargs.setdefault("library", ScriptedLibcuda(scenario))
    kwargs.setdefault("files", scenario.fs)
    kwargs.setdefault("environ", scenario.environ)
    return CudaPlatform(**kwargs)


# ---- presets from real readings ---------------------------------------------------------------------
#: This process's ``usedGpuMemory`` on the H200 after creating its CUDA context (driver 580.159.04).
H200_CONTEXT = 545259520
#: ... and after allocating a 512 MiB tensor.
H200_CONTEXT_PLUS_512MIB = 1082130432
#: A child process holding a 1 GiB tensor, as its own entry.
H200_CHILD_1GIB = 1616904192
#: ``torch.cuda.mem_get_info()`` total on the same H200: NVML v2 ``total - reserved``.
H200_RUNTIME_TOTAL = H200_TOTAL - H200_RESERVED


def h200_scenario(*, context: bool = False, **kwargs: Any) -> Scenario:
    """One H200 as recorded (driver 580.159.04): v1 total 150754820096, free 150109880320, used 644939776;
    v2 used 0, reserved 644939776. ``context=True`` adds this process's CUDA context (545259520 bytes)."""
    sc = Scenario(devices=[ScriptedNvidiaGpu()], **kwargs)
    if context:
        sc.allocate(H200_CONTEXT)
    return sc


def mig_scenario(**kwargs: Any) -> Scenario:
    """An H200 with MIG on, split into a 3g.71gb and a 1g.18gb instance.

    Instance sizes follow NVIDIA's H200 MIG profile names (not a recorded reading); the parent GPU is the
    recorded H200. Per-instance usage lives in each instance's ``processes``.
    """
    parent = ScriptedNvidiaGpu()
    parent.mig = [
        ScriptedNvidiaGpu(
            name="NVIDIA H200 MIG 3g.71gb",
            total=71 * GiB,
            reserved=0,
            uuid="MIG-8f2c1a3e-4b5d-5e6f-8a9b-0c1d2e3f4a5b",
            pci_bus_id=parent.pci_bus_id,
        ),
        ScriptedNvidiaGpu(
            name="NVIDIA H200 MIG 1g.18gb",
            total=18 * GiB - 512 * MiB,
            reserved=0,
            uuid="MIG-1a2b3c4d-5e6f-5a7b-9c8d-7e6f5a4b3c2d",
            pci_bus_id=parent.pci_bus_id,
        ),
    ]
    return Scenario(devices=[parent], **kwargs)


#: PID of the MPS server in :func:`mps_scenario`, and what it held on the H200 under an MPS daemon without a limit.
MPS_SERVER_PID = 3131
MPS_SERVER_BYTES = 69 * MiB


def mps_scenario(**kwargs: Any) -> Scenario:
    """The H200 under an MPS daemon: this process is a client with its context (NVML's MPS list, nvidia-smi type
    "M+C"), the server ``nvidia-cuda-mps-server`` is in the compute list only with 69 MiB (as measured)."""
    sc = h200_scenario(context=True, **kwargs)
    sc.allocate(MPS_SERVER_BYTES, pid=MPS_SERVER_PID)
    sc.driver(ScriptedNvidiaDriver).process_kinds.update({sc.own_driver_pid: "M", MPS_SERVER_PID: "C"})
    sc.files[f"/proc/{MPS_SERVER_PID}/comm"] = "nvidia-cuda-mps\n"  # the kernel keeps 15 characters of a command
    sc.files["/tmp/nvidia-mps/control"] = ""  # the control daemon's pipe in the default pipe directory
    return sc


class ScriptedMpsControl:
    """``nvidia-cuda-mps-control`` fed commands on stdin, answering ``get_default_device_pinned_mem_limit <dev>``
    with the size set for ``dev`` as the real program prints it (``"8G"``) and nothing where none is set (both as
    on the H200). ``failure``: an exception to raise instead (``OSError`` for a missing program,
    ``subprocess.TimeoutExpired`` for a daemon that does not answer). ``calls`` counts the runs."""

    def __init__(self, defaults: dict[int, str] | None = None, failure: Exception | None = None):
        self.defaults = defaults or {}
        self.failure = failure
        self.calls = 0

    def __call__(self, commands: str) -> str:
        self.calls += 1
        if self.failure is not None:
            raise self.failure
        out = []
        for line in commands.splitlines():
            verb, _, dev = line.partition(" ")
            if verb == "get_default_device_pinned_mem_limit" and int(dev) in self.defaults:
                out.append(self.defaults[int(dev)] + "\n")
        return "".join(out)


def mig_container_scenario(error: str = "NoPermission", **kwargs: Any) -> Scenario:
    """:func:`mig_scenario` as a container given one MIG instance sees it: NVML refuses the parent GPU's memory
    info with ``error`` (``NoPermission``, as on the H200 of vLLM issue #55381) while the instances answer."""
    sc = mig_scenario(**kwargs)
    sc.failures[f"nvmlDeviceGetMemoryInfo*@{sc.devices[0].uuid}"] = error
    return sc


def wsl2_scenario(**kwargs: Any) -> Scenario:
    """A GeForce RTX 4090 under WSL2: WDDM driver model, ``/dev/dxg`` present, a microsoft kernel.

    The 24 GiB figure is the card's nominal size, not a recorded reading; what matters here is the shape
    of NVML's answers under WDDM (no per-process figures).
    """
    kwargs.setdefault("drivers", [ScriptedNvidiaDriver(wddm=True)])
    sc = Scenario(
        devices=[
            ScriptedNvidiaGpu(
                name="NVIDIA GeForce RTX 4090",
                total=24 * GiB,
                reserved=0,
                uuid="GPU-7b6a5c4d-3e2f-4a1b-8c9d-0e1f2a3b4c5d",
                pci_bus_id="00000000:01:00.0",
                compute_capability=(8, 9),
            )
        ],
        **kwargs,
    )
    sc.files.setdefault("/dev/dxg", "")
    sc.files.setdefault("/proc/sys/kernel/osrelease", "5.15.167.4-microsoft-standard-WSL2\n")
    return sc


def scripted_platform(scenario: Scenario, **kwargs: Any) -> Any:
    """``NvmlPlatform`` on ``scenario``: its scripted NVML, libcuda, files, environment and runtime boundary (the one
    construction the tests share; ``kwargs`` go to :class:`~devmem_nvidia.NvmlPlatform`)."""
    from devmem_nvidia.nvml_platform import NvmlPlatform

    kwargs.setdefault("nvml", ScriptedNvml(scenario))
    kwargs.setdefault("allocator", ScriptedAllocator(scenario))
    kwargs.setdefault("files", scenario.fs)
    kwargs.setdefault("environ", scenario.environ)
    kwargs.setdefault("cuda", ScriptedLibcuda(scenario))
    return NvmlPlatform(**kwargs)


__all__ = [
    "H200_CHILD_1GIB",
    "H200_CONTEXT",
    "H200_CONTEXT_PLUS_512MIB",
    "H200_DRIVER",
    "H200_RESERVED",
    "H200_RUNTIME_TOTAL",
    "H200_TOTAL",
    "NVMLError",
    "NVMLLibraryMismatchError",
    "ScriptedAllocator",
    "ScriptedHandle",
    "ScriptedLibcuda",
    "ScriptedMpsControl",
    "ScriptedNvidiaDriver",
    "ScriptedNvidiaGpu",
    "ScriptedNvml",
    "h200_scenario",
    "MPS_SERVER_BYTES",
    "MPS_SERVER_PID",
    "mig_container_scenario",
    "mig_scenario",
    "mps_scenario",
    "nvml_error",
    "scripted_cuda_platform",
    "scripted_platform",
    "wsl2_scenario",
]
