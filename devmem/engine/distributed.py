"""Agreement across ranks: every rank of a tensor/pipeline-parallel group ends with the smallest budget.

torch is never imported here: a process that has not imported torch has no process group to agree in.
"""

from __future__ import annotations

import logging
import sys
from typing import Any

from devmem import arguments
from devmem.errors import ArgumentTypeError as ArgumentTypeError  # re-exported
from devmem.platform import Platform
from devmem.resolution.plugins import platform_argument

log = logging.getLogger("devmem.engine.distributed")

#: What a byte count is shifted by to fit the int64 a collective carries.
INT64_SHIFT = 1 << 63


def _device(torch: Any, dist: Any, group: Any, platform: Platform | None) -> Any:
    """Where the group's backend wants its tensors: the platform's current device when the group runs the
    platform's distributed backend (``platform.dist_backend``), the CPU otherwise."""
    backend = str(dist.get_backend(group))
    platform = platform_argument(platform)
    namespace = platform.torch_device
    if namespace is not None and backend == platform.dist_backend:
        return torch.device(namespace, getattr(torch, namespace).current_device())
    return torch.device("cpu")


def agree_on_minimum(value: int, group: Any = None, platform: Platform | None = None) -> int:
    """The minimum of ``value`` over every rank of ``group`` (the default group when ``None``).

    Uses whatever backend the group has: a CPU tensor for a host backend (gloo), a tensor on the current device
    for the platform's own backend (``platform.dist_backend``; ``platform`` defaults to the current one).
    Returns ``value`` unchanged when torch is not imported or torch.distributed is unavailable or not initialised.
    Every rank must call it, as with any collective. ``value`` is a byte count, ``0 <= value < 2**64``, agreed
    exactly (shifted into the int64 a collective carries); anything else raises :class:`ArgumentTypeError` (a
    ``TypeError``) or :class:`~devmem.arguments.ArgumentError` naming it, before the collective runs.
    """
    value = arguments.byte_count("agree_on_minimum's value", value, type_error=ArgumentTypeError)
    if platform is not None:
        platform_argument(platform)
    torch = sys.modules.get("torch")
    if torch is None:
        return int(value)
    import torch.distributed as dist

    if not dist.is_available() or not dist.is_initialized():
        return int(value)
    shifted = value - INT64_SHIFT  # [0, 2**64) onto int64's [-2**63, 2**63): the order, so the minimum, is kept
    tensor = torch.tensor([shifted], dtype=torch.int64, device=_device(torch, dist, group, platform))
    dist.all_reduce(tensor, op=dist.ReduceOp.MIN, group=group)
    agreed = int(tensor.item()) + INT64_SHIFT
    if agreed != value:
        log.info(
            "devmem: rank %d lowers its budget from %d to %d bytes, the smallest over %d ranks",
            dist.get_rank(),
            value,
            agreed,
            dist.get_world_size(group),
        )
    return agreed
