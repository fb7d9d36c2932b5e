"""MiMo-V2 (Flash): ``hybrid_layer_pattern`` places full and sliding-window layers, each with its own heads.

As vLLM's mimo_v2_flash builds them: full layers cache ``num_key_value_heads`` K heads of ``head_dim`` and V heads of
``v_head_dim``; sliding layers ``swa_num_key_value_heads`` K heads of ``swa_head_dim`` and V heads of
``swa_v_head_dim`` within the sliding window. ``attention_chunk_size`` is not Llama 4's chunked attention here.
"""

from __future__ import annotations

from devmem.planner.models.config import _Config
from devmem.planner.models.kinds import FULL, SLIDING
from devmem.planner.models.spec import AttentionSpec

WHY = "MiMo-V2's per-layer attention"


def mimo_v2_specs(
    c: _Config, kinds: list[str], kv_heads: int, head_dim: int, window: int | None
) -> list[AttentionSpec]:
    full = AttentionSpec(FULL, kv_heads, head_dim, c.int("v_head_dim", why=WHY))
    swa_dim = c.int("swa_head_dim", why=WHY)
    sliding = AttentionSpec(
        SLIDING, c.int("swa_num_key_value_heads", why=WHY), swa_dim, c.int("swa_v_head_dim", why=WHY), window
    )
    return [full if kind == FULL else sliding for kind in kinds if kind in (FULL, SLIDING)]
