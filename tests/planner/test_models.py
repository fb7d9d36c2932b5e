"""devmem.planner.models: KV bytes per token, state per sequence and weights of public models, from their config.json.

Every figure is worked out by hand in the test's docstring from the published config (tests/model_configs.py).
"""

from __future__ import annotations

import json
import struct
import subprocess
import sys

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from model_configs import (
    DEEPSEEK_V3,
    DEEPSEEK_V3_2,
    GEMMA_2_9B_IT,
    GEMMA_3_4B_IT,
    GEMMA_3_12B_IT,
    GPT_OSS_20B,
    JAMBA_V0_1,
    LFM2_5_VL_1_6B,
    LLAMA_3_1_8B,
    LLAMA_4_SCOUT,
    MISTRAL_7B_V0_1,
    MIXTRAL_8X7B,
    NEMOTRON_3_NANO,
    QWEN2_5_7B,
    QWEN3_8B,
    QWEN3_30B_A3B,
    QWEN3_NEXT_80B_A3B,
    write_model,
)
from model_configs_more import (
    BLOOM_560M,
    COHERE2_7B,
    DBRX,
    DEEPSEEK_V2_LITE,
    FALCON_40B,
    GLM_4_5_AIR,
    GPTJ_6B,
    GRANITE_4_H_SHAPED,
    MINICPM3_4B,
    OLMOE_1B_7B,
    PHI3_MINI_4K,
    QWEN2_5_VL_7B,
)

from devmem import DevmemError
from devmem.planner.capacity import sequence_cost
from devmem.planner.models import ModelConfigError, ModelMemory, UnknownArchitectureError, load_model


def model(config: dict, **options) -> ModelMemory:
    return ModelMemory.from_config(config, **options)


# --- per-token figures of public models ------------------------------------------------------------------------


def test_llama_3_1_8b_holds_131072_bytes_per_token():
    """32 layers x 2 (K, V) x 8 KV heads x head dim 4096/32 = 128 x 2 B (bf16) = 131,072 B per token."""
    m = model(LLAMA_3_1_8B)
    assert (m.attention, m.head_dim, m.kv_bytes_per_token) == ("gqa", 128, 131_072)


def test_qwen3_8b_holds_147456_bytes_per_token():
    """36 layers x 2 x 8 KV heads x head_dim 128 x 2 B (bf16) = 147,456 B per token."""
    assert model(QWEN3_8B).kv_bytes_per_token == 147_456


def test_qwen2_5_7b_keeps_full_attention_when_use_sliding_window_is_false():
    """sliding_window 131072 is set but use_sliding_window is false: 28 full layers x 2 x 4 KV heads x
    head dim 3584/28 = 128 x 2 B = 57,344 B per token, no layer capped."""
    m = model(QWEN2_5_7B)
    assert (m.kv_bytes_per_token, m.full_attention_layers, m.sliding_attention_layers) == (57_344, 28, 0)


def test_mistral_7b_v0_1_slides_every_layer_at_4096():
    """sliding_window 4096 with no per-layer pattern: all 32 layers slide. 32 x 2 x 8 x 128 x 2 B = 131,072 B
    per token, each layer holding at most 4096 tokens of a sequence."""
    m = model(MISTRAL_7B_V0_1)
    assert (m.kv_bytes_per_token, m.sliding_attention_layers, m.sliding_window) == (131_072, 32, 4096)


def test_gemma_2_9b_alternates_sliding_and_full_layers():
    """Gemma 2 slides its even layers: 21 sliding (window 4096) and 21 full. One layer: 2 x 8 KV heads x
    head_dim 256 x 2 B = 8,192 B; full layers 21 x 8,192 = 172,032 B per token, sliding the same up to the
    window, 344,064 B per token in all (query_pre_attn_scalar scales queries only: no memory)."""
    m = model(GEMMA_2_9B_IT)
    assert (m.full_bytes_per_token, m.sliding_bytes_per_token, m.sliding_window) == (172_032, 172_032, 4096)


