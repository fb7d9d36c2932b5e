"""Gemma 4: sliding layers of ``num_key_value_heads`` x ``head_dim``, full layers of their own shape.

As transformers' Gemma4TextAttention and vLLM's gemma4 build them: a full-attention layer has heads of
``global_head_dim`` and, where ``attention_k_eq_v`` (K and V from one projection, both cached),
``num_global_key_value_heads`` KV heads; a sliding layer ``num_key_value_heads`` heads of ``head_dim`` within
``sliding_window``.
"""

from __future__ import annotations

from devmem.planner.models.config import _Config
from devmem.planner.models.kinds import FULL, SLIDING
from devmem.planner.models.spec import AttentionSpec


def gemma4_specs(c: _Config, kinds: list[str], kv_heads: int, head_dim: int, window: int | None) -> list[AttentionSpec]:
    full_dim = c.int("global_head_dim") if c.has("global_head_dim") else head_dim
    full_heads = kv_heads
    if c.flag("attention_k_eq_v", False) and c.has("num_global_key_value_heads"):
        full_heads = c.int("num_global_key_value_heads")
    full = AttentionSpec(FULL, full_heads, full_dim, full_dim)
    sliding = AttentionSpec(SLIDING, kv_heads, head_dim, head_dim, window)
    return [full if kind == FULL else sliding for kind in kinds if kind in (FULL, SLIDING)]
