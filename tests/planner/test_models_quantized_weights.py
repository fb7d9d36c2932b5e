"""The weights of quantized checkpoints counted from their quantization config: MXFP4, NVFP4, FP8,
compressed-tensors, GPTQ/AWQ, each at its bits per weight with its block scales, the matrices it leaves out kept in
the served dtype. The published sizes are the checkpoints' model.safetensors.index.json metadata.total_size."""

from __future__ import annotations

from model_configs import GPT_OSS_20B
from model_configs_fourth import (
    LLAMA_3_3_70B,
    LLAMA_3_3_70B_FP4_QUANT,
    LLAMA_3_3_70B_FP4_TOTAL_SIZE,
    modelopt_quantization_config,
)

from devmem.planner.models import ModelMemory

#: openai/gpt-oss-20b's model.safetensors.index.json metadata.total_size, as public copies of the index quote it.
GPT_OSS_20B_TOTAL_SIZE = 13_761_264_768


def weights(config: dict, **options) -> int:
    return ModelMemory.from_config(config, **options).weights_bytes


def test_mxfp4_counts_the_experts_at_4_25_bits_and_the_rest_at_bf16():
    """gpt-oss-20b: 24 layers x 32 experts x (2,880 x 5,760 + 2,880 x 2,880) = 19,110,297,600 expert weights at 4
    bits + an 8-bit scale per 32 (0.53125 B) = 10,152,345,600 B; attention, router, norms, embeddings and head in
    bf16: 13,747,989,120 B, 0.1 % under the checkpoint's 13,761,264,768 (the experts' biases, not counted). In bf16
    it counted 41.8 GB."""
    assert weights(GPT_OSS_20B) == 13_747_989_120
    assert abs(weights(GPT_OSS_20B) - GPT_OSS_20B_TOTAL_SIZE) < 0.001 * GPT_OSS_20B_TOTAL_SIZE


def test_modelopt_nvfp4_from_hf_quant_config_is_the_checkpoint_less_its_per_tensor_scales():
    """nvidia/Llama-3.3-70B-Instruct-FP4: 80 layers x 855,638,016 linear weights at 4 bits + an fp8 scale per 16
    (0.5625 B), embeddings and the excluded lm_head in bf16: 42,709,041,152 B; the published 42,709,045,632 adds
    two float32 per-tensor scales to each of the 560 linear layers (4,480 B)."""
    assert weights(LLAMA_3_3_70B, hf_quant_config=LLAMA_3_3_70B_FP4_QUANT) == LLAMA_3_3_70B_FP4_TOTAL_SIZE - 4_480


def test_matrices_an_exclusion_names_stay_in_the_served_dtype():
    """ignore model.layers.*.self_attn*: 80 x 150,994,944 attention weights in bf16 (2 B, not 0.5625 B):
    17,364,418,560 B more than with every linear layer in NVFP4."""
    config = {**LLAMA_3_3_70B, "quantization_config": modelopt_quantization_config("NVFP4", None, ["lm_head"])}
    excluded = modelopt_quantization_config("NVFP4", None, ["lm_head", "model.layers.*.self_attn*"])
    assert weights({**config, "quantization_config": excluded}) - weights(config) == 17_364_418_560


def test_compressed_tensors_nvfp4_groups_count_an_fp8_scale_per_16():
    """llm-compressor's NVFP4 (num_bits 4, type float, strategy tensor_group, group_size 16): the same 4.5 bits as
    ModelOpt's NVFP4."""
    scheme = {"num_bits": 4, "type": "float", "strategy": "tensor_group", "group_size": 16, "symmetric": True}
    quant = {
        "quant_method": "compressed-tensors",
        "format": "nvfp4-pack-quantized",
        "config_groups": {"group_0": {"targets": ["Linear"], "weights": scheme, "input_activations": scheme}},
        "ignore": ["lm_head"],
    }
    nvfp4 = {**LLAMA_3_3_70B, "quantization_config": modelopt_quantization_config("NVFP4", None, ["lm_head"])}
    assert weights({**LLAMA_3_3_70B, "quantization_config": quant}) == weights(nvfp4)


def test_the_note_says_what_was_assumed():
    notes = ModelMemory.from_config(GPT_OSS_20B).notes
    assert any("the routed experts at 4.25 bits per weight (MXFP4, block scales included)" in n for n in notes)