def test_gemma_3_12b_reads_its_text_config_with_gemma3_defaults():
    """text_config of gemma3_text: head_dim 256 and sliding_window_pattern 6 from Gemma3TextConfig's defaults.
    Layers 5, 11, .., 47 are full (8), the other 40 slide over 1024 tokens. One layer: 2 x 8 x 256 x 2 B =
    8,192 B; full 8 x 8,192 = 65,536 B per token; sliding 40 x 8,192 = 327,680 B per token up to the window."""
    m = model(GEMMA_3_12B_IT)
    assert (m.head_dim, m.full_attention_layers, m.sliding_attention_layers, m.sliding_window) == (256, 8, 40, 1024)
    assert (m.full_bytes_per_token, m.sliding_bytes_per_token) == (65_536, 327_680)


def test_deepseek_v3_caches_one_576_element_latent_per_layer():
    """MLA: kv_lora_rank 512 + qk_rope_head_dim 64 = 576 elements shared by the 128 heads; 61 layers x 576 x
    2 B (bf16) = 70,272 B per token."""
    m = model(DEEPSEEK_V3)
    assert (m.attention, m.head_dim, m.kv_bytes_per_token) == ("mla", 576, 70_272)


def test_mixtral_moe_has_the_kv_cache_of_its_dense_shape():
    """Mixtral-8x7B: experts change the weights, not the cache: 32 x 2 x 8 x 128 x 2 B = 131,072 B per token,
    as Mistral-7B's shape has."""
    assert model(MIXTRAL_8X7B).kv_bytes_per_token == model(MISTRAL_7B_V0_1).kv_bytes_per_token == 131_072


def test_qwen3_moe_caches_only_its_attention():
    """Qwen3-30B-A3B: 128 experts change the weights only: 48 x 2 x 4 KV heads x 128 x 2 B = 98,304 B per token."""
    assert model(QWEN3_30B_A3B).kv_bytes_per_token == 98_304


def test_jamba_has_attention_every_eighth_layer_and_mamba_state_per_sequence():
    """attn_layer_period 8, offset 4: layers 4, 12, 20, 28 attend: 4 x 2 x 8 x 128 x 2 B = 16,384 B per token.
    28 Mamba layers, inner 2 x 4096 = 8192: conv 8192 x (4 - 1) + ssm 8192 x 16 = 155,648 elements x 2 B =
    311,296 B each, 8,716,288 B per sequence."""
    m = model(JAMBA_V0_1)
    assert (m.kv_bytes_per_token, m.state_bytes_per_sequence) == (16_384, 8_716_288)


def test_qwen3_next_has_linear_attention_state_per_sequence():
    """full_attention_interval 4: layers 3, 7, .., 47 attend (12): 12 x 2 x 2 KV heads x 256 x 2 B = 24,576 B
    per token. 36 gated-delta-net layers: conv (2 x 16 x 128 + 32 x 128) x (4 - 1) = 24,576 + state
    32 x 128 x 128 = 524,288 elements x 2 B = 1,097,728 B each, 39,518,208 B per sequence."""
    m = model(QWEN3_NEXT_80B_A3B)
    assert (m.kv_bytes_per_token, m.state_bytes_per_sequence) == (24_576, 39_518_208)


def test_layer_types_list_gives_the_layers_the_interval_gives():
    """The same Qwen3-Next with its layers listed (as newer transformers writes them) is the same model."""
    listed = {**QWEN3_NEXT_80B_A3B, "layer_types": ["linear_attention"] * 48}
    listed["layer_types"][3::4] = ["full_attention"] * 12
    a, b = model(QWEN3_NEXT_80B_A3B), model(listed)
    assert (a.kv_bytes_per_token, a.state_bytes_per_sequence) == (b.kv_bytes_per_token, b.state_bytes_per_sequence)


