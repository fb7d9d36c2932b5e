"""Each layer's kind, from the per-layer lists and patterns configs give (``layer_types``, ``hybrid_override_pattern``,
indices, periods, sliding-window rules)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from devmem.errors import UnknownArchitectureError
from devmem.planner.models.config import _Config
from devmem.planner.models.gpt_neo import _gpt_neo_local_layers
from devmem.planner.models.kimi_linear import kimi_linear_layers
from devmem.planner.models.kinds import CHUNKED, CONV, FULL, LIGHTNING, LINEAR, MAMBA, MAMBA2, SLIDING
from devmem.planner.models.nemotron_nas import FAMILIES as NAS_FAMILIES
from devmem.planner.models.nemotron_nas import nas_layer_kinds
from devmem.planner.models.reading import _shown
from devmem.planner.models.zamba2 import _zamba2_layers

#: Layer names in ``layer_types`` / ``layers_block_type``, as transformers' config classes write them.
_LAYER_TYPES = {
    "full_attention": FULL,
    "attention": FULL,
    "indexed_attention": FULL,
    "sliding_attention": SLIDING,
    "chunked_attention": CHUNKED,
    "linear_attention": LINEAR,
    "mamba": MAMBA,
    "conv": CONV,
    "mlp": "mlp",
    "moe": "moe",
}


#: MiMo-V2's ``hybrid_layer_pattern``: 0 a full-attention layer, 1 a sliding-window one.
_HYBRID_LAYER_PATTERN = {0: FULL, 1: SLIDING}
#: MiniMax's ``attn_type_list`` (MiniMax-Text-01, -M1, -M2), as vLLM's MiniMaxText01 reads it: 0 a lightning
#: (linear) attention layer, 1 a softmax (full) attention layer.
_ATTN_TYPE_LIST = {0: LIGHTNING, 1: FULL}
#: Families whose ``linear_attention`` layers are MiniMax's lightning attention (transformers' MiniMaxConfig).
_LIGHTNING_FAMILIES = {"minimax", "minimax_text_01", "minimax_m1"}
#: NemotronH's ``hybrid_override_pattern``: one character per layer.
_PATTERN = {"M": MAMBA2, "*": FULL, "-": "mlp", "E": "moe"}


#: Families whose ``linear_attention`` / ``mamba`` layers are Mamba2 (transformers' NemotronHConfig names them so).
_MAMBA2_FAMILIES = {"nemotron_h", "granitemoehybrid", "bamba", "falcon_h1", "zamba2"}


def _layer_kinds(c: _Config, layers: int) -> tuple[list[str], str]:
    """Each layer's kind and which config keys said so (recurrent kinds not yet told apart: see below)."""

    def listed(key: str, table: Mapping[Any, str]) -> list[str]:
        values = c.get(key)
        if key == "hybrid_override_pattern" and isinstance(values, str):
            values = list(values)
        if not isinstance(values, list) or len(values) != layers:
            raise c.refuse(key, f"config key {key} must list one entry per layer ({layers}), got {_shown(values)}")
        unknown = sorted(
            {_shown(v) for v in values if isinstance(v, bool) or not isinstance(v, str | int) or v not in table}
        )
        if unknown:
            raise UnknownArchitectureError(
                f"config of model_type {c.model_type!r}: {key} holds {', '.join(unknown)}, layers devmem "
                f"does not model (known: {', '.join(map(_shown, table))})",
                c.model_type,
                (key,),
            )
        return [table[v] for v in values]

    if c.model_type == "zamba2":
        return _zamba2_layers(c, layers), "layers_block_type: a shared attention block beside each hybrid's Mamba2"
    if c.model_type == "falcon_h1":  # the Mamba2 mixers beside them: _state_kinds
        return [FULL] * layers, "falcon_h1: an attention and a Mamba2 mixer side by side in every layer"
    if c.model_type == "gpt_neo":  # GPTNeoConfig expands attention_types: [[["global", "local"], 12]]
        local = _gpt_neo_local_layers(c, layers)
        return [FULL] * layers, (
            f"attention_types; its {local} local layers attend within window_size but transformers' cache keeps "
            "every token in them, so they are counted in full"
        )
    if c.model_type in NAS_FAMILIES:
        return nas_layer_kinds(c), "block_configs (attention that is no_op or replaced by a linear holds no cache)"
    if c.model_type == "kimi_linear" and c.has("linear_attn_config"):
        return kimi_linear_layers(c, layers), "linear_attn_config (kda_layers and full_attn_layers, 1-based)"
    if c.has("layer_types"):
        return listed("layer_types", _LAYER_TYPES), "layer_types"
    if c.has("attn_type_list"):
        return listed("attn_type_list", _ATTN_TYPE_LIST), "attn_type_list (0 lightning attention, 1 softmax attention)"
    if c.has("hybrid_layer_pattern"):  # MiMo-V2: 0 full attention, 1 sliding window (not attention_chunk_size)
        return listed("hybrid_layer_pattern", _HYBRID_LAYER_PATTERN), "hybrid_layer_pattern (0 full, 1 sliding)"
    if c.has("layers_block_type"):
        return listed("layers_block_type", _LAYER_TYPES), "layers_block_type"
    if c.has("hybrid_override_pattern"):
        return listed("hybrid_override_pattern", _PATTERN), "hybrid_override_pattern"
    if c.has("attn_layer_indices"):  # Bamba: attention at these indices, Mamba2 elsewhere
        attention = _indices(c, "attn_layer_indices", layers)
        return [FULL if i in attention else MAMBA2 for i in range(layers)], "attn_layer_indices"
    if c.has("full_attn_idxs"):  # LFM2: attention at these indices, short convolutions elsewhere
        attention = _indices(c, "full_attn_idxs", layers)
        return [FULL if i in attention else CONV for i in range(layers)], "full_attn_idxs"
    if c.has("attn_layer_period") or c.has("attn_layer_offset"):
        period, offset = c.int("attn_layer_period"), c.int("attn_layer_offset", positive=False)
        return (
            [FULL if i % period == offset else MAMBA for i in range(layers)],
            f"attn_layer_period {period}, attn_layer_offset {offset}",
        )
    if c.has("full_attention_interval") and c.has("linear_num_value_heads"):
        interval = c.int("full_attention_interval")
        return (
            [FULL if (i + 1) % interval == 0 else LINEAR for i in range(layers)],
            f"full_attention_interval {interval}",
        )
    if c.has("attention_chunk_size"):  # Llama 4: rope layers attend in chunks, the NoPE layers fully
        c.int("attention_chunk_size")
        if c.get("no_rope_layers") not in (None, []):  # published empty: the config class fills it in
            flags = c.get("no_rope_layers")
            if not isinstance(flags, list) or len(flags) != layers or not all(f in (0, 1) for f in flags):
                raise c.refuse(
                    "no_rope_layers",
                    f"config key no_rope_layers must list 0 or 1 per layer ({layers}), got {_shown(flags)}",
                )
            return [CHUNKED if f else FULL for f in flags], "attention_chunk_size, no_rope_layers"
        interval = c.get_int("no_rope_layer_interval", 4, positive=True)
        return (
            [CHUNKED if (i + 1) % interval else FULL for i in range(layers)],
            f"attention_chunk_size, every {interval}th layer without rope attends fully",
        )
    if not c.has("sliding_window"):
        return [FULL] * layers, ""
    if c.model_type == "gemma2":
        return [SLIDING if i % 2 == 0 else FULL for i in range(layers)], "gemma2: even layers slide"
    if c.model_type == "gpt_oss":
        return [SLIDING if i % 2 == 0 else FULL for i in range(layers)], "gpt_oss: even layers slide"
    for key in ("sliding_window_pattern", "_sliding_window_pattern"):
        if c.has(key):
            pattern = c.int(key)
            return [FULL if (i + 1) % pattern == 0 else SLIDING for i in range(layers)], f"{key} {pattern}"
    if c.family == "Gemma3TextConfig":
        return (
            [FULL if (i + 1) % 6 == 0 else SLIDING for i in range(layers)],
            "Gemma3TextConfig's sliding_window_pattern 6",
        )
    if c.has("use_sliding_window") and not c.flag("use_sliding_window", True):
        return [FULL] * layers, "use_sliding_window false"
    if c.has("use_sliding_window") and c.has("max_window_layers"):
        first = c.int("max_window_layers", positive=False)
        return [SLIDING if i >= first else FULL for i in range(layers)], f"max_window_layers {first}"
    return [SLIDING] * layers, "sliding_window, on every layer"


