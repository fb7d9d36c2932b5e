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