def test_qwen3_5_config_ssm_dtype_sets_the_recurrent_state_precision():
    """vLLM's Qwen3_5ForConditionalGenerationConfig hook reads mamba_ssm_dtype: float32 puts the SSM state at 4 B,
    the conv state at 2 B: 36 x (24,576 x 2 + 524,288 x 4) = 77,266,944 B per sequence (Qwen3-Next's shapes)."""
    config = {**QWEN3_NEXT_80B_A3B, "model_type": "qwen3_5_moe_text", "mamba_ssm_dtype": "float32"}
    assert model(config).state_bytes_per_sequence == 77_266_944


def test_ssm_dtype_key_of_a_family_vllm_reads_it_for_no_more_is_ignored_and_said_so():
    """Qwen3-Next has no vLLM hook: its SSM state stays in bf16 whatever mamba_ssm_dtype says, 36 x (24,576 +
    524,288) x 2 B = 39,518,208 B per sequence."""
    m = model({**QWEN3_NEXT_80B_A3B, "mamba_ssm_dtype": "float32"})
    assert m.state_bytes_per_sequence == 39_518_208
    assert any("sets mamba_ssm_dtype" in note for note in m.notes)


# --- KV dtype and tensor parallelism ---------------------------------------------------------------------------


def test_fp8_kv_cache_is_one_byte_per_element():
    """Qwen3-8B at fp8: 36 x 2 x 8 x 128 x 1 B = 73,728 B per token."""
    assert model(QWEN3_8B, kv_dtype="fp8").kv_bytes_per_token == 73_728


def test_fp32_kv_cache_is_four_bytes_per_element():
    """Qwen3-8B at fp32: 36 x 2 x 8 x 128 x 4 B = 294,912 B per token."""
    assert model(QWEN3_8B, kv_dtype="fp32").kv_bytes_per_token == 294_912


def test_auto_kv_dtype_follows_the_served_dtype():
    """A float32 config served in bf16 (dtype=): Qwen3-8B back at 147,456 B per token."""
    assert model({**QWEN3_8B, "torch_dtype": "float32"}, dtype="bf16").kv_bytes_per_token == 147_456


def test_tensor_parallel_splits_kv_heads_across_ranks():
    """Llama-3.1-8B over 4 ranks: 8 // 4 = 2 KV heads each: 32 x 2 x 2 x 128 x 2 B = 32,768 B per token."""
    m = model(LLAMA_3_1_8B, tp=4)
    assert (m.kv_heads_per_rank, m.kv_bytes_per_token) == (2, 32_768)


def test_tensor_parallel_beyond_the_kv_heads_replicates_one_per_rank():
    """Llama-3.1-8B over 16 ranks: max(1, 8 // 16) = 1 KV head each (each head on 2 ranks): 32 x 2 x 1 x 128 x
    2 B = 16,384 B per token."""
    m = model(LLAMA_3_1_8B, tp=16)
    assert (m.kv_heads_per_rank, m.kv_bytes_per_token) == (1, 16_384)


def test_mla_latent_is_not_split_across_ranks():
    """DeepSeek-V3 over 8 ranks: every rank holds the whole 576-element latent: 70,272 B per token each."""
    assert model(DEEPSEEK_V3, tp=8).kv_bytes_per_token == 70_272


def test_tensor_parallel_splits_the_recurrent_state():
    """Jamba over 2 ranks: inner 8192 / 2 per rank: 8,716,288 / 2 = 4,358,144 B per sequence."""
    assert model(JAMBA_V0_1, tp=2).state_bytes_per_sequence == 4_358_144


def test_tensor_parallel_that_cannot_split_the_heads_is_refused_with_the_sizes_allowed():
    with pytest.raises(
        ModelConfigError,
        match=r"tp=3 cannot split llama: 32 attention heads are not a multiple of 3.*"
        r"allows: 1, 2, 4, 8, 16, 32",
    ):
        model(LLAMA_3_1_8B, tp=3)


def test_tensor_parallel_must_be_a_positive_whole_number():
    with pytest.raises(ModelConfigError, match="tp must be a whole number >= 1"):
        model(LLAMA_3_1_8B, tp=0)


