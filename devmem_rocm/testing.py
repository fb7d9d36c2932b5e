"""A scripted ``amdsmi``: the names, enums, exceptions and return shapes of the amdsmi Python package,
answering from a :class:`~devmem.testing.Scenario`; and AMD's parts of a scenario: the device
(:class:`ScriptedAmdGpu`), the amdgpu driver and its files (:class:`ScriptedAmdgpuDriver`) and presets.

Inject it where a backend takes its amdsmi module (``RocmPlatform(amdsmi=ScriptedAmdsmi(sc))``); it answers
for every :class:`ScriptedAmdGpu` of any scenario, including the APU presets of :mod:`devmem_uma.testing`. It
mirrors amdsmi 7.0.2 (checked against its ``amdsmi_interface.py`` and ``amdsmi_exception.py``):

- ``amdsmi_init(flag=AmdSmiInitFlags.INIT_AMD_GPUS)`` / ``amdsmi_shut_down()``; every other call before
  init raises ``AmdSmiLibraryException`` with ``AMDSMI_STATUS_NOT_INIT``.
- ``amdsmi_get_processor_handles()`` lists the scenario's AMD GPUs in amdsmi's
  order, which ``handle_order`` can make differ from the HIP order (the scenario's device order).
- ``amdsmi_get_processor_type(h)`` -> ``{"processor_type": "AMDSMI_PROCESSOR_TYPE_AMD_GPU"}``;
  ``amdsmi_get_gpu_device_bdf(h)`` -> ``"0000:0c:00.0"``; ``amdsmi_get_gpu_device_uuid(h)``;
  ``amdsmi_get_gpu_asic_info(h)`` -> a dict with ``market_name``, ``target_graphics_version``
  (``"gfx942"``), ``asic_serial`` (``"0x..."``, upper-case hex, what HIP prints as ``GPU-<serial>``), ...;
  ``amdsmi_get_gpu_enumeration_info(h)`` -> ``{"drm_card", "drm_render", "hsa_id", "hip_id", "hip_uuid"}``.
- ``amdsmi_get_gpu_memory_total/usage(h, AmdSmiMemoryType.VRAM | GTT)`` -> ``int`` bytes.
- processes, ``api="list"`` (amdsmi >= 6.2): ``amdsmi_get_gpu_process_list(h)`` returns dicts
  ``{"name", "pid", "mem", "engine_usage": {"gfx", "enc"}, "memory_usage": {"gtt_mem", "cpu_mem",
  "vram_mem"}, "cu_occupancy"}``; ``api="handles"`` (amdsmi 6.0/6.1): it returns ``ctypes.c_uint32``
  process handles and ``amdsmi_get_gpu_process_info(h, p)`` returns the dict. amdsmi scans ``/proc`` in
  the caller's PID namespace, so this process is listed as ``scenario.pid``.
- ``settle_s``: amdsmi documents that process figures are valid only once 1 s has passed since the
  program started using it; with ``settle_s=1.0`` every ``vram_mem`` reads 0 before then, by ``clock``
  (a :class:`devmem.testing.ScriptedClock` shared with the platform keeps tests from really waiting).
- ``Scenario.failures`` maps a function name (or a glob such as ``"amdsmi_get_gpu_*"``) to an error:
  an amdsmi status (``"NO_PERM"``, ``"AMDSMI_STATUS_NOT_SUPPORTED"``) or a shared name (``"NotSupported"``,
  ``"NoPermission"``, ``"Unknown"``, ``"GpuIsLost"``, ``"Retry"``, ``"Timeout"``).
- ``missing`` names functions this amdsmi lacks (``AttributeError``, as on an older package).

``calls`` counts every call by name.
"""

from __future__ import annotations

import ctypes
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from enum import IntEnum
from typing import Any

from devmem import GiB, MiB
from devmem.testing import (
    HostMemory,
    Scenario,
    ScriptedClock,
    ScriptedDevice,
    ScriptedDriver,
    ScriptedLibrary,
    drm_fdinfo,
)


def _bdf(pci_bus_id: str) -> str:
    """``00000000:0C:00.0`` -> ``0000:0c:00.0``: the kernel's form, as sysfs, DRM fdinfo and amdsmi print it."""
    domain, bus, rest = pci_bus_id.strip().lower().split(":")
    return f"{int(domain, 16):04x}:{bus}:{rest}"


