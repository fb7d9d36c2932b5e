"""Every architecture of the published configs devmem was refused or wrong on: KV bytes per token, state per
sequence, maximum context and served dtype, each worked out by hand in the docstring (and, for the recurrent
state, by vLLM's MambaStateShapeCalculator shapes: conv ``(kernel - 1, channels / tp)``, SSM per head).
"""

from __future__ import annotations

import time

import numpy as np
import pytest
from model_configs import (
    DEEPSEEK_V3,
    DEEPSEEK_V3_2,
    GEMMA_2_9B,
    GEMMA_3_4B_IT,
    GEMMA_3_27B_IT,
    GPT_OSS_20B,
    GPT_OSS_120B,
    LFM2_5_VL_1_6B,
    LLAMA_4_SCOUT,
    NEMOTRON_3_NANO,
    NEMOTRON_H_56B,
)

from devmem.planner.capacity import capacity, sequence_cost
from devmem.planner.models import ModelConfigError, ModelMemory, UnknownArchitectureError


def model(config: dict, **options) -> ModelMemory:
    return ModelMemory.from_config(config, **options)


def test_gemma_3_4b_takes_what_its_text_config_leaves_out_from_gemma3_defaults():
    """Gemma3TextConfig: 8 heads, 4 KV heads, head dim 256, pattern 6: 34 layers, full at 6, 12, 18, 24, 30 = 5,
    29 sliding (1024); 2 x 4 x 256 x 2 B = 4,096 B per layer, x 34 = 139,264 B per token."""
    m = model(GEMMA_3_4B_IT)
    assert (m.num_attention_heads, m.num_kv_heads, m.head_dim) == (8, 4, 256)
    assert (m.full_attention_layers, m.sliding_attention_layers, m.sliding_window) == (5, 29, 1024)
    assert m.kv_bytes_per_token == 139_264
    assert any("num_attention_heads 8" in n and "Gemma3TextConfig's defaults" in n for n in m.notes)


def test_gemma_3_27b_max_context_is_gemma3s_131072():
    """max_position_embeddings is left to Gemma3TextConfig (131,072, already scaled: rope scaling not applied)."""
    m = model(GEMMA_3_27B_IT)
    assert (m.max_context, m.kv_bytes_per_token) == (131_072, 62 * 2 * 16 * 128 * 2)


def test_gemma_3_27b_longest_context_is_capped_at_its_maximum():
    answer = capacity(model(GEMMA_3_27B_IT), 60 << 30, sequences=1)
    assert answer.longest_context_by_memory > 131_072 and answer.longest_context == 131_072


def test_context_beyond_the_maximum_holds_no_sequence():
    answer = capacity(model(GEMMA_3_27B_IT), 60 << 30, context=131_073)
    assert answer.sequences_at_context == 0 and answer.context_beyond_max


def test_float32_checkpoint_is_served_in_bf16_and_says_so():
    """google/gemma-2-9b is published as float32: 42 layers x 2 x 8 x 256 x 2 B = 344,064 B per token in bf16."""
    m = model(GEMMA_2_9B)
    assert (m.dtype, m.kv_bytes_per_token, m.weights_bytes) == (
        "bf16",
        344_064,
        model(GEMMA_2_9B, dtype="bf16").weights_bytes,
    )
    assert any("float32: served in bf16" in n for n in m.notes)


def test_dtype_flag_keeps_a_float32_checkpoint_in_float32():
    assert model(GEMMA_2_9B, dtype="fp32").kv_bytes_per_token == 688_128


def test_gpt_oss_20b_without_dtype_alternates_128_token_windows_and_full_layers():
    """24 layers from layer_types: 12 sliding (128), 12 full; 2 x 8 x 64 x 2 B = 2,048 B per layer, 49,152 per
    token; yarn: 4,096 x 32 = 131,072 tokens."""
    m = model(GPT_OSS_20B)
    assert (m.dtype, m.sliding_attention_layers, m.full_attention_layers, m.sliding_window) == ("bf16", 12, 12, 128)
    assert (m.kv_bytes_per_token, m.max_context) == (49_152, 131_072)


