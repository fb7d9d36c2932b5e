"""devmem.planner.capacity: a KV budget in tokens and sequences, and what a (context, sequences) target needs.

Figures are worked out by hand in each docstring; the models are the published configs of tests/model_configs.py.
"""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from model_configs import (
    GEMMA_2_9B_IT,
    GEMMA_3_12B_IT,
    JAMBA_V0_1,
    MISTRAL_7B_V0_1,
    QWEN3_8B,
    QWEN3_NEXT_80B_A3B,
)

from devmem import GiB, MiB
from devmem.engine.kvcache import ALLOCATOR_GRANULARITY
from devmem.planner.capacity import (
    capacity,
    fit,
    longest_context,
    plan_for_model,
    sequence_cost,
    sequences_at,
    tokens_in_pool,
)
from devmem.planner.models import ModelMemory
from devmem.planner.sizing import SizingError, plan_kv_cache

QWEN3 = ModelMemory.from_config(QWEN3_8B)
MISTRAL = ModelMemory.from_config(MISTRAL_7B_V0_1)
GEMMA2 = ModelMemory.from_config(GEMMA_2_9B_IT)
GEMMA3 = ModelMemory.from_config(GEMMA_3_12B_IT)
JAMBA = ModelMemory.from_config(JAMBA_V0_1)
QWEN3_NEXT = ModelMemory.from_config(QWEN3_NEXT_80B_A3B)


# --- budget -> tokens and sequences ----------------------------------------------------------------------------


def test_qwen3_8b_20_gib_pinned_cache_holds_9102_blocks_of_16_tokens():
    """A block is 16 tokens x 147,456 B = 2,359,296 B; 20 GiB = 21,474,836,480 B holds 9,102 of them (with
    1,048,576 B over): 145,632 tokens."""
    plan = plan_for_model(QWEN3, pinned_bytes=20 * GiB)
    assert (plan.num_blocks, plan.block_bytes) == (9102, 2_359_296)
    assert tokens_in_pool(QWEN3, plan.kv_cache_bytes) == 145_632


def test_the_byte_plan_is_devmems_planner_with_the_models_block():
    """plan_for_model is plan_kv_cache with page 16 tokens x 4,096 B on 36 layers and the model's weights."""
    expected = plan_kv_cache(
        total=80 * GiB, utilization=0.9, weights=QWEN3.weights_bytes, page_size_bytes=65_536, num_layers=36
    )
    assert plan_for_model(QWEN3, total=80 * GiB, utilization=0.9) == expected


def test_a_sequence_holds_whole_blocks():
    """17 tokens take 2 blocks of 16 on each of Qwen3-8B's 36 layers: 36 x 2 x 16 x 4,096 B = 4,718,592 B, so
    20 GiB holds 4,551 such sequences (9,102 blocks / 2)."""
    assert sequence_cost(QWEN3, 17).total == 4_718_592
    assert sequences_at(QWEN3, 20 * GiB, 17) == 4551


def test_sliding_layers_stop_growing_at_their_window():
    """Mistral-7B at 32,768 tokens: each layer holds ceil(4096 / 16) + 1 = 257 blocks, not 2,048: 32 x 257 x
    65,536 B = 538,968,064 B per sequence; 20 GiB holds 39 (2,048 blocks each would allow 5)."""
    assert sequence_cost(MISTRAL, 32_768).sliding_blocks == 257
    assert sequences_at(MISTRAL, 20 * GiB, 32_768) == 39


def test_gemma_3_caps_only_its_sliding_layers():
    """Gemma-3-12B at 32,768 tokens: 8 full layers x 2,048 blocks + 40 sliding x (ceil(1024 / 16) + 1 = 65) =
    18,984 layer-blocks x 16 x 8,192 B = 2,488,270,848 B per sequence."""
    assert sequence_cost(GEMMA3, 32_768).total == 2_488_270_848


def test_recurrent_state_is_counted_once_per_sequence():
    """Qwen3-Next at 1 token: one block on 12 layers (12 x 16 x 2,048 B = 393,216 B) + 39,518,208 B of state."""
    assert sequence_cost(QWEN3_NEXT, 1).total == 393_216 + 39_518_208


# --- the longest context -----------------------------------------------------------------------------------------


