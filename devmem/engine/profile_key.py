"""What the key of a stored profile (:mod:`devmem.engine.profile_store`) holds beside the engine's own configuration:
the device, the driver the runtime reports, the libraries' versions and the allocator's settings. A figure measured
under one of them is never read back under another. torch is imported on first use only.
"""

from __future__ import annotations

import os
from typing import Any

from devmem.platform import Platform


def library_versions(**engine: str | None) -> dict[str, str | None]:
    """The versions of devmem, torch (with its CUDA or HIP) and the engine's libraries (``transformers="5.24.0"``)."""
    import torch

    from devmem import __version__

    return {
        "devmem": __version__,
        "torch": torch.__version__,
        **engine,
        "torch_cuda": getattr(torch.version, "cuda", None),
        "torch_hip": getattr(torch.version, "hip", None),
    }


def driver_version(device: Any) -> int | None:
    """The GPU driver's version as the runtime reports it for ``device`` (a ``torch.device``; ``None`` on the CPU or
    where torch does not say)."""
    import torch

    if device.type != "cuda":
        return None
    query = getattr(torch._C, "_cuda_getDriverVersion", None)
    return int(query()) if query is not None else None


def allocator_settings() -> dict[str, str]:
    """The ``PYTORCH_*ALLOC*`` variables (the caching allocator's settings) of this process."""
    return {n: v for n, v in sorted(os.environ.items()) if n.startswith("PYTORCH_") and "ALLOC" in n}


def environment_key(platform: Platform, device: int, total: int, where: Any, **engine: str | None) -> dict[str, Any]:
    """The part of a profile key that says where the figures were measured: ``platform``'s device ``device`` (its
    name and ``total`` bytes), the driver of ``where`` (its ``torch.device``), :func:`library_versions` with
    ``engine``'s, and :func:`allocator_settings`."""
    return {
        "platform": platform.name,
        "device_name": platform.device_name(device),
        "device_total": total,
        "driver_version": driver_version(where),
        "versions": library_versions(**engine),
        "allocator": allocator_settings(),
    }


__all__ = ["allocator_settings", "driver_version", "environment_key", "library_versions"]
