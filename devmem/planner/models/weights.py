"""The weights a config describes, counted matrix by matrix (docs/models.md)."""

from __future__ import annotations

import math
from dataclasses import dataclass
from fractions import Fraction

from devmem.errors import UnknownArchitectureError
from devmem.planner.models.attention import _EXPANDED_MLA
from devmem.planner.models.config import _Config
from devmem.planner.models.falcon_h1 import _falcon_h1_mixer_params
from devmem.planner.models.kimi_linear import kda_params
from devmem.planner.models.kinds import CONV, KDA, LIGHTNING, LINEAR, MAMBA, MAMBA2
from devmem.planner.models.nemotron_nas import FAMILIES as NAS_FAMILIES
from devmem.planner.models.nemotron_nas import nas_layer_params
from devmem.planner.models.reading import _shown
from devmem.planner.models.recurrent import _lightning_dims, _mamba2_params
from devmem.planner.models.weight_format import ATTENTION, EXPERTS, MLP, WeightFormat
from devmem.planner.models.zamba2 import _zamba2_params

#: Families whose config class ties the output embedding to the input one unless told otherwise.
_TIED_BY_DEFAULT = {
    "gemma",
    "gemma2",
    "gemma3",
    "gemma3_text",
    "lfm2",
    "cohere",
    "cohere2",
    "minicpm3",
    "starcoder2",
    "smollm3",
    "ernie4_5",
    "bloom",
    "gpt2",
    "gpt_bigcode",
    "gpt_neo",
    "opt",
    "mpt",
}


#: Families with a norm on each query and key head (two ``head_dim`` vectors per attention layer).
#: Qwen3.5's configs (qwen3_5, qwen3_5_moe and their text configs).
_QWEN3_5 = {"qwen3_5", "qwen3_5_text", "qwen3_5_moe", "qwen3_5_moe_text"}


_QK_NORM = {"qwen3", "qwen3_moe", "qwen3_next", "gemma3", "gemma3_text", *_QWEN3_5}


#: Families with a norm over the whole query and key projections (OLMo 2, OLMoE).
_QK_NORM_ALL = {"olmo2", "olmoe"}


#: Families whose q, k and v projections carry a bias whatever ``attention_bias`` says.
_QKV_BIAS = {"qwen2", "qwen2_moe"}


#: Families with one norm per layer (Cohere's attention and MLP run in parallel) or four (Gemma 2 and 3 norm
#: after attention and around the MLP too).
_ONE_NORM = {"cohere", "cohere2"}


_FOUR_NORMS = {"gemma2", "gemma3", "gemma3_text"}


@dataclass(frozen=True)
class _Ungated:
    """A family whose MLP is two matrices (up and down, no gate) and whose norms are LayerNorms.

    ``norms`` LayerNorms per layer (and ``more_norms`` beside the final one); biases on the q/k/v projections and on
    the attention output where ``qkv_bias`` / ``out_bias`` (unless the family's bias switch or ``attention_bias``
    turns them off), on the output head where ``head_bias``; ``positions`` is ``None`` without learned position
    embeddings, else the rows beyond the maximum context (OPT keeps 2); ``bias_switch`` names the key that turns
    every bias off, the LayerNorms' too where ``norm_bias_switched`` (MPT's ``no_bias``).
    """

    norms: int
    qkv_bias: bool
    out_bias: bool
    head_bias: bool = False
    more_norms: int = 0
    positions: int | None = None
    bias_switch: str = "use_bias"
    norm_bias_switched: bool = False


#: The families with an ungated MLP and LayerNorms (GPT-2's Conv1D layers hold the same matrices as Linear ones).
_LAYERNORM_UNGATED = {
    "gpt_neox": _Ungated(2, True, True),
    "starcoder2": _Ungated(2, True, True),
    "phi": _Ungated(1, True, True, head_bias=True),  # attention and MLP side by side after one norm
    "gptj": _Ungated(1, False, False, head_bias=True),
    "codegen": _Ungated(1, False, False, head_bias=True),  # GPT-J's layer, fused qkv_proj
    "bloom": _Ungated(2, True, True, more_norms=1),  # and a LayerNorm on the embeddings
    "gpt2": _Ungated(2, True, True, positions=0),
    "gpt_bigcode": _Ungated(2, True, True, positions=0),
    "gpt_neo": _Ungated(2, False, True, positions=0),
    "opt": _Ungated(2, True, True, positions=2, bias_switch="enable_bias"),
    "mpt": _Ungated(2, True, True, bias_switch="no_bias", norm_bias_switched=True),
}


