"""The ``acme`` platform: the ACME reference accelerator computes in host memory, read through psutil."""

from __future__ import annotations

from types import ModuleType

import devmem


class AcmePlatform(devmem.PlatformBase):
    """One device whose memory is host RAM: free is what psutil calls available, usage is this process's RSS.

    ``psutil`` is the vendor library; tests pass a scripted one (:mod:`devmem_acme.testing`).
    """

    name = "acme"
    torch_device = None  # host memory: torch's device allocators do not manage it
    dist_backend = "gloo"

    def __init__(self, *, psutil: ModuleType | None = None):
        if psutil is None:
            import psutil
        self._psutil = psutil

    def device_count(self) -> int:
        return 1

    def _memory(self, device: int) -> devmem.DeviceMemory:
        vm = self._psutil.virtual_memory()
        return devmem.DeviceMemory(
            devmem.MemoryInfo(free=int(vm.available), total=int(vm.total)),
            {"free": "psutil.virtual_memory().available", "total": "psutil.virtual_memory().total"},
        )

    def _process_memory(self, device: int) -> devmem.ProcessMemory:
        return devmem.ProcessMemory(int(self._psutil.Process().memory_info().rss))

    def _is_integrated(self, device: int) -> bool:
        return True

    def _pages_instead_of_failing(self, device: int) -> bool:
        return True

    def _device_name(self, device: int) -> str:
        return "ACME reference accelerator (host memory)"
