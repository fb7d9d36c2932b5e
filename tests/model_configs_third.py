"""Published configs of the third round (issue 36): families whose attention layers differ in shape.

The Hugging Face files themselves are not in the reference store; each config below is the one that public
repositories quote as the published file (named above it), with the keys devmem reads verbatim.
"""

from __future__ import annotations

# google/gemma-4-26b-a4b(-it) text_config, as quoted in full (30 layer_types) by a Go test of the checkpoint
# (TestParseTextConfig26B) and, key by key, by mlx-community/gemma-4-26b-a4b-it-4bit's quoted config.
GEMMA4_26B_A4B = {
    "architectures": ["Gemma4ForConditionalGeneration"],
    "model_type": "gemma4",
    "torch_dtype": "bfloat16",
    "tie_word_embeddings": True,
    "text_config": {
        "model_type": "gemma4_text",
        "hidden_size": 2816,
        "num_hidden_layers": 30,
        "intermediate_size": 2112,
        "num_attention_heads": 16,
        "num_key_value_heads": 8,
        "num_global_key_value_heads": 2,
        "head_dim": 256,
        "global_head_dim": 512,
        "vocab_size": 262144,
        "rms_norm_eps": 1e-6,
        "max_position_embeddings": 131072,
        "sliding_window": 1024,
        "final_logit_softcapping": 30.0,
        "use_double_wide_mlp": False,
        "num_kv_shared_layers": 0,
        "hidden_size_per_layer_input": None,
        "attention_k_eq_v": True,
        "enable_moe_block": True,
        "num_experts": 128,
        "top_k_experts": 8,
        "moe_intermediate_size": 704,
        "tie_word_embeddings": True,
        "layer_types": (["sliding_attention"] * 5 + ["full_attention"]) * 5,
        "rope_parameters": {
            "full_attention": {"partial_rotary_factor": 0.25, "rope_theta": 1000000.0, "rope_type": "proportional"},
            "sliding_attention": {"rope_theta": 10000.0, "rope_type": "default"},
        },
    },
}

# XiaomiMiMo/MiMo-V2-Flash config.json, as a Rust test of the checkpoint quotes it (mimo_v2_flash_hub_config): full
# attention on layer 0 and every 6th layer, experts on every layer but the first.
MIMO_V2_FLASH = {
    "model_type": "mimo_v2_flash",
    "vocab_size": 152576,
    "hidden_size": 4096,
    "num_hidden_layers": 48,
    "num_attention_heads": 64,
    "num_key_value_heads": 4,
    "head_dim": 192,
    "v_head_dim": 128,
    "swa_num_attention_heads": 64,
    "swa_num_key_value_heads": 8,
    "swa_head_dim": 192,
    "swa_v_head_dim": 128,
    "partial_rotary_factor": 0.334,
    "rope_theta": 5000000,
    "swa_rope_theta": 10000,
    "sliding_window": 128,
    "sliding_window_size": 128,
    "hybrid_layer_pattern": [0 if layer == 0 or (layer + 1) % 6 == 0 else 1 for layer in range(48)],
    "moe_layer_freq": [0 if layer == 0 else 1 for layer in range(48)],
    "add_swa_attention_sink_bias": True,
    "add_full_attention_sink_bias": False,
    "intermediate_size": 16384,
    "n_routed_experts": 256,
    "num_experts_per_tok": 8,
    "moe_intermediate_size": 2048,
    "routed_scaling_factor": None,
    "scoring_func": "sigmoid",
    "topk_method": "noaux_tc",
    "n_group": 1,
    "norm_topk_prob": True,
    "layernorm_epsilon": 1e-5,
    "attention_value_scale": 0.707,
}


def _nas_block(heads_in_group: int | None, ffn_mult: float) -> dict:
    """One ``block_configs`` entry as the published DeciLM configs write it."""
    return {
        "attention": {
            "n_heads_in_group": heads_in_group,
            "no_op": heads_in_group is None,
            "num_sink_tokens": None,
            "replace_with_linear": False,
            "sparsify": None,
            "unshifted_sink": False,
            "use_prefill_window_in_sink_attention": False,
            "window_length": None,
        },
        "ffn": {"ffn_mult": ffn_mult, "no_op": False, "replace_with_linear": False, "sparsify": None},
    }


