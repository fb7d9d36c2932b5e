"""Per-layer attention specs: families whose layers differ in shape, against their published configs
(tests/model_configs_third.py). Every figure is worked out in the docstring from vLLM's model code."""

from __future__ import annotations

import json

import pytest
from model_configs import DEEPSEEK_V3_2
from model_configs_third import GEMMA4_26B_A4B, GLM_5, MIMO_V2_FLASH, NEMOTRON_3_SUPER_120B, NEMOTRON_SUPER_49B

from devmem.command.main import main
from devmem.planner.capacity import sequence_cost
from devmem.planner.models import AttentionSpec, ModelConfigError, ModelMemory, UnknownArchitectureError


def model(config: dict, **options) -> ModelMemory:
    return ModelMemory.from_config(config, **options)


def test_gemma4_full_layers_have_their_own_kv_heads_and_head_size():
    """vLLM's gemma4: 25 sliding layers of 8 KV heads x 256, 2 x 8 x 256 x 2 B = 8,192 B; 5 full layers (K = V,
    both cached) of num_global_key_value_heads 2 x global_head_dim 512: 2 x 2 x 512 x 2 B = 4,096 B.
    25 x 8,192 + 5 x 4,096 = 225,280 B per token (every layer at 8 x 256 would be 245,760)."""
    m = model(GEMMA4_26B_A4B)
    assert (m.full_attention_layers, m.sliding_attention_layers, m.sliding_window) == (5, 25, 1024)
    assert m.kv_bytes_per_token == 225_280
    assert m.attention_specs[5] == AttentionSpec("full_attention", 2, 512, 512)
    assert m.attention_specs[0] == AttentionSpec("sliding_attention", 8, 256, 256, 1024)


def test_gemma4_long_contexts_cost_only_the_full_layers():
    """Past the window every further token costs the full layers only: 5 x 4,096 = 20,480 B (not 40,960).
    At 16,384 tokens, block 16: full 1,024 blocks x 16 x 20,480 = 335,544,320 B; sliding min(1,024, 1,024 / 16
    + 1 = 65) blocks x 16 x 25 x 8,192 = 212,992,000 B; 548,536,320 B in all."""
    m = model(GEMMA4_26B_A4B)
    assert m.full_bytes_per_token == 20_480
    assert sequence_cost(m, 16_384, 16).kv_bytes == 548_536_320


def test_gemma4_full_layers_use_the_sliding_heads_without_k_eq_v():
    """Without attention_k_eq_v the full layers keep num_key_value_heads (8) at global_head_dim 512: 2 x 8 x 512 x
    2 B = 16,384 B x 5 + 25 x 8,192 = 286,720 B per token."""
    text = {**GEMMA4_26B_A4B["text_config"], "attention_k_eq_v": False}
    assert model({**GEMMA4_26B_A4B, "text_config": text}).kv_bytes_per_token == 286_720


def test_gemma4_kv_heads_split_over_ranks_layer_by_layer():
    """tp 2: sliding 4 heads per rank (4,096 B), full 1 head (2,048 B): 25 x 4,096 + 5 x 2,048 = 112,640 B."""
    assert model(GEMMA4_26B_A4B, tp=2).kv_bytes_per_token == 112_640


def test_gemma4_tp_that_splits_neither_kv_head_count_is_refused():
    with pytest.raises(ModelConfigError, match="2 KV heads neither split evenly over 4 ranks|tp=4"):
        model(
            {**GEMMA4_26B_A4B, "text_config": {**GEMMA4_26B_A4B["text_config"], "num_global_key_value_heads": 3}}, tp=4
        )


def test_mimo_v2_flash_hybrid_pattern_gives_each_layer_its_heads_and_smaller_v_head():
    """vLLM's mimo_v2_flash: hybrid_layer_pattern puts full attention on 9 layers, 4 KV heads x (K 192 + V 128) x
    2 B = 2,560 B; sliding (window 128) on 39, 8 KV heads x 320 x 2 B = 5,120 B. 9 x 2,560 + 39 x 5,120 = 222,720 B
    per token."""
    m = model(MIMO_V2_FLASH)
    assert (m.full_attention_layers, m.sliding_attention_layers, m.chunked_attention_layers) == (9, 39, 0)
    assert (m.kv_bytes_per_token, m.full_bytes_per_token, m.sliding_window) == (222_720, 23_040, 128)