def test_unknown_kv_dtype_is_refused_naming_the_choices():
    choices = "auto, bf16, fp16, fp8, fp8_ds_mla, nvfp4, fp32"
    with pytest.raises(ModelConfigError, match=f"kv_dtype 'int4' is not one of {choices}"):
        model(LLAMA_3_1_8B, kv_dtype="int4")


# --- what devmem refuses to guess ------------------------------------------------------------------------------


def test_unknown_architecture_names_every_missing_key_and_the_model_type():
    with pytest.raises(UnknownArchitectureError) as info:
        model({"model_type": "mystery", "torch_dtype": "bfloat16", "d_model": 1024})
    assert info.value.model_type == "mystery"
    assert info.value.missing == ("num_hidden_layers", "num_attention_heads", "hidden_size")
    assert "model_type 'mystery' lacks num_hidden_layers, num_attention_heads, hidden_size" in str(info.value)


def test_unknown_architecture_error_is_a_devmem_error():
    assert issubclass(UnknownArchitectureError, DevmemError)


def test_hybrid_without_its_state_dimensions_is_refused_naming_them():
    """A family without transformers defaults (Qwen3.5's text config) gets no default for a missing dimension."""
    config = {k: v for k, v in QWEN3_NEXT_80B_A3B.items() if k != "linear_conv_kernel_dim"}
    config["model_type"] = "qwen3_5_text"
    config["layer_types"] = (["linear_attention"] * 3 + ["full_attention"]) * 12
    with pytest.raises(UnknownArchitectureError, match="lacks linear_conv_kernel_dim, which the linear-attention"):
        model(config)


def test_unmodelled_layer_kind_is_refused_naming_it():
    config = {**LLAMA_3_1_8B, "layer_types": ["cross_attention"] * 32}
    with pytest.raises(UnknownArchitectureError, match="layer_types holds 'cross_attention'"):
        model(config)


def test_key_for_unmodelled_memory_is_refused():
    """Gemma 3n shares KV across layers; devmem does not size each layer as its own."""
    with pytest.raises(UnknownArchitectureError, match="sets num_kv_shared_layers: KV shared across layers"):
        model({**LLAMA_3_1_8B, "num_kv_shared_layers": 10})


MINIMAX_TEXT_01_LIKE = {
    "model_type": "minimax_text_01",
    "attn_type_list": [0, 0, 0, 0, 0, 0, 0, 1] * 10,
    "head_dim": 128,
    "hidden_size": 6144,
    "intermediate_size": 9216,
    "num_attention_heads": 64,
    "num_hidden_layers": 80,
    "num_key_value_heads": 8,
    "num_local_experts": 32,
    "max_position_embeddings": 10240000,
    "vocab_size": 200064,
    "torch_dtype": "bfloat16",
}
RECURRENT_GEMMA_2B_LIKE = {
    "model_type": "recurrent_gemma",
    "block_types": ["recurrent", "recurrent", "attention"],
    "attention_window_size": 2048,
    "hidden_size": 2560,
    "intermediate_size": 15360,
    "lru_width": 2560,
    "conv1d_width": 4,
    "num_attention_heads": 10,
    "num_hidden_layers": 26,
    "num_key_value_heads": 1,
    "vocab_size": 256000,
    "torch_dtype": "bfloat16",
}


@pytest.mark.parametrize(
    ("config", "key"),
    [
        (RECURRENT_GEMMA_2B_LIKE, "block_types"),
        ({**MINIMAX_TEXT_01_LIKE, "model_type": "minimax", "attn_type_list": None}, "layer_types"),
    ],
    ids=["recurrent_gemma", "minimax-config-class-default"],
)
def test_configs_whose_linear_or_recurrent_layers_devmem_cannot_size_are_refused(config, key):
    """Each was sized as every layer attending fully: RecurrentGemma's recurrent blocks (2 of every 3), and a MiniMax
    config that lists neither layer_types nor attn_type_list (MiniMaxConfig alternates lightning layers), counted as
    KV cache."""
    with pytest.raises(UnknownArchitectureError) as caught:
        model(config)
    assert caught.value.missing == (key,)


