"""The planner against the real transformers model: for small configs of each family devmem reads under its own key
names, the transformers model class is built on the CPU with random weights, and devmem's figures must equal what
that model holds: its parameter count (``sum(p.numel())``) and, after a forward of N tokens, the bytes of the keys
and values in its cache divided by N. Every figure here is measured, none written by hand."""

from __future__ import annotations

import pytest

from devmem.planner.models import ModelMemory

transformers = pytest.importorskip("transformers")
torch = pytest.importorskip("torch")

TOKENS = 5
SMALL = {"vocab_size": 100, "bos_token_id": 0, "eos_token_id": 0, "pad_token_id": 0}
GPT2_SHAPE = {"n_layer": 2, "n_head": 4, "n_embd": 64, "n_positions": 32, **SMALL}

FALCON_H1_SHAPE = {
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "head_dim": 16,
    "hidden_size": 64,
    "intermediate_size": 96,
    "max_position_embeddings": 32,
    "mamba_d_ssm": 96,
    "mamba_n_heads": 6,
    "mamba_d_head": 16,
    "mamba_d_state": 8,
    "mamba_n_groups": 1,
    "mamba_d_conv": 4,
    **SMALL,
}

ZAMBA2_SHAPE = {
    "num_hidden_layers": 6,
    "layers_block_type": ["mamba", "mamba", "hybrid", "mamba", "mamba", "hybrid"],
    "num_attention_heads": 4,
    "hidden_size": 64,
    "intermediate_size": 96,
    "max_position_embeddings": 32,
    "n_mamba_heads": 8,
    "mamba_d_state": 8,
    "mamba_ngroups": 1,
    "adapter_rank": 4,
    **SMALL,
}

CASES = {
    "gpt2": ("GPT2Config", GPT2_SHAPE),
    "gpt2-n_inner-untied": ("GPT2Config", {**GPT2_SHAPE, "n_inner": 96, "tie_word_embeddings": False}),
    "gpt_bigcode-multi-query": ("GPTBigCodeConfig", GPT2_SHAPE),
    "gpt_bigcode-multi-head": ("GPTBigCodeConfig", {**GPT2_SHAPE, "multi_query": False}),
    "gpt_neo": (
        "GPTNeoConfig",
        {
            "num_layers": 4,
            "num_heads": 4,
            "hidden_size": 64,
            "max_position_embeddings": 32,
            "attention_types": [[["global", "local"], 2]],
            "window_size": 16,
            **SMALL,
        },
    ),
    "codegen": ("CodeGenConfig", {**GPT2_SHAPE, "rotary_dim": 8}),
    "opt": (
        "OPTConfig",
        {
            "num_hidden_layers": 2,
            "num_attention_heads": 4,
            "hidden_size": 64,
            "ffn_dim": 96,
            "max_position_embeddings": 32,
            **SMALL,
        },
    ),
    "opt-projected-post-norm": (  # OPT-350m's shape: narrower embeddings projected in and out, no final LayerNorm
        "OPTConfig",
        {
            "num_hidden_layers": 2,
            "num_attention_heads": 4,
            "hidden_size": 64,
            "ffn_dim": 96,
            "max_position_embeddings": 32,
            "word_embed_proj_dim": 32,
            "do_layer_norm_before": False,
            **SMALL,
        },
    ),
    "opt-no-bias": (
        "OPTConfig",
        {
            "num_hidden_layers": 2,
            "num_attention_heads": 4,
            "hidden_size": 64,
            "ffn_dim": 96,
            "max_position_embeddings": 32,
            "enable_bias": False,
            **SMALL,
        },
    ),
    "mpt": ("MptConfig", {"n_layers": 2, "n_heads": 4, "d_model": 64, "max_seq_len": 32, **SMALL}),
    # transformers' MptMLP is 4 x d_model whatever expansion_ratio says; devmem reads expansion_ratio as vLLM does
    # and as the checkpoint's shapes are (tests/planner/test_models_more_published.py), so only ratio 4 is compared here
    "mpt-two-heads": ("MptConfig", {"n_layers": 3, "n_heads": 2, "d_model": 64, "max_seq_len": 32, **SMALL}),
    "falcon_h1": ("FalconH1Config", FALCON_H1_SHAPE),
    "falcon_h1-two-groups-gated-norm": (
        "FalconH1Config",
        {**FALCON_H1_SHAPE, "mamba_n_groups": 2, "mamba_rms_norm": True},
    ),
    "falcon_h1-biases": (
        "FalconH1Config",
        {
            **FALCON_H1_SHAPE,
            "mamba_proj_bias": True,
            "mlp_bias": True,
            "attention_bias": True,
            "mamba_conv_bias": False,
        },
    ),
    "falcon_h1-out-proj-bias": (
        "FalconH1Config",
        {**FALCON_H1_SHAPE, "projectors_bias": True, "mamba_conv_bias": False},
    ),
    "falcon_h1-inner-from-expand": (
        "FalconH1Config",
        {**FALCON_H1_SHAPE, "mamba_d_ssm": None, "mamba_d_head": "auto", "mamba_n_heads": 8},
    ),
    "zamba2": ("Zamba2Config", ZAMBA2_SHAPE),
    "zamba2-two-shared-blocks-untied": (
        "Zamba2Config",
        {**ZAMBA2_SHAPE, "num_mem_blocks": 2, "tie_word_embeddings": False, "mamba_ngroups": 2},
    ),
    "zamba2-attention-adapters": (
        "Zamba2Config",
        {**ZAMBA2_SHAPE, "use_shared_attention_adapter": True, "mamba_expand": 1},
    ),
    "zamba2-three-hybrid-default-mlp": (
        "Zamba2Config",
        {
            **{k: v for k, v in ZAMBA2_SHAPE.items() if k != "intermediate_size"},
            "num_hidden_layers": 5,
            "layers_block_type": ["hybrid", "mamba", "hybrid", "mamba", "hybrid"],
            "num_mem_blocks": 2,
        },
    ),
}


