"""A cap on torch's caching allocator of one device, so that what serving leaves cached never takes the process past
its share: at the cap the allocator gives its cached, unused blocks back and retries before it reserves more; a pass
that needs more than the cap fails with out of memory instead of taking memory from the engines beside it. torch is
imported on first use only.
"""

from __future__ import annotations

from typing import Any

#: Devices whose caching allocator :func:`limit_allocator` capped, and at what fraction of their total.
_LIMITED: dict[str, float] = {}


def limit_allocator(device: Any, nbytes: int | None) -> float | None:
    """Cap torch's caching allocator on ``device`` (a ``torch.device``) at ``nbytes`` (``None``: lift a cap set here
    before); returns the fraction of the device's total set, ``None`` on the CPU or where torch has no such cap."""
    import torch

    if device.type == "cpu":
        return None
    module = torch.get_device_module(device.type)
    setter, info = getattr(module, "set_per_process_memory_fraction", None), getattr(module, "mem_get_info", None)
    if setter is None or info is None:
        return None
    key = str(device)
    if nbytes is None:
        if key in _LIMITED:
            setter(1.0, device)
            del _LIMITED[key]
        return None
    fraction = min(1.0, max(0.0, nbytes / info(device)[1]))
    setter(fraction, device)
    _LIMITED[key] = fraction
    return fraction


__all__ = ["limit_allocator"]