def test_config_without_model_type_is_refused():
    with pytest.raises(UnknownArchitectureError, match="no model_type"):
        model({k: v for k, v in LLAMA_3_1_8B.items() if k != "model_type"})


def test_config_without_dtype_is_served_in_bf16_and_says_so():
    """vLLM's "auto" serves a config naming no dtype in bf16: 131,072 B per token, as for Llama-3.1-8B in bf16."""
    m = model({k: v for k, v in LLAMA_3_1_8B.items() if k != "torch_dtype"})
    assert (m.dtype, m.kv_bytes_per_token) == ("bf16", 131_072)
    assert any("names no dtype" in note and "bf16" in note for note in m.notes)


def test_dtype_given_overrides_the_served_dtype():
    config = {k: v for k, v in LLAMA_3_1_8B.items() if k != "torch_dtype"}
    assert model(config, dtype="fp32").kv_bytes_per_token == 262_144


def test_transformers_5_dtype_key_is_read():
    config = {**{k: v for k, v in LLAMA_3_1_8B.items() if k != "torch_dtype"}, "dtype": "float16"}
    assert model(config).dtype == "fp16"


def test_non_integer_layer_count_is_refused_naming_the_key():
    with pytest.raises(ModelConfigError, match=r"num_hidden_layers='32' must be a whole number"):
        model({**LLAMA_3_1_8B, "num_hidden_layers": "32"})


@pytest.mark.parametrize("value", [32.0, -8, 0, True, [32], {"n": 32}, "32"], ids=repr)
@pytest.mark.parametrize(
    ("config", "key"),
    [
        (QWEN3_8B, "num_hidden_layers"),
        (QWEN3_8B, "num_attention_heads"),
        (QWEN3_8B, "num_key_value_heads"),
        (QWEN3_8B, "head_dim"),
        (LLAMA_3_1_8B, "hidden_size"),
        (QWEN3_8B, "max_position_embeddings"),
        (MISTRAL_7B_V0_1, "sliding_window"),
        (GEMMA_3_12B_IT, "sliding_window_pattern"),
        (JAMBA_V0_1, "attn_layer_period"),
        (QWEN3_NEXT_80B_A3B, "linear_num_value_heads"),
        (DEEPSEEK_V3, "kv_lora_rank"),
    ],
)
def test_a_size_that_is_not_a_positive_whole_number_is_refused_naming_the_key(config, key, value):
    """Floats (even 32.0), negatives, zero, booleans, lists, objects and strings: one ModelConfigError naming the key
    and the value, never a figure."""
    hostile = (
        {**config, "text_config": {**config["text_config"], key: value}}
        if "text_config" in config
        else {
            **config,
            key: value,
        }
    )
    with pytest.raises(ModelConfigError, match=rf"config key {key}=.* must be a whole number from 1 to"):
        model(hostile)


def test_a_size_under_another_key_name_is_refused_by_the_name_in_the_file():
    with pytest.raises(ModelConfigError, match=r"config key n_layer='28' must be a whole number"):
        model({**GPTJ_6B, "n_layer": "28"})


def test_sliding_window_longer_than_any_context_holds_what_full_attention_holds():
    """Mistral-7B-v0.1 with a 1,000,000-token window: a 32,768-token sequence holds all of it on all 32 layers."""
    m = model({**MISTRAL_7B_V0_1, "sliding_window": 1_000_000})
    assert sequence_cost(m, 32_768).kv_bytes == 32_768 // 16 * 16 * m.kv_bytes_per_token


def test_layer_list_of_the_wrong_length_is_refused():
    with pytest.raises(ModelConfigError, match=r"layer_types must list one entry per layer \(32\)"):
        model({**LLAMA_3_1_8B, "layer_types": ["full_attention"] * 31})


