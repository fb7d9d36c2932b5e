"""More published configs (tests/model_configs_more.py): KV bytes per token, layers, maximum context and weights,
each worked out by hand in the docstring. Shapes were checked against transformers' config classes (head_dim,
num_key_value_heads, layer_types) and the weights against the parameter count of the transformers model built from
the same config on the meta device (``sum(p.numel() for p in model.parameters())``), written here as numbers.
"""

from __future__ import annotations

import pytest
from model_configs_more import (
    BLOOM_560M,
    CHATGLM3_6B,
    CHATGLM4_9B,
    CODEGEN_350M_MONO,
    COHERE2_7B,
    DBRX,
    DEEPSEEK_V2_LITE,
    EXAONE_3_5_7_8B,
    FALCON_7B,
    FALCON_40B,
    FALCON_H1_0_5B,
    GEMMA_3_1B,
    GEMMA_7B,
    GLM_4_5_AIR,
    GPT2,
    GPT2_XL,
    GPT_NEO_1_3B,
    GPTJ_6B,
    GRANITE_4_H_SHAPED,
    MINICPM3_4B,
    MISTRAL_SMALL_24B,
    MPT_7B,
    OLMOE_1B_7B,
    OPT_6_7B,
    OPT_350M,
    PHI3_MINI_4K,
    PHI4,
    PHI_2,
    PYTHIA_1B,
    QWEN2_5_7B_AWQ,
    QWEN2_5_VL_7B,
    STABLELM_2_1_6B,
    STARCODER,
    STARCODER2_15B,
    T5_BASE,
    WHISPER_LARGE_V3,
    ZAMBA2_2_7B_SHAPED,
)

from devmem.planner.models import ModelConfigError, ModelMemory, UnknownArchitectureError


def model(config: dict, **options) -> ModelMemory:
    return ModelMemory.from_config(config, **options)


def test_minicpm3_caches_expanded_heads_as_vllm_does_not_the_latent():
    """vLLM's MiniCPM3Attention caches K and V of all 40 heads at qk_nope 64 + qk_rope 32 = 96 (V zero-padded):
    62 layers x 2 x 40 x 96 x 2 B = 952,320 B per token (the MLA latent, (256 + 32) x 2 x 62, would be 35,712)."""
    m = model(MINICPM3_4B)
    assert (m.attention, m.num_kv_heads, m.head_dim, m.kv_bytes_per_token) == ("mha", 40, 96, 952_320)
    assert any("cached expanded" in n for n in m.notes)


def test_minicpm3_splits_its_heads_over_ranks():
    """40 heads over 4 ranks: 10 each, 62 x 2 x 10 x 96 x 2 B = 238,080 B per token per rank."""
    assert model(MINICPM3_4B, tp=4).kv_bytes_per_token == 238_080


def test_minicpm3_weights_count_its_mla_projections_and_tied_embeddings():
    """MiniCPM3Config ties the embeddings by default: 4,073,875,968 parameters x 2 B."""
    assert model(MINICPM3_4B).weights_bytes == 4_073_875_968 * 2


def test_cohere2_slides_three_layers_of_four():
    """sliding_window_pattern 4: layers 3, 7, ..., 31 full (8), 24 sliding at 4,096;
    2 x 8 x 128 x 2 B = 4,096 B per layer, x 32 = 131,072 B per token."""
    m = model(COHERE2_7B)
    assert (m.full_attention_layers, m.sliding_attention_layers, m.sliding_window) == (8, 24, 4096)
    assert m.kv_bytes_per_token == 131_072


def test_cohere2_weights_tie_the_embeddings_and_count_one_norm_per_layer():
    """Cohere2Config ties by default (no tie_word_embeddings in the file) and each layer has one LayerNorm:
    8,028,033,024 parameters x 2 B (untied it read 18,153,480,192 B)."""
    assert model(COHERE2_7B).weights_bytes == 8_028_033_024 * 2


def test_phi3_mini_slides_every_layer_at_2047():
    """32 layers, all sliding (2047); 2 x 32 x 3072/32 = 96 x 2 B = 12,288 B per layer, x 32 = 393,216 B."""
    m = model(PHI3_MINI_4K)
    assert (m.sliding_attention_layers, m.sliding_window, m.kv_bytes_per_token) == (32, 2047, 393_216)
    assert (m.max_context, m.weights_bytes) == (4096, 3_821_079_552 * 2)