@dataclass
class ScriptedAmdgpuDriver(ScriptedDriver):
    """The amdgpu driver on a scripted machine, with ``libraries`` ``"amdsmi"`` and ``"hip"`` where installed.

    Its files, with an AMD GPU present: ``/sys/module/amdgpu/initstate``; for each GPU its sysfs entries under
    ``/sys/class/drm/card<card>/device`` (``vendor``, ``uevent``, ``mem_info_vram_total/used`` and, with a GTT
    pool, ``mem_info_gtt_total/used``); and this process's DRM client on it (``/proc/self/fdinfo/<100 + device>``,
    present while it holds memory there, in the GTT region on an APU with a GTT pool, else VRAM).
    """

    libraries: set[str] = field(default_factory=lambda: {"amdsmi", "hip"})

    def files(self, scenario: Scenario) -> dict[str, str]:
        indices = scenario.indices(ScriptedAmdGpu)
        table = {"/sys/module/amdgpu/initstate": "live\n"} if indices else {}
        for index in indices:
            dev = _gpu(scenario, index)
            base = f"/sys/class/drm/card{dev.card}/device"
            table[f"{base}/vendor"] = "0x1002\n"
            table[f"{base}/uevent"] = f"DRIVER=amdgpu\nPCI_SLOT_NAME={_bdf(dev.pci_bus_id)}\n"
            table[f"{base}/mem_info_vram_total"] = f"{dev.total}\n"
            vram_used = dev.base_used if dev.integrated else scenario.device_used(index)
            table[f"{base}/mem_info_vram_used"] = f"{vram_used}\n"
            if dev.gtt_total:
                table[f"{base}/mem_info_gtt_total"] = f"{dev.gtt_total}\n"
                table[f"{base}/mem_info_gtt_used"] = f"{dev.gtt_used}\n"
            held = scenario.held(index)
            if held:
                region = "gtt" if dev.integrated and dev.gtt_total else "vram"
                table[f"/proc/self/fdinfo/{100 + index}"] = drm_fdinfo(
                    "amdgpu", 100 + index, _bdf(dev.pci_bus_id), {region: held}
                )
        return table


@dataclass(kw_only=True)
class ScriptedAmdGpu(ScriptedDevice):
    """An AMD GPU or APU: ``total`` is its VRAM (amdsmi's VRAM total, ``mem_info_vram_total``), and the
    runtime's ``mem_get_info`` is ``hipMemGetInfo``.

    ``market_name`` and ``gfx_target`` are amdsmi's ASIC info; ``card`` its DRM card number in sysfs;
    ``gtt_total``/``gtt_used`` its GTT pool, which on an integrated part caps and counts its allocations.
    """

    driver_type = ScriptedAmdgpuDriver
    runtime_call = "hipMemGetInfo"

    market_name: str = ""
    gfx_target: str = ""
    gtt_total: int = 0
    gtt_used: int = 0
    card: int = 0

    def shared_free(self, host_available: int) -> int:
        return min(host_available, self.gtt_total - self.gtt_used) if self.gtt_total else host_available

    def draw(self, nbytes: int) -> None:
        if self.gtt_total:
            self.gtt_used += nbytes


def _gpu(scenario: Scenario, index: int) -> ScriptedAmdGpu:
    dev = scenario.devices[index]
    if not isinstance(dev, ScriptedAmdGpu):
        raise TypeError(f"scenario device {index} is a {type(dev).__name__}, not a ScriptedAmdGpu")
    return dev


