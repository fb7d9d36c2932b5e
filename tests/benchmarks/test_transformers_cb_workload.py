"""benchmarks/transformers_cb.py's worst-case workload reaches what the plan charges every block for: its requests
take every block of the cache the engine was sized to, whatever that count, so that a peak short of the share is the
plan's, not the workload's."""

from __future__ import annotations

import pytest

BLOCK_TOKENS, MAX_BATCH_TOKENS = 256, 8192


@pytest.fixture
def worst_workload(benchmark_module):
    return benchmark_module("transformers_cb")._worst_workload


def _blocks_taken(prompts: list[list[int]], new_tokens: int) -> int:
    return sum(-(-(len(prompt) + new_tokens) // BLOCK_TOKENS) for prompt in prompts)


@pytest.mark.parametrize("blocks", [32, 33, 125, 390, 1000])
def test_the_worst_workload_takes_every_block_of_the_cache(worst_workload, blocks):
    prompts, new_tokens = worst_workload(blocks, BLOCK_TOKENS, MAX_BATCH_TOKENS, 32000)
    assert _blocks_taken(prompts, new_tokens) == blocks


def test_the_worst_workload_prefills_a_whole_batch_last(worst_workload):
    prompts, new_tokens = worst_workload(125, BLOCK_TOKENS, MAX_BATCH_TOKENS, 32000)
    assert len(prompts[-1]) + 64 == MAX_BATCH_TOKENS
    assert len({tuple(prompt[:8]) for prompt in prompts}) == len(prompts)  # no prefix shared between requests