def test_gpt_oss_120b_has_36_layers_half_sliding():
    m = model(GPT_OSS_120B)
    assert (m.sliding_attention_layers, m.full_attention_layers, m.kv_bytes_per_token) == (18, 18, 73_728)


def test_llama_4_scout_attends_in_8192_token_chunks_except_every_fourth_layer():
    """no_rope_layers published empty: every 4th layer (no rope) attends fully: 12 full, 36 chunked;
    2 x 8 x 128 x 2 B = 4,096 B per layer, x 48 = 196,608 B per token; max context 10,485,760 (llama3 rope
    scaling is already in max_position_embeddings)."""
    m = model(LLAMA_4_SCOUT)
    assert (m.full_attention_layers, m.chunked_attention_layers, m.attention_chunk_size) == (12, 36, 8192)
    assert (m.kv_bytes_per_token, m.max_context) == (196_608, 10_485_760)


def test_llama_4_chunked_layers_hold_at_most_their_chunk():
    """At 32,768 tokens: 12 full layers x 2,048 blocks + 36 chunked x 512 blocks (8,192 / 16), x 16 x 4,096 B."""
    cost = sequence_cost(model(LLAMA_4_SCOUT), 32_768)
    assert (cost.full_blocks, cost.chunked_blocks) == (2048, 512)
    assert cost.kv_bytes == (12 * 2048 + 36 * 512) * 16 * 4096


def test_llama_4_layer_list_of_no_rope_flags_is_read():
    text = {**LLAMA_4_SCOUT["text_config"], "no_rope_layers": [1, 0] * 24}
    m = model({**LLAMA_4_SCOUT, "text_config": text})
    assert (m.full_attention_layers, m.chunked_attention_layers) == (24, 24)


def test_deepseek_v3_2_caches_the_bf16_latent_and_the_indexer_key_by_default():
    """vLLM caches DeepSeek sparse attention's latent in the model dtype unless an fp8 cache is asked for: (512 + 64)
    x 2 B = 1,152 + the indexer key 128 fp8 + 4 B scale = 132: 1,284 B per layer, x 61 = 78,324 B per token, the same
    on every rank."""
    m = model(DEEPSEEK_V3_2)
    assert (m.kv_dtype, m.kv_layer_bytes_per_token, m.kv_bytes_per_token) == ("bf16", 1_284, 78_324)
    assert m.at_tp(8).kv_bytes_per_token == 78_324


def test_deepseek_v3_2_with_an_fp8_cache_packs_the_latent():
    """fp8 (vLLM: fp8_ds_mla for this attention): 512 fp8 + 4 x 4 B scales + 64 x 2 B rope = 656 B + 132 = 788 B per
    layer, x 61 = 48,068 B per token."""
    for kv_cache_dtype in ("fp8", "fp8_ds_mla"):
        m = ModelMemory.from_config(DEEPSEEK_V3_2, kv_cache_dtype=kv_cache_dtype)
        assert (m.kv_dtype, m.kv_bytes_per_token) == ("fp8_ds_mla", 48_068)


def test_packed_fp8_latent_is_refused_without_sparse_attention_naming_the_family():
    with pytest.raises(UnknownArchitectureError, match="model_type 'deepseek_v3' has no DeepSeek sparse attention"):
        ModelMemory.from_config(DEEPSEEK_V3, kv_cache_dtype="fp8_ds_mla")


def test_deepseek_v3_without_kv_lora_rank_takes_the_config_class_default_and_says_so():
    m = model({k: v for k, v in DEEPSEEK_V3.items() if k != "kv_lora_rank"})
    assert (m.attention, m.kv_layer_bytes_per_token) == ("mla", 1152)
    assert any("kv_lora_rank 512" in n and "DeepseekV3Config's defaults" in n for n in m.notes)


def test_deepseek_v3_with_a_null_kv_lora_rank_is_refused_not_sized_as_multi_head():
    with pytest.raises(UnknownArchitectureError, match="is MLA .* sets kv_lora_rank to null") as info:
        model({**DEEPSEEK_V3, "kv_lora_rank": None})
    assert info.value.missing == ("kv_lora_rank",)


