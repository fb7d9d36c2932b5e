"""The KV-cache dtype a checkpoint declares, as vLLM 0.34.0 resolves ``--kv-cache-dtype auto``: ModelOpt's
``kv_cache_quant_algo`` / ``kv_cache_scheme`` (resolve_kv_cache_dtype_string, in config.json or in
hf_quant_config.json beside it) and compressed-tensors' ``kv_cache_scheme`` (Attention.__init__). Every figure is
worked out in the docstring from the published config (tests/model_configs_fourth.py)."""

from __future__ import annotations

import json

import pytest
from model_configs import DEEPSEEK_V3, LLAMA_3_1_8B, NEMOTRON_3_NANO, write_model
from model_configs_fourth import (
    COMPRESSED_TENSORS_FP8_KV,
    LLAMA_3_3_70B,
    LLAMA_3_3_70B_FP4_QUANT,
    NEMOTRON_3_NANO_NVFP4_QUANT,
    modelopt_quantization_config,
)
from model_configs_third import GEMMA4_26B_A4B, GLM_5, QWEN3_5_35B_A3B

from devmem.command.main import main
from devmem.planner.models import ModelMemory, UnknownArchitectureError, load_model

NVFP4_FP8_KV = modelopt_quantization_config("NVFP4", "FP8", ["lm_head"])


def model(config: dict, **options) -> ModelMemory:
    return ModelMemory.from_config(config, **options)


def checkpoint(tmp_path, config: dict, quant: dict | None = None):
    """A model folder with config.json and, given ``quant``, hf_quant_config.json beside it."""
    folder = write_model(tmp_path / "model", config)
    if quant is not None:
        (folder / "hf_quant_config.json").write_text(json.dumps(quant))
    return folder


def test_hf_quant_config_beside_config_json_declares_an_fp8_cache(tmp_path):
    """nvidia/Llama-3.3-70B-Instruct-FP4: config.json has no quantization_config, hf_quant_config.json (ModelOpt,
    producer modelopt) sets kv_cache_quant_algo FP8: 80 layers x 2 x 8 x 128 x 1 B = 163,840 B per token (bf16:
    327,680)."""
    m = load_model(checkpoint(tmp_path, LLAMA_3_3_70B, LLAMA_3_3_70B_FP4_QUANT))
    assert (m.kv_dtype, m.kv_bytes_per_token) == ("fp8", 163_840)


def test_the_declared_dtype_says_where_it_came_from(tmp_path):
    m = load_model(checkpoint(tmp_path, LLAMA_3_3_70B, LLAMA_3_3_70B_FP4_QUANT))
    assert m.kv_dtype_source == (
        "auto: declared by the checkpoint, quantization.kv_cache_quant_algo 'FP8' in hf_quant_config.json, ModelOpt"
    )


def test_a_dtype_given_wins_over_the_declared_one_and_says_so(tmp_path):
    """--kv-cache-dtype bf16 on the same checkpoint: 327,680 B per token, as vLLM's explicit flag wins."""
    m = load_model(checkpoint(tmp_path, LLAMA_3_3_70B, LLAMA_3_3_70B_FP4_QUANT), kv_dtype="bf16")
    assert (m.kv_dtype, m.kv_bytes_per_token, m.kv_dtype_source) == ("bf16", 327_680, "kv_cache_dtype bf16, given")
    assert any("kv_cache_dtype bf16 overrides the fp8 cache the checkpoint declares" in n for n in m.notes)


def test_hybrid_declared_fp8_halves_the_attention_layers_not_the_recurrent_state(tmp_path):
    """nvidia/NVIDIA-Nemotron-3-Nano-30B-A3B-NVFP4 (hf_quant_config.json, kv_cache_quant_algo FP8): its 6 attention
    layers cache 2 x 2 x 128 x 1 B = 512 B, 3,072 B per token; the Mamba2 state keeps its dtypes."""
    bf16 = model(NEMOTRON_3_NANO)
    m = load_model(checkpoint(tmp_path, NEMOTRON_3_NANO, NEMOTRON_3_NANO_NVFP4_QUANT))
    assert (m.kv_bytes_per_token, m.state_bytes_per_sequence) == (3_072, bf16.state_bytes_per_sequence)


def test_modelopt_kv_cache_scheme_in_config_json_declares_an_fp8_cache():
    """Qwen3.5-35B-A3B with config.json's quantization_config as ModelOpt 0.31+ writes it (kv_cache_scheme {8-bit
    float, not dynamic}): the 10 full layers cache 2 x 2 x 256 x 1 B, 10,240 B per token (bf16: 20,480)."""
    m = model({**QWEN3_5_35B_A3B, "quantization_config": NVFP4_FP8_KV})
    assert (m.kv_dtype, m.kv_bytes_per_token) == ("fp8", 10_240)


def test_per_layer_shapes_all_take_the_declared_dtype():
    """Gemma 4 26B-A4B with the same quantization_config: 25 sliding layers x 2 x 8 x 256 x 1 B = 102,400 and 5 full
    layers x 2 x 2 x 512 x 1 B = 10,240: 112,640 B per token."""
    assert model({**GEMMA4_26B_A4B, "quantization_config": NVFP4_FP8_KV}).kv_bytes_per_token == 112_640


