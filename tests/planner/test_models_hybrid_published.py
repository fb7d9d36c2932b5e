"""Linear-attention hybrids against their published configs (tests/model_configs_third.py): MiniMax's
lightning attention, Kimi-Linear's KDA beside MLA, Qwen3.5's gated delta net. Every figure is worked out in the
docstring from vLLM's model code (MambaStateShapeCalculator, MambaStateDtypeCalculator and each model's layers)."""

from __future__ import annotations

import pytest
from model_configs_third import KIMI_LINEAR_48B_A3B, MINIMAX_M2, MINIMAX_TEXT_01, QWEN3_5_35B_A3B

from devmem.planner.models import ModelMemory, UnknownArchitectureError


def model(config: dict, **options) -> ModelMemory:
    return ModelMemory.from_config(config, **options)


def test_minimax_m2_attn_type_list_of_ones_is_softmax_attention_in_every_layer():
    """attn_type_list is 1 on all 62 layers (vLLM's MiniMax layers: 1 softmax attention): 2 x 8 x 128 x 2 B = 4,096 B
    per layer, x 62 = 253,952 B per token, no state."""
    m = model(MINIMAX_M2)
    assert (m.full_attention_layers, m.recurrent_layers, m.kv_bytes_per_token) == (62, 0, 253_952)
    assert m.state_bytes_per_sequence == 0


def test_minimax_m2_weights_are_its_230b_parameters():
    """Embeddings 200,064 x 3,072 x 2 (untied); per layer 256 experts x 3 x 3,072 x 1,536, q/o 2 x 3,072 x 6,144, k/v
    2 x 3,072 x 1,024, the router and two norms: 228,689,304,576 parameters (the card: 230 B, with its MTP modules),
    457 GB in bf16."""
    assert model({**MINIMAX_M2, "quantization_config": None}).weights_bytes == 228_689_304_576 * 2


def test_minimax_text_01_lightning_layers_hold_a_state_per_sequence():
    """10 softmax layers (every 8th) x 2 x 8 x 128 x 2 B = 40,960 B per token; 70 lightning layers each hold vLLM's
    linear_attention_state_shape (64 heads, 128, 128) in the served bf16: 70 x 2,097,152 = 146,800,640 B."""
    m = model(MINIMAX_TEXT_01)
    assert (m.full_attention_layers, m.kv_bytes_per_token) == (10, 40_960)
    assert ({s.kind: s.layers for s in m.states}, m.state_bytes_per_sequence) == (
        {"lightning_attention": 70},
        146_800_640,
    )


def test_minimax_text_01_lightning_state_splits_its_heads_over_ranks():
    """tp 8: 64 / 8 = 8 heads per rank, 70 x 8 x 128 x 128 x 2 B = 18,350,080 B; KV 8 / 8 = 1 head: 10 x 512 B."""
    m = model(MINIMAX_TEXT_01, tp=8)
    assert (m.state_bytes_per_sequence, m.kv_bytes_per_token) == (18_350_080, 5_120)


def test_minimax_text_01_weights_are_its_456b_parameters():
    """Lightning layers: qkv 3 x 6,144 x 8,192, the output gate and out_proj 6,144 x 8,192 each, a norm of 8,192; 32
    experts of 3 x 6,144 x 9,216 in every layer: 456,089,655,296 parameters (the card: 456 B)."""
    assert model(MINIMAX_TEXT_01).weights_bytes == 456_089_655_296 * 2


def test_minimax_config_class_layer_types_read_linear_attention_as_lightning():
    """transformers' MiniMaxConfig (model_type minimax) writes the same layers as layer_types."""
    listed = {k: v for k, v in MINIMAX_TEXT_01.items() if k != "attn_type_list"}
    listed |= {
        "model_type": "minimax",
        "layer_types": ["full_attention" if t else "linear_attention" for t in MINIMAX_TEXT_01["attn_type_list"]],
    }
    assert model(listed).state_bytes_per_sequence == model(MINIMAX_TEXT_01).state_bytes_per_sequence


def test_attn_type_list_with_an_unknown_entry_is_refused_naming_family_and_key():
    with pytest.raises(UnknownArchitectureError, match="'minimax_text_01'.*attn_type_list holds 2") as caught:
        model({**MINIMAX_TEXT_01, "attn_type_list": [2] * 80})
    assert caught.value.missing == ("attn_type_list",)