def test_mla_config_of_an_unknown_family_without_kv_lora_rank_is_refused():
    config = {k: v for k, v in DEEPSEEK_V3.items() if k != "kv_lora_rank"}
    with pytest.raises(UnknownArchitectureError, match="has no kv_lora_rank"):
        model({**config, "model_type": "deepseek_v9"})


def test_nemotron_h_56b_holds_mamba2_state_per_sequence():
    """Pattern: 10 attention (*), 54 Mamba2 (M), 54 MLP (-). KV 2 x 8 x 128 x 2 B = 4,096 B x 10 = 40,960 B per
    token. Mamba2 per layer: conv 3 x (256 x 64 + 2 x 8 x 256 = 20,480) x 2 B = 122,880; SSM 256 x 64 x 256 x 4 B
    (no mamba_ssm_cache_dtype in config.json: vLLM 0.28's NemotronHForCausalLMConfig default, float32) = 16,777,216;
    x 54 = 912,605,184 B per sequence."""
    m = model(NEMOTRON_H_56B)
    assert (m.full_attention_layers, m.recurrent_layers, m.num_layers) == (10, 54, 118)
    assert (m.kv_bytes_per_token, m.state_bytes_per_sequence) == (40_960, 912_605_184)
    assert any("vLLM's default for nemotron_h" in note for note in m.notes)


def test_nemotron_h_ssm_state_in_the_dtype_its_config_sets():
    """mamba_ssm_cache_dtype float16 in config.json wins over vLLM's float32: SSM 256 x 64 x 256 x 2 B = 8,388,608
    + conv 122,880 = 8,511,488 x 54 = 459,620,352 B per sequence."""
    m = model({**NEMOTRON_H_56B, "mamba_ssm_cache_dtype": "float16"})
    assert m.state_bytes_per_sequence == 459_620_352


def test_nemotron_3_nano_state_splits_over_ranks():
    """tp 2: KV 1 head per rank: 2 x 1 x 128 x 2 B x 6 = 3,072 B; Mamba2 conv 3 x (4,096 + 2,048) / 2 x 2 B =
    18,432 + SSM 32 x 64 x 128 x 4 B = 1,048,576; x 23 = 24,541,184 B per sequence."""
    m = model(NEMOTRON_3_NANO, tp=2)
    assert (m.kv_bytes_per_token, m.state_bytes_per_sequence) == (3_072, 24_541_184)
    assert model(NEMOTRON_3_NANO).state_bytes_per_sequence == 49_082_368


def test_mamba2_single_group_is_replicated_on_every_rank():
    """n_groups 1 at tp 2: vLLM adds tp - 1 groups: conv 3 x (4,096 + 2 x 2 x 128) / 2 x 2 B = 13,824 +
    SSM 1,048,576 = 1,062,400 x 23 = 24,435,200 B."""
    assert model({**NEMOTRON_3_NANO, "n_groups": 1}, tp=2).state_bytes_per_sequence == 24_435_200


def test_mamba2_groups_that_do_not_split_are_refused():
    with pytest.raises(ModelConfigError, match="n_groups 8 is neither 1 nor a multiple of 16"):
        model(NEMOTRON_H_56B, tp=16)


def test_nemotron_pattern_of_the_wrong_length_is_refused():
    with pytest.raises(ModelConfigError, match=r"hybrid_override_pattern must list one entry per layer \(52\)"):
        model({**NEMOTRON_3_NANO, "hybrid_override_pattern": "M*"})


def test_lfm2_5_vl_short_convolutions_hold_a_state_per_sequence():
    """text_config layer_types: 6 attention, 10 conv. KV 2 x 8 x 64 x 2 B = 2,048 x 6 = 12,288 B per token; conv
    state (L_cache 3 - 1) x 2,048 x 2 B = 8,192 x 10 = 81,920 B per sequence."""
    m = model(LFM2_5_VL_1_6B)
    assert (m.full_attention_layers, m.recurrent_layers) == (6, 10)
    assert (m.kv_bytes_per_token, m.state_bytes_per_sequence, m.max_context) == (12_288, 81_920, 128_000)