def _indices(c: _Config, key: str, layers: int) -> set[int]:
    """The layer indices config key ``key`` lists: distinct, each below ``layers`` (so at most ``layers`` of them),
    read once (a list tested per layer made a config of a long list run for minutes)."""
    indices = c.get(key)
    if isinstance(indices, list) and len(indices) <= layers:
        unique = {i for i in indices if type(i) is int and 0 <= i < layers}
        if len(unique) == len(indices):
            return unique
    raise c.refuse(key, f"config key {key} must list distinct layer indices below {layers}, got {_shown(indices)}")


def _resolve_recurrent(c: _Config, kinds: list[str]) -> list[str]:
    """``mamba`` and ``linear_attention`` layers as the family means them: Mamba2 in NemotronH (whose
    transformers config calls its Mamba2 layers ``linear_attention``) and the other Mamba2 hybrids; lightning
    attention in MiniMax's."""
    if c.model_type in _LIGHTNING_FAMILIES:
        return [LIGHTNING if k == LINEAR else k for k in kinds]
    mamba2 = c.model_type in _MAMBA2_FAMILIES or c.has("mamba_num_heads") or c.has("mamba_n_heads")
    if not mamba2:
        return kinds
    return [MAMBA2 if k in (MAMBA, LINEAR) and (k == MAMBA or c.model_type == "nemotron_h") else k for k in kinds]