def test_longest_context_for_n_sequences_is_whole_blocks():
    """Qwen3-8B, 20 GiB, 4 sequences: 9,102 blocks // 4 = 2,275 blocks each = 36,400 tokens."""
    assert longest_context(QWEN3, 20 * GiB, 4) == 36_400


def test_longest_context_takes_each_sequences_state_first():
    """Qwen3-Next, 10 GiB, 8 sequences: 1,342,177,280 B each - 39,518,208 B state = 1,302,659,072 B //
    393,216 B per block = 3,312 blocks = 52,992 tokens."""
    assert longest_context(QWEN3_NEXT, 10 * GiB, 8) == 52_992


def test_longest_context_past_the_window_grows_only_the_full_layers():
    """Gemma-2-9B, 8 GiB, 1 sequence: a layer-block is 16 x 8,192 = 131,072 B. All 42 layers to the window's 257
    blocks: 1,414,791,168 B; the 7,175,143,424 B left // (21 full layers x 131,072 B) = 2,606 more blocks:
    2,863 blocks = 45,808 tokens."""
    assert longest_context(GEMMA2, 8 * GiB, 1) == 45_808


def test_longest_context_is_unbounded_when_every_layer_slides():
    assert longest_context(MISTRAL, 20 * GiB, 8) is None


def test_longest_context_is_zero_when_the_state_alone_does_not_fit():
    assert longest_context(QWEN3_NEXT, 10 * MiB, 1) == 0


@settings(max_examples=500, deadline=None)
@given(
    model=st.sampled_from([QWEN3, MISTRAL, GEMMA2, GEMMA3, JAMBA, QWEN3_NEXT]),
    budget=st.integers(0, 200 * GiB),
    sequences=st.integers(1, 256),
    block_size=st.sampled_from([1, 16, 32, 256, 4096, 5000]),
)
def test_longest_context_fits_and_one_block_more_does_not(model, budget, sequences, block_size):
    longest = longest_context(model, budget, sequences, block_size)
    if longest is None:  # no limit: any length fits
        assert sequences * sequence_cost(model, 10**9, block_size).total <= budget
        return
    if longest:
        assert sequences * sequence_cost(model, longest, block_size).total <= budget
    assert sequences * sequence_cost(model, (longest or 0) + block_size, block_size).total > budget


def test_capacity_explains_each_answer():
    lines = capacity(QWEN3, 20 * GiB, context=32_768, sequences=4).explain().splitlines()
    assert lines[0] == (
        "tokens: 21474836480 B // block 2359296 B (16 tokens x 147456 B per token) = 9102 blocks = 145632 tokens"
    )
    assert lines[1].startswith("sequences at 32768 tokens: each holds (36 full layers x 2048 blocks) x 65536 B")
    assert lines[1].endswith("20.00 GiB holds 4")
    assert lines[2] == "longest context for 4 sequence(s): (21474836480 B // 4) in whole blocks = 36400 tokens"


def test_capacity_says_when_the_models_max_context_is_lower():
    lines = capacity(QWEN3, 20 * GiB, sequences=1).explain().splitlines()
    assert lines[-1] == "  capped at the model's maximum context: 40960 tokens (max_position_embeddings 40960)"


def test_capacity_as_dict_gives_exact_ints():
    data = capacity(QWEN3, 20 * GiB, context=17, sequences=4).as_dict()
    assert (data["num_blocks"], data["tokens"], data["sequences_at_context"], data["longest_context"]) == (
        9102,
        145_632,
        4551,
        36_400,
    )
    assert data["sequence"]["total_bytes"] == 4_718_592


def test_zero_context_is_refused():
    with pytest.raises(SizingError, match="context must be a whole number >= 1, got 0"):
        sequence_cost(QWEN3, 0)


# --- (context, sequences) -> what it needs ---------------------------------------------------------------------


def test_fit_budget_is_the_planners():
    result = fit(QWEN3, context=32_768, sequences=8, total=80 * GiB, utilization=0.9, transient_peak_bytes=2 * GiB)
    assert (
        result.kv_budget
        == plan_for_model(QWEN3, total=80 * GiB, utilization=0.9, transient_peak_bytes=2 * GiB).kv_cache_bytes
    )


