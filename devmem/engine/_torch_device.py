"""torch's device module for a platform (``torch.<platform.torch_device>``), found without importing torch.

A process that has not imported torch holds no torch memory, and importing it would itself grow the process,
so every helper here answers from ``sys.modules`` alone.
"""

from __future__ import annotations

import sys
from typing import Any

from devmem.platform import Platform


def device_module(platform: Platform) -> tuple[Any, str | None]:
    """``(torch.<namespace>, None)`` when torch manages ``platform``'s device memory in this process, else
    ``(None, why not)``. The namespace is the one the platform declares (``platform.torch_device``)."""
    torch = sys.modules.get("torch")
    if torch is None:
        return None, "torch is not imported in this process, so it holds no device memory"
    namespace = platform.torch_device
    if namespace is None:
        return None, (
            f"the {platform.name} platform's device is host memory, which torch's device allocator does "
            "not manage: its allocator figures (allocated, reserved, peak) are 0, not measured"
        )
    module = getattr(torch, namespace, None)
    if module is None or not _call(module, "is_available", False):
        return None, (
            f"torch {torch.__version__} sees no {namespace} device (a build without it, or no device "
            "visible): its allocator figures (allocated, reserved, peak) are 0, not measured"
        )
    return module, None


def initialised_module(platform: Platform) -> tuple[Any, str | None]:
    """:func:`device_module`, and only where torch has already initialised that device runtime in this process."""
    module, why = device_module(platform)
    if module is not None and not _call(module, "is_initialized", True):
        return None, f"torch has not initialised its {platform.torch_device} runtime in this process"
    return module, why


def _call(module: Any, name: str, default: bool) -> bool:
    """``module.<name>()``, or ``default`` where this torch device module lacks it; never raises."""
    fn = getattr(module, name, None)
    try:
        return bool(fn()) if callable(fn) else default
    except Exception:  # a half-initialised or CPU-only torch
        return False


def import_torch(needed_by: str) -> Any:
    """``import torch`` for ``needed_by`` (``"allocate_kv_cache"``); where torch is not installed, a
    :class:`ModuleNotFoundError` that says what to install rather than only its name."""
    try:
        import torch
    except ModuleNotFoundError as exc:
        if exc.name != "torch":
            raise
        raise ModuleNotFoundError(
            f"{needed_by} needs torch, which is not installed in this environment ({sys.executable}): "
            'pip install torch (from a devmem checkout, pip install -e ".[torch]")',
            name="torch",
        ) from None
    return torch


def torch_device_for(platform: Platform, index: int) -> Any:
    """torch's device for devmem's device ``index`` on ``platform``: ``torch.device(<namespace>, index)``, or
    the CPU where the platform's device is host memory (``torch_device`` is ``None``). Imports torch.
    :class:`~devmem.arguments.ArgumentError` for an index that is not one of the platform's devices."""
    from devmem.arguments import device_index

    return _device_of(platform, device_index(index))


def _device_of(platform: Platform, index: int) -> Any:
    """:func:`torch_device_for` of a checked ``index`` (refused where the platform has no such device)."""
    from devmem.arguments import ArgumentError

    count = platform.device_count()
    if index >= count:
        valid = f"0..{count - 1}" if count else "none (no device is visible)"
        raise ArgumentError(f"{platform.name}: device index {index} is out of range; valid indices: {valid}")
    torch = import_torch("a torch device for devmem's device index")
    namespace = platform.torch_device
    return torch.device("cpu") if namespace is None else torch.device(namespace, index)
