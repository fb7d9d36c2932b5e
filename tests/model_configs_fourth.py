"""Published configs of the fourth round: quantized checkpoints that declare their KV-cache dtype, and the
newest attention kinds.

As in model_configs_third.py, the Hugging Face files are not in the reference store: each config is the one public
repositories quote as the published file (named above it), trimmed to the keys that matter; where a quantization
config is the shape a tool writes rather than one release's file, the comment says so.
"""

from __future__ import annotations

from model_configs_third import GLM_5, NEMOTRON_3_SUPER_120B

# meta-llama/Llama-3.3-70B-Instruct config.json (the NVFP4 release nvidia/Llama-3.3-70B-Instruct-FP4 ships the same
# config.json and puts its quantization in hf_quant_config.json beside it).
LLAMA_3_3_70B = {
    "architectures": ["LlamaForCausalLM"],
    "attention_bias": False,
    "hidden_act": "silu",
    "hidden_size": 8192,
    "intermediate_size": 28672,
    "max_position_embeddings": 131072,
    "mlp_bias": False,
    "model_type": "llama",
    "num_attention_heads": 64,
    "num_hidden_layers": 80,
    "num_key_value_heads": 8,
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
    "vocab_size": 128256,
}

# nvidia/Llama-3.3-70B-Instruct-FP4 hf_quant_config.json, with the values a public deployment script checks in the
# published file (quant_algo NVFP4, kv_cache_quant_algo FP8, group_size 16, lm_head excluded) and the index's
# metadata.total_size it checks: 42,709,045,632 bytes.
LLAMA_3_3_70B_FP4_QUANT = {
    "producer": {"name": "modelopt", "version": "0.23.0"},
    "quantization": {
        "quant_algo": "NVFP4",
        "kv_cache_quant_algo": "FP8",
        "group_size": 16,
        "exclude_modules": ["lm_head"],
    },
}
LLAMA_3_3_70B_FP4_TOTAL_SIZE = 42_709_045_632

# nvidia/NVIDIA-Nemotron-3-Nano-30B-A3B-NVFP4 hf_quant_config.json, as a Rust test quotes "the exact schema shipped"
# (exclude_modules trimmed there to three of its entries); its config.json is the BF16 release's (NEMOTRON_3_NANO).
NEMOTRON_3_NANO_NVFP4_QUANT = {
    "producer": {"name": "modelopt", "version": "0.29.0"},
    "quantization": {
        "quant_algo": "NVFP4",
        "kv_cache_quant_algo": "FP8",
        "group_size": 16,
        "exclude_modules": ["lm_head", "backbone.layers.4.mixer.in_proj", "backbone.layers.0.mixer.conv1d"],
    },
}


def modelopt_quantization_config(quant_algo: str, kv_cache_quant_algo: str | None, ignore: list[str]) -> dict:
    """config.json's ``quantization_config`` as ModelOpt 0.31 and later write it (NVIDIA/Model-Optimizer,
    modelopt/torch/export/convert_hf_config.py ``convert_hf_quant_config_format``): an FP8 KV cache becomes the
    ``kv_cache_scheme`` object, another algorithm its name; ``quant_method`` ``modelopt``."""
    bits = 4 if quant_algo == "NVFP4" else 8
    scheme: dict = {"dynamic": False, "num_bits": bits, "type": "float"}
    if quant_algo == "NVFP4":
        scheme["group_size"] = 16
    config: dict = {
        "config_groups": {"group_0": {"input_activations": scheme, "weights": scheme, "targets": ["Linear"]}},
        "ignore": ignore,
        "quant_algo": quant_algo,
        "producer": {"name": "modelopt", "version": "0.37.0"},
        "quant_method": "modelopt",
    }
    if kv_cache_quant_algo == "FP8":
        config["kv_cache_scheme"] = {"dynamic": False, "num_bits": 8, "type": "float"}
    elif kv_cache_quant_algo is not None:
        config["kv_cache_scheme"] = kv_cache_quant_algo
    return config


# config.json's quantization_config as llm-compressor writes an FP8 checkpoint with an FP8 KV cache (the
# compressed-tensors QuantizationArgs of its weights and of kv_cache_scheme, written out in full).
COMPRESSED_TENSORS_FP8_KV = {
    "config_groups": {
        "group_0": {
            "input_activations": {
                "actorder": None,
                "block_structure": None,
                "dynamic": True,
                "group_size": None,
                "num_bits": 8,
                "observer": None,
                "strategy": "token",
                "symmetric": True,
                "type": "float",
            },
            "targets": ["Linear"],
            "weights": {
                "actorder": None,
                "block_structure": None,
                "dynamic": False,
                "group_size": None,
                "num_bits": 8,
                "observer": "minmax",
                "strategy": "channel",
                "symmetric": True,
                "type": "float",
            },
        }
    },
    "format": "float-quantized",
    "ignore": ["lm_head"],
    "kv_cache_scheme": {
        "actorder": None,
        "block_structure": None,
        "dynamic": False,
        "group_size": None,
        "num_bits": 8,
        "observer": "minmax",
        "strategy": "tensor",
        "symmetric": True,
        "type": "float",
    },
    "quant_method": "compressed-tensors",
    "quantization_status": "compressed",
}