def test_phi4_with_null_sliding_window_attends_fully():
    """sliding_window null: 40 full layers x 2 x 10 x 128 x 2 B = 204,800 B per token; max context 16,384."""
    m = model(PHI4)
    assert (m.full_attention_layers, m.sliding_attention_layers, m.kv_bytes_per_token) == (40, 0, 204_800)
    assert (m.max_context, m.weights_bytes) == (16_384, 14_659_507_200 * 2)


def test_deepseek_v2_lite_without_q_lora_caches_the_latent():
    """q_lora_rank null (queries projected directly): 27 layers x (512 + 64) x 2 B = 31,104 B per token;
    yarn: 4,096 x 40 = 163,840 tokens."""
    m = model(DEEPSEEK_V2_LITE)
    assert (m.attention, m.kv_bytes_per_token, m.max_context) == ("mla", 31_104, 163_840)


def test_qwen2_5_vl_reads_its_top_level_text_keys():
    """28 full layers (use_sliding_window false) x 2 x 4 x 128 x 2 B = 57,344 B per token; mrope is not a length
    scaling: max context 128,000."""
    m = model(QWEN2_5_VL_7B)
    assert (m.full_attention_layers, m.kv_bytes_per_token, m.max_context) == (28, 57_344, 128_000)


def test_mistral_small_3_head_dim_is_the_configs_not_hidden_over_heads():
    """head_dim 128 (5,120 / 32 would be 160): 40 x 2 x 8 x 128 x 2 B = 163,840 B per token, no window."""
    m = model(MISTRAL_SMALL_24B)
    assert (m.head_dim, m.sliding_window, m.kv_bytes_per_token) == (128, None, 163_840)
    assert m.weights_bytes == 23_572_403_200 * 2


def test_gemma_7b_has_16_kv_heads_of_256():
    """28 layers x 2 x 16 x 256 x 2 B = 458,752 B per token; 8,537,680,896 parameters (tied)."""
    m = model(GEMMA_7B)
    assert (m.kv_bytes_per_token, m.weights_bytes) == (458_752, 8_537_680_896 * 2)


def test_gemma_3_1b_has_four_full_layers_and_four_norms_per_layer():
    """pattern 6 over 26 layers: full at 5, 11, 17, 23; 22 slide at 512; 26 x 2 x 1 x 256 x 2 B = 26,624 B per
    token; 999,885,952 parameters (each layer norms four times: before and after attention and the MLP)."""
    m = model(GEMMA_3_1B)
    assert (m.full_attention_layers, m.sliding_attention_layers, m.sliding_window) == (4, 22, 512)
    assert (m.kv_bytes_per_token, m.max_context, m.weights_bytes) == (26_624, 32_768, 999_885_952 * 2)


def test_olmoe_weights_count_its_64_experts():
    """16 layers x 2 x 16 x 128 x 2 B = 131,072 B per token; 6,919,161,856 parameters: 64 experts of 1,024 per
    layer (it read 575,211,520, the experts left out)."""
    m = model(OLMOE_1B_7B)
    assert (m.kv_bytes_per_token, m.weights_bytes) == (131_072, 6_919_161_856 * 2)


def test_pythia_without_kv_heads_is_multi_head_in_fp16():
    """No num_key_value_heads: 8 K/V heads of 2,048 / 8 = 256; 16 x 2 x 8 x 256 x 2 B (float16) = 131,072 B."""
    m = model(PYTHIA_1B)
    assert (m.attention, m.dtype, m.kv_bytes_per_token, m.max_context) == ("mha", "fp16", 131_072, 2048)


def test_pythia_weights_count_an_ungated_mlp_with_biases():
    """GPT-NeoX: up and down matrices (no gate), biased projections, LayerNorms with biases: 1,011,781,632
    parameters x 2 B (float16; counted as a gated MLP it read 1,279,854,592)."""
    assert model(PYTHIA_1B).weights_bytes == 1_011_781_632 * 2


def test_phi_2_weights_count_one_layernorm_per_layer_and_the_heads_bias():
    """32 x 2 x 32 x 80 x 2 B = 327,680 B per token; 2,779,683,840 parameters x 2 B (was 3,617,753,600)."""
    m = model(PHI_2)
    assert (m.kv_bytes_per_token, m.weights_bytes) == (327_680, 2_779_683_840 * 2)


def test_starcoder2_15b_slides_every_layer_and_counts_an_ungated_mlp():
    """float32 checkpoint served in bf16: 40 sliding layers (4,096) x 2 x 4 x 128 x 2 B = 81,920 B per token;
    15,655,899,136 parameters x 2 B (tied by default; was 21,693,437,952)."""
    m = model(STARCODER2_15B)
    assert (m.dtype, m.sliding_attention_layers, m.sliding_window, m.kv_bytes_per_token) == ("bf16", 40, 4096, 81_920)
    assert m.weights_bytes == 15_655_899_136 * 2