def test_modelopt_nvfp4_kv_cache_packs_fp4_with_fp8_scales():
    """kv_cache_scheme "NVFP4" (the name, as ModelOpt writes any algorithm but FP8): vLLM's nvfp4 cache holds per head
    128 / 2 + 128 / 16 = 72 B of K and as much of V: 80 layers x 8 heads x 144 B = 92,160 B per token."""
    m = model({**LLAMA_3_3_70B, "quantization_config": modelopt_quantization_config("NVFP4", "NVFP4", [])})
    assert (m.kv_dtype, m.kv_bytes_per_token) == ("nvfp4", 92_160)


def test_a_modelopt_kv_algorithm_vllm_does_not_map_keeps_the_served_dtype_and_says_so():
    """vLLM warns and falls back to auto on a kv_cache_quant_algo it does not map (INT8)."""
    m = model({**LLAMA_3_3_70B, "quantization_config": modelopt_quantization_config("FP8", "INT8", [])})
    assert (m.kv_dtype, m.kv_bytes_per_token) == ("bf16", 327_680)
    assert any("kv_cache_scheme 'INT8'" in n and "falls back to auto" in n for n in m.notes)


def test_compressed_tensors_kv_cache_scheme_declares_an_fp8_cache():
    """Llama-3.1-8B as llm-compressor writes it with an FP8 KV cache: 32 x 2 x 8 x 128 x 1 B = 65,536 B per token."""
    m = model({**LLAMA_3_1_8B, "quantization_config": COMPRESSED_TENSORS_FP8_KV})
    assert (m.kv_dtype, m.kv_bytes_per_token) == ("fp8", 65_536)


def test_compressed_tensors_kv_cache_scheme_leaves_an_mla_latent_in_the_served_dtype():
    """vLLM's MLAAttention does not read compressed-tensors' kv_cache_scheme: DeepSeek-V3's 61 latents of 576 stay
    bf16, 70,272 B per token, and a note says why."""
    m = model({**DEEPSEEK_V3, "quantization_config": COMPRESSED_TENSORS_FP8_KV})
    assert (m.kv_dtype, m.kv_bytes_per_token) == ("bf16", 70_272)
    assert any("MLA layers (MLAAttention) do not read it" in n for n in m.notes)


def test_a_compressed_tensors_kv_scheme_vllm_refuses_is_refused_naming_the_key():
    """vLLM's validate_kv_cache_scheme takes only 8-bit float: an int8 scheme stops the engine."""
    scheme = {**COMPRESSED_TENSORS_FP8_KV["kv_cache_scheme"], "type": "int"}
    with pytest.raises(UnknownArchitectureError, match="kv_cache_scheme .* type 'int'") as caught:
        model({**LLAMA_3_1_8B, "quantization_config": {**COMPRESSED_TENSORS_FP8_KV, "kv_cache_scheme": scheme}})
    assert caught.value.missing == ("quantization_config.kv_cache_scheme",)


def test_hf_quant_config_is_not_read_where_config_json_has_a_quantization_config(tmp_path):
    """vLLM reads hf_quant_config.json only where config.json has no quantization_config."""
    config = {**LLAMA_3_3_70B, "quantization_config": {"quant_method": "fp8", "weight_block_size": [128, 128]}}
    assert load_model(checkpoint(tmp_path, config, LLAMA_3_3_70B_FP4_QUANT)).kv_dtype == "bf16"


def test_hf_quant_config_without_the_modelopt_producer_declares_nothing(tmp_path):
    """vLLM marks a quantization config ModelOpt by producer.name; without it the kv_cache_quant_algo is not read."""
    quant = {"quantization": LLAMA_3_3_70B_FP4_QUANT["quantization"]}
    assert load_model(checkpoint(tmp_path, LLAMA_3_3_70B, quant)).kv_dtype == "bf16"


def test_sparse_mla_with_a_declared_fp8_cache_packs_the_latent():
    """GLM-5 with ModelOpt's FP8 KV declared: vLLM's FLASHMLA_SPARSE serves it as fp8_ds_mla, 656 + 132 B on each of
    its 78 layers: 61,464 B per token."""
    m = model({**GLM_5, "quantization_config": NVFP4_FP8_KV})
    assert (m.kv_dtype, m.kv_bytes_per_token) == ("fp8_ds_mla", 61_464)


def test_nvfp4_cache_of_a_plain_mla_latent_is_refused_naming_the_key():
    with pytest.raises(UnknownArchitectureError, match="nvfp4 KV cache .* MLA") as caught:
        model({**DEEPSEEK_V3, "quantization_config": modelopt_quantization_config("NVFP4", "NVFP4", [])})
    assert caught.value.missing == ("quantization_config",)


def test_plan_json_names_the_declared_dtype_and_its_source(tmp_path, capsys):
    folder = checkpoint(tmp_path, LLAMA_3_3_70B, LLAMA_3_3_70B_FP4_QUANT)
    assert main(["plan", "--model", str(folder), "--pinned", "20GiB", "--weights", "40GiB", "--json"]) == 0
    shown = json.loads(capsys.readouterr().out)["model"]
    assert (shown["kv_dtype"], shown["kv_bytes_per_token"]) == ("fp8", 163_840)
    assert shown["kv_dtype_source"].startswith("auto: declared by the checkpoint")
