"""A platform whose every call is given ``DEVMEM_READ_TIMEOUT`` seconds: what :class:`devmem.EngineMemory` reads
through.

:class:`BoundedPlatform` answers what the platform it holds answers, each call run on that platform's one reused
thread (:class:`devmem._deadline.Backend`): a reading that never returns (NVML blocked in the driver, a vendor call
that never comes back) is a :class:`~devmem.DevmemError` naming the platform, the call and the deadline, and how to
change it, never a hang. A composite step of devmem's own (the reading taken at an engine's start, the device's
ledger key) runs as one call on it (:meth:`BoundedPlatform.call`), so that each index is still checked once. The
members outside the contract (``read``, ``prepare``, ``check_device``, ``device_uuid``, ``reset_process_peak``,
``process_peak``) are bounded the same way where the platform has them, and absent where it has not.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, TypeVar

from devmem._deadline import Backend

if TYPE_CHECKING:
    from devmem.platform import DeviceMemory, Platform, ProcessMemory
    from devmem.types import MemoryInfo

T = TypeVar("T")


class BoundedPlatform:
    """``platform``, every call of it given ``DEVMEM_READ_TIMEOUT`` seconds (module docstring)."""

    def __init__(self, platform: Platform):
        self.platform = platform
        self.name = platform.name
        self._where = f"platform {platform.name!r} ({type(platform).__module__}.{type(platform).__qualname__})"
        self._backend = Backend(f"devmem-{platform.name}"[:60])

    def __repr__(self) -> str:
        return f"BoundedPlatform({self.platform!r})"

    @property
    def torch_device(self) -> str | None:
        return self.platform.torch_device

    @property
    def dist_backend(self) -> str | None:
        return self.platform.dist_backend

    def call(self, what: str, function: Callable[..., T], *args: Any) -> T:
        """``function(*args)``, described for people as ``what`` (``"read(0)"``), given the deadline."""
        return self._backend(functools.partial(function, *args), f"{self._where}: {what}")

    def _ask(self, member: str, *args: Any) -> Any:
        return self.call(f"{member}({', '.join(map(repr, args))})", getattr(self.platform, member), *args)

    def __getattr__(self, member: str) -> Any:
        """A member outside the contract, bounded where it is a method; absent where the platform lacks it."""
        if member.startswith("_"):
            raise AttributeError(member)
        value = getattr(self.platform, member)
        return functools.partial(self._ask, member) if callable(value) else value

    # ---- the contract (devmem.platform.Platform) -----------------------------------------------------------------
    def device_count(self) -> int:
        return self._ask("device_count")

    def memory(self, device: int = 0) -> DeviceMemory:
        return self._ask("memory", device)

    def device_memory_info(self, device: int = 0) -> MemoryInfo:
        return self._ask("device_memory_info", device)

    def process_memory(self, device: int = 0) -> ProcessMemory:
        return self._ask("process_memory", device)

    def get_process_memory_usage(self, device: int = 0) -> int | None:
        return self._ask("get_process_memory_usage", device)

    def process_memory_reason(self, device: int = 0) -> str | None:
        return self._ask("process_memory_reason", device)

    def is_integrated_gpu(self, device: int = 0) -> bool:
        return self._ask("is_integrated_gpu", device)

    def pages_instead_of_failing(self, device: int = 0) -> bool:
        return self._ask("pages_instead_of_failing", device)

    def device_name(self, device: int = 0) -> str:
        return self._ask("device_name", device)

    def other_processes_memory(self, device: int = 0) -> dict[int, int] | None:
        return self._ask("other_processes_memory", device)

    def process_roles(self, device: int = 0) -> dict[int, str]:
        return self._ask("process_roles", device)

    def memory_sources(self, device: int = 0) -> dict[str, str]:
        return self._ask("memory_sources", device)

    def notes(self, device: int = 0) -> list[str]:
        return self._ask("notes", device)


__all__ = ["BoundedPlatform"]
