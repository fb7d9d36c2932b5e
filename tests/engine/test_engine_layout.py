"""devmem.planner.engine_layout: the budget as vLLM's hybrid allocator lays it out, and the tokens vLLM logs."""

from __future__ import annotations

from model_configs import GEMMA_3_27B_IT, GPT_OSS_20B, LLAMA_3_1_8B, NEMOTRON_3_NANO, QWEN3_NEXT_80B_A3B

from devmem import GiB
from devmem.planner.capacity import capacity
from devmem.planner.engine_layout import engine_layout
from devmem.planner.models import ModelMemory


def test_qwen3_next_logs_786080_tokens_at_72_gib():
    """State page (3 x 8,192 + 32 x 128 x 128) x 2 B = 1,097,728 B; attention 2,048 B per token: block
    16 x ceil(1,097,728 / 32,768) = 544, page 1,114,112 B; 12 full + 36 linear: groups of 12, 1 + 3 groups;
    72 GiB // 1,114,112 // 12 = 5,782 blocks, // 4 x 544 = 786,080 tokens."""
    layout = engine_layout(ModelMemory.from_config(QWEN3_NEXT_80B_A3B), 72 * GiB)
    assert (layout.block_size, layout.page_bytes, layout.num_blocks) == (544, 1_114_112, 5_782)
    assert layout.tokens == 786_080


def test_gemma_3_27b_pads_its_52_sliding_layers_to_6_groups_of_10():
    layout = engine_layout(ModelMemory.from_config(GEMMA_3_27B_IT), 40 * GiB)
    assert (layout.group_size, layout.num_groups, layout.padding_layers) == (10, 7, 8)
    assert layout.num_blocks == 40 * GiB // (16 * 8192) // 10


def test_dense_model_logs_devmems_tokens():
    model = ModelMemory.from_config(LLAMA_3_1_8B)
    answer = capacity(model, 40 * GiB)
    assert answer.engine.tokens == answer.tokens


def test_equal_sliding_and_full_layers_share_one_group_size():
    """gpt-oss: 12 + 12 layers, group size 12, 2 groups; a sequence of 32,768 takes 2,048 + 9 blocks."""
    model = ModelMemory.from_config(GPT_OSS_20B)
    layout = engine_layout(model, 20 * GiB)
    assert (layout.group_size, layout.num_groups, layout.blocks_per_sequence(model, 32_768)) == (12, 2, 2057)


def test_mamba2_hybrid_sequences_count_one_block_per_recurrent_group():
    """Nemotron-3-Nano: 6 attention, 23 Mamba2: group size 6, 1 + 4 groups; 1,024 B per token, state page
    2,134,016 B: block 16 x ceil(2,134,016 / 16,384) = 2,096."""
    model = ModelMemory.from_config(NEMOTRON_3_NANO)
    layout = engine_layout(model, 20 * GiB)
    assert (layout.block_size, layout.group_size, layout.num_groups) == (2096, 6, 5)
    assert layout.blocks_per_sequence(model, 4096) == 2 + 4


def test_capacity_reports_vllms_tokens_beside_devmems_for_a_hybrid():
    answer = capacity(ModelMemory.from_config(QWEN3_NEXT_80B_A3B), 72 * GiB, context=65536)
    text = answer.explain()
    assert 'vLLM\'s "GPU KV cache size"' in text and "= 786080 tokens" in text
    assert answer.as_dict()["vllm"]["tokens"] == 786_080
