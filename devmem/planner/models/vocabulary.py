"""Every config key about attention or a cache, and what devmem does with it.

A key whose name is about attention (:data:`ABOUT_ATTENTION`) is read by devmem (:data:`READ`), listed as not
changing what the cache holds (:data:`IRRELEVANT`, with the reason) or refused with what it models (:data:`REFUSED`).
A config that sets any other such key is refused naming it too: a sparse-attention setting devmem does not model
(MiniMax-M3's ``sparse_attention_config``) would otherwise be planned as dense attention, a wrong number where a
refusal is due.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

#: A config key is about attention or a cache when its name holds one of these.
ABOUT_ATTENTION = re.compile(
    r"attn|attention|kv|key_value|(?<!lm_)head|window|sliding|swa_|sparse|^index|indexer|compress|cache|sink|chunk|"
    r"layer_type|block_type|pattern|latent|mla|(^|_)cla(_|$)|mamba|ssm|conv|state|recurrent|lightning|kda|linear_|"
    r"hybrid"
)


#: Keys about attention that devmem reads (each is read by a module of devmem/planner; a test checks it).
READ = frozenset(
    {
        "add_qkv_bias",
        "attention_bias",
        "attention_chunk_size",
        "attention_head_dim",
        "attention_k_eq_v",
        "attention_types",
        "attn_config",
        "attn_layer_indices",
        "attn_layer_offset",
        "attn_layer_period",
        "attn_type_list",
        "conv_L_cache",
        "conv_dim",
        "conv_kernel",
        "decoder_sparse_step",
        "full_attention_interval",
        "full_attn_idxs",
        "global_head_dim",
        "head_dim",
        "hybrid_layer_pattern",
        "hybrid_override_pattern",
        "index_head_dim",
        "index_skip_topk_offset",
        "index_topk",
        "index_topk_freq",
        "index_topk_pattern",
        "indexer_types",
        "kv_channels",
        "kv_lora_rank",
        "kv_n_heads",
        "layer_types",
        "layers_block_type",
        "linear_attn_config",
        "linear_conv_kernel_dim",
        "linear_key_head_dim",
        "linear_num_key_heads",
        "linear_num_value_heads",
        "linear_value_head_dim",
        "mamba_conv_bias",
        "mamba_d_conv",
        "mamba_d_head",
        "mamba_d_ssm",
        "mamba_d_state",
        "mamba_dt_rank",
        "mamba_expand",
        "mamba_head_dim",
        "mamba_n_groups",
        "mamba_n_heads",
        "mamba_ngroups",
        "mamba_num_heads",
        "mamba_proj_bias",
        "mamba_rms_norm",
        "mamba_ssm_cache_dtype",
        "mamba_ssm_dtype",
        "max_window_layers",
        "moe_latent_size",
        "multi_query_attention",
        "n_head",
        "n_heads",
        "n_mamba_heads",
        "num_attention_heads",
        "num_global_key_value_heads",
        "num_heads",
        "num_key_value_heads",
        "num_kv_heads",
        "parallel_attn",
        "qk_nope_head_dim",
        "qk_rope_head_dim",
        "sliding_window",
        "sliding_window_pattern",
        "sliding_window_size",
        "ssm_state_size",
        "swa_head_dim",
        "swa_num_key_value_heads",
        "swa_v_head_dim",
        "use_conv_bias",
        "use_shared_attention_adapter",
        "use_sliding_window",
        "v_head_dim",
    }
)


_SCALING = "a scale, cap or temperature of the attention scores: no size"
_DROPOUT = "dropout: training only"
_BIAS_WEIGHTS = "a bias or norm of the attention's weights: not the cache"
_RUNTIME = "how a runtime computes or allocates, not what the cache holds"
_ENCODER = "an encoder-decoder model's key: refused by is_encoder_decoder"

#: Keys about attention that do not change what the cache holds per token or per sequence, and why.
IRRELEVANT = {
    "add_full_attention_sink_bias": "MiMo-V2's attention-sink bias: a weight, not the cache",
    "add_swa_attention_sink_bias": "MiMo-V2's attention-sink bias: a weight, not the cache",
    "attention_dropout": _DROPOUT,
    "attn_pdrop": _DROPOUT,
    "attention_in_multiplier": _SCALING,
    "attention_multiplier": _SCALING,
    "attention_value_scale": _SCALING,
    "attention_out_multiplier": _SCALING,
    "ssm_in_multiplier": _SCALING,
    "ssm_multipliers": _SCALING,
    "ssm_out_multiplier": _SCALING,
    "attn_logit_softcapping": _SCALING,
    "attn_scale": _SCALING,
    "attn_temperature_tuning": _SCALING,
    "query_pre_attn_scalar": _SCALING,
    "scale_attn_weights": _SCALING,
    "reorder_and_upcast_attn": "the precision of the attention scores: no size",
    "scale_attn_by_inverse_layer_idx": _SCALING,
    "attention_softmax_in_fp32": "the softmax's precision: no size",
    "scale_attention_softmax_in_fp32": "the softmax's precision: no size",
    "attn_output_gate": "an output gate on the attention (a weight, counted by family): not the cache",
    "clip_qkv": "a clamp on q, k and v: no size",
    "skip_bias_add_qkv": _BIAS_WEIGHTS,
    "use_qkv_bias": _BIAS_WEIGHTS,
    "layernorm_full_attention_alpha": _BIAS_WEIGHTS,
    "layernorm_full_attention_beta": _BIAS_WEIGHTS,
    "layernorm_linear_attention_alpha": _BIAS_WEIGHTS,
    "layernorm_linear_attention_beta": _BIAS_WEIGHTS,
    "mamba_norm_before_gate": _BIAS_WEIGHTS,
    "conv_bias": _BIAS_WEIGHTS,
    "conv_use_xavier_init": "an initialisation: training only",
    "conv_dim_out": "LFM2's convolution output width: the state is conv_dim's",
    "mamba_hidden_act": "an activation: no size",
    "mamba_use_mlp": "Falcon-H1's MLP switch: its weights are counted from intermediate_size",
    "cache_implementation": _RUNTIME,
    "pre_allocate_kv_cache": _RUNTIME,
    "use_cache": _RUNTIME,
    "use_mamba_kernels": _RUNTIME,
    "output_attentions": "what a transformers forward returns (every PretrainedConfig has it)",
    "output_hidden_states": "what a transformers forward returns (every PretrainedConfig has it)",
    "chunk_size_feed_forward": "how transformers chunks the MLP (every PretrainedConfig has it): no size",
    "chunk_size": "the chunk of the Mamba2 scan at prefill: the state is one per sequence whatever it is",
    "mamba_chunk_size": "the chunk of the Mamba2 scan at prefill: the state is one per sequence whatever it is",
    "for_llm_compressor": "a flag for the quantization tool: no size",
    "attention_layers": "GPT-Neo's expansion of attention_types, which devmem reads",
    "window_size": "GPT-Neo's local window: transformers' cache keeps every token of those layers (docs/models.md)",
    "hybrid_layer_ids": "Zamba2's hybrid layer positions, as layers_block_type lists them (read)",
    "attention_hidden_size": "Zamba2Config sets it to 2 x hidden_size whatever config.json says (devmem reads that)",
    "mamba_headdim": "Zamba2Config sets it to mamba_expand x hidden_size / n_mamba_heads (devmem reads those)",
    "index_n_heads": "the sparse-attention indexer's query heads: weights; its cache holds one key per token",
    "index_share_for_mtp_iteration": "how the speculative (MTP) layers share the top-k: not counted",
    "indexer_rope_interleave": "the indexer's rope layout: no size",
    "mla_use_nope": "Kimi-Linear's MLA without rope in the scores: the latent cached is the same",
    "qk_head_dim": "qk_nope_head_dim + qk_rope_head_dim, which devmem reads",
    "swa_num_attention_heads": "MiMo-V2's sliding layers' query heads: the cache holds its KV heads",
    "swa_rope_theta": "the rope base of sliding layers: no size",
    "mlp_layer_types": "dense or MoE MLP per layer: the weights, which follow first_k_dense_replace",
    "d_kv": _ENCODER,
    "decoder_attention_heads": _ENCODER,
    "encoder_attention_heads": _ENCODER,
    "relative_attention_num_buckets": _ENCODER,
}


#: Keys that change the KV cache in ways devmem does not model, and how: a config setting one (to anything but
#: ``false`` or ``null``) is refused naming it, except where its family reads it (build.py).
REFUSED = {
    "num_kv_shared_layers": "KV shared across layers (Gemma 3n)",
    "linear_attn_config": "Kimi-Linear's delta-attention layers",
    "cross_attention_layers": "cross-attention layers (Mllama)",
    "add_cross_attention": "cross-attention layers (a decoder of an encoder-decoder model)",
    "multi_query": "a multi-query flag (read for Falcon only)",
    "n_head_kv": "a KV-head count under the key n_head_kv",
    "num_kv_heads": "a KV-head count under the key num_kv_heads",
    "multi_query_group_num": "a KV-head count under the key multi_query_group_num (ChatGLM)",
    "kv_n_heads": "a KV-head count under the key kv_n_heads",
    "use_cla": "cross-layer attention (Hunyuan's CLA: adjacent layers share one KV cache)",
    "block_types": "RecurrentGemma's recurrent blocks",
    **dict.fromkeys(
        ("compress_ratios", "compress_rates", "compress_rate_csa", "compress_rate_hca"),
        "compressed KV caches (DeepSeek-V4: layers that cache one entry per 4 or 128 tokens beside a sliding window, "
        "with no single bytes-per-token figure)",
    ),
}


def unknown_attention_keys(keys: Iterable[str]) -> list[str]:
    """The keys about attention that devmem neither reads nor knows to be irrelevant, sorted."""
    known = READ | IRRELEVANT.keys() | REFUSED.keys()
    return sorted(k for k in keys if ABOUT_ATTENTION.search(k) and k not in known)