def test_layer_list_entry_that_is_not_a_name_is_refused_naming_it():
    with pytest.raises(UnknownArchitectureError, match=r"layer_types holds \{'kind': 'full'\}"):
        model({**LLAMA_3_1_8B, "layer_types": [{"kind": "full"}] + ["full_attention"] * 31})


def test_config_dtype_devmem_does_not_know_asks_for_one():
    with pytest.raises(ModelConfigError, match=r"the config's dtype \(give another with dtype= or --dtype\) 'auto'"):
        model({**LLAMA_3_1_8B, "torch_dtype": "auto"})


def test_transformers_5_rope_parameters_scale_the_maximum_context():
    """Qwen3-8B as transformers 5 writes it: rope_parameters yarn, 32,768 x 4 = 131,072 (it read 40,960)."""
    config = {
        **QWEN3_8B,
        "rope_parameters": {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 32768},
    }
    assert model(config).max_context == 131_072


def test_rope_factor_that_is_not_a_number_is_refused_naming_the_key():
    """A factor of "4" was skipped silently: Qwen3-8B then read 40,960 tokens."""
    config = {
        **QWEN3_8B,
        "rope_scaling": {"rope_type": "yarn", "factor": "4", "original_max_position_embeddings": 32768},
    }
    with pytest.raises(ModelConfigError, match=r"rope_scaling.factor='4' must be a number from 1 to 1024"):
        model(config)


def test_yarn_original_length_that_is_not_a_whole_number_is_refused_naming_the_key():
    """It was read as max_position_embeddings x factor: 163,840 for Qwen3-8B."""
    scaling = {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": "32768"}
    with pytest.raises(ModelConfigError, match=r"rope_scaling.original_max_position_embeddings='32768' must be"):
        model({**QWEN3_8B, "rope_scaling": scaling})


def test_use_sliding_window_that_is_not_a_boolean_is_refused():
    """The string "false" read as true: Qwen2.5-7B with max_window_layers 20 slid its last 8 layers."""
    with pytest.raises(ModelConfigError, match=r"config key use_sliding_window='false' must be true or false"):
        model({**QWEN2_5_7B, "use_sliding_window": "false", "max_window_layers": 20})


def test_tie_word_embeddings_that_is_not_a_boolean_is_refused():
    """The string "false" read as tied: Llama-3.1-8B's weights short of its 128,256 x 4,096 output head."""
    with pytest.raises(ModelConfigError, match=r"config key tie_word_embeddings='false' must be true or false"):
        model({**LLAMA_3_1_8B, "tie_word_embeddings": "false"})


def test_head_dim_null_falls_back_to_hidden_over_heads():
    """Qwen3Config with head_dim null: hidden_size 4,096 / 32 heads = 128, as transformers reads it."""
    assert model({**QWEN3_8B, "head_dim": None}).head_dim == 128


def test_num_key_value_heads_null_means_one_per_attention_head():
    """Qwen2Config with num_key_value_heads null: 28 K/V heads (the family default, 32, is not taken)."""
    assert model({**QWEN2_5_7B, "num_key_value_heads": None}).num_kv_heads == 28


JSON_VALUES = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**70), 2**70) | st.floats() | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=4), inner, max_size=3),
    max_leaves=8,
)
FIXTURES = [
    DBRX,
    FALCON_40B,
    GPTJ_6B,
    BLOOM_560M,
    MINICPM3_4B,
    COHERE2_7B,
    DEEPSEEK_V2_LITE,
    QWEN2_5_VL_7B,
    OLMOE_1B_7B,
    GLM_4_5_AIR,
    GRANITE_4_H_SHAPED,
    PHI3_MINI_4K,
    LLAMA_3_1_8B,
    GEMMA_2_9B_IT,
    GEMMA_3_12B_IT,
    DEEPSEEK_V3,
    JAMBA_V0_1,
    QWEN3_NEXT_80B_A3B,
    QWEN3_30B_A3B,
    GEMMA_3_4B_IT,
    GPT_OSS_20B,
    LLAMA_4_SCOUT,
    DEEPSEEK_V3_2,
    NEMOTRON_3_NANO,
    LFM2_5_VL_1_6B,
]


