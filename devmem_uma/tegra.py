"""NVIDIA Jetson (Tegra) recognised from its files, without NVML (which Jetson Orin and older do not have)."""

from __future__ import annotations

from devmem.sdk import Files, read_stripped

TEGRA_RELEASE = "/etc/nv_tegra_release"
DT_COMPATIBLE = "/proc/device-tree/compatible"
DT_MODEL = "/proc/device-tree/model"


def jetson_reason(files: Files) -> str | None:
    """Why this machine is a Jetson (which file says so), or ``None`` when it is not one."""
    release = read_stripped(files, TEGRA_RELEASE)
    if release is not None:
        first = release.strip().splitlines()[0] if release.strip() else ""
        return f"{TEGRA_RELEASE} is present" + (f" ({first.lstrip('# ').strip()})" if first else "")
    compatible = read_stripped(files, DT_COMPATIBLE)
    if compatible is not None:
        tegra = [c for c in compatible.split("\0") if c.strip().startswith("nvidia,tegra")]
        if tegra:
            return f"the device tree is compatible with {tegra[0].strip()}"
    return None


def jetson_model(files: Files) -> str:
    """The board's name from the device tree (``NVIDIA Jetson AGX Orin Developer Kit``), else ``NVIDIA Jetson``."""
    model = (read_stripped(files, DT_MODEL) or "").replace("\0", "").strip()
    return model or "NVIDIA Jetson"