def test_stablelm_2_partial_rotary_changes_no_cache_size():
    """24 x 2 x 32 x 64 x 2 B (float16) = 196,608 B per token."""
    assert model(STABLELM_2_1_6B).kv_bytes_per_token == 196_608


def test_glm_4_5_air_caches_46_layers_of_8_kv_heads():
    """46 x 2 x 8 x 128 x 2 B = 188,416 B per token (partial rotary changes nothing); max context 131,072."""
    m = model(GLM_4_5_AIR)
    assert (m.kv_bytes_per_token, m.max_context) == (188_416, 131_072)


def test_awq_checkpoint_serves_fp16_kv_and_counts_4_bit_matrices():
    """torch_dtype float16: 28 x 2 x 4 x 128 x 2 B = 57,344 B per token; the weight matrices at 4 bits and a 16-bit
    scale and 4-bit zero point per group of 128: 4.15625 bits."""
    m = model(QWEN2_5_7B_AWQ)
    assert (m.dtype, m.kv_bytes_per_token) == ("fp16", 57_344)
    assert any("at 4.15625 bits per weight (awq" in n for n in m.notes)


def test_granite_hybrid_counts_its_shared_mlp():
    """GraniteMoeHybrid layers have a shared MLP beside the experts: 35,478,895,104 parameters, 4,026,531,840
    (40 x 3 x 4,096 x 8,192) of them in the shared MLPs."""
    assert model(GRANITE_4_H_SHAPED).weights_bytes == 35_478_895_104 * 2


def test_exaone_3_5_layers_are_read_from_num_layers():
    """ExaoneConfig maps num_layers to num_hidden_layers: 32 x 2 x 8 x 128 x 2 B = 131,072 B per token (it was
    refused as lacking num_hidden_layers); llama3 scaling is already in the 32,768; 7,818,448,896 parameters."""
    m = model(EXAONE_3_5_7_8B)
    assert (m.num_layers, m.kv_bytes_per_token, m.max_context) == (32, 131_072, 32_768)
    assert m.weights_bytes == 7_818_448_896 * 2


def test_falcon_7b_is_multi_query_as_vllm_reads_it():
    """multi_query: one K/V head of 4,544 / 71 = 64; 32 x 2 x 1 x 64 x 2 B = 8,192 B per token (it was refused);
    FalconConfig's 2,048 positions; 6,921,720,704 parameters (tied, one LayerNorm per parallel layer)."""
    m = model(FALCON_7B)
    assert (m.num_kv_heads, m.head_dim, m.kv_bytes_per_token, m.max_context) == (1, 64, 8192, 2048)
    assert m.weights_bytes == 6_921_720_704 * 2


def test_falcon_40b_new_decoder_architecture_reads_num_kv_heads():
    """new_decoder_architecture: 8 K/V heads of 8,192 / 128 = 64; 60 x 2 x 8 x 64 x 2 B = 122,880 B per token;
    41,303,293,952 parameters (two LayerNorms per layer)."""
    m = model(FALCON_40B)
    assert (m.num_kv_heads, m.kv_bytes_per_token, m.weights_bytes) == (8, 122_880, 41_303_293_952 * 2)
    assert not any("multi_query" in n for n in m.notes)


def test_gpt_j_reads_its_gpt2_style_keys():
    """GPTJConfig's attribute_map: n_layer 28, n_head 16, n_embd 4,096 (head dim 256), n_positions 2,048;
    28 x 2 x 16 x 256 x 2 B = 458,752 B per token (it was refused); 6,050,882,784 parameters (n_inner null: 4 x
    4,096; one LayerNorm per layer, unbiased attention, biased MLP and output head)."""
    m = model(GPTJ_6B)
    assert (m.num_layers, m.head_dim, m.kv_bytes_per_token, m.max_context) == (28, 256, 458_752, 2048)
    assert m.weights_bytes == 6_050_882_784 * 2


def test_bloom_reads_n_layer_and_n_head():
    """n_layer 24, n_head 16 (1,024 / 16 = 64): 24 x 2 x 16 x 64 x 2 B = 98,304 B per token (it was refused);
    ALiBi, no length key: no maximum context; 559,214,592 parameters (tied, a LayerNorm on the embeddings)."""
    m = model(BLOOM_560M)
    assert (m.num_layers, m.kv_bytes_per_token, m.max_context) == (24, 98_304, None)
    assert m.weights_bytes == 559_214_592 * 2


