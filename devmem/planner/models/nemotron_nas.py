"""Llama-Nemotron NAS (``nemotron-nas``, DeciLM): every layer's attention and MLP from its ``block_configs`` entry.

As vLLM's nemotron_nas builds them: an attention block that is ``no_op`` (or ``replace_with_linear``) holds no KV
cache; another has ``num_attention_heads // n_heads_in_group`` KV heads of ``hidden_size // num_attention_heads``;
an MLP that is not ``no_op`` is gated, of ``ffn_mult`` as DeciLM sizes it (``2 x ffn_mult x hidden / 3``, rounded up
to 256). ``intermediate_size`` and ``num_key_value_heads`` are null in these configs and never read.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from devmem.errors import UnknownArchitectureError
from devmem.planner.models.config import _Config
from devmem.planner.models.kinds import FULL
from devmem.planner.models.reading import _shown
from devmem.planner.models.spec import AttentionSpec

FAMILIES = ("nemotron-nas", "nemotron_nas", "deci", "deci_lm")


def _blocks(c: _Config) -> list[Mapping[str, Any]]:
    c.require("block_configs", why="the per-layer attention of a NAS model")
    blocks = c.get("block_configs")
    layers = c.int("num_hidden_layers")
    if not (
        isinstance(blocks, list)
        and len(blocks) == layers
        and all(isinstance(b, Mapping) and isinstance(b.get("attention"), Mapping) for b in blocks)
    ):
        raise UnknownArchitectureError(
            f"config of model_type {c.model_type!r}: block_configs must list one block per layer ({layers}), each "
            f"with an attention entry, got {_shown(blocks)}",
            c.model_type,
            ("block_configs",),
        )
    return blocks


def _flag(c: _Config, layer: int, part: str, block: Mapping[str, Any], key: str) -> bool:
    """``block_configs[layer].part.key``: true or false (absent or null: false); anything else is refused."""
    value = block.get(key)
    if value is not None and not isinstance(value, bool):
        raise UnknownArchitectureError(
            f"config of model_type {c.model_type!r}: block_configs[{layer}].{part}.{key} must be true or false, "
            f"got {_shown(value)}",
            c.model_type,
            ("block_configs",),
        )
    return bool(value)


#: Per-block attention variants DeciLM defines and vLLM's nemotron_nas does not build: refused when set.
_UNMODELLED_ATTENTION = ("window_length", "num_sink_tokens", "sparsify")


def _cached(c: _Config, layer: int, attention: Mapping[str, Any]) -> bool:
    no_op = _flag(c, layer, "attention", attention, "no_op")
    variant = next((k for k in _UNMODELLED_ATTENTION if attention.get(k) is not None), None)
    if variant and not no_op:
        raise UnknownArchitectureError(
            f"config of model_type {c.model_type!r}: block_configs[{layer}].attention.{variant}="
            f"{_shown(attention[variant])}, an attention variant devmem does not model",
            c.model_type,
            ("block_configs",),
        )
    return not _flag(c, layer, "attention", attention, "replace_with_linear") and not no_op


def nas_layer_kinds(c: _Config) -> list[str]:
    """FULL where the layer's attention caches K and V, ``mlp`` (no cache) elsewhere, in layer order."""
    return [FULL if _cached(c, i, b["attention"]) else "mlp" for i, b in enumerate(_blocks(c))]


def _kv_heads(c: _Config, layer: int, attention: Mapping[str, Any]) -> int:
    heads, group = c.int("num_attention_heads"), attention.get("n_heads_in_group")
    if isinstance(group, bool) or not isinstance(group, int) or group < 1 or heads % group:
        raise UnknownArchitectureError(
            f"config of model_type {c.model_type!r}: block_configs[{layer}].attention.n_heads_in_group must divide "
            f"num_attention_heads {heads}, got {_shown(group)}",
            c.model_type,
            ("block_configs",),
        )
    return heads // group


def nas_specs(c: _Config, kinds: list[str], kv_heads: int, head_dim: int, window: int | None) -> list[AttentionSpec]:
    return [
        AttentionSpec(FULL, _kv_heads(c, i, b["attention"]), head_dim, head_dim)
        for i, b in enumerate(_blocks(c))
        if _cached(c, i, b["attention"])
    ]


def nas_first_kv_heads(c: _Config) -> int:
    """The KV heads of the first attention layer (the model-wide figure devmem shows)."""
    for i, b in enumerate(_blocks(c)):
        if _cached(c, i, b["attention"]):
            return _kv_heads(c, i, b["attention"])
    return c.int("num_attention_heads")


def nas_layer_params(c: _Config, layer: int, head_dim: int) -> tuple[int, int]:
    """``(matrices, other)`` of one layer: q, k, v and o where attention is kept (one linear where replaced), the
    gated MLP of its ``ffn_mult``, an RMSNorm before each kept block."""
    block = _blocks(c)[layer]
    hidden, heads = c.int("hidden_size", why="the weights estimate"), c.int("num_attention_heads")
    attention = block["attention"]
    ffn: Mapping[str, Any] = block["ffn"] if isinstance(block.get("ffn"), Mapping) else {}
    matrices, other = 0, 0
    if _flag(c, layer, "attention", attention, "replace_with_linear"):
        matrices, other = hidden * hidden, hidden
    elif not _flag(c, layer, "attention", attention, "no_op"):
        kv = _kv_heads(c, layer, attention)
        matrices, other = 2 * hidden * heads * head_dim + 2 * hidden * kv * head_dim, hidden
    if _flag(c, layer, "ffn", ffn, "replace_with_linear"):
        matrices, other = matrices + hidden * hidden, other + hidden
    elif not _flag(c, layer, "ffn", ffn, "no_op"):
        mult = ffn.get("ffn_mult")
        if isinstance(mult, bool) or not isinstance(mult, int | float) or not 0 < mult <= 64:
            raise UnknownArchitectureError(
                f"config of model_type {c.model_type!r}: block_configs[{layer}].ffn.ffn_mult must be a number above "
                f"0, got {_shown(mult)}",
                c.model_type,
                ("block_configs",),
            )
        inner = 256 * -(-int(2 * mult * hidden / 3) // 256)
        matrices, other = matrices + 3 * hidden * inner, other + hidden
    return matrices, other