def test_mimo_v2_attention_chunk_size_is_not_read_as_chunked_attention():
    """A config that also sets attention_chunk_size (the value here is not the published file's) keeps the hybrid
    pattern: 222,720 B per token, no chunked layer."""
    m = model({**MIMO_V2_FLASH, "attention_chunk_size": 128})
    assert (m.chunked_attention_layers, m.kv_bytes_per_token) == (0, 222_720)


def test_mimo_v2_per_layer_moe_layer_freq_places_the_experts():
    """moe_layer_freq [0, 1, 1, ...]: layer 0 dense, 47 with experts. One layer's experts: 256 x 3 x 4,096 x
    2,048 = 6,442,450,944 parameters, in place of a dense MLP of 3 x 4,096 x 16,384 = 201,326,592 (+ a router of
    256 x 4,096 + 256 bias): turning layer 1's experts off lowers the weights by their difference, in bf16."""
    dense_second = [0, 0] + [1] * 46
    more_dense = model({**MIMO_V2_FLASH, "moe_layer_freq": dense_second})
    assert model(MIMO_V2_FLASH).weights_bytes - more_dense.weights_bytes == 2 * (
        6_442_450_944 - 201_326_592 + 256 * 4_096 + 256
    )


def test_moe_layer_freq_list_of_the_wrong_length_is_refused_naming_family_and_key():
    with pytest.raises(UnknownArchitectureError, match="model_type 'mimo_v2_flash': moe_layer_freq") as info:
        model({**MIMO_V2_FLASH, "moe_layer_freq": [0, 1]})
    assert info.value.missing == ("moe_layer_freq",)


def test_mimo_v2_without_swa_heads_is_refused_naming_the_key():
    config = {k: v for k, v in MIMO_V2_FLASH.items() if k != "swa_num_key_value_heads"}
    with pytest.raises(UnknownArchitectureError, match="mimo_v2_flash.*swa_num_key_value_heads"):
        model(config)


def test_refusal_without_a_family_of_its_own_names_the_model_type(tmp_path, capsys):
    """A ModelConfigError raised deep in the arithmetic carries the config's model_type (the JSON error too)."""
    (tmp_path / "config.json").write_text(json.dumps({**MIMO_V2_FLASH, "hybrid_layer_pattern": [0, 1]}))
    assert main(["plan", "--model", str(tmp_path), "--weights", "0", "--total", "80GiB", "--json"]) == 3
    out = json.loads(capsys.readouterr().out)
    assert out["kind"] == "model_refused" and out["model_type"] == "mimo_v2_flash"
    assert "model_type 'mimo_v2_flash'" in out["error"]


def test_explain_shows_each_layer_shape_and_the_sum():
    text = str(model(MIMO_V2_FLASH).explain())
    assert "per layer, 9 layers: 4 KV heads per rank x (K head 192 + V head 128) x bf16 2 B = 2560 B" in text
    assert "KV per token: 9 x 2560 + 39 x 5120 B = 222720 B (full layers 23040 B)" in text


def test_as_dict_lists_the_layer_specs_with_their_counts():
    specs = model(GEMMA4_26B_A4B).as_dict()["attention_specs"]
    assert [(s["kind"], s["kv_heads"], s["k_head_size"], s["layers"]) for s in specs] == [
        ("sliding_attention", 8, 256, 25),
        ("full_attention", 2, 512, 5),
    ]


def test_kv_cache_dtype_and_kv_dtype_that_disagree_are_refused():
    with pytest.raises(ModelConfigError, match="kv_cache_dtype 'fp8' and kv_dtype 'bf16' disagree"):
        model(DEEPSEEK_V3_2, kv_cache_dtype="fp8", kv_dtype="bf16")


def test_nemotron_nas_counts_only_the_layers_that_keep_attention():
    """vLLM's nemotron_nas: 49 of the 80 layers keep attention, each with 64 // n_heads_in_group 8 = 8 KV heads of
    8,192 / 64 = 128: 2 x 8 x 128 x 2 B = 4,096 B x 49 = 200,704 B per token (not 80 layers of 64 heads)."""
    m = model(NEMOTRON_SUPER_49B, weights_bytes=0)
    assert (m.full_attention_layers, m.num_kv_heads, m.kv_bytes_per_token) == (49, 8, 200_704)