def test_fit_needed_utilization_is_the_smallest_that_holds_the_target():
    """8 x 32,768 tokens of Qwen3-8B need 38,654,705,664 B + 16,381,470,720 B of weights = 64.07% of 80 GiB."""
    result = fit(QWEN3, context=32_768, sequences=8, total=80 * GiB)
    assert result.needed_kv_bytes == 38_654_705_664 and result.needed_utilization == 0.6408
    at = plan_for_model(QWEN3, total=80 * GiB, utilization=0.6408).kv_cache_bytes
    below = plan_for_model(QWEN3, total=80 * GiB, utilization=0.6407).kv_cache_bytes
    assert at >= result.needed_kv_bytes > below


def test_fit_just_fits_and_one_block_more_does_not():
    budget = plan_for_model(QWEN3, total=24 * GiB, utilization=0.9, transient_peak_bytes=GiB).kv_cache_bytes
    longest = longest_context(QWEN3, budget, 1)
    options = {"sequences": 1, "total": 24 * GiB, "utilization": 0.9, "transient_peak_bytes": GiB}
    assert fit(QWEN3, context=longest, **options).fits
    more = fit(QWEN3, context=longest + 16, **options)
    assert not more.fits and 0 < more.needed_kv_bytes - more.kv_budget <= 2_359_296


def test_fit_counts_the_gpus_tensor_parallel_needs():
    """Qwen3-8B's 15.26 GiB of weights and 4096 x 147,456 B of KV need (16,381,470,720 + 603,979,776) / 16 GiB =
    98.87% of one 16 GiB device; at 0.9 it takes 2 ranks, each holding 7.63 GiB and half the KV heads."""
    result = fit(QWEN3, context=4096, sequences=1, total=16 * GiB)
    assert (result.fits, result.needed_utilization, result.gpus) == (False, 0.9887, 2)


def test_fit_needs_no_utilization_when_the_weights_exceed_the_device():
    assert fit(QWEN3, context=4096, sequences=1, total=8 * GiB).needed_utilization is None


def test_fit_fails_when_free_memory_is_below_the_request():
    result = fit(QWEN3, context=4096, sequences=1, total=80 * GiB, free=60 * GiB)
    assert result.fits_memory and result.reasons == ["free memory is below the request"]


def test_fit_fails_past_the_models_max_context():
    result = fit(QWEN3, context=40_961, sequences=1, total=80 * GiB)
    assert result.fits_memory and result.reasons == [
        "the context exceeds the model's maximum context (max_position_embeddings 40960)"
    ]


def test_fit_lines_say_why_not():
    result = fit(QWEN3, context=4096, sequences=1, total=16 * GiB)
    assert result.explain().splitlines()[0].startswith("fits: no (the KV budget is ")
    assert "  GPUs of this kind needed (tensor parallel, same utilization): 2" in result.explain().splitlines()


# --- one allocation, rounded up to the allocator's granularity -------------------------------------------------


@settings(max_examples=200, deadline=None)
@given(model=st.sampled_from([QWEN3, GEMMA3, JAMBA]), budget=st.integers(64 * MiB, 200 * GiB))
def test_capacity_in_allocation_units_has_the_blocks_the_planner_allocates(model, budget):
    expected = plan_for_model(model, pinned_bytes=budget, allocation_granularity=ALLOCATOR_GRANULARITY).num_blocks
    assert capacity(model, budget, allocation_granularity=ALLOCATOR_GRANULARITY).num_blocks == expected


def test_fit_counts_only_whole_allocation_units():
    """A budget of 9,103 blocks of 2,359,296 B = 21,476,261,888 B is 10,240 whole 2 MiB units = 21,474,836,480 B:
    9,102 blocks. One sequence of 9,103 x 16 tokens fits byte for byte, not in whole units."""
    total, options = 32 * GiB, {"context": 9103 * 16, "sequences": 1}
    weights = plan_for_model(QWEN3, total=total, utilization=0.9, weights=0).kv_cache_bytes - 9103 * 2_359_296
    model = ModelMemory.from_config({**QWEN3_8B, "max_position_embeddings": 10**6}, weights_bytes=weights)
    assert fit(model, total=total, **options).fits
    assert not fit(model, total=total, allocation_granularity=ALLOCATOR_GRANULARITY, **options).fits_memory
