"""Whether an NVIDIA driver is loaded here, and whether this is WSL2, from files alone (no pynvml import)."""

from __future__ import annotations

import sys

from devmem.sdk import REAL_FILES, Files

#: What a Linux machine with the NVIDIA kernel driver (or WSL2's GPU paravirtualisation) has.
DRIVER_PATHS = ("/proc/driver/nvidia", "/dev/nvidiactl", "/dev/dxg")

NO_DRIVER = "no NVIDIA driver is loaded (/proc/driver/nvidia and /dev/nvidiactl are absent)"
NOT_WSL = "not WSL2: no /dev/dxg and the kernel release names neither microsoft nor WSL"


def driver_loaded(files: Files = REAL_FILES, system: str = sys.platform) -> bool:
    """True on Windows and where any of :data:`DRIVER_PATHS` exists: only then is NVML worth importing."""
    return system == "win32" or any(files.exists(path) for path in DRIVER_PATHS)


def wsl_marker(files: Files = REAL_FILES) -> str | None:
    """What says this is WSL2 (``/dev/dxg``, or a kernel release naming microsoft/WSL), or ``None``."""
    if files.exists("/dev/dxg"):
        return "/dev/dxg"
    try:
        release = files.read_text("/proc/sys/kernel/osrelease").strip()
    except OSError:
        return None
    if "microsoft" in release.lower() or "wsl" in release.lower():
        return f"kernel {release}"
    return None