def test_nemotron_nas_with_weights_given_never_reads_intermediate_size(tmp_path, capsys):
    """intermediate_size is null in the published config: --weights 0 plans without it."""
    (tmp_path / "config.json").write_text(json.dumps(NEMOTRON_SUPER_49B))
    assert main(["plan", "--model", str(tmp_path), "--weights", "0", "--total", "80GiB", "--json"]) == 0
    assert "kv_cache_bytes" in capsys.readouterr().out


def test_nemotron_nas_weights_come_from_each_block():
    """Layer 0 of the blocks: attention 2 x 8,192 x 64 x 128 + 2 x 8,192 x 8 x 128 = 150,994,944 and a gated MLP of
    ffn_mult 2.625: 256 x ceil(int(2 x 2.625 x 8,192 / 3) / 256) = 14,336 wide, 3 x 8,192 x 14,336 = 352,321,536;
    two norms of 8,192. Making its attention no_op removes 150,994,944 + 8,192 parameters, 2 B each."""
    blocks = list(NEMOTRON_SUPER_49B["block_configs"])
    blocks[0] = {**blocks[0], "attention": {**blocks[0]["attention"], "no_op": True, "n_heads_in_group": None}}
    without = model({**NEMOTRON_SUPER_49B, "block_configs": blocks}).weights_bytes
    assert model(NEMOTRON_SUPER_49B).weights_bytes - without == 2 * (150_994_944 + 8_192)


def test_nemotron_nas_block_with_a_bad_group_is_refused_naming_family_and_key():
    blocks = list(NEMOTRON_SUPER_49B["block_configs"])
    blocks[0] = {**blocks[0], "attention": {**blocks[0]["attention"], "n_heads_in_group": 7}}
    with pytest.raises(UnknownArchitectureError, match=r"'nemotron-nas': block_configs\[0\]") as info:
        model({**NEMOTRON_SUPER_49B, "block_configs": blocks}, weights_bytes=0)
    assert info.value.missing == ("block_configs",)


def test_nemotron_3_super_latent_moe_weights():
    """vLLM's NemotronH latent MoE: the 512 routed experts (up and down, relu2) work in moe_latent_size 1,024,
    projected in and out of it; the shared expert at hidden 4,096. Per MoE layer: 2 x 4,096 x 1,024 = 8,388,608 +
    512 x 2 x 1,024 x 2,688 = 2,818,572,288 + 2 x 4,096 x 5,376 = 44,040,192, router 4,096 x 512 + 512 bias, norm
    4,096: 2,873,102,848, x 40 = 114,924,113,920. Mamba2 (128 heads x 64, 8 groups x 128, kernel 4): 4,096 x
    (8,192 + 10,240 + 128) + 8,192 x 4,096 = 109,576,192, conv 10,240 x 5 + 3 x 128 + 8,192 = 59,776, norm 4,096:
    109,640,064 x 40 = 4,385,602,560. Attention 4,096 x 32 x 128 x 2 + 2 x 4,096 x 2 x 128 + norm = 35,655,680 x 8 =
    285,245,440. Embeddings and head 2 x 131,072 x 4,096 + final norm = 1,073,745,920. 120,668,707,840 parameters,
    x 2 B = 241,337,415,680 B (about 241 GB, not 917)."""
    assert model(NEMOTRON_3_SUPER_120B).weights_bytes == 241_337_415_680


def test_plan_takes_vllms_kv_cache_dtype_flag(tmp_path, capsys):
    """--kv-cache-dtype fp8 on DeepSeek-V3.2: the packed latent, 788 B x 61 = 48,068 B per token."""
    (tmp_path / "config.json").write_text(json.dumps(DEEPSEEK_V3_2))
    argv = ["plan", "--model", str(tmp_path), "--weights", "0", "--total", "80GiB", "--json"]
    assert main([*argv, "--kv-cache-dtype", "fp8"]) == 0
    assert json.loads(capsys.readouterr().out)["model"]["kv_bytes_per_token"] == 48_068