def test_dbrx_reads_its_nested_attention_and_expert_configs():
    """DbrxConfig: n_layers 40, n_heads 48, d_model 6,144 (head dim 128), attn_config.kv_n_heads 8, max_seq_len
    32,768: 40 x 2 x 8 x 128 x 2 B = 163,840 B per token (it was refused); 16 gated experts of ffn_hidden_size
    10,752: 131,596,523,520 parameters."""
    m = model(DBRX)
    assert (m.num_layers, m.num_kv_heads, m.kv_bytes_per_token, m.max_context) == (40, 8, 163_840, 32_768)
    assert m.weights_bytes == 131_596_523_520 * 2


def test_dbrx_without_kv_n_heads_is_refused_naming_it():
    """DbrxAttentionConfig defaults kv_n_heads to 1 where vLLM falls back to the 48 attention heads: not guessed."""
    with pytest.raises(UnknownArchitectureError) as caught:
        model({**DBRX, "attn_config": {"clip_qkv": 8, "rope_theta": 500000}})
    assert caught.value.missing == ("attn_config.kv_n_heads",)


def test_hunyuan_cross_layer_attention_is_refused():
    """use_cla: adjacent layers share one KV cache (Hunyuan-Large, cla_share_factor 2); sized per layer it read
    twice the cache."""
    config = {**EXAONE_3_5_7_8B, "model_type": "hunyuan_v1_dense", "use_cla": True, "cla_share_factor": 2}
    with pytest.raises(UnknownArchitectureError) as caught:
        model(config)
    assert caught.value.missing == ("use_cla",)


@pytest.mark.parametrize("config", [WHISPER_LARGE_V3, T5_BASE], ids=["whisper", "t5"])
def test_encoder_decoder_is_refused_as_such(config):
    with pytest.raises(UnknownArchitectureError, match="encoder-decoder") as caught:
        model(config)
    assert caught.value.missing == ("is_encoder_decoder",)


def test_falcon_h1_caches_attention_and_mamba2_in_every_layer():
    """36 layers, each an attention (2 K/V heads of head_dim 64) and a Mamba2 mixer side by side:
    36 x 2 x 2 x 64 x 2 B = 18,432 B per token; per sequence 36 x ((4 - 1) x (1,536 + 2 x 1 x 128) + 24 x 64 x 128)
    x 2 B = 14,542,848 B (mamba_d_ssm 1,536 is the inner size, not mamba_expand x hidden_size)."""
    m = model(FALCON_H1_0_5B)
    assert (m.full_attention_layers, m.recurrent_layers, m.kv_bytes_per_token) == (36, 36, 36 * 2 * 2 * 64 * 2)
    assert m.state_bytes_per_sequence == 36 * (3 * (1536 + 2 * 128) + 24 * 64 * 128) * 2 == 14_542_848
    assert m.max_context == 16_384


def test_falcon_h1_weights_count_attention_mixer_and_mlp_per_layer():
    """Per layer: q 1,024 x 512, k and v 1,024 x 128, o 512 x 1,024; in_proj 1,024 x (1,536 + 1,792 + 24), out_proj
    1,536 x 1,024, the convolution 1,792 x 4 with its bias, dt_bias, A_log and D of 24; a gated MLP of 2,048; two
    norms. Untied embeddings of 32,784: 521,411,104 parameters."""
    h = 1024
    attention = h * 512 + 2 * h * 128 + 512 * h
    mixer = h * (1536 + 1792 + 24) + 1536 * h + 1792 * 4 + 1792 + 3 * 24
    layer = attention + mixer + 3 * h * 2048 + 2 * h
    assert model(FALCON_H1_0_5B).weights_bytes == (2 * 32_784 * h + 36 * layer + h) * 2 == 521_411_104 * 2


def test_falcon_h1_splits_its_mamba_heads_over_ranks():
    """24 Mamba2 heads and 8 attention heads split over 2 ranks; 3 ranks split neither and are refused."""
    assert model(FALCON_H1_0_5B, tp=2).kv_bytes_per_token == 36 * 2 * 1 * 64 * 2
    with pytest.raises(ModelConfigError, match="tp=3"):
        model(FALCON_H1_0_5B, tp=3)


