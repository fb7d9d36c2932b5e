"""Zamba2: hybrid layers running a shared attention block beside their Mamba2 mixer."""

from __future__ import annotations

from devmem.errors import UnknownArchitectureError
from devmem.planner.models.config import _Config
from devmem.planner.models.kinds import FULL, MAMBA2
from devmem.planner.models.reading import _shown
from devmem.planner.models.recurrent import _mamba2_params


def _zamba2_layers(c: _Config, layers: int) -> list[str]:
    """Zamba2's ``layers_block_type``: ``hybrid`` layers run a shared attention block (with its own KV cache) beside
    their Mamba2 mixer, ``mamba`` (``linear_attention``) layers the mixer alone. The mixers are added in _build."""
    c.require("layers_block_type", why="Zamba2's hybrid layers")
    types = c.get("layers_block_type")
    known = ("mamba", "linear_attention", "hybrid")
    if not isinstance(types, list) or len(types) != layers or not all(t in known for t in types):
        raise c.refuse(
            "layers_block_type",
            f"config key layers_block_type must list one of {', '.join(known)} per layer ({layers}), got "
            f"{_shown(types)}",
        )
    return [FULL if t == "hybrid" else MAMBA2 for t in types]


def _zamba2_attention(c: _Config, heads: int) -> tuple[str, int, int, int, list[str]]:
    """Zamba2's shared attention: ``num_attention_heads`` heads of ``2 x hidden_size / num_attention_heads`` (its
    ``attention_head_dim``), every head cached, as vLLM's Zamba2Attention caches them."""
    width = 2 * c.int("hidden_size")
    if width % heads:
        raise c.refuse(
            "num_attention_heads", f"num_attention_heads {heads} does not divide Zamba2's attention width {width}"
        )
    if c.has("num_key_value_heads") and c.int("num_key_value_heads") != heads:
        raise UnknownArchitectureError(
            f"config of model_type 'zamba2' sets num_key_value_heads {c.int('num_key_value_heads')}, not "
            f"num_attention_heads {heads}: transformers caches those K/V heads, vLLM every attention head, and "
            "devmem does not choose between them",
            c.model_type,
            ("num_key_value_heads",),
        )
    if c.flag("add_bias_linear", False) or not c.flag("use_conv_bias", True):
        key = "add_bias_linear" if c.flag("add_bias_linear", False) else "use_conv_bias"
        raise UnknownArchitectureError(
            f"config of model_type 'zamba2' sets {key} {c.flag(key, False)}: transformers and vLLM build those "
            "biases differently, and devmem does not choose between them",
            c.model_type,
            (key,),
        )
    return "mha", heads, heads, width // heads, []


def _zamba2_params(c: _Config, kinds: list[str], hidden: int, heads: int, head_dim: int) -> tuple[int, int]:
    """``(matrices, other)`` of Zamba2's layers: a Mamba2 mixer and its norm in every layer, a ``hidden x hidden``
    projection in each hybrid layer, ``num_mem_blocks`` shared blocks (attention over ``2 x hidden_size``, a gated
    MLP, two norms) and, per hybrid layer, a LoRA adapter of ``adapter_rank`` on the MLP's gate and up projection
    (and on q, k and v where ``use_shared_attention_adapter``)."""
    mixer, mixer_other = _mamba2_params(c, hidden)
    hybrid, width = kinds.count(FULL), heads * head_dim
    ffn = c.get_int("intermediate_size", 4 * hidden, positive=True)
    block = 3 * 2 * hidden * width + width * hidden + hidden * 2 * ffn + ffn * hidden
    rank = c.int("adapter_rank", why="the weights estimate")
    adapters = rank * (hidden + 2 * ffn)
    if c.flag("use_shared_attention_adapter", False):
        adapters += 3 * rank * (2 * hidden + width)
    blocks = c.int("num_mem_blocks", why="the weights estimate")
    matrices = len(kinds) * mixer + hybrid * (hidden * hidden + adapters) + blocks * block
    return matrices, len(kinds) * (mixer_other + hidden) + blocks * 3 * hidden
