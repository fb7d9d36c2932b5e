"""Whether the amdgpu driver is loaded here, from its files alone (no amdsmi import)."""

from __future__ import annotations

from devmem.sdk import REAL_FILES, Files

#: What a machine with the amdgpu kernel driver has: the ROCm compute device and the loaded module.
DRIVER_PATHS = ("/dev/kfd", "/sys/module/amdgpu")

NO_DRIVER = "no AMD GPU driver is loaded (/dev/kfd and /sys/module/amdgpu are absent)"


def driver_loaded(files: Files = REAL_FILES) -> bool:
    """True where any of :data:`DRIVER_PATHS` exists: only then is amdsmi worth importing."""
    return any(files.exists(path) for path in DRIVER_PATHS)