# ---- statuses and exceptions, as amdsmi_wrapper.py / amdsmi_exception.py define them -------------------
STATUS = {
    "INVAL": 1,
    "NOT_SUPPORTED": 2,
    "NOT_YET_IMPLEMENTED": 3,
    "FAIL_LOAD_MODULE": 4,
    "FAIL_LOAD_SYMBOL": 5,
    "DRM_ERROR": 6,
    "API_FAILED": 7,
    "TIMEOUT": 8,
    "RETRY": 9,
    "NO_PERM": 10,
    "INTERRUPT": 11,
    "IO": 12,
    "ADDRESS_FAULT": 13,
    "FILE_ERROR": 14,
    "OUT_OF_RESOURCES": 15,
    "INTERNAL_EXCEPTION": 16,
    "INPUT_OUT_OF_BOUNDS": 17,
    "INIT_ERROR": 18,
    "REFCOUNT_OVERFLOW": 19,
    "DIRECTORY_NOT_FOUND": 20,
    "BUSY": 30,
    "NOT_FOUND": 31,
    "NOT_INIT": 32,
    "NO_SLOT": 33,
    "DRIVER_NOT_LOADED": 34,
    "NO_DATA": 40,
    "INSUFFICIENT_SIZE": 41,
    "UNEXPECTED_SIZE": 42,
    "UNEXPECTED_DATA": 43,
    "FILE_NOT_FOUND": 52,
    "ARG_PTR_NULL": 53,
    "UNKNOWN_ERROR": 4294967295,
}
_DESCRIPTION = {
    "INVAL": "Invalid parameters",
    "NOT_SUPPORTED": "Feature not supported",
    "NO_PERM": "Permission Denied",
    "IO": "I/O Error",
    "BUSY": "Device busy",
    "NOT_FOUND": "Device Not found",
    "NOT_INIT": "Device not initialized",
    "DRIVER_NOT_LOADED": "Driver not loaded",
    "NO_DATA": "No data was found for given input",
    "RETRY": "Retry operation",
    "TIMEOUT": "Timeout in API call",
    "INIT_ERROR": "Initialization error",
}
#: Error names shared with the other scripted libraries, in amdsmi's terms.
ALIASES = {
    "NotSupported": "NOT_SUPPORTED",
    "NoPermission": "NO_PERM",
    "Unknown": "UNKNOWN_ERROR",
    "GpuIsLost": "IO",
    "Retry": "RETRY",
    "Timeout": "TIMEOUT",
    "Busy": "BUSY",
    "NotFound": "NOT_FOUND",
    "DriverNotLoaded": "DRIVER_NOT_LOADED",
    "InvalidArgument": "INVAL",
    "NoData": "NO_DATA",
}


class AmdSmiException(Exception):
    """Base smi exception class"""


class AmdSmiLibraryException(AmdSmiException):
    """A failed status: ``err_code`` and ``err_info`` (``"AMDSMI_STATUS_NO_PERM - Permission Denied"``)."""

    def __init__(self, err_code: int):
        err_code = abs(err_code)
        super().__init__(err_code)
        self.err_code = err_code
        name = next((n for n, c in STATUS.items() if c == err_code), "UNKNOWN_ERROR")
        self.err_info = f"AMDSMI_STATUS_{name} - {_DESCRIPTION.get(name, name.replace('_', ' ').capitalize())}"

    def __str__(self) -> str:
        return f"Error code:\n\t{self.err_code} | {self.err_info}"

    def get_error_info(self, detailed: bool = True) -> str:
        return self.err_info if detailed else self.err_info.split(" - ")[0]

    def get_error_code(self) -> int:
        return self.err_code


class AmdSmiRetryException(AmdSmiLibraryException):
    def __init__(self):
        super().__init__(STATUS["RETRY"])


class AmdSmiTimeoutException(AmdSmiLibraryException):
    def __init__(self):
        super().__init__(STATUS["TIMEOUT"])


class AmdSmiParameterException(AmdSmiException):
    def __init__(self, received: Any, expected: Any, msg: str | None = None):
        super().__init__(msg)
        self.err_code = None
        self.err_msg = msg or f"Invalid parameter:\nActual type: {type(received)}\nExpected type: {expected}"

    def __str__(self) -> str:
        return self.err_msg


def amdsmi_error(name: str) -> AmdSmiLibraryException:
    """``amdsmi_error("NoPermission")`` or ``amdsmi_error("NO_PERM")`` -> the exception amdsmi raises."""
    key = ALIASES.get(name, name).removeprefix("AMDSMI_STATUS_")
    if key == "RETRY":
        return AmdSmiRetryException()
    if key == "TIMEOUT":
        return AmdSmiTimeoutException()
    if key not in STATUS:
        raise ValueError(f"unknown amdsmi error {name!r}; known: {', '.join(sorted(STATUS) + sorted(ALIASES))}")
    return AmdSmiLibraryException(STATUS[key])


# ---- enums with amdsmi's member names ------------------------------------------------------------------
class AmdSmiInitFlags(IntEnum):
    INIT_ALL_PROCESSORS = 0xFFFFFFFF
    INIT_AMD_CPUS = 1
    INIT_AMD_GPUS = 2
    INIT_AMD_APUS = 3
    INIT_NON_AMD_CPUS = 4
    INIT_NON_AMD_GPUS = 8


class AmdSmiMemoryType(IntEnum):
    VRAM = 0
    VIS_VRAM = 1
    GTT = 2


#: The enums under names that ScriptedAmdsmi's class attributes (amdsmi's names) do not shadow in annotations.
_InitFlags = AmdSmiInitFlags
_MemoryType = AmdSmiMemoryType