def test_zamba2_caches_each_hybrid_layers_shared_attention_and_every_mamba2_state():
    """9 hybrid layers of 54 each cache 32 heads of 2 x 2,560 / 32 = 160: 9 x 2 x 32 x 160 x 2 B = 184,320 B per
    token; all 54 layers hold a Mamba2 state: 54 x ((4 - 1) x (5,120 + 2 x 64) + 80 x 64 x 64) x 2 B per sequence."""
    m = model(ZAMBA2_2_7B_SHAPED)
    assert (m.full_attention_layers, m.recurrent_layers, m.head_dim) == (9, 54, 160)
    assert m.kv_bytes_per_token == 9 * 2 * 32 * 160 * 2 == 184_320
    assert m.state_bytes_per_sequence == 54 * (3 * (5120 + 128) + 80 * 64 * 64) * 2 == 37_089_792


def test_zamba2_weights_count_the_shared_blocks_once_and_an_adapter_per_hybrid_layer():
    """Every layer: a Mamba2 mixer (in_proj 2,560 x (5,120 + 5,248 + 80), out_proj, convolution 5,248 x 4 with its
    bias, dt_bias/A_log/D, a gated norm of 5,120) and its norm; each hybrid layer a 2,560 x 2,560 projection and an
    MLP adapter of rank 128; two shared blocks (q, k, v of 5,120 x 5,120, o 5,120 x 2,560, a gated MLP of 10,240,
    norms of 5,120 and 2,560); tied embeddings: 2,662,214,560 parameters."""
    h, inner, channels, heads, ffn = 2560, 5120, 5248, 80, 10_240
    mixer = h * (inner + channels + heads) + inner * h + channels * 5 + 3 * heads + inner + h
    block = 3 * 2 * h * 2 * h + 2 * h * h + h * 2 * ffn + ffn * h + 3 * h
    hybrid = h * h + 128 * (h + 2 * ffn)
    expected = 32_000 * h + h + 54 * mixer + 9 * hybrid + 2 * block
    assert model(ZAMBA2_2_7B_SHAPED).weights_bytes == expected * 2 == 2_662_214_560 * 2


def gpt2_layer(h: int, inner: int, kv_width: int) -> int:
    """One GPT-2-style layer: two LayerNorms (weight, bias), fused q/k/v of ``h + 2 x kv_width`` and the output
    projection with biases, the MLP's two matrices with biases."""
    return 4 * h + (h * (h + 2 * kv_width) + h + 2 * kv_width) + (h * h + h) + (2 * h * inner + inner + h)


def test_gpt2_reads_n_layer_n_head_n_embd():
    """12 layers x 2 x 12 heads x 64 x 2 B (no dtype: bf16) = 36,864 B per token; n_positions 1,024; tied head,
    1,024 learned positions: 124,439,808 parameters."""
    m = model(GPT2)
    assert (m.num_layers, m.num_kv_heads, m.head_dim, m.kv_bytes_per_token, m.max_context) == (12, 12, 64, 36_864, 1024)
    h = 768
    assert m.weights_bytes == (50_257 * h + 1024 * h + 12 * gpt2_layer(h, 4 * h, h) + 2 * h) * 2 == 124_439_808 * 2


def test_gpt2_xl_plans_exactly():
    """48 x 2 x 25 x 64 x 2 B = 307,200 B per token; 1,557,611,200 parameters."""
    m = model(GPT2_XL)
    h = 1600
    assert (m.kv_bytes_per_token, m.max_context) == (48 * 2 * 25 * 64 * 2, 1024) == (307_200, 1024)
    assert m.weights_bytes == (50_257 * h + 1024 * h + 48 * gpt2_layer(h, 4 * h, h) + 2 * h) * 2


def test_starcoder_multi_query_caches_one_kv_head():
    """multi_query: one K/V head of 6,144 / 48 = 128; 40 x 2 x 1 x 128 x 2 B (float32 served in bf16) = 20,480 B
    per token; 8,192 positions; 15,517,456,384 parameters (q of 6,144 + one K and one V of 128 fused)."""
    m = model(STARCODER)
    assert (m.attention, m.num_kv_heads, m.kv_bytes_per_token, m.max_context) == ("mqa", 1, 20_480, 8192)
    h = 6144
    assert m.weights_bytes == (49_152 * h + 8192 * h + 40 * gpt2_layer(h, 24_576, 128) + 2 * h) * 2
    assert m.weights_bytes == 15_517_456_384 * 2


def test_starcoder_without_multi_query_caches_every_head():
    assert model({**STARCODER, "multi_query": False}).kv_bytes_per_token == 40 * 2 * 48 * 128 * 2


