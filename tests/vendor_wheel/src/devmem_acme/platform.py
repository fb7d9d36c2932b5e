"""The ``acme`` platform: the ACME reference accelerator computes in host memory, read through psutil."""

from __future__ import annotations

from types import ModuleType

import devmem
from devmem.sdk import REAL_FILES, Files

#: Where the acme kernel module states its version (``MODULE_VERSION``), as every module with one does.
DRIVER_VERSION = "/sys/module/acme/version"


class AcmePlatform(devmem.PlatformBase):
    """One device whose memory is host RAM: free is what psutil calls available, usage is this process's RSS.

    ``psutil`` is the vendor library and ``files`` the filesystem its driver's files are read through; tests pass
    scripted ones (:mod:`devmem_acme.testing`).
    """

    name = "acme"
    torch_device = None  # host memory: torch's device allocators do not manage it
    dist_backend = "gloo"

    def __init__(self, *, psutil: ModuleType | None = None, files: Files = REAL_FILES):
        if psutil is None:
            import psutil
        self._psutil = psutil
        self._files = files

    def device_count(self) -> int:
        return 1

    def _memory(self, device: int) -> devmem.sdk.DeviceMemory:
        vm = self._psutil.virtual_memory()
        return devmem.sdk.DeviceMemory(
            devmem.MemoryInfo(free=int(vm.available), total=int(vm.total)),
            {"free": "psutil.virtual_memory().available", "total": "psutil.virtual_memory().total"},
        )

    def _process_memory(self, device: int) -> devmem.sdk.ProcessMemory:
        return devmem.sdk.ProcessMemory(int(self._psutil.Process().memory_info().rss))

    def _is_integrated(self, device: int) -> bool:
        return True

    def _pages_instead_of_failing(self, device: int) -> bool:
        return True

    def _device_name(self, device: int) -> str:
        return "ACME reference accelerator (host memory)"

    def _notes(self, device: int) -> list[str]:
        try:
            version = self._files.read_text(DRIVER_VERSION).strip()
        except OSError:
            return []  # no acme module loaded: the accelerator runs on the host alone
        return [f"acme driver {version}"] if version else []