class AmdSmiProcessorType(IntEnum):
    UNKNOWN = 0
    AMDSMI_PROCESSOR_TYPE_AMD_GPU = 1
    AMDSMI_PROCESSOR_TYPE_AMD_CPU = 2
    AMDSMI_PROCESSOR_TYPE_NON_AMD_GPU = 3
    AMDSMI_PROCESSOR_TYPE_NON_AMD_CPU = 4


@dataclass(frozen=True)
class ScriptedProcessorHandle:
    """Stands for amdsmi's ``amdsmi_processor_handle`` (a ctypes pointer): scenario device ``device``."""

    device: int


def asic_serial(dev: ScriptedDevice) -> str:
    """The scripted ASIC serial: the last 16 hex digits of the device's uuid (HIP's ``GPU-<serial>``)."""
    return dev.uuid.replace("-", "")[-16:].lower()


class ScriptedAmdsmi(ScriptedLibrary):
    """``amdsmi`` answering from ``scenario`` (read live on every call). See the module docstring."""

    AmdSmiInitFlags = AmdSmiInitFlags
    AmdSmiMemoryType = AmdSmiMemoryType
    AmdSmiProcessorType = AmdSmiProcessorType
    AmdSmiException = AmdSmiException
    AmdSmiLibraryException = AmdSmiLibraryException
    AmdSmiRetryException = AmdSmiRetryException
    AmdSmiTimeoutException = AmdSmiTimeoutException
    AmdSmiParameterException = AmdSmiParameterException
    __version__ = "7.0.2"

    def __init__(
        self,
        scenario: Scenario,
        *,
        api: str = "list",
        handle_order: Sequence[int] | None = None,
        missing: Iterable[str] = (),
        settle_s: float = 0.0,
        clock: Callable[[], float] = time.monotonic,
    ):
        if api not in ("list", "handles"):
            raise ValueError(f"api must be 'list' (amdsmi >= 6.2) or 'handles' (amdsmi 6.0/6.1), not {api!r}")
        super().__init__(scenario)
        self.api = api
        self.handle_order = list(handle_order) if handle_order is not None else None
        self.missing = set(missing) | ({"amdsmi_get_gpu_process_info"} if api == "list" else set())
        self.settle_s = settle_s
        self.clock = clock
        self.initialised_at: float | None = None

    def __getattribute__(self, name: str) -> Any:
        if name.startswith("amdsmi_") and name in object.__getattribute__(self, "missing"):
            raise AttributeError(f"module 'amdsmi' has no attribute '{name}'")
        return object.__getattribute__(self, name)

    # ---- plumbing ------------------------------------------------------------------------------
    NOT_INITIALISED = "NOT_INIT"

    def error(self, name: str) -> Exception:
        return amdsmi_error(name)

    def _amd(self) -> list[int]:
        amd = self.scenario.indices(ScriptedAmdGpu)
        if self.handle_order is None:
            return amd
        return [amd[k] for k in self.handle_order]

    def _device(self, handle: Any) -> tuple[int, ScriptedAmdGpu]:
        if not isinstance(handle, ScriptedProcessorHandle):
            raise AmdSmiParameterException(handle, ScriptedProcessorHandle)
        return handle.device, _gpu(self.scenario, handle.device)

    # ---- library -------------------------------------------------------------------------------
    def amdsmi_init(self, flag: _InitFlags = _InitFlags.INIT_AMD_GPUS) -> None:
        self._enter("amdsmi_init", needs_init=False)
        if not isinstance(flag, AmdSmiInitFlags):
            raise AmdSmiParameterException(flag, AmdSmiInitFlags)
        if not self._amd():
            raise amdsmi_error("DRIVER_NOT_LOADED")
        if self.initialised == 0:
            self.initialised_at = self.clock()
        self.initialised += 1

    def amdsmi_shut_down(self) -> None:
        self._enter("amdsmi_shut_down")
        self.initialised -= 1

    def amdsmi_get_lib_version(self) -> dict[str, Any]:
        self._enter("amdsmi_get_lib_version", needs_init=False)
        return {"major": 25, "minor": 5, "release": 1, "build": "7.0.2"}

    # ---- discovery -----------------------------------------------------------------------------
    def amdsmi_get_processor_handles(self) -> list[ScriptedProcessorHandle]:
        self._enter("amdsmi_get_processor_handles")
        return [ScriptedProcessorHandle(i) for i in self._amd()]

    def amdsmi_get_processor_type(self, handle: Any) -> dict[str, str]:
        self._enter("amdsmi_get_processor_type")
        self._device(handle)
        return {"processor_type": AmdSmiProcessorType.AMDSMI_PROCESSOR_TYPE_AMD_GPU.name}

    def amdsmi_get_gpu_device_bdf(self, handle: Any) -> str:
        self._enter("amdsmi_get_gpu_device_bdf")
        return _bdf(self._device(handle)[1].pci_bus_id)

    def amdsmi_get_gpu_device_uuid(self, handle: Any) -> str:
        self._enter("amdsmi_get_gpu_device_uuid")
        return self._device(handle)[1].uuid

    def amdsmi_get_gpu_asic_info(self, handle: Any) -> dict[str, Any]:
        self._enter("amdsmi_get_gpu_asic_info")
        _, dev = self._device(handle)
        return {
            "market_name": dev.market_name or "N/A",
            "vendor_id": "0x1002",
            "vendor_name": "Advanced Micro Devices Inc. [AMD/ATI]",
            "subvendor_id": "0x1002",
            "device_id": "0x74a1" if "MI300X" in dev.market_name else "N/A",
            "rev_id": "0x00",
            "asic_serial": "0x" + asic_serial(dev).upper(),
            "oam_id": "N/A",
            "num_compute_units": "N/A",
            "target_graphics_version": dev.gfx_target or "N/A",
            "subsystem_id": "N/A",
        }

    def amdsmi_get_gpu_enumeration_info(self, handle: Any) -> dict[str, Any]:
        self._enter("amdsmi_get_gpu_enumeration_info")
        index, dev = self._device(handle)
        hip_id = self.scenario.indices(ScriptedAmdGpu).index(index)
        return {
            "drm_render": 128 + dev.card,
            "drm_card": dev.card,
            "hsa_id": hip_id + 1,
            "hip_id": hip_id,
            "hip_uuid": "GPU-" + asic_serial(dev),
        }

    # ---- memory --------------------------------------------------------------------------------
    def _memory_type(self, mem_type: Any) -> _MemoryType:
        if not isinstance(mem_type, AmdSmiMemoryType):
            raise AmdSmiParameterException(mem_type, AmdSmiMemoryType)
        return mem_type

    def amdsmi_get_gpu_memory_total(self, handle: Any, mem_type: _MemoryType) -> int:
        self._enter("amdsmi_get_gpu_memory_total")
        _, dev = self._device(handle)
        kind = self._memory_type(mem_type)
        return dev.gtt_total if kind == AmdSmiMemoryType.GTT else dev.total

    def amdsmi_get_gpu_memory_usage(self, handle: Any, mem_type: _MemoryType) -> int:
        self._enter("amdsmi_get_gpu_memory_usage")
        index, dev = self._device(handle)
        kind = self._memory_type(mem_type)
        if kind == AmdSmiMemoryType.GTT:
            return dev.gtt_used
        return dev.base_used if dev.integrated else self.scenario.device_used(index)

    # ---- processes -----------------------------------------------------------------------------
    def _listed(self, index: int) -> dict[int, int]:
        sc = self.scenario
        valid = self.initialised_at is not None and self.clock() >= self.initialised_at + self.settle_s
        return {
            (sc.pid if pid == sc.own_driver_pid else pid): (used if valid else 0)
            for pid, used in sc.processes(index).items()
        }

    @staticmethod
    def _info(pid: int, vram: int) -> dict[str, Any]:
        return {
            "name": "python3",
            "pid": pid,
            "mem": vram,
            "engine_usage": {"gfx": 0, "enc": 0},
            "memory_usage": {"gtt_mem": 2 * MiB, "cpu_mem": 0, "vram_mem": vram},
            "cu_occupancy": "N/A",
        }

    def amdsmi_get_gpu_process_list(self, handle: Any) -> list[Any]:
        self._enter("amdsmi_get_gpu_process_list")
        index, _ = self._device(handle)
        listed = self._listed(index)
        if self.api == "handles":
            return [ctypes.c_uint32(pid) for pid in listed]
        return [self._info(pid, vram) for pid, vram in listed.items()]

    def amdsmi_get_gpu_process_info(self, handle: Any, process: Any) -> dict[str, Any]:
        self._enter("amdsmi_get_gpu_process_info")
        index, _ = self._device(handle)
        if not isinstance(process, ctypes.c_uint32):
            raise AmdSmiParameterException(process, ctypes.c_uint32)
        listed = self._listed(index)
        if process.value not in listed:
            raise amdsmi_error("NOT_FOUND")
        return self._info(process.value, listed[process.value])


