"""The ``acme-classic`` platform: ACME's first backend, written to the six-member protocol devmem started from.

It subclasses nothing and declares only ``name``, ``device_count``, ``device_memory_info``,
``get_process_memory_usage``, ``is_integrated_gpu`` and ``pages_instead_of_failing``; devmem adapts it
(``devmem.as_platform``) with honest defaults for the rest. Kept so that a wheel written that way keeps working.
"""

from __future__ import annotations

from types import ModuleType

import devmem


class ClassicAcmePlatform:
    """Host memory through psutil, as the first ACME wheel read it (``psutil`` injected in tests)."""

    name = "acme-classic"

    def __init__(self, *, psutil: ModuleType | None = None):
        if psutil is None:
            import psutil
        self._psutil = psutil

    def device_count(self) -> int:
        return 1

    def device_memory_info(self, device: int = 0) -> devmem.MemoryInfo:
        vm = self._psutil.virtual_memory()
        return devmem.MemoryInfo(free=int(vm.available), total=int(vm.total))

    def get_process_memory_usage(self, device: int = 0) -> int | None:
        return int(self._psutil.Process().memory_info().rss)

    def is_integrated_gpu(self, device: int = 0) -> bool:
        return True

    def pages_instead_of_failing(self, device: int = 0) -> bool:
        return True