def test_gpt_neo_counts_its_local_layers_in_full():
    """24 layers (12 global, 12 local within 256) x 2 x 16 x 128 x 2 B = 196,608 B per token: transformers' cache
    keeps every token in the local layers; unbiased q/k/v, biased output: 1,315,575,808 parameters."""
    m = model(GPT_NEO_1_3B)
    assert (m.full_attention_layers, m.sliding_attention_layers, m.kv_bytes_per_token) == (24, 0, 196_608)
    assert "12 local layers" in m.layer_source
    h = 2048
    layer = 4 * h + 3 * h * h + h * h + h + 2 * h * 4 * h + 4 * h + h
    assert m.weights_bytes == (50_257 * h + 2048 * h + 24 * layer + 2 * h) * 2 == 1_315_575_808 * 2


def test_codegen_reads_gpt2_keys_and_an_untied_biased_head():
    """20 x 2 x 16 x 64 x 2 B (float16) = 81,920 B per token; one LayerNorm per layer, fused unbiased qkv_proj,
    biased MLP, untied head with a bias: 356,712,448 parameters."""
    m = model(CODEGEN_350M_MONO)
    assert (m.dtype, m.kv_bytes_per_token, m.max_context) == ("fp16", 81_920, 2048)
    h, v = 1024, 51_200
    layer = 2 * h + 4 * h * h + 2 * h * 4 * h + 4 * h + h
    assert m.weights_bytes == (v * h + 20 * layer + 2 * h + v * h + v) * 2 == 356_712_448 * 2


def test_opt_350m_projects_its_embeddings_and_has_no_final_norm():
    """24 x 2 x 16 x 64 x 2 B = 98,304 B per token; embeddings of 512 projected in and out, 2,048 + 2 learned
    positions, do_layer_norm_before false (no final LayerNorm): 331,196,416 parameters."""
    m = model(OPT_350M)
    assert (m.kv_bytes_per_token, m.max_context) == (98_304, 2048)
    h, ffn = 1024, 4096
    layer = 4 * (h * h + h) + 4 * h + (h * ffn + ffn) + (ffn * h + h)
    assert m.weights_bytes == (50_272 * 512 + 2050 * h + 2 * 512 * h + 24 * layer) * 2 == 331_196_416 * 2


def test_opt_6_7b_plans_exactly():
    """32 x 2 x 32 x 128 x 2 B = 524,288 B per token; 6,658,473,984 parameters (with the final LayerNorm)."""
    m = model(OPT_6_7B)
    h, ffn = 4096, 16_384
    layer = 4 * (h * h + h) + 4 * h + (h * ffn + ffn) + (ffn * h + h)
    assert m.kv_bytes_per_token == 524_288
    assert m.weights_bytes == (50_272 * h + 2050 * h + 32 * layer + 2 * h) * 2 == 6_658_473_984 * 2


def test_mpt_7b_reads_its_keys_and_counts_no_biases():
    """n_layers 32, n_heads 32, d_model 4,096: 32 x 2 x 32 x 128 x 2 B = 524,288 B per token; max_seq_len 2,048;
    no_bias: LayerNorms of a weight only, no position embeddings (ALiBi): 6,649,286,656 parameters."""
    m = model(MPT_7B)
    assert (m.num_layers, m.num_kv_heads, m.kv_bytes_per_token, m.max_context) == (32, 32, 524_288, 2048)
    h = 4096
    assert m.weights_bytes == (50_432 * h + 32 * (2 * h + 4 * h * h + 8 * h * h) + h) * 2 == 6_649_286_656 * 2


def test_mpt_grouped_query_reads_attn_config_kv_n_heads():
    """attn_config.kv_n_heads 8 (vLLM's MPTAttention): 32 x 2 x 8 x 128 x 2 B = 131,072 B per token."""
    config = {**MPT_7B, "attn_config": {**MPT_7B["attn_config"], "kv_n_heads": 8}}
    assert model(config).kv_bytes_per_token == 131_072


def test_mpt_with_biases_and_qk_ln_counts_them_as_vllm_builds_them():
    """no_bias false: biases on Wqkv, out_proj, up and down, and on every LayerNorm; qk_ln adds two LayerNorms of
    d_model per layer (vLLM's MPTAttention; transformers' MptModel builds neither)."""
    config = {**MPT_7B, "no_bias": False, "attn_config": {**MPT_7B["attn_config"], "qk_ln": True}}
    h = 4096
    layer = 4 * 2 * h + 12 * h * h + 3 * h + h + 4 * h + h
    assert model(config).weights_bytes == (50_432 * h + 32 * layer + 2 * h) * 2


def test_mpt_without_alibi_is_refused_naming_the_key():
    config = {**MPT_7B, "attn_config": {**MPT_7B["attn_config"], "alibi": False}}
    with pytest.raises(UnknownArchitectureError) as caught:
        model(config)
    assert caught.value.missing == ("attn_config.alibi",)