# ---- presets from real readings ---------------------------------------------------------------------
#: MI300X VRAM total and idle VRAM used, bytes, from ``rocm-smi --showmeminfo vram`` on 8x MI300X nodes
#: (a public Megatron-Swift AMD guide; ROCm issue 4750 in ROCm/legacy-rocm-build shows the same total with
#: 297771008 used). amdsmi's own unit tests use this total as "real MI300X SPX values observed on hardware:
#: sysfs and KFD agree byte-for-byte", so it is also the total ``hipMemGetInfo`` (``torch.cuda.mem_get_info``)
#: reports.
MI300X_TOTAL = 206141652992
MI300X_IDLE_USED = 297611264
#: Radeon RX 7900 XTX (gfx1100) VRAM total, bytes: rocm-smi's "VRAM Total Memory (B)" for the card in several
#: published outputs, equal to clinfo's "Global memory size" on it. The idle 1 MiB used is illustrative.
RX7900XTX_TOTAL = 25753026560
RX7900XTX_IDLE_USED = 1048576
#: PCI addresses of an 8-GPU MI300X OAM platform (illustrative; HIP numbers them in this order).
MI300X_BDFS = (
    "0000:05:00.0",
    "0000:26:00.0",
    "0000:46:00.0",
    "0000:65:00.0",
    "0000:85:00.0",
    "0000:a6:00.0",
    "0000:c6:00.0",
    "0000:e5:00.0",
)