def test_glm_5_caches_the_bf16_latent_and_the_indexer_key_by_default():
    """GLM-5 (glm_moe_dsa) is DeepSeek sparse attention (vLLM's GlmMoeDsaForCausalLM is its DeepseekV2 model with the
    indexer): per layer the latent (kv_lora_rank 512 + qk_rope_head_dim 64) x bf16 2 B = 1,152 B and the indexer
    key (vLLM's DeepseekV32IndexerCache: index_head_dim 128 fp8 + 128 / 128 x 4 B scale = 132 B): 1,284 B x 78
    layers = 100,152 B per token, the same on every rank."""
    m = model(GLM_5)
    assert (m.attention, m.full_attention_layers, m.kv_layer_bytes_per_token) == ("mla", 78, 1_284)
    assert (m.kv_bytes_per_token, m.at_tp(8).kv_bytes_per_token) == (100_152, 100_152)


def test_glm_5_with_an_fp8_cache_packs_the_latent():
    """--kv-cache-dtype fp8 (vLLM's FlashMLASparse: fp8 is an alias of fp8_ds_mla): 512 fp8 + 4 x 4 B scales + 64 x
    bf16 2 B = 656 B + the indexer's 132 B = 788 B x 78 = 61,464 B per token."""
    assert model(GLM_5, kv_cache_dtype="fp8").kv_bytes_per_token == 61_464
    assert model(GLM_5, kv_cache_dtype="fp8_ds_mla").kv_bytes_per_token == 61_464


def test_glm_5_weights_are_its_744b_parameters():
    """Per layer, MLA: q_a 6,144 x 2,048 + norm 2,048 + q_b 2,048 x 64 x 256 + kv_a 6,144 x 576 + norm 512 + kv_b
    512 x 64 x (192 + 256) + o 64 x 256 x 6,144 = 165,022,208, and two norms of 6,144; 3 dense MLPs of 3 x 6,144 x
    12,288 = 226,492,416; 75 MoE layers of 257 experts x 3 x 6,144 x 2,048 + router 256 x 6,144 + 256 bias =
    9,702,998,272; embeddings and head 2 x 154,880 x 6,144 and the final norm. 743,180,209,920 parameters x 2 B (the
    published 744B-753B counts add the MTP layer and the indexers' projections, not counted)."""
    assert model(GLM_5).weights_bytes == 1_486_360_419_840


@pytest.mark.parametrize(
    ("key", "value"),
    [
        ("indexer_types", ["full"] * 3 + ["dense"] * 75),
        ("indexer_types", "full"),
        ("indexer_types", ["full"] * 77),
        ("index_topk_freq", 0),
        ("index_topk_pattern", "FSX"),
    ],
)
def test_an_indexer_schedule_vllm_cannot_read_is_refused_naming_family_and_key(key, value):
    with pytest.raises(UnknownArchitectureError, match=f"model_type 'glm_moe_dsa'.*{key}") as info:
        model({**GLM_5, key: value})
    assert info.value.missing == (key,)


def test_indexer_types_all_full_is_every_layer_with_its_indexer():
    assert model({**GLM_5, "indexer_types": ["full"] * 78, "index_topk_freq": 1}).kv_bytes_per_token == 100_152


def test_plan_with_weights_given_never_needs_a_key_only_the_weights_estimate_reads(tmp_path, capsys):
    """Without vocab_size and with a block whose ffn_mult is null, only the weights estimate fails: --weights 0 plans
    (the weights reported are the ones given), and without --weights the refusal names the key."""
    blocks = [dict(b) for b in NEMOTRON_SUPER_49B["block_configs"]]
    blocks[1]["ffn"] = {**blocks[1]["ffn"], "ffn_mult": None}
    config = {k: v for k, v in NEMOTRON_SUPER_49B.items() if k != "vocab_size"}
    (tmp_path / "config.json").write_text(json.dumps({**config, "block_configs": blocks}))
    argv = ["plan", "--model", str(tmp_path), "--total", "80GiB", "--json"]
    assert main([*argv, "--weights", "1GiB", "--tp", "2"]) == 0
    out = json.loads(capsys.readouterr().out)["model"]
    assert (out["weights_bytes_per_rank"], out["kv_bytes_per_token"]) == (1 << 30, 100_352)
    assert main(argv) == 3
    assert json.loads(capsys.readouterr().out)["missing"] == ["vocab_size"]


