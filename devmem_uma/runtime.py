"""The CUDA runtime's own view, consulted only when this process already has it.

devmem never imports torch or creates a CUDA context for the unified-memory platform: these helpers
answer ``None`` unless torch is already imported and its CUDA runtime already initialised.
"""

from __future__ import annotations

import logging
import sys
from collections.abc import Callable
from typing import Any

log = logging.getLogger("devmem.uma")

#: ``mem_get_info(device) -> (free, total)`` or ``None`` where the runtime's view is not at hand.
MemGetInfo = Callable[[int], "tuple[int, int] | None"]


def _initialised_torch() -> Any:
    torch = sys.modules.get("torch")
    if torch is None:
        return None
    try:
        return torch if torch.cuda.is_initialized() else None
    except Exception as exc:  # a half-imported or CPU-only torch
        log.debug("devmem: torch.cuda.is_initialized() failed: %s", exc)
        return None


def runtime_mem_get_info(device: int) -> tuple[int, int] | None:
    """``torch.cuda.mem_get_info(device)`` when CUDA is already initialised in this process, else ``None``."""
    torch = _initialised_torch()
    if torch is None:
        return None
    try:
        free, total = torch.cuda.mem_get_info(device)
    except Exception as exc:
        log.debug("devmem: torch.cuda.mem_get_info(%d) failed: %s", device, exc)
        return None
    return int(free), int(total)


def runtime_integrated(device: int) -> bool | None:
    """The CUDA "integrated" attribute of ``device`` when CUDA is already initialised, else ``None``."""
    torch = _initialised_torch()
    if torch is None:
        return None
    try:
        return bool(torch.cuda.get_device_properties(device).is_integrated)
    except Exception as exc:
        log.debug("devmem: torch.cuda.get_device_properties(%d) failed: %s", device, exc)
        return None
