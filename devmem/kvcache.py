"""Allocating a planned KV cache as one allocation, viewed per layer, so it costs exactly what was planned.

An engine that allocates one tensor per layer pays the allocator's rounding once per layer (PyTorch's caching
allocator rounds large allocations up to 2 MiB: up to 2 MiB lost per layer, 44 MiB over 22 layers). One
allocation, rounded once and planned for with ``allocation_granularity``, loses nothing the plan does not know of.

torch is imported on first use only.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from devmem.sizing import KvCachePlan, SizingError
from devmem.types import MiB

#: What PyTorch's caching allocator rounds an allocation above 1 MiB up to; pass it to
#: :func:`devmem.sizing.plan_kv_cache` as ``allocation_granularity``.
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


def allocate_kv_cache(plan: KvCachePlan, num_layers: int, device: Any) -> KvCacheTensors:
    """Allocate ``plan.num_blocks`` blocks on ``device`` (a torch device or its name) as one zeroed allocation.

    Layer ``i``'s view holds its page of every block contiguously; reshape it to the engine's layout with
    ``.view(dtype).view(...)``. ``num_layers`` must divide ``plan.block_bytes`` (a block is one page per layer).
    Allocate right after :func:`devmem.profiling.release_allocator_cache`.
    """
    if isinstance(num_layers, bool) or not isinstance(num_layers, int) or num_layers <= 0:
        raise SizingError(f"num_layers must be an int > 0, got {num_layers!r}")
    if plan.block_bytes % num_layers:
        raise SizingError(
            f"a block of {plan.block_bytes} bytes does not split into {num_layers} equal layer pages; "
            "give the num_layers the plan was made with"
        )
    import torch

    page = plan.block_bytes // num_layers
    buffer = torch.zeros((num_layers, plan.num_blocks, page), dtype=torch.uint8, device=device)
    return KvCacheTensors(buffer, tuple(buffer.unbind(0)), plan.num_blocks, page)


__all__ = ["ALLOCATOR_GRANULARITY", "KvCacheTensors", "allocate_kv_cache"]