@pytest.mark.parametrize(
    ("config", "key"),
    [
        ({**GLM_5, "num_attention_heads": 0}, "num_attention_heads"),
        ({**GLM_5, "kv_lora_rank": 512.0}, "kv_lora_rank"),
        ({**GLM_5, "index_head_dim": -128}, "index_head_dim"),
        ({**GLM_5, "first_k_dense_replace": "3"}, "first_k_dense_replace"),
        ({**MIMO_V2_FLASH, "hybrid_layer_pattern": [3] * 48}, "hybrid_layer_pattern"),
        ({**MIMO_V2_FLASH, "hybrid_layer_pattern": [0, 1]}, "hybrid_layer_pattern"),
        ({**MIMO_V2_FLASH, "moe_layer_freq": [True] * 48}, "moe_layer_freq"),
        ({**MIMO_V2_FLASH, "moe_layer_freq": 0}, "moe_layer_freq"),
        ({**MIMO_V2_FLASH, "swa_num_key_value_heads": -8}, "swa_num_key_value_heads"),
        (
            {**GEMMA4_26B_A4B, "text_config": {**GEMMA4_26B_A4B["text_config"], "layer_types": ["full_attention"]}},
            "layer_types",
        ),
        (
            {**GEMMA4_26B_A4B, "text_config": {**GEMMA4_26B_A4B["text_config"], "global_head_dim": "512"}},
            "global_head_dim",
        ),
        (
            {**GEMMA4_26B_A4B, "text_config": {**GEMMA4_26B_A4B["text_config"], "attention_k_eq_v": "yes"}},
            "attention_k_eq_v",
        ),
        ({**NEMOTRON_3_SUPER_120B, "mamba_ssm_cache_dtype": "int3"}, "mamba_ssm_cache_dtype"),
        ({**NEMOTRON_3_SUPER_120B, "hybrid_override_pattern": "M*"}, "hybrid_override_pattern"),
        ({**NEMOTRON_3_SUPER_120B, "mamba_num_heads": 0}, "mamba_num_heads"),
    ],
)
def test_hostile_per_layer_config_is_refused_naming_family_and_key(config, key):
    """Lists of the wrong length or values, zero, negative and non-int sizes: one refusal naming model_type and key
    (its .missing too, as the CLI's JSON shows it), never a traceback or a figure."""
    family = config.get("text_config", {}).get("model_type", config["model_type"])
    with pytest.raises(UnknownArchitectureError, match=f"model_type '{family}'.*{key}") as info:
        model(config)
    assert info.value.missing == (key,)


@pytest.mark.parametrize(
    ("part", "key", "value"),
    [
        ("attention", "no_op", "false"),
        ("attention", "replace_with_linear", 0),
        ("attention", "n_heads_in_group", "8"),
        ("attention", "n_heads_in_group", 0),
        ("attention", "window_length", 4096),
        ("attention", "num_sink_tokens", 4),
    ],
)
def test_hostile_nas_block_is_refused_naming_family_and_block(part, key, value):
    blocks = [dict(b) for b in NEMOTRON_SUPER_49B["block_configs"]]
    blocks[2] = {**blocks[2], part: {**blocks[2][part], key: value}}
    with pytest.raises(UnknownArchitectureError, match=rf"'nemotron-nas': block_configs\[2\]\.{part}\.{key}") as info:
        model({**NEMOTRON_SUPER_49B, "block_configs": blocks}, weights_bytes=0)
    assert info.value.missing == ("block_configs",)


def test_nemotron_nas_layers_are_read_in_their_order():
    """Each kept block's spec sits at its place among the attention layers: block 2 with n_heads_in_group 16 (4 KV
    heads) is the third spec, and turning block 0's attention into a linear moves it to the second; 48 x 4,096 +
    2,048 = 198,656 B per token."""
    blocks = [dict(b) for b in NEMOTRON_SUPER_49B["block_configs"]]
    blocks[2] = {**blocks[2], "attention": {**blocks[2]["attention"], "n_heads_in_group": 16}}
    m = model({**NEMOTRON_SUPER_49B, "block_configs": blocks}, weights_bytes=0)
    assert [s.kv_heads for s in m.attention_specs[:4]] == [8, 8, 4, 8]
    blocks[0] = {**blocks[0], "attention": {**blocks[0]["attention"], "replace_with_linear": True}}
    m = model({**NEMOTRON_SUPER_49B, "block_configs": blocks}, weights_bytes=0)
    assert [s.kv_heads for s in m.attention_specs[:3]] == [8, 4, 8]
    assert (m.full_attention_layers, m.kv_bytes_per_token) == (48, 48 * 4_096 - 4_096 + 2_048)