def _glm_5_2_indexer_types() -> list[str]:
    types = ["shared"] * 78
    for layer in (0, 1, 2, *range(6, 78, 4)):
        types[layer] = "full"
    return types


# zai-org/GLM-5.2 config.json: GLM-5's architecture (glm_moe_dsa, 78 layers) with the IndexShare keys. indexer_types
# as a public profile test gives the official checkpoint's ("full producers at 0, 1, 2 then every 4th layer": 21
# full, 57 shared); mlp_layer_types, index_share_for_mtp_iteration and moe_router_dtype are keys a public validator
# of the checkpoint requires, with the values it fixes. The other keys are GLM-5's: not checked key by key.
GLM_5_2 = {
    **GLM_5,
    "indexer_types": _glm_5_2_indexer_types(),
    "mlp_layer_types": ["dense"] * 3 + ["sparse"] * 75,
    "index_share_for_mtp_iteration": True,
    "moe_router_dtype": "float32",
}


_NEMOTRON_H_LAYER_TYPES = {"M": "mamba", "E": "moe", "*": "attention", "-": "mlp"}


# A Nemotron 3 config in the form Nemotron 3 Ultra's config.json takes (nvidia/NVIDIA-Nemotron-3-Ultra-550B-A55B: the
# layers only as layers_block_type, no num_hidden_layers, as NemotronHConfig writes them since transformers 5):
# Nemotron-3-Super-120B's layers (NEMOTRON_3_SUPER_120B) written so. Ultra's own file is not in the reference store.
NEMOTRON_3_LAYERS_BLOCK_TYPE = {
    **{k: v for k, v in NEMOTRON_3_SUPER_120B.items() if k not in ("num_hidden_layers", "hybrid_override_pattern")},
    "layers_block_type": [_NEMOTRON_H_LAYER_TYPES[c] for c in NEMOTRON_3_SUPER_120B["hybrid_override_pattern"]],
}


# A MiniMax-M3 text config (an architecture vLLM 0.34.0 does not register as MiniMaxM3ForCausalLM), shaped after
# transformers' MiniMaxM3VLTextConfig defaults (60 layers, 64 heads, 4 KV heads of 128) with its sparse attention
# in the sparse_attention_config object the config class folds in (sparse_attention_freq per layer, the lightning
# indexer's heads, dims and blocks). Not the published file: its shape.
MINIMAX_M3_SHAPED = {
    "architectures": ["MiniMaxM3ForCausalLM"],
    "model_type": "minimax_m3",
    "hidden_size": 6144,
    "intermediate_size": 3072,
    "num_hidden_layers": 60,
    "num_attention_heads": 64,
    "num_key_value_heads": 4,
    "head_dim": 128,
    "rotary_dim": 64,
    "max_position_embeddings": 524288,
    "vocab_size": 200064,
    "num_local_experts": 128,
    "num_experts_per_tok": 4,
    "shared_intermediate_size": 3072,
    "dense_intermediate_size": 12288,
    "sparse_attention_config": {
        "sparse_attention_freq": [0, 0, 0] + [1] * 57,
        "sparse_num_index_heads": 4,
        "sparse_index_dim": 128,
        "sparse_block_size": 128,
        "sparse_topk_blocks": 16,
        "sparse_local_block": 1,
    },
    "tie_word_embeddings": False,
    "torch_dtype": "bfloat16",
}

# A DeepSeek-V4 config shaped after transformers' DeepseekV4Config defaults (its docstring checkpoint,
# deepseek-ai/DeepSeek-V4-Flash-Base: 43 layers, one KV head of 512, qk_rope_head_dim 64, no kv_lora_rank), with the
# per-layer compress_ratios the released config.json carries (0 a sliding-window layer, 4 compressed sparse
# attention, 128 heavily compressed) in DeepseekV4Config's default order. Not the published file: its shape.
DEEPSEEK_V4_SHAPED = {
    "architectures": ["DeepseekV4ForCausalLM"],
    "model_type": "deepseek_v4",
    "hidden_size": 4096,
    "num_hidden_layers": 43,
    "num_attention_heads": 64,
    "num_key_value_heads": 1,
    "head_dim": 512,
    "qk_rope_head_dim": 64,
    "q_lora_rank": 1024,
    "o_groups": 8,
    "o_lora_rank": 1024,
    "sliding_window": 128,
    "compress_ratios": [128, 128] + [4 if layer % 2 else 128 for layer in range(41)],
    "index_n_heads": 64,
    "index_head_dim": 128,
    "index_topk": 512,
    "n_routed_experts": 256,
    "n_shared_experts": 1,
    "num_experts_per_tok": 6,
    "moe_intermediate_size": 2048,
    "max_position_embeddings": 1048576,
    "vocab_size": 129280,
    "torch_dtype": "bfloat16",
}