def test_chatglm3_caches_its_query_groups():
    """multi_query_group_num 2 of kv_channels 128: 28 x 2 x 2 x 128 x 2 B (float16) = 28,672 B per token;
    seq_length 8,192; untied output layer of padded_vocab_size: 6,243,584,000 parameters."""
    m = model(CHATGLM3_6B)
    assert (m.num_layers, m.num_kv_heads, m.kv_bytes_per_token, m.max_context) == (28, 2, 28_672, 8192)
    h, ffn = 4096, 13_696
    layer = 2 * h + h * (h + 2 * 256) + (h + 2 * 256) + h * h + 3 * h * ffn
    assert m.weights_bytes == (2 * 65_024 * h + 28 * layer + h) * 2 == 6_243_584_000 * 2


def test_glm_4_9b_chat_in_chatglm_format_plans_exactly():
    """40 x 2 x 2 x 128 x 2 B = 40,960 B per token; seq_length 131,072; 9,399,951,360 parameters."""
    m = model(CHATGLM4_9B)
    assert (m.num_kv_heads, m.kv_bytes_per_token, m.max_context) == (2, 40_960, 131_072)
    h, ffn = 4096, 13_696
    layer = 2 * h + h * (h + 2 * 256) + (h + 2 * 256) + h * h + 3 * h * ffn
    assert m.weights_bytes == (2 * 151_552 * h + 40 * layer + h) * 2 == 9_399_951_360 * 2


def test_chatglm_without_multi_query_attention_caches_every_head():
    assert model({**CHATGLM3_6B, "multi_query_attention": False}).kv_bytes_per_token == 28 * 2 * 32 * 128 * 2


def test_chatglm_layernorm_and_linear_biases_are_counted():
    """rmsnorm false: LayerNorms with biases; add_bias_linear: biases on dense and both MLP matrices too."""
    h, ffn = 4096, 13_696
    layer = 4 * h + h * (h + 512) + (h + 512) + h * h + h + 3 * h * ffn + 2 * ffn + h
    config = {**CHATGLM3_6B, "rmsnorm": False, "add_bias_linear": True}
    assert model(config).weights_bytes == (2 * 65_024 * h + 28 * layer + 2 * h) * 2


