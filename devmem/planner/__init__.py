"""The planner: pure KV-cache arithmetic (:mod:`.sizing`), models read from their configs (:mod:`.models`,
:mod:`.model_defaults`), capacity in tokens and sequences (:mod:`.capacity`) and vLLM's layout of a budget
(:mod:`.engine_layout`). Nothing here reads a device. A plan's inputs are checked once (:mod:`.inputs`), and the
arithmetic trusts them.

- :func:`requested_memory`: the one rounding of a utilization to bytes (the exact product's ceiling).
- :func:`plan_kv_cache` chooses among :func:`plan_utilization`, :func:`plan_pinned` and :func:`plan_growable`
  from its :class:`PlanInputs`, and returns a :class:`KvCachePlan`; the terms are :func:`profiled_kv_cache_bytes`,
  :func:`growable_kv_cache_bytes` and :func:`blocks_for_bytes`.
- :func:`load_model` reads a model's config into a :class:`ModelMemory` (KV bytes per token, weights).

Every name loads on first use.
"""

from typing import TYPE_CHECKING

from devmem._lazy import lazy_exports

if TYPE_CHECKING:  # the lazy names below, for type checkers
    from devmem.planner.models import ModelMemory, load_model
    from devmem.planner.sizing import (
        KvCachePlan,
        PlanInputs,
        blocks_for_bytes,
        growable_kv_cache_bytes,
        plan_growable,
        plan_kv_cache,
        plan_pinned,
        plan_utilization,
        profiled_kv_cache_bytes,
        requested_memory,
    )

_NAMES = {
    "ModelMemory": "devmem.planner.models",
    "load_model": "devmem.planner.models",
    **dict.fromkeys(
        (
            "KvCachePlan",
            "PlanInputs",
            "blocks_for_bytes",
            "growable_kv_cache_bytes",
            "plan_growable",
            "plan_kv_cache",
            "plan_pinned",
            "plan_utilization",
            "profiled_kv_cache_bytes",
            "requested_memory",
        ),
        "devmem.planner.sizing",
    ),
}

__all__ = [
    "KvCachePlan",
    "ModelMemory",
    "PlanInputs",
    "blocks_for_bytes",
    "growable_kv_cache_bytes",
    "load_model",
    "plan_growable",
    "plan_kv_cache",
    "plan_pinned",
    "plan_utilization",
    "profiled_kv_cache_bytes",
    "requested_memory",
]

__getattr__, __dir__ = lazy_exports(globals(), _NAMES)