#: Families whose every layer has a dense MLP of ``shared_intermediate_size`` beside its experts.
_GRANITE_SHARED_MLP = {"granitemoehybrid", "granitemoeshared"}


#: Families whose full-attention query projection also produces an output gate (twice the query width).
_GATED_QUERY = {"qwen3_next", *_QWEN3_5}


def _mlp_params(c: _Config, layer: int, hidden: int) -> tuple[int, int, int]:
    """``(matrix parameters, other parameters, of the matrices the routed experts')`` of one layer's MLP or mixture
    of experts."""

    def dense() -> int:
        inner = c.int("intermediate_size", why="the weights estimate")
        if c.model_type == "lfm2" and c.values.get("block_auto_adjust_ff_dim") is True:  # Lfm2MLP's sizing
            multiple = c.get_int("block_multiple_of", 256, positive=True)
            factor = c.values.get("block_ffn_dim_multiplier", 1.0)
            scaled = int(2 * inner / 3)
            if isinstance(factor, int | float) and not isinstance(factor, bool) and 0 < factor <= 16:
                scaled = int(factor * scaled)
            inner = multiple * -(-scaled // multiple)
        return 3 * hidden * inner

    if c.model_type in ("llama4", "llama4_text"):  # MoE every interleave_moe_layer_step, with a shared expert
        step = c.get_int("interleave_moe_layer_step", 1, positive=True)
        if (layer + 1) % step:
            return 3 * hidden * c.int("intermediate_size_mlp", why="the weights estimate"), 0, 0
        experts = c.int("num_local_experts")
        return (experts + 1) * dense(), hidden * experts, experts * dense()
    if c.get_int("num_local_experts", 0):  # Mixtral, gpt-oss, Granite (with its shared MLP): every layer
        experts = c.int("num_local_experts")
        shared = c.get_int("shared_intermediate_size", 0) if c.model_type in _GRANITE_SHARED_MLP else 0
        return experts * dense() + 3 * hidden * shared, hidden * experts, experts * dense()
    if c.has("n_routed_experts") or c.model_type == "kimi_linear":  # DeepSeek-V2/V3; Kimi-Linear under its names
        if not _moe_layer(c, layer) or (c.model_type == "kimi_linear" and not c.has("num_experts")):
            return dense(), 0, 0
        kimi = c.model_type == "kimi_linear"
        experts = c.int("num_experts" if kimi else "n_routed_experts")
        inner = c.int("moe_intermediate_size", why="the weights estimate")
        shared = c.get_int("num_shared_experts" if kimi else "n_shared_experts", 0)
        return (experts + shared) * 3 * hidden * inner, hidden * experts + experts, experts * 3 * hidden * inner
    if c.get_int("num_experts", 0) and c.has("expert_layer_period"):  # Jamba
        period, offset = c.int("expert_layer_period"), c.get_int("expert_layer_offset", 0)
        experts = c.int("num_experts")
        if experts > 1 and layer % period == offset:
            return experts * dense(), hidden * experts, experts * dense()
        return dense(), 0, 0
    if c.get_int("num_experts", 0) and c.has("moe_intermediate_size"):  # Qwen2/3-MoE, Qwen3-Next
        step, dense_layers = c.get_int("decoder_sparse_step", 1, positive=True), c.values.get("mlp_only_layers", [])
        if not isinstance(dense_layers, list):
            raise c.refuse(
                "mlp_only_layers", f"config key mlp_only_layers must list layer indices, got {_shown(dense_layers)}"
            )
        experts = c.int("num_experts")
        if layer in dense_layers or (layer + 1) % step:
            return dense(), 0, 0
        shared = c.get_int("shared_expert_intermediate_size", 0)
        routed = experts * 3 * hidden * c.int("moe_intermediate_size")
        return routed + 3 * hidden * shared, hidden * experts + (hidden if shared else 0), routed
    if c.get_int("num_experts", 0) > 1:  # OLMoE: every layer, each expert of intermediate_size
        experts = c.int("num_experts")
        return experts * dense(), hidden * experts, experts * dense()
    return dense(), 0, 0


def _cacheless_params(c: _Config, kind: str, hidden: int) -> tuple[int, int, int]:
    """NemotronH's MLP (``-``: up and down, relu2) and mixture-of-experts (``E``) layers, as :func:`_mlp_params`."""
    if kind == "mlp":
        return 2 * hidden * c.int("intermediate_size", why="the weights estimate"), hidden, 0
    experts = c.int("n_routed_experts", why="the weights estimate")
    inner = c.int("moe_intermediate_size", why="the weights estimate")
    shared = c.get_int("moe_shared_expert_intermediate_size", 0) * c.get_int("n_shared_experts", 1)
    if c.get("moe_latent_size") is not None:  # latent MoE: the routed experts work in moe_latent_size, projected
        latent = c.int("moe_latent_size")  # in and out of it (vLLM's fc1/fc2_latent_proj); the shared expert not
        return (
            2 * hidden * latent + experts * 2 * latent * inner + 2 * hidden * shared,
            hidden * experts + experts + hidden,
            experts * 2 * latent * inner,
        )
    return 2 * hidden * (experts * inner + shared), hidden * experts + experts + hidden, 2 * hidden * experts * inner


def _layer_params(c: _Config, kind: str, layer: int, attention: tuple[str, int, int, int]) -> tuple[int, int]:
    if c.model_type in NAS_FAMILIES:  # attention and MLP from the layer's block_configs entry
        return nas_layer_params(c, layer, attention[3])
    hidden = c.int("hidden_size", why="the weights estimate")
    if kind in ("mlp", "moe"):
        return _cacheless_params(c, kind, hidden)[:2]
    single_mixer = c.model_type == "nemotron_h"  # one mixer per layer: no MLP beside it
    own_mlp = single_mixer or c.model_type == "falcon" or c.model_type in _LAYERNORM_UNGATED  # counted below
    mlp, router = (0, 0) if own_mlp else _mlp_params(c, layer, hidden)[:2]
    norms = hidden * (1 if single_mixer or c.model_type in _ONE_NORM else 4 if c.model_type in _FOUR_NORMS else 2)
    if kind == MAMBA2:
        matrices, other = _mamba2_params(c, hidden)
        return mlp + matrices, router + norms + other
    if kind == CONV:
        channels = c.first_int("conv_dim", "hidden_size", why="the weights estimate")
        kernel = c.int("conv_L_cache", why="the weights estimate")
        return mlp + hidden * 3 * channels + channels * hidden, router + norms + channels * kernel
    if kind == MAMBA:
        inner, d_state, d_conv = c.int("mamba_expand") * hidden, c.int("mamba_d_state"), c.int("mamba_d_conv")
        rank = c.values.get("mamba_dt_rank", "auto")
        rank = math.ceil(hidden / 16) if rank == "auto" else c.int("mamba_dt_rank")
        matrices = hidden * 2 * inner + inner * (rank + 2 * d_state) + rank * inner + inner * hidden
        return mlp + matrices, router + norms + inner * (d_conv + 1) + inner * (d_state + 2) + rank + 2 * d_state
    if kind == KDA:
        matrices, other = kda_params(c, hidden)
        return mlp + matrices, router + norms + other
    if kind == LIGHTNING:  # vLLM's MiniMaxText01LinearAttention: qkv, output gate, out_proj, a norm over the heads
        heads, head_dim = _lightning_dims(c)
        inner = heads * head_dim
        return mlp + 4 * hidden * inner + inner * hidden, router + norms + inner
    if kind == LINEAR:
        nk, dk = c.int("linear_num_key_heads"), c.int("linear_key_head_dim")
        nv, dv = c.int("linear_num_value_heads"), c.int("linear_value_head_dim")
        kernel = c.int("linear_conv_kernel_dim")
        matrices = hidden * (2 * nk * dk + 2 * nv * dv) + hidden * 2 * nv + nv * dv * hidden
        return mlp + matrices, router + norms + (2 * nk * dk + nv * dv) * kernel + 2 * nv + dv
    style, heads, kv, head_dim = attention
    if style == "mla" or c.model_type in _EXPANDED_MLA:
        rank, rope = c.int("kv_lora_rank"), c.int("qk_rope_head_dim")
        nope = c.int("qk_nope_head_dim", why="the weights estimate")
        v_dim = c.int("v_head_dim", why="the weights estimate")
        q_rank = c.values.get("q_lora_rank")
        query = heads * (nope + rope) * (hidden if q_rank is None else c.int("q_lora_rank"))
        query += 0 if q_rank is None else hidden * c.int("q_lora_rank")
        matrices = query + hidden * (rank + rope) + rank * heads * (nope + v_dim) + heads * v_dim * hidden
        return mlp + matrices, router + norms + rank + (0 if q_rank is None else c.int("q_lora_rank"))
    gate = 2 if c.model_type in _GATED_QUERY else 1
    matrices = hidden * heads * head_dim * gate + 2 * hidden * kv * head_dim + heads * head_dim * hidden
    if c.model_type == "falcon":  # fused QKV, an ungated MLP, LayerNorms; biases where the config says so
        inner = c.get_int("ffn_hidden_size", 4 * hidden, positive=True)
        biased = c.flag("bias", False)
        bias = (heads + 2 * kv) * head_dim + hidden + inner + hidden if biased else 0
        if c.flag("new_decoder_architecture", False):
            layer_norms = c.get_int("num_ln_in_parallel_attn", 2, positive=True)
        else:
            layer_norms = 1 if c.flag("parallel_attn", True) else 2
        return 2 * hidden * inner + matrices, 2 * hidden * layer_norms + bias
    if c.model_type in _LAYERNORM_UNGATED:
        shape = _LAYERNORM_UNGATED[c.model_type]
        if c.model_type == "mpt":  # MPTMLP: expansion_ratio x d_model; q and k LayerNorms of d_model where qk_ln
            inner = c.int("expansion_ratio", why="the weights estimate") * hidden
        else:  # GPT-2's n_inner, OPT's ffn_dim; absent or null: 4 x hidden
            inner = c.get_int("intermediate_size", 4 * hidden, positive=True)
        biased = _biases_on(c, shape)
        attention_biased = biased and c.flag("attention_bias", True)
        bias = (heads + 2 * kv) * head_dim if attention_biased and shape.qkv_bias else 0
        bias += hidden if attention_biased and shape.out_bias else 0
        norm = hidden if shape.norm_bias_switched and not biased else 2 * hidden
        norms = norm * (shape.norms + (2 if c.model_type == "mpt" and c.flag("qk_ln", False) else 0))
        return 2 * hidden * inner + matrices, norms + bias + (inner + hidden if biased else 0)
    if c.model_type == "chatglm":  # GLMBlock: biases where add_bias_linear (and on q/k/v where add_qkv_bias)
        linear_bias = c.flag("add_bias_linear", False)
        bias = (heads + 2 * kv) * head_dim if linear_bias or c.flag("add_qkv_bias", False) else 0
        bias += hidden + 2 * c.int("intermediate_size") + hidden if linear_bias else 0
        return mlp + matrices, router + 2 * _chatglm_norm(c, hidden) + bias
    bias = 0
    if c.values.get("attention_bias") is True:
        bias = (heads + 2 * kv) * head_dim + hidden
    elif c.model_type in _QKV_BIAS:
        bias = (heads + 2 * kv) * head_dim
    if c.model_type == "falcon_h1":
        mixer, mixer_other = _falcon_h1_mixer_params(c, hidden)
        mlp_bias = 2 * c.int("intermediate_size") + hidden if c.flag("mlp_bias", False) else 0
        return mlp + matrices + mixer, router + norms + bias + mixer_other + mlp_bias
    qk_norm = 2 * head_dim if c.model_type in _QK_NORM else 0
    if c.model_type in _QK_NORM_ALL:
        qk_norm = (heads + kv) * head_dim
    return mlp + matrices, router + norms + bias + qk_norm


def _biases_on(c: _Config, shape: _Ungated) -> bool:
    """Whether the family's bias switch leaves biases on (MPT's ``no_bias`` turns them off)."""
    if shape.bias_switch == "no_bias":
        return not c.flag("no_bias", True)
    return c.flag(shape.bias_switch, True)


def _chatglm_norm(c: _Config, hidden: int) -> int:
    """One ChatGLM norm's parameters: RMSNorm (a weight) where ``rmsnorm``, else a LayerNorm (weight and bias)."""
    return hidden if c.flag("rmsnorm", True) else 2 * hidden


def _matrix_buckets(c: _Config, kind: str, layer: int, matrices: int) -> dict[str, int]:
    """One layer's weight matrices split as a quantization config names them: attention (or the recurrent mixer),
    MLP (dense, and shared experts), routed experts. Families whose layer counts its own MLP put it under attention."""
    hidden = c.int("hidden_size", why="the weights estimate")
    if c.model_type in NAS_FAMILIES:
        mlp, experts = 0, 0
    elif kind in ("mlp", "moe"):
        mlp, _, experts = _cacheless_params(c, kind, hidden)
    elif c.model_type == "nemotron_h" or c.model_type == "falcon" or c.model_type in _LAYERNORM_UNGATED:
        mlp, experts = 0, 0
    else:
        mlp, _, experts = _mlp_params(c, layer, hidden)
    return {ATTENTION: matrices - mlp, MLP: mlp - experts, EXPERTS: experts}


def _estimate_weights(
    c: _Config,
    kinds: list[str],
    attention: tuple[str, int, int, int],
    dtype: tuple[str, int],
    quantization: WeightFormat | str | None,
) -> tuple[int, list[str]]:
    """Bytes of the weights a config describes, counted matrix by matrix, and notes on what is approximate.

    Embeddings (and the output head unless tied), per layer the attention or recurrent projections, the MLP or
    every expert with its router, the norms. Gated MLPs (three matrices) are assumed. The matrices a quantized
    checkpoint stores quantized (``quantization``, :mod:`.weight_format`) are counted at its bits per weight.
    """
    dtype_name, dtype_bytes = dtype
    hidden = c.int("hidden_size", why="the weights estimate")
    vocab_key = "padded_vocab_size" if c.model_type == "chatglm" else "vocab_size"  # ChatGLM's embedding rows
    vocab = c.int(vocab_key, why="the weights estimate")
    tied = c.flag("tie_word_embeddings", c.model_type in _TIED_BY_DEFAULT)
    width = hidden
    if c.model_type == "opt" and c.get("word_embed_proj_dim") is not None:  # embeddings projected in and out
        width = c.int("word_embed_proj_dim")
    matrices, other = 0, vocab * width * (1 if tied else 2) + hidden
    if width != hidden:
        matrices += 2 * width * hidden
    if c.model_type == "falcon":
        other += hidden  # the final LayerNorm's bias
    if c.model_type == "chatglm":
        other = vocab * hidden * 2 + (0 if not c.flag("post_layer_norm", True) else _chatglm_norm(c, hidden))
    if c.model_type in _LAYERNORM_UNGATED:  # the final LayerNorm's bias, the others, the output head's bias
        shape = _LAYERNORM_UNGATED[c.model_type]
        other += 0 if shape.norm_bias_switched and not _biases_on(c, shape) else hidden  # MPT's no_bias: none
        other += 2 * hidden * shape.more_norms + (vocab if shape.head_bias else 0)
        if shape.positions is not None:  # learned position embeddings (OPT keeps 2 rows more)
            other += (c.int("max_position_embeddings", why="the position embeddings") + shape.positions) * hidden
        final_norm = c.flag("do_layer_norm_before", True) and not c.flag("_remove_final_layer_norm", False)
        if c.model_type == "opt" and not final_norm:
            other -= 2 * hidden  # OPTDecoder has no final LayerNorm then
    if c.model_type == "zamba2":
        m, o = _zamba2_params(c, kinds, hidden, attention[1], attention[3])
        matrices, other = matrices + m, other + o
    fmt = quantization if isinstance(quantization, WeightFormat) else None
    stored = Fraction(0)  # bytes of the matrices, as the checkpoint stores them
    if matrices:  # outside the layers: the same format as the layers' MLPs
        stored += matrices * (fmt.bits / 8 if fmt and fmt.covers(MLP, -1) else dtype_bytes)
    for layer, kind in enumerate(kinds if c.model_type != "zamba2" else []):
        m, o = _layer_params(c, kind, layer, attention)
        other += o
        for bucket, count in (_matrix_buckets(c, kind, layer, m) if fmt else {MLP: m}).items():
            stored += count * (fmt.bits / 8 if fmt and fmt.covers(bucket, layer) else dtype_bytes)
    notes = []
    if isinstance(quantization, str):
        notes.append(
            f"{quantization} is not a weight format devmem models: the estimate counts the weight matrices at the "
            "model dtype and overstates them"
        )
    elif fmt is not None:
        notes.append(fmt.note(dtype_name))
    if c.get_int("num_nextn_predict_layers", 0) or c.get_int("mtp_num_hidden_layers", 0):
        notes.append("multi-token-prediction layers are not counted (engines load them only for speculative decoding)")
    return math.ceil(stored) + other * dtype_bytes, notes


def _moe_layer(c: _Config, layer: int) -> bool:
    """Whether ``layer`` holds experts: past ``first_k_dense_replace`` every ``moe_layer_freq``-th layer, or where a
    per-layer ``moe_layer_freq`` list (MiMo-V2's) holds 1."""
    freq = c.get("moe_layer_freq", 1)
    if isinstance(freq, list):
        if len(freq) != c.int("num_hidden_layers") or not all(f in (0, 1) and type(f) is int for f in freq):
            raise UnknownArchitectureError(
                f"config of model_type {c.model_type!r}: moe_layer_freq must be a whole number or list 0 or 1 per "
                f"layer ({c.int('num_hidden_layers')}), got {_shown(freq)}",
                c.model_type,
                ("moe_layer_freq",),
            )
        return bool(freq[layer])
    first, every = c.get_int("first_k_dense_replace", 0), c.get_int("moe_layer_freq", 1, positive=True)
    return layer >= first and layer % every == 0
