"""Allocating a planned KV cache as one allocation, viewed per layer, so it costs exactly what was planned.

An engine that allocates one tensor per layer pays the allocator's rounding once per layer (PyTorch's caching
allocator rounds large allocations up to 2 MiB: up to 2 MiB lost per layer, 44 MiB over 22 layers). One
allocation, rounded once and planned for with ``allocation_granularity``, loses nothing the plan does not know of.

torch is imported on first use only.
"""

from __future__ import annotations

import numbers
from dataclasses import dataclass
from typing import Any

from devmem import arguments
from devmem._text import shown
from devmem.engine._torch_device import import_torch, torch_device_for
from devmem.planner.sizing import KvCachePlan, SizingError
from devmem.platform import Platform
from devmem.resolution.plugins import platform_argument
from devmem.types import MiB

#: What PyTorch's caching allocator rounds an allocation above 1 MiB up to; pass it to
#: :func:`devmem.planner.sizing.plan_kv_cache` as ``allocation_granularity``.
ALLOCATOR_GRANULARITY = 2 * MiB


@dataclass(frozen=True)
class KvCacheTensors:
    """The cache's one allocation (``buffer``, uint8) and a ``[num_blocks, page_size_bytes]`` view per layer."""

    buffer: Any
    layers: tuple[Any, ...]
    num_blocks: int
    page_size_bytes: int

    @property
    def nbytes(self) -> int:
        return self.num_blocks * self.page_size_bytes * len(self.layers)


def allocate_kv_cache(
    plan: KvCachePlan, num_layers: int, device: Any = 0, platform: Platform | None = None
) -> KvCacheTensors:
    """Allocate ``plan.num_blocks`` blocks on ``device`` as one zeroed allocation.

    ``device`` is devmem's device index, as every other call takes it, mapped to torch's device by ``platform``
    (the current one by default: the CPU on the ``cpu`` platform); a torch device or its name is taken as it is,
    anything else (``None``, a float) is refused.
    Layer ``i``'s view holds its page of every block contiguously; reshape it to the engine's layout with
    ``.view(dtype).view(...)``. ``num_layers`` must divide ``plan.block_bytes`` (a block is one page per layer).
    Allocate right after :func:`devmem.engine.profiling.release_allocator_cache`.
    """
    if not isinstance(plan, KvCachePlan):
        raise SizingError(f"plan must be a KvCachePlan (from plan_kv_cache), got {shown(plan)}")
    num_layers = arguments.count("num_layers", num_layers, error=SizingError)
    if plan.block_bytes % num_layers:
        raise SizingError(
            f"a block of {plan.block_bytes} bytes does not split into {num_layers} equal layer pages; "
            "give the num_layers the plan was made with"
        )
    if isinstance(device, numbers.Integral):
        index = arguments.device_index(device, error=SizingError)
        if plan.device is not None and plan.device != index:
            raise SizingError(f"the plan was made for device {plan.device}, not device {index}: plan on each device")
        device = torch_device_for(platform_argument(platform, error=SizingError), index)
    torch = import_torch("allocate_kv_cache")

    if not isinstance(device, (str, torch.device)):
        raise SizingError(
            f"device must be devmem's device index (an int >= 0), a torch device or its name, got {shown(device)} "
            f"of type {type(device).__name__}"
        )

    page = plan.block_bytes // num_layers
    buffer = torch.zeros((num_layers, plan.num_blocks, page), dtype=torch.uint8, device=device)
    return KvCacheTensors(buffer, tuple(buffer.unbind(0)), plan.num_blocks, page)


__all__ = ["ALLOCATOR_GRANULARITY", "KvCacheTensors", "allocate_kv_cache"]