# nvidia/Llama-3_3-Nemotron-Super-49B-v1 config.json: the top-level keys verbatim, from the copy NVIDIA's
# Megatron-Bridge tests hold (LLAMA_33_NEMOTRON_SUPER_49B_HETEROGENEOUS_CONFIG). Its 80 block_configs entries keep
# attention (n_heads_in_group 8) on 49 layers and make it no_op on 31; their order and ffn_mult values were not
# transcribed here (the first twelve are), so the blocks below hold the published counts, not the published order.
NEMOTRON_SUPER_49B = {
    "architectures": ["DeciLMForCausalLM"],
    "attention_bias": False,
    "attention_dropout": 0.0,
    "block_configs": [
        _nas_block(8, 2.625),
        *[_nas_block(8, 5.25)] * 5,
        *[_nas_block(None, 2.625)] * 2,
        *[_nas_block(8, 5.25)] * 3,
        _nas_block(None, 3.28125),
        *[_nas_block(8, 5.25)] * 40,
        *[_nas_block(None, 1.3125)] * 28,
    ],
    "bos_token_id": 128000,
    "eos_token_id": [128001, 128008, 128009],
    "hidden_act": "silu",
    "hidden_size": 8192,
    "initializer_range": 0.02,
    "intermediate_size": None,
    "max_position_embeddings": 131072,
    "mlp_bias": False,
    "model_type": "nemotron-nas",
    "num_attention_heads": 64,
    "num_hidden_layers": 80,
    "num_key_value_heads": None,
    "pretraining_tp": 1,
    "rms_norm_eps": 1e-05,
    "rope_scaling": {
        "factor": 8.0,
        "high_freq_factor": 4.0,
        "low_freq_factor": 1.0,
        "original_max_position_embeddings": 8192,
        "rope_type": "llama3",
    },
    "rope_theta": 500000.0,
    "tie_word_embeddings": False,
    "torch_dtype": "bfloat16",
    "transformers_version": "4.48.3",
    "use_cache": True,
    "vocab_size": 128256,
}

# nvidia/NVIDIA-Nemotron-3-Super-120B-A12B: the keys a public checkpoint check quotes as the published topology (88
# layers, 40 Mamba2, 40 latent MoE, 8 attention; 512 experts of 2,688 in a latent of 1,024) and the shared expert
# and dtype its Puzzle sibling's config quotes. The published hybrid_override_pattern's order is not quoted: the
# pattern below has its counts (which decide the weights and the state), not its order.
NEMOTRON_3_SUPER_120B = {
    "architectures": ["NemotronHForCausalLM"],
    "model_type": "nemotron_h",
    "num_hidden_layers": 88,
    "hybrid_override_pattern": "ME" * 36 + "M*E*" * 4,
    "hidden_size": 4096,
    "vocab_size": 131072,
    "num_attention_heads": 32,
    "num_key_value_heads": 2,
    "head_dim": 128,
    "mamba_num_heads": 128,
    "mamba_head_dim": 64,
    "ssm_state_size": 128,
    "conv_kernel": 4,
    "n_groups": 8,
    "n_routed_experts": 512,
    "num_experts_per_tok": 22,
    "moe_latent_size": 1024,
    "moe_intermediate_size": 2688,
    "moe_shared_expert_intermediate_size": 5376,
    "n_shared_experts": 1,
    "num_nextn_predict_layers": 1,
    "tie_word_embeddings": False,
    "torch_dtype": "bfloat16",
}