def test_tensor_parallel_and_weights_take_numpy_integers():
    m = ModelMemory.from_config(GPT_OSS_20B, tp=np.int64(2), weights_bytes=np.int64(10**9))
    assert (m.tp, m.weights_bytes, type(m.tp), type(m.weights_bytes)) == (2, 10**9, int, int)
    assert m.at_tp(np.int32(4)).tp == 4
    rebuilt = ModelMemory(**{**m.__dict__, "weights_bytes": np.int64(7), "tp": np.int64(1)})
    assert (type(rebuilt.weights_bytes), type(rebuilt.weights_bytes_per_rank)) == (int, int)


def test_max_position_embeddings_of_zero_is_refused_naming_the_key():
    with pytest.raises(ModelConfigError, match="config key max_position_embeddings=0 must be a whole number"):
        model({**GPT_OSS_20B, "max_position_embeddings": 0})


def test_recurrent_keys_without_a_layer_pattern_are_refused_not_sized_as_attention_only():
    """A hybrid whose Mamba2 layers no key places: devmem does not leave their state out (Falcon-H1 itself is refused
    by family: tests/planner/test_models_more_published.py)."""
    config = {
        "model_type": "some_hybrid",
        "num_hidden_layers": 44,
        "num_attention_heads": 8,
        "num_key_value_heads": 2,
        "head_dim": 64,
        "hidden_size": 1024,
        "mamba_d_state": 256,
        "mamba_n_heads": 24,
        "torch_dtype": "bfloat16",
    }
    with pytest.raises(UnknownArchitectureError, match="sets mamba_d_state, mamba_n_heads .recurrent layers."):
        model(config)


def test_bamba_attention_indices_place_attention_among_mamba2_layers():
    """A Bamba-9B-shaped config: attention at 9, 18, 27, Mamba2 elsewhere (29 layers); inner 2 x 4,096; conv 3 x
    (8,192 + 2 x 1 x 128) x 2 B = 50,688 + SSM 128 x 64 x 128 x 2 B = 2,097,152; x 29 = 62,287,360 B; KV 3 x 2 x
    8 x 128 x 2 B = 12,288 B per token."""
    config = {
        "model_type": "bamba",
        "num_hidden_layers": 32,
        "attn_layer_indices": [9, 18, 27],
        "hidden_size": 4096,
        "num_attention_heads": 32,
        "num_key_value_heads": 8,
        "mamba_n_heads": 128,
        "mamba_d_head": 64,
        "mamba_n_groups": 1,
        "mamba_d_state": 128,
        "mamba_d_conv": 4,
        "mamba_expand": 2,
        "torch_dtype": "bfloat16",
    }
    m = model(config)
    assert (m.full_attention_layers, m.recurrent_layers) == (3, 29)
    assert (m.kv_bytes_per_token, m.state_bytes_per_sequence) == (12_288, 62_287_360)
    assert model({**config, "mamba_d_head": "auto"}).state_bytes_per_sequence == 62_287_360


BAMBA = {
    "model_type": "bamba",
    "num_hidden_layers": 32,
    "attn_layer_indices": [9, 18, 27],
    "hidden_size": 4096,
    "num_attention_heads": 32,
    "num_key_value_heads": 8,
    "mamba_n_heads": 128,
    "mamba_d_head": 64,
    "mamba_n_groups": 1,
    "mamba_d_state": 128,
    "mamba_d_conv": 4,
    "mamba_expand": 2,
    "torch_dtype": "bfloat16",
}


@pytest.mark.parametrize("key", ["attn_layer_indices", "full_attn_idxs"])
@pytest.mark.parametrize(
    "indices", [[0] * 300_000, [1, 1], [True], list(range(33))], ids=["long", "twice", "bool", "33"]
)
def test_layer_indices_that_are_not_distinct_layers_are_refused_at_once_naming_the_key(key, indices):
    """A list tested once per layer made a config of 300,000 indices (600 KB) run for a minute on 10,000 layers."""
    config = {**BAMBA, "num_hidden_layers": 10_000 if len(indices) > 33 else 32}
    if key == "full_attn_idxs":
        config = {**config, "model_type": "lfm2"}
        del config["attn_layer_indices"]
    config[key] = indices
    started = time.monotonic()
    with pytest.raises(UnknownArchitectureError, match=f"{key} must list distinct layer indices below") as info:
        model(config)
    assert info.value.missing == (key,) and time.monotonic() - started < 5
