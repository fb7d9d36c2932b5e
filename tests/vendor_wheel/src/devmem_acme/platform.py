"""The ``acme`` platform: the ACME reference accelerator computes in host memory, read through psutil."""

from __future__ import annotations

from types import ModuleType

import devmem


class AcmePlatform(devmem.PlatformBase):
    """One device whose memory is host RAM: free is what psutil calls available, usage is this process's RSS.

    ``psutil`` is the vendor library; tests may pass another object with the same calls.
    """

    name = "acme"

    def __init__(self, *, psutil: ModuleType | None = None):
        if psutil is None:
            import psutil
        self._psutil = psutil

    def device_count(self) -> int:
        return 1

    def device_memory_info(self, device: int = 0) -> devmem.MemoryInfo:
        self.check_device(device)
        vm = self._psutil.virtual_memory()
        return devmem.MemoryInfo(free=int(vm.available), total=int(vm.total))

    def get_process_memory_usage(self, device: int = 0) -> int | None:
        self.check_device(device)
        return int(self._psutil.Process().memory_info().rss)

    def is_integrated_gpu(self, device: int = 0) -> bool:
        self.check_device(device)
        return True

    def pages_instead_of_failing(self, device: int = 0) -> bool:
        self.check_device(device)
        return True

    def device_name(self, device: int = 0) -> str:
        self.check_device(device)
        return "ACME reference accelerator (host memory)"

    def memory_sources(self, device: int = 0) -> dict[str, str]:
        self.check_device(device)
        return {"free": "psutil.virtual_memory().available", "total": "psutil.virtual_memory().total"}
