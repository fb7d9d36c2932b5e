"""The Platform protocol every backend implements, a helper base class, and the per-device report.

Required members are the contract of DESIGN.md. Optional members let a platform explain itself
(``devmem info`` and ``devmem doctor`` use them when present; :func:`describe` fills neutral values
when a vendor's platform does not have them):

- ``device_name(device) -> str``
- ``process_memory_reason(device) -> str | None``: why ``get_process_memory_usage`` returns ``None``
- ``other_processes_memory(device) -> dict[int, int] | None``: other processes' bytes by PID, where known
- ``memory_sources(device) -> dict[str, str]``: where ``free`` and ``total`` came from, for people
- ``notes(device) -> list[str]``: facts an operator should know (MIG, WDDM, PID namespace, ...)
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Protocol, runtime_checkable

from devmem.types import DevmemError, MemoryInfo


@runtime_checkable
class Platform(Protocol):
    """Device memory as an inference engine needs to see it. All figures are ``int`` bytes."""

    name: str

    def device_count(self) -> int:
        """Devices visible to this process (after CUDA/HIP/ROCR_VISIBLE_DEVICES)."""
        ...

    def device_memory_info(self, device: int = 0) -> MemoryInfo:
        """``free``: what a new allocation can obtain now; ``total``: what the runtime calls total."""
        ...

    def get_process_memory_usage(self, device: int = 0) -> int | None:
        """Device memory held by this process, or ``None`` when the platform cannot attribute it."""
        ...

    def is_integrated_gpu(self, device: int = 0) -> bool:
        """True when device memory is host memory."""
        ...

    def pages_instead_of_failing(self, device: int = 0) -> bool:
        """True when over-subscription is paged to host memory or taken from the OS instead of failing."""
        ...


class PlatformBase:
    """Optional base for backends: device-index checking and neutral optional members."""

    name: str = "base"

    def device_count(self) -> int:  # pragma: no cover - every subclass overrides it
        raise NotImplementedError

    def check_device(self, device: int) -> int:
        """Return ``device`` if it is a valid index, else raise :class:`DevmemError` naming the range."""
        count = self.device_count()
        if isinstance(device, bool) or not isinstance(device, int) or not 0 <= device < count:
            valid = f"0..{count - 1}" if count else "none (no device is visible)"
            raise DevmemError(f"{self.name}: device index {device!r} is out of range; valid indices: {valid}")
        return device

    def device_name(self, device: int = 0) -> str:
        return f"{self.name}:{self.check_device(device)}"

    def process_memory_reason(self, device: int = 0) -> str | None:
        return None

    def other_processes_memory(self, device: int = 0) -> dict[int, int] | None:
        return None

    def memory_sources(self, device: int = 0) -> dict[str, str]:
        return {}

    def notes(self, device: int = 0) -> list[str]:
        return []


@dataclass(frozen=True)
class DeviceReport:
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
    sources: dict[str, str] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)

    def as_dict(self) -> dict[str, object]:
        d = dict(self.__dict__)
        if self.other_processes is not None:
            d["other_processes"] = {str(pid): used for pid, used in self.other_processes.items()}
        return d


def _optional(platform: object, member: str, device: int, default):
    fn = getattr(platform, member, None)
    return fn(device) if callable(fn) else default


def describe(platform: Platform, device: int = 0) -> DeviceReport:
    """Collect a :class:`DeviceReport`, calling optional members only where the platform has them."""
    info = platform.device_memory_info(device)
    process = platform.get_process_memory_usage(device)
    reason = _optional(platform, "process_memory_reason", device, None)
    if process is None and reason is None:
        reason = f"{platform.name} does not attribute device memory to processes"
    return DeviceReport(
        index=device,
        name=_optional(platform, "device_name", device, f"{platform.name}:{device}"),
        platform=platform.name,
        free=info.free,
        total=info.total,
        process=process,
        process_reason=None if process is not None else reason,
        other_processes=_optional(platform, "other_processes_memory", device, None),
        integrated=platform.is_integrated_gpu(device),
        pages_instead_of_failing=platform.pages_instead_of_failing(device),
        sources=dict(_optional(platform, "memory_sources", device, {})),
        notes=list(_optional(platform, "notes", device, [])),
    )
