"""The attention shape of a config: MHA, GQA, MQA or MLA, its heads and head size."""

from __future__ import annotations

from devmem.errors import UnknownArchitectureError
from devmem.planner.models.config import _Config
from devmem.planner.models.nemotron_nas import FAMILIES as NAS_FAMILIES
from devmem.planner.models.nemotron_nas import nas_first_kv_heads
from devmem.planner.models.zamba2 import _zamba2_attention

#: Families whose attention is MLA: without ``kv_lora_rank`` they are refused, never sized as multi-head.
_MLA_FAMILIES = {"deepseek_v2", "deepseek_v3", "deepseek_v32", "glm_moe_dsa", "kimi_k2", "minicpm3", "kimi_linear"}


#: Families with MLA projections whose engine caches the expanded K and V of every head, not the latent (vLLM's
#: MiniCPM3: K and V of ``qk_nope_head_dim + qk_rope_head_dim`` per head, V zero-padded to it).
_EXPANDED_MLA = {"minicpm3"}


def _attention_shape(c: _Config) -> tuple[str, int, int, int, list[str]]:
    """``(attention kind, attention heads, KV heads, head dim or MLA latent width, notes)``."""
    heads = c.int("num_attention_heads")
    mla = c.model_type in _MLA_FAMILIES or c.has("kv_lora_rank") or c.has("qk_rope_head_dim")
    if mla:
        if "kv_lora_rank" in c.explicit_null or not c.has("kv_lora_rank"):
            raise UnknownArchitectureError(
                f"config of model_type {c.model_type!r} is MLA (multi-head latent attention) but "
                f"{'sets kv_lora_rank to null' if 'kv_lora_rank' in c.explicit_null else 'has no kv_lora_rank'}"
                ": its KV cache is the latent, which devmem does not size as multi-head attention",
                c.model_type,
                ("kv_lora_rank",),
            )
        c.require("qk_rope_head_dim", why="the MLA latent (kv_lora_rank + qk_rope_head_dim)")
        if c.model_type in _EXPANDED_MLA:
            nope, rope = c.int("qk_nope_head_dim", why="the expanded K and V per head"), c.int("qk_rope_head_dim")
            note = (
                f"{c.model_type}'s MLA projections are cached expanded, as vLLM caches them: K and V of every one of "
                f"the {heads} heads at qk_nope_head_dim {nope} + qk_rope_head_dim {rope} (V zero-padded), not the "
                "latent"
            )
            return "mha", heads, heads, nope + rope, [note]
        return "mla", heads, 1, c.int("kv_lora_rank") + c.int("qk_rope_head_dim"), []
    notes = []
    if c.model_type == "zamba2":  # the shared block attends over [hidden, embeddings]: 2 x hidden_size wide
        return _zamba2_attention(c, heads)
    if c.has("attention_head_dim") and ("head_dim" in c.defaults or not c.has("head_dim")):
        head_dim = c.int("attention_head_dim")  # NemotronH's name for it
    elif c.has("head_dim"):
        head_dim = c.int("head_dim")
    else:
        hidden = c.int("hidden_size", why="head_dim (hidden_size / num_attention_heads when head_dim is absent)")
        if hidden % heads:
            raise UnknownArchitectureError(
                f"config of model_type {c.model_type!r} has no head_dim and {c.name('hidden_size')} {hidden} is not a "
                f"multiple of {c.name('num_attention_heads')} {heads}",
                c.model_type,
                ("head_dim",),
            )
        head_dim = hidden // heads
    if c.model_type == "falcon":  # as vLLM reads it: one K/V head unless new_decoder_architecture
        multi_query = not c.flag("new_decoder_architecture", False) and c.flag("multi_query", True)
        kv = 1 if multi_query else c.int("num_kv_heads") if c.has("num_kv_heads") else heads
    elif c.model_type == "gpt_bigcode":  # GPTBigCodeConfig's multi_query (default true): one K/V head
        kv = 1 if c.flag("multi_query", True) else heads
    elif c.model_type == "chatglm":  # vLLM's GLMAttention: the groups where multi_query_attention
        kv = c.int("multi_query_group_num") if c.flag("multi_query_attention", False) else heads
        if heads % kv:
            raise c.refuse(
                "multi_query_group_num", f"num_attention_heads {heads} is not a multiple of multi_query_group_num {kv}"
            )
        hidden = c.int("hidden_size", why="ChatGLM's head dim (hidden_size / num_attention_heads, as vLLM reads it)")
        if hidden % heads or head_dim != hidden // heads:
            raise UnknownArchitectureError(
                f"config of model_type 'chatglm' has kv_channels {head_dim} but hidden_size {hidden} / "
                f"num_attention_heads {heads} is not that: the modelling code caches kv_channels per head, vLLM "
                "hidden_size / num_attention_heads, and devmem does not choose between them",
                c.model_type,
                ("kv_channels",),
            )
    elif c.model_type in NAS_FAMILIES:  # per layer, from block_configs: the first attention layer's shown here
        kv = nas_first_kv_heads(c)
    elif c.has("num_key_value_heads"):
        kv = c.int("num_key_value_heads")
    elif c.model_type == "dbrx":  # DbrxAttentionConfig's default is 1, vLLM's the attention heads: not guessed
        raise UnknownArchitectureError(
            "config of model_type 'dbrx' lacks attn_config.kv_n_heads, which the KV cache per token needs; "
            "devmem does not guess it",
            c.model_type,
            ("attn_config.kv_n_heads",),
        )
    else:
        kv = heads
        notes.append(
            f"{c.name('num_key_value_heads')} is absent: every attention head has its own K and V (as transformers "
            "reads it)"
        )
    if heads % kv:
        raise c.refuse(
            "num_key_value_heads",
            f"{c.name('num_attention_heads')} {heads} is not a multiple of {c.name('num_key_value_heads')} {kv}",
        )
    kind = "mha" if kv == heads else "mqa" if kv == 1 else "gqa"
    return kind, heads, kv, head_dim, notes
