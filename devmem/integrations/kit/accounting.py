"""What a sizing reserves and says: :func:`weights_per_rank` (a pinned start's weights, read before they load),
:func:`graphs_after_cache` (graphs captured after the cache, stored for the next start),
:func:`grown_since_baseline` and :func:`log_sizing` (the one line saying how the cache was sized, every charge in
it)."""

from __future__ import annotations

import logging
import os
from collections.abc import Callable, Mapping
from typing import Any

from devmem.engine.graphs import GraphsAfterCache
from devmem.engine.memory import EngineMemory
from devmem.engine.profile_store import ProfileStore
from devmem.units import format_size


def weights_per_rank(model: str, config: Callable[[], Any], dtype: str, ranks: int, log: logging.Logger) -> int:
    """What a pinned start's weights take on each of ``ranks`` ranks, read before they load: the checkpoint's tensor
    bytes where ``model`` is a local folder, else counted from the model's config (``config()``: a mapping, or an
    object with ``to_dict()`` such as Hugging Face's; weights in ``dtype``); 0, with one warning, where neither can be
    read (the reservation then covers the cache alone)."""
    from devmem.planner.models.memory import ModelMemory
    from devmem.planner.models.reading import checkpoint_weights

    try:
        found = checkpoint_weights(model) if os.path.isdir(model) else None
        if found is not None:
            return -(-found[0] // ranks)
        found_config = config()
        mapping = found_config.to_dict() if callable(getattr(found_config, "to_dict", None)) else dict(found_config)
        counted = ModelMemory.from_config(mapping, tp=ranks, dtype=dtype.removeprefix("torch."))
        return counted.weights_bytes_per_rank
    except Exception as exc:  # an architecture devmem cannot count: the reservation covers the cache only
        log.warning("devmem: the weights beside the pinned cache cannot be counted (%s): reserved for the cache", exc)
        return 0


def graphs_after_cache(
    memory: EngineMemory, key: Mapping[str, Any], estimate: Callable[[], int] | None = None
) -> GraphsAfterCache:
    """The declaration of graphs the engine captures after its cache (``memory.plan(..., graphs=...)``): the
    engine's estimate where it makes one (``estimate()``, a throwaway capture run inside ``memory.graphs()``), and
    what capture keeps stored under ``key`` beside the device's total, for the next start."""
    figure = 0
    if estimate is not None:
        with memory.graphs():
            figure = int(estimate())
    return GraphsAfterCache(figure, ProfileStore(), {**key, "device_total": memory.baseline.total})


def grown_since_baseline(memory: EngineMemory) -> int | None:
    """This process's device memory now less at ``memory``'s baseline; ``None`` where the platform attributes no
    memory to processes."""
    if memory.baseline.process is None:
        return None
    own = memory.platform.get_process_memory_usage(memory.device)
    return None if own is None else own - memory.baseline.process


def log_sizing(
    log: logging.Logger, memory: EngineMemory, budget: int, block: int, set_aside: tuple[int, str] = (0, "")
) -> None:
    """devmem's one line on a cache the engine allocates itself: ``budget`` bytes in blocks of ``block``, from what
    (this process's memory or the device-wide fallback), of what request, each charge in it (graphs, what was held
    in the profile window) and what the engine set aside of it (``set_aside``: bytes, and for what);
    :meth:`~devmem.EngineMemory.explain` at debug level; one warning where a pinned start holds more with its cache
    than its reservation."""
    profile, plan, pinned, size = memory.profile_result, memory.kv_plan, memory.pinned_bytes, format_size
    assert profile is not None and plan is not None  # the plan's phase
    charge = plan.breakdown.get("graph_capture", 0)
    source = "process-scoped (this process's own memory)" if profile.process_scoped else "the device-wide fallback"
    asked = f"utilization {memory.utilization}" if pinned is None else "kv_cache_memory_bytes, for the cache"
    graphs = "" if memory.graph_charge is None else f" ({memory.graph_charge.source})"
    log.info(
        f"devmem sized the KV cache from {source}: {size(budget)} = {budget // block} blocks of {size(block)}; "
        f"requested {size(memory.requested if pinned is None else pinned)} of {size(memory.baseline.total)} "
        f"({asked}), consumed {size(profile.total_consumed)}, transient {size(profile.transient_peak_bytes)}, CUDA "
        f"graphs charged {size(charge)}{graphs}"
        + (f"; {size(set_aside[0])} set aside for {set_aside[1]}" if set_aside[0] else "")
        + "".join(f"; the profile window: {held.explain()}" for held in memory.held_charges.values())
    )
    held, reserved = (pinned or 0) + profile.total_consumed + profile.transient_peak_bytes, memory.reservation
    if pinned is not None and reserved is not None and held > reserved.bytes:
        log.warning(
            f"devmem: this pinned start holds {size(held)} with its cache, {size(held - reserved.bytes)} more than "
            f"its reservation of {size(reserved.bytes)} (the cache and its weights): engines beside it may not fit"
        )
    log.debug("devmem: %s", memory.explain())