def mi300x(index: int = 0) -> ScriptedAmdGpu:
    """One AMD Instinct MI300X (gfx942, SPX/NPS1) at its recorded idle reading; ``index`` picks its slot."""
    return ScriptedAmdGpu(
        name="AMD Instinct MI300X",
        total=MI300X_TOTAL,
        reserved=0,
        base_used=MI300X_IDLE_USED,
        uuid=f"5eff74a1-0000-1000-8040-{0x2D3E4F5A6B70 + index:012x}",
        pci_bus_id=MI300X_BDFS[index],
        market_name="AMD Instinct MI300X",
        gfx_target="gfx942",
        card=index + 1,
    )


def radeon_rx7900xtx() -> ScriptedAmdGpu:
    """One AMD Radeon RX 7900 XTX (gfx1100, 24 GiB GDDR6) at the idle reading above."""
    return ScriptedAmdGpu(
        name="AMD Radeon RX 7900 XTX",
        total=RX7900XTX_TOTAL,
        reserved=0,
        base_used=RX7900XTX_IDLE_USED,
        uuid="0cff744c-0000-1000-cc4d-02090dc9c3ff",
        pci_bus_id="0000:03:00.0",
        market_name="AMD Radeon RX 7900 XTX",
        gfx_target="gfx1100",
        card=0,
    )


def mi300x_scenario(count: int = 1, **kwargs: Any) -> Scenario:
    """``count`` MI300X GPUs (1 to 8) on a host with 1.5 TiB of RAM, amdsmi and HIP installed."""
    kwargs.setdefault("host", HostMemory(total=1536 * GiB, free=1400 * GiB, page_cache=64 * GiB))
    return Scenario(devices=[mi300x(i) for i in range(count)], **kwargs)


def radeon_scenario(**kwargs: Any) -> Scenario:
    """One Radeon RX 7900 XTX in a 64 GiB desktop."""
    kwargs.setdefault("host", HostMemory(total=64 * GiB, free=48 * GiB, page_cache=8 * GiB))
    return Scenario(devices=[radeon_rx7900xtx()], **kwargs)


__all__ = [
    "ALIASES",
    "AmdSmiException",
    "AmdSmiInitFlags",
    "AmdSmiLibraryException",
    "AmdSmiMemoryType",
    "AmdSmiParameterException",
    "AmdSmiProcessorType",
    "AmdSmiRetryException",
    "AmdSmiTimeoutException",
    "MI300X_BDFS",
    "MI300X_IDLE_USED",
    "MI300X_TOTAL",
    "RX7900XTX_IDLE_USED",
    "RX7900XTX_TOTAL",
    "STATUS",
    "ScriptedAmdGpu",
    "ScriptedAmdgpuDriver",
    "ScriptedAmdsmi",
    "ScriptedClock",
    "ScriptedProcessorHandle",
    "amdsmi_error",
    "asic_serial",
    "mi300x",
    "mi300x_scenario",
    "radeon_rx7900xtx",
    "radeon_scenario",
]