@settings(max_examples=400, deadline=None)
@given(config=st.sampled_from(FIXTURES), data=st.data(), value=JSON_VALUES)
def test_any_value_under_any_key_is_sized_or_refused_with_a_devmem_error(config, data, value):
    text = "text_config" in config
    keys = sorted((config["text_config"] if text else config).keys())
    key = data.draw(st.sampled_from(keys))
    hostile = {**config, "text_config": {**config["text_config"], key: value}} if text else {**config, key: value}
    try:
        m = model(hostile, tp=data.draw(st.sampled_from([1, 2, 8])))
    except DevmemError as exc:
        assert "\n" not in str(exc)
        return
    assert m.kv_bytes_per_token > 0 and m.state_bytes_per_sequence >= 0 and m.weights_bytes > 0
    assert m.explain() and m.as_dict()


# --- weights ---------------------------------------------------------------------------------------------------


def test_llama_3_1_8b_weights_estimate_counts_every_matrix():
    """Embeddings and output head 2 x 128,256 x 4096 = 1,050,673,152; per layer q and o 2 x 4096^2, k and v
    2 x 4096 x 1024, MLP 3 x 4096 x 14336, norms 2 x 4096 = 218,112,000, x 32 = 6,979,584,000; final norm 4096:
    8,030,261,248 parameters x 2 B = 16,060,522,496 B (the published safetensors total_size)."""
    m = model(LLAMA_3_1_8B)
    assert (m.weights_bytes, m.weights_estimated) == (16_060_522_496, True)


def test_mixtral_weights_estimate_counts_every_expert():
    """Embeddings 2 x 32000 x 4096 = 262,144,000; per layer attention 41,943,040 + 8 experts x 3 x 4096 x 14336
    = 1,409,286,144 + router 4096 x 8 + norms 8192 = 1,451,270,144, x 32 = 46,440,644,608; + final norm 4096:
    46,702,792,704 parameters x 2 B = 93,405,585,408 B."""
    assert model(MIXTRAL_8X7B).weights_bytes == 93_405_585_408


def test_qwen3_moe_weights_estimate_counts_experts_and_router():
    """Qwen3-30B-A3B: embeddings 2 x 151,936 x 2048 = 622,329,856; per layer attention 18,874,368 + q/k norms 256
    + 128 experts x 3 x 2048 x 768 = 603,979,776 + router 2048 x 128 = 262,144 + norms 4096 = 623,120,640,
    x 48 = 29,909,790,720; + final norm 2048: 30,532,122,624 parameters x 2 B = 61,064,245,248 B."""
    assert model(QWEN3_30B_A3B).weights_bytes == 61_064_245_248


def test_fp8_checkpoint_counts_its_matrices_at_one_byte():
    m, unquantized = model(DEEPSEEK_V3), model({k: v for k, v in DEEPSEEK_V3.items() if k != "quantization_config"})
    assert m.weights_bytes < unquantized.weights_bytes * 0.51
    assert any("at 8.00195 bits per weight (fp8, block scales included)" in note for note in m.notes)


COMPRESSED_TENSORS_FP8 = {
    "config_groups": {
        "group_0": {
            "input_activations": {"dynamic": False, "num_bits": 8, "strategy": "tensor", "type": "float"},
            "targets": ["Linear"],
            "weights": {"dynamic": False, "num_bits": 8, "strategy": "tensor", "type": "float"},
        }
    },
    "format": "float-quantized",
    "ignore": ["lm_head"],
    "kv_cache_scheme": {"dynamic": False, "num_bits": 8, "strategy": "tensor", "symmetric": True, "type": "float"},
    "quant_method": "compressed-tensors",
    "quantization_status": "compressed",
}