def built(name: str) -> tuple[dict, int, int]:
    """``(config.json as a dict, parameters, cache bytes per token)`` of the transformers model built from it."""
    class_name, values = CASES[name]
    config = getattr(transformers, class_name)(**values)
    torch.manual_seed(0)
    model = transformers.AutoModelForCausalLM.from_config(config).eval()
    parameters = sum(p.numel() for p in model.parameters())
    with torch.no_grad():
        cache = model(torch.randint(0, 100, (1, TOKENS)), use_cache=True).past_key_values
    attention = [layer for layer in cache.layers if hasattr(layer, "keys")]  # Zamba2's Mamba2-only layers hold none
    held = sum(t.numel() * t.element_size() for layer in attention for t in (layer.keys, layer.values))
    assert held % TOKENS == 0
    return config.to_dict(), parameters, held // TOKENS


def held_state(name: str) -> tuple[dict, int, int, int]:
    """``(config.json, conv state bytes, its kernel, SSM state bytes)`` one sequence holds in the transformers
    model's cache after a forward, over every layer."""
    class_name, values = CASES[name]
    config = getattr(transformers, class_name)(**values)
    model = transformers.AutoModelForCausalLM.from_config(config).eval()
    with torch.no_grad():
        cache = model(torch.randint(0, 100, (1, TOKENS)), use_cache=True).past_key_values
    conv = sum(t.numel() * t.element_size() for layer in cache.layers for t in layer.conv_states.values())
    ssm = sum(t.numel() * t.element_size() for layer in cache.layers for t in layer.recurrent_states.values())
    kernels = {k for layer in cache.layers for k in layer.conv_kernel_size.values()}
    assert len(kernels) == 1
    return config.to_dict(), conv, kernels.pop(), ssm


@pytest.mark.parametrize("name", sorted(n for n in CASES if n.startswith(("falcon_h1", "zamba2"))))
def test_recurrent_state_equals_the_transformers_cache_with_vllms_conv_width(name):
    """transformers keeps d_conv columns of the convolution state, vLLM (whose layout devmem plans) d_conv - 1: the
    SSM state is the same, the convolution state one column narrower."""
    config, conv, kernel, ssm = held_state(name)
    state = ModelMemory.from_config(config, dtype="fp32").state_bytes_per_sequence
    assert state == ssm + conv // kernel * (kernel - 1)


@pytest.mark.parametrize("name", sorted(CASES))
def test_kv_bytes_per_token_equal_what_the_transformers_cache_holds(name):
    config, _, per_token = built(name)
    assert ModelMemory.from_config(config, dtype="fp32").kv_bytes_per_token == per_token


@pytest.mark.parametrize("name", sorted(CASES))
def test_weights_equal_the_transformers_parameter_count(name):
    config, parameters, _ = built(name)
    assert ModelMemory.from_config(config, dtype="fp32").weights_bytes == parameters * 4