HOSTILE = [
    ("gpt2-no-n_layer", {k: v for k, v in GPT2.items() if k != "n_layer"}, UnknownArchitectureError, "n_layer"),
    ("gpt2-n_head-string", {**GPT2, "n_head": "12"}, ModelConfigError, "n_head"),
    ("gpt2-zero-heads", {**GPT2, "n_head": 0}, ModelConfigError, "n_head"),
    ("gpt2-heads-not-dividing", {**GPT2, "n_embd": 770}, UnknownArchitectureError, "n_embd 770"),
    ("gpt2-n_inner-float", {**GPT2, "n_inner": 3072.5}, ModelConfigError, "n_inner"),
    ("starcoder-multi_query-string", {**STARCODER, "multi_query": "yes"}, ModelConfigError, "multi_query"),
    ("gpt_neo-no-attention_types", {**GPT_NEO_1_3B, "attention_types": None}, UnknownArchitectureError, "attention_"),
    (
        "gpt_neo-short-attention_types",
        {**GPT_NEO_1_3B, "attention_types": [[["global", "local"], 11]]},
        ModelConfigError,
        "attention_types",
    ),
    (
        "gpt_neo-unknown-kind",
        {**GPT_NEO_1_3B, "attention_types": [[["global", "sparse"], 12]]},
        ModelConfigError,
        "attention_types",
    ),
    (
        "gpt_neo-no-num_heads",
        {k: v for k, v in GPT_NEO_1_3B.items() if k != "num_heads"},
        UnknownArchitectureError,
        "num_heads",
    ),
    ("opt-ffn_dim-zero", {**OPT_6_7B, "ffn_dim": 0}, ModelConfigError, "ffn_dim"),
    ("opt-enable_bias-string", {**OPT_6_7B, "enable_bias": "false"}, ModelConfigError, "enable_bias"),
    ("mpt-no-d_model", {k: v for k, v in MPT_7B.items() if k != "d_model"}, UnknownArchitectureError, "d_model"),
    ("mpt-zero-heads", {**MPT_7B, "n_heads": 0}, ModelConfigError, "n_heads"),
    ("mpt-kv-heads-not-dividing", {**MPT_7B, "attn_config": {"kv_n_heads": 5}}, ModelConfigError, "kv_n_heads"),
    ("mpt-expansion-float", {**MPT_7B, "expansion_ratio": 2.5}, ModelConfigError, "expansion_ratio"),
    ("mpt-no_bias-string", {**MPT_7B, "no_bias": 1}, ModelConfigError, "no_bias"),
    ("mpt-prefix-lm", {**MPT_7B, "attn_config": {"prefix_lm": True}}, UnknownArchitectureError, "prefix_lm"),
    (
        "chatglm-no-num_layers",
        {k: v for k, v in CHATGLM3_6B.items() if k != "num_layers"},
        UnknownArchitectureError,
        "num_layers",
    ),
    (
        "chatglm-groups-not-dividing",
        {**CHATGLM3_6B, "multi_query_group_num": 3},
        ModelConfigError,
        "multi_query_group_num 3",
    ),
    ("chatglm-zero-groups", {**CHATGLM3_6B, "multi_query_group_num": 0}, ModelConfigError, "multi_query_group_num"),
    (
        "chatglm-kv_channels-not-hidden-over-heads",
        {**CHATGLM3_6B, "kv_channels": 64},
        UnknownArchitectureError,
        "kv_channels",
    ),
    (
        "chatglm-no-padded_vocab_size",
        {k: v for k, v in CHATGLM3_6B.items() if k != "padded_vocab_size"},
        UnknownArchitectureError,
        "padded_vocab_size",
    ),
    ("falcon_h1-heads-times-head-not-inner", {**FALCON_H1_0_5B, "mamba_d_head": 48}, ModelConfigError, "mamba_d_ssm"),
    ("falcon_h1-zero-mamba-heads", {**FALCON_H1_0_5B, "mamba_n_heads": 0}, ModelConfigError, "mamba_n_heads"),
    ("falcon_h1-d_ssm-string", {**FALCON_H1_0_5B, "mamba_d_ssm": "1536"}, ModelConfigError, "mamba_d_ssm"),
    ("falcon_h1-rms_norm-string", {**FALCON_H1_0_5B, "mamba_rms_norm": "no"}, ModelConfigError, "mamba_rms_norm"),
    (
        "falcon_h1-kv-heads-not-dividing",
        {**FALCON_H1_0_5B, "num_key_value_heads": 3},
        ModelConfigError,
        "num_key_value_heads 3",
    ),
    (
        "zamba2-no-layers_block_type",
        {k: v for k, v in ZAMBA2_2_7B_SHAPED.items() if k != "layers_block_type"},
        UnknownArchitectureError,
        "layers_block_type",
    ),
    (
        "zamba2-short-layers_block_type",
        {**ZAMBA2_2_7B_SHAPED, "layers_block_type": ["mamba", "hybrid"]},
        ModelConfigError,
        "layers_block_type",
    ),
    (
        "zamba2-unknown-layer",
        {**ZAMBA2_2_7B_SHAPED, "layers_block_type": ["attention"] * 54},
        ModelConfigError,
        "layers_block_type",
    ),
    ("zamba2-mamba-heads-not-dividing", {**ZAMBA2_2_7B_SHAPED, "n_mamba_heads": 77}, ModelConfigError, "n_mamba_heads"),
    ("zamba2-zero-heads", {**ZAMBA2_2_7B_SHAPED, "num_attention_heads": 0}, ModelConfigError, "num_attention_heads"),
    (
        "zamba2-heads-not-dividing",
        {**ZAMBA2_2_7B_SHAPED, "num_attention_heads": 48},
        ModelConfigError,
        "num_attention_heads 48",
    ),
    (
        "zamba2-fewer-kv-heads",
        {**ZAMBA2_2_7B_SHAPED, "num_key_value_heads": 8},
        UnknownArchitectureError,
        "num_key_value_heads",
    ),
    ("zamba2-no-conv-bias", {**ZAMBA2_2_7B_SHAPED, "use_conv_bias": False}, UnknownArchitectureError, "use_conv_bias"),
    ("zamba2-adapter-rank-string", {**ZAMBA2_2_7B_SHAPED, "adapter_rank": "128"}, ModelConfigError, "adapter_rank"),
    (
        "chatglm-multi_query_attention-string",
        {**CHATGLM3_6B, "multi_query_attention": "true"},
        ModelConfigError,
        "multi_query_attention",
    ),
]


@pytest.mark.parametrize(("config", "error", "named"), [h[1:] for h in HOSTILE], ids=[h[0] for h in HOSTILE])
def test_hostile_configs_of_the_new_families_are_refused_by_name(config, error, named):
    with pytest.raises(error, match=named):
        model(config)