def test_compressed_tensors_checkpoint_counts_its_matrices_at_their_group_width():
    """Llama-3.1-8B in the layout llm-compressor writes: the 6,979,321,856 matrix parameters at 8 bits, the
    1,050,939,392 others (embeddings, output head, norms) at 2 B: 9,081,200,640 B (it counted 16,060,522,496)."""
    m = model({**LLAMA_3_1_8B, "quantization_config": COMPRESSED_TENSORS_FP8})
    assert m.weights_bytes == 6_979_321_856 + 2 * 1_050_939_392


def test_kv_cache_scheme_makes_the_cache_fp8_as_vllm_does_and_says_so():
    """vLLM 0.34.0's Attention.__init__ caches fp8 under auto where a compressed-tensors config has a kv_cache_scheme:
    32 x 2 x 8 x 128 x 1 B = 65,536 B per token."""
    m = model({**LLAMA_3_1_8B, "quantization_config": COMPRESSED_TENSORS_FP8})
    assert m.kv_bytes_per_token == 65_536
    assert any("the KV cache is fp8, as the checkpoint declares it" in n for n in m.notes)


def test_weights_come_from_the_safetensors_index(tmp_path):
    folder = write_model(tmp_path / "qwen3-8b", QWEN3_8B, total_size=16_381_470_720)
    m = ModelMemory.from_pretrained_dir(folder)
    assert (m.weights_bytes, m.weights_estimated) == (16_381_470_720, False)
    assert m.weights_source == "model.safetensors.index.json metadata.total_size"


def test_weights_come_from_a_single_safetensors_file(tmp_path):
    folder = write_model(tmp_path / "tiny", LLAMA_3_1_8B)
    header = json.dumps({"w": {"dtype": "BF16", "shape": [3, 5], "data_offsets": [0, 30]}}).encode()
    (folder / "model.safetensors").write_bytes(struct.pack("<Q", len(header)) + header + bytes(30))
    assert ModelMemory.from_pretrained_dir(folder).weights_bytes == 30


def test_weights_are_estimated_and_said_so_without_a_checkpoint(tmp_path):
    m = ModelMemory.from_pretrained_dir(write_model(tmp_path / "llama", LLAMA_3_1_8B))
    assert m.weights_source == "estimated from config.json" and m.weights_bytes == 16_060_522_496


def test_multimodal_estimate_says_it_covers_the_text_model_only():
    assert model(GEMMA_3_12B_IT).weights_source == "estimated from config.json (text model only)"


def test_weights_per_rank_are_split_evenly_rounding_up():
    m = model(LLAMA_3_1_8B, tp=4, weights_bytes=10)
    assert m.weights_bytes_per_rank == 3


def test_broken_safetensors_index_is_a_clear_error(tmp_path):
    folder = write_model(tmp_path / "broken", QWEN3_8B)
    (folder / "model.safetensors.index.json").write_text('{"weight_map": {}}')
    with pytest.raises(ModelConfigError, match="metadata.total_size must be a byte count > 0"):
        ModelMemory.from_pretrained_dir(folder)


# --- reading configs -------------------------------------------------------------------------------------------


def test_load_model_reads_a_folder_or_its_config_json(tmp_path):
    folder = write_model(tmp_path / "q", QWEN3_8B, total_size=123)
    assert load_model(folder).weights_bytes == load_model(folder / "config.json").weights_bytes == 123


def test_missing_config_is_a_clear_error(tmp_path):
    with pytest.raises(ModelConfigError, match="no model config at"):
        load_model(tmp_path / "nothing.json")


def test_config_that_is_not_json_is_a_clear_error(tmp_path):
    (tmp_path / "config.json").write_text("{not json")
    with pytest.raises(ModelConfigError, match="is not valid JSON"):
        load_model(tmp_path)


def test_models_and_capacity_import_neither_torch_nor_transformers():
    probe = (
        "import sys, devmem.planner.models, devmem.planner.capacity; "
        "print([m for m in ('torch', 'transformers') if m in sys.modules])"
    )
    assert (
        subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True).stdout.strip() == "[]"
    )