def test_kimi_linear_caches_the_mla_latent_on_full_layers_and_a_kda_state_per_sequence():
    """full_attn_layers (1-based) 4, 8, ..., 24, 27: 7 MLA layers of (512 + 64) x 2 B = 1,152 B, 8,064 B per token;
    20 KDA layers of conv 3 x 32 x 128 x 3 x 2 B = 73,728 B + recurrent 32 x 128 x 128 x float32 = 2,097,152 B:
    43,417,600 B per sequence; model_max_length 1,048,576 (a key vLLM reads for the longest sequence)."""
    m = model(KIMI_LINEAR_48B_A3B)
    assert (m.attention, m.full_attention_layers, m.kv_bytes_per_token) == ("mla", 7, 8_064)
    assert ({s.kind: s.layers for s in m.states}, m.state_bytes_per_sequence) == (
        {"kimi_delta_attention": 20},
        43_417_600,
    )
    assert m.max_context == 1_048_576


def test_kimi_linear_recurrent_state_stays_float32_whatever_the_state_dtype():
    """vLLM's kda_state_dtype: the convolutions in the state dtype asked for, the recurrent state float32: with fp8
    state 20 x (36,864 x 1 + 524,288 x 4) = 42,680,320 B."""
    assert model(KIMI_LINEAR_48B_A3B, state_dtype="fp8").state_bytes_per_sequence == 42_680_320


def test_kimi_linear_kda_state_splits_over_ranks():
    assert model(KIMI_LINEAR_48B_A3B, tp=4).state_bytes_per_sequence == 43_417_600 // 4


def test_kimi_linear_weights_count_kda_mla_and_experts():
    """Embeddings 163,840 x 2,304 x 2; layer 0 a dense MLP of 9,216, the 26 others 256 + 1 shared experts of 3 x
    2,304 x 1,024 with a sigmoid router and its bias; 20 KDA mixers (q, k, v, o of 2,304 x 4,096, low-rank gates
    through 128, three convolutions of 4), 7 MLA layers without q_lora: 49,122,681,728 parameters (the card: 48 B)."""
    assert model(KIMI_LINEAR_48B_A3B).weights_bytes == 49_122_681_728 * 2


@pytest.mark.parametrize(
    ("part", "value", "key"),
    [
        ("full_attn_layers", [4, 8, 12, 16, 20, 24], "linear_attn_config.kda_layers"),
        ("full_attn_layers", [4, 8, 12, 16, 20, 24, 28], "linear_attn_config.full_attn_layers"),
        ("kda_layers", [0, 1, 2], "linear_attn_config.kda_layers"),
        ("num_heads", "32", "linear_attn_config.num_heads"),
    ],
    ids=["layer-left-out", "past-the-last", "zero-based", "heads-a-string"],
)
def test_kimi_linear_broken_linear_attn_config_is_refused_naming_family_and_key(part, value, key):
    config = {**KIMI_LINEAR_48B_A3B, "linear_attn_config": {**KIMI_LINEAR_48B_A3B["linear_attn_config"], part: value}}
    with pytest.raises(UnknownArchitectureError, match="'kimi_linear'") as caught:
        model(config)
    assert caught.value.missing == (key,)


def test_linear_attn_config_outside_kimi_linear_is_still_refused():
    config = {**QWEN3_5_35B_A3B["text_config"], "model_type": "qwen3", "linear_attn_config": {"num_heads": 4}}
    with pytest.raises(UnknownArchitectureError) as caught:
        model(config)
    assert caught.value.missing == ("linear_attn_config",)


def test_qwen3_5_35b_a3b_caches_10_full_layers_and_a_float32_delta_net_state():
    """10 full layers x 2 x 2 x 256 x 2 B = 20,480 B per token; 30 gated-delta-net layers of conv (2 x 16 x 128 + 32 x
    128) x 3 x 2 B = 49,152 B + state 32 x 128 x 128 in mamba_ssm_dtype float32 (vLLM's Qwen3.5 config hook) =
    2,097,152 B: 64,389,120 B per sequence."""
    m = model(QWEN3_5_35B_A3B)
    assert (m.full_attention_layers, m.kv_bytes_per_token, m.state_bytes_per_sequence) == (10, 20_480, 64_389_120)


def test_qwen3_5_weights_count_its_gated_query():
    """As Qwen3-Next: each full layer's q_proj is twice the query width (attn_output_gate), q/k norms of 256: 256
    experts of 3 x 2,048 x 512 and a shared one per layer: 34,660,610,688 parameters, the text model of the card's
    35 B."""
    assert model(QWEN3_5_35B_A3B).weights_bytes == 34_660_610_688 * 2