# zai-org/GLM-5 config.json (transformers 5.0.2.dev0), as xDeepOmniAI's deployment guide quotes it with the keys of
# the published file (its architectures and model_type rewritten there to DeepSeek-V3.2's, restored here, and its
# own quantization_config left out).
GLM_5 = {
    "architectures": ["GlmMoeDsaForCausalLM"],
    "attention_bias": False,
    "attention_dropout": 0.0,
    "dtype": "bfloat16",
    "eos_token_id": [154820, 154827, 154829],
    "ep_size": 1,
    "first_k_dense_replace": 3,
    "hidden_act": "silu",
    "head_dim": 64,
    "hidden_size": 6144,
    "index_head_dim": 128,
    "index_n_heads": 32,
    "index_topk": 2048,
    "indexer_rope_interleave": True,
    "initializer_range": 0.02,
    "intermediate_size": 12288,
    "kv_lora_rank": 512,
    "max_position_embeddings": 202752,
    "moe_intermediate_size": 2048,
    "moe_layer_freq": 1,
    "model_type": "glm_moe_dsa",
    "n_group": 1,
    "n_routed_experts": 256,
    "n_shared_experts": 1,
    "norm_topk_prob": True,
    "num_attention_heads": 64,
    "num_experts_per_tok": 8,
    "num_hidden_layers": 78,
    "num_key_value_heads": 64,
    "num_nextn_predict_layers": 1,
    "pad_token_id": 154820,
    "pretraining_tp": 1,
    "q_lora_rank": 2048,
    "qk_head_dim": 256,
    "qk_nope_head_dim": 192,
    "qk_rope_head_dim": 64,
    "rms_norm_eps": 1e-05,
    "rope_interleave": True,
    "rope_parameters": {"rope_theta": 1000000, "rope_type": "default"},
    "routed_scaling_factor": 2.5,
    "scoring_func": "sigmoid",
    "tie_word_embeddings": False,
    "topk_group": 1,
    "topk_method": "noaux_tc",
    "transformers_version": "5.0.2.dev0",
    "use_cache": True,
    "v_head_dim": 256,
    "vocab_size": 154880,
}

# moonshotai/Kimi-Linear-48B-A3B-Instruct config.json, as public repositories quote it key by key (a Rust test of the
# released checkpoint, "released_48b_config_parses_with_one_based_layers", and Megatron-Bridge's fixture of "the
# official Kimi-Linear-48B-A3B architecture"): 27 layers, MLA at 1-based layers 4, 8, ..., 24 and 27, KDA elsewhere.
KIMI_LINEAR_48B_A3B = {
    "architectures": ["KimiLinearForCausalLM"],
    "model_type": "kimi_linear",
    "torch_dtype": "bfloat16",
    "vocab_size": 163840,
    "hidden_size": 2304,
    "num_hidden_layers": 27,
    "num_attention_heads": 32,
    "num_key_value_heads": 32,
    "head_dim": 72,
    "intermediate_size": 9216,
    "hidden_act": "silu",
    "kv_lora_rank": 512,
    "q_lora_rank": None,
    "qk_nope_head_dim": 128,
    "qk_rope_head_dim": 64,
    "v_head_dim": 128,
    "mla_use_nope": True,
    "linear_attn_config": {
        "kda_layers": [1, 2, 3, 5, 6, 7, 9, 10, 11, 13, 14, 15, 17, 18, 19, 21, 22, 23, 25, 26],
        "full_attn_layers": [4, 8, 12, 16, 20, 24, 27],
        "num_heads": 32,
        "head_dim": 128,
        "short_conv_kernel_size": 4,
    },
    "num_experts": 256,
    "num_experts_per_token": 8,
    "num_shared_experts": 1,
    "moe_intermediate_size": 1024,
    "moe_router_activation_func": "sigmoid",
    "moe_renormalize": True,
    "routed_scaling_factor": 2.446,
    "first_k_dense_replace": 1,
    "moe_layer_freq": 1,
    "use_grouped_topk": True,
    "num_expert_group": 1,
    "topk_group": 1,
    "model_max_length": 1048576,
    "rms_norm_eps": 1e-5,
    "rope_theta": 10000.0,
    "rope_scaling": None,
    "tie_word_embeddings": False,
    "num_nextn_predict_layers": 0,
}
