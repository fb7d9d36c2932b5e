"""devmem.planner.sizing: the pure KV-cache arithmetic, its three paths, its errors, and readings from real reports."""

from __future__ import annotations

import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

import devmem
from devmem import DevmemError, GiB, MiB, NotEnoughMemoryError
from devmem.planner.sizing import (
    SizingError,
    blocks_for_bytes,
    growable_kv_cache_bytes,
    plan_growable,
    plan_kv_cache,
    plan_pinned,
    plan_utilization,
    profiled_kv_cache_bytes,
    requested_memory,
)

#: Qwen3-8B (36 layers, 8 KV heads, head_dim 128, bf16, 16-token pages): one page is 64 KiB per layer.
QWEN3_8B_PAGE = 16 * 2 * 8 * 128 * 2
QWEN3_8B_LAYERS = 36

sizes = st.integers(min_value=0, max_value=1 << 48)
utilizations = st.floats(min_value=0.0, max_value=1.0, exclude_min=True, allow_nan=False)
pages = st.integers(min_value=1, max_value=1 << 24)
layers = st.integers(min_value=1, max_value=128)


def _gib(figure: float) -> int:
    """Exact bytes of a GiB figure as a report prints it."""
    return round(figure * GiB)


# ---- requested memory ------------------------------------------------------------------------------------


def test_requested_memory_reads_a_float_utilization_as_the_decimal_it_prints():
    assert requested_memory(1000, 0.9) == 900  # 0.9 means 9/10, not the float just above it


def test_requested_memory_rounds_a_fraction_of_a_byte_up():
    assert requested_memory(1001, 0.5) == 501
    assert requested_memory(3, 0.1) == 1


def test_requested_memory_at_full_utilization_is_the_total():
    assert requested_memory(80 * GiB, 1) == 80 * GiB


@given(total=st.integers(min_value=1, max_value=1 << 48), utilization=utilizations)
def test_requested_memory_stays_within_the_total(total, utilization):
    requested = requested_memory(total, utilization)
    assert type(requested) is int and 0 < requested <= total


# ---- properties of the budget ----------------------------------------------------------------------------


@given(
    total=st.integers(min_value=1, max_value=1 << 48),
    utilization=utilizations,
    consumed=sizes,
    transient=sizes,
    graphs=sizes,
)
def test_profiled_budget_never_exceeds_requested_minus_consumed(total, utilization, consumed, transient, graphs):
    requested = requested_memory(total, utilization)
    assert profiled_kv_cache_bytes(requested, consumed, transient, graphs) <= requested - consumed


@given(requested=sizes, init_free=sizes, free=sizes, committed=sizes, transient=sizes)
def test_growable_budget_leaves_the_transient_peak_and_at_least_a_gib_free(
    requested, init_free, free, committed, transient
):
    kv = growable_kv_cache_bytes(
        requested_memory=requested,
        init_free_memory=init_free,
        free_memory=free,
        committed_bytes=committed,
        transient_peak_bytes=transient,
    )
    assert kv >= 0
    assert kv == 0 or kv + transient + GiB <= free + committed


@given(requested=sizes, init_free=sizes, free=sizes, committed=sizes, transient=sizes)
def test_growable_budget_never_exceeds_requested_minus_what_others_than_the_cache_took(
    requested, init_free, free, committed, transient
):
    kv = growable_kv_cache_bytes(
        requested_memory=requested,
        init_free_memory=init_free,
        free_memory=free,
        committed_bytes=committed,
        transient_peak_bytes=transient,
    )
    assert kv == 0 or kv + transient <= requested - (init_free - free - committed)


@given(requested=sizes, init_free=sizes, free=sizes, committed=sizes, transient=sizes, more=sizes)
def test_growable_budget_never_shrinks_when_more_is_free(requested, init_free, free, committed, transient, more):
    def kv(free_now: int) -> int:
        return growable_kv_cache_bytes(
            requested_memory=requested,
            init_free_memory=init_free + more,
            free_memory=free_now,
            committed_bytes=committed,
            transient_peak_bytes=transient,
        )

    assert kv(free) <= kv(free + more)


# ---- the growable formula, term by term ------------------------------------------------------------------


def test_growable_margin_is_three_quarters_of_a_large_transient_peak():
    # min(100 - (90 - 80 - 2), 80 + 2 - 0.75 * 4) - 4 = 75 GiB
    assert (
        growable_kv_cache_bytes(
            requested_memory=100 * GiB,
            init_free_memory=90 * GiB,
            free_memory=80 * GiB,
            committed_bytes=2 * GiB,
            transient_peak_bytes=4 * GiB,
        )
        == 75 * GiB
    )


def test_growable_margin_is_a_gib_below_a_small_transient_peak():
    # min(100 - 8, 80 + 2 - 1) - 1 = 80 GiB: 0.75 GiB of margin is raised to the 1 GiB floor
    assert (
        growable_kv_cache_bytes(
            requested_memory=100 * GiB,
            init_free_memory=90 * GiB,
            free_memory=80 * GiB,
            committed_bytes=2 * GiB,
            transient_peak_bytes=GiB,
        )
        == 80 * GiB
    )


def test_growable_budget_without_a_transient_peak_keeps_exactly_a_gib_free():
    # min(100 - 0, 50 - 1) - 0 = 49 GiB
    assert (
        growable_kv_cache_bytes(requested_memory=100 * GiB, init_free_memory=50 * GiB, free_memory=50 * GiB) == 49 * GiB
    )


def test_growable_plan_margin_is_the_gib_floor_for_a_small_transient_peak():
    plan = plan_growable(
        total=100 * GiB,
        init_free_memory=50 * GiB,
        free_memory=50 * GiB,
        transient_peak_bytes=256 * MiB,
        page_size_bytes=MiB,
        num_layers=1,
    )
    assert plan.breakdown["margin"] == GiB and plan.kv_cache_bytes == 48 * GiB + 768 * MiB


def test_growable_budget_binds_on_requested_minus_what_others_took():
    # min(50 - (90 - 60 - 0), 60 - 1) - 0 = 20 GiB
    assert (
        growable_kv_cache_bytes(requested_memory=50 * GiB, init_free_memory=90 * GiB, free_memory=60 * GiB) == 20 * GiB
    )


def test_growable_budget_subtracts_the_transient_peak_once_more_beside_the_margin():
    # min(200 - 0, 80 - 6) - 8 = 66 GiB
    assert (
        growable_kv_cache_bytes(
            requested_memory=200 * GiB, init_free_memory=80 * GiB, free_memory=80 * GiB, transient_peak_bytes=8 * GiB
        )
        == 66 * GiB
    )


@given(
    total=st.integers(min_value=1, max_value=1 << 48),
    low=utilizations,
    high=utilizations,
    consumed=sizes,
    transient=sizes,
)
def test_profiled_budget_is_monotonic_in_utilization(total, low, high, consumed, transient):
    low, high = sorted((low, high))
    assert profiled_kv_cache_bytes(requested_memory(total, low), consumed, transient) <= profiled_kv_cache_bytes(
        requested_memory(total, high), consumed, transient
    )


@given(
    total=st.integers(min_value=1, max_value=1 << 48),
    low=utilizations,
    high=utilizations,
    init_free=sizes,
    free=sizes,
    committed=sizes,
    transient=sizes,
)
def test_growable_budget_is_monotonic_in_utilization(total, low, high, init_free, free, committed, transient):
    low, high = sorted((low, high))

    def kv(u: float) -> int:
        return growable_kv_cache_bytes(
            requested_memory=requested_memory(total, u),
            init_free_memory=init_free,
            free_memory=free,
            committed_bytes=committed,
            transient_peak_bytes=transient,
        )

    assert kv(low) <= kv(high)


@given(kv=sizes, page=pages, num_layers=layers)
def test_blocks_never_exceed_the_budget(kv, page, num_layers):
    blocks = blocks_for_bytes(kv, page, num_layers)
    assert type(blocks) is int and 0 <= blocks * page * num_layers <= kv < (blocks + 1) * page * num_layers


@given(
    total=st.integers(min_value=1, max_value=1 << 48),
    utilization=utilizations,
    weights=sizes,
    peak=sizes,
    non_torch=sizes,
    page=pages,
    num_layers=layers,
)
def test_every_accepted_utilization_plan_is_in_whole_bytes_and_blocks(
    total, utilization, weights, peak, non_torch, page, num_layers
):
    try:
        plan = plan_kv_cache(
            total=total,
            utilization=utilization,
            weights=weights,
            transient_peak_bytes=peak,
            non_torch=non_torch,
            page_size_bytes=page,
            num_layers=num_layers,
        )
    except NotEnoughMemoryError as exc:
        assert exc.breakdown["kv_cache"] < page * num_layers
        return
    assert type(plan.kv_cache_bytes) is int and type(plan.num_blocks) is int
    assert all(type(v) is int for v in plan.breakdown.values())
    assert plan.num_blocks >= 1 and plan.num_blocks * plan.block_bytes <= plan.kv_cache_bytes
    assert plan.kv_cache_bytes <= requested_memory(total, utilization) - weights - non_torch


# ---- bad input -------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "name",
    [
        "weights",
        "transient_peak_bytes",
        "non_torch",
        "graph_capture",
        "consumed",
        "other_processes",
        "released_cache",
        "total",
    ],
)
@pytest.mark.parametrize("bad", [-1, 1.5, 1024.0, float("nan"), float("inf"), True, "4096"])
def test_bytes_that_are_not_whole_nonnegative_ints_are_refused(name, bad):
    with pytest.raises(SizingError, match=name) as info:
        plan_kv_cache(**{"total": GiB, name: bad}, page_size_bytes=4096, num_layers=1)
    assert isinstance(info.value, ValueError) and isinstance(info.value, DevmemError)
    assert repr(bad) in str(info.value)


@pytest.mark.parametrize(
    "bad, says",
    [
        (0, "in (0, 1], got 0"),
        (0.0, "in (0, 1], got 0.0"),
        (-0.1, "in (0, 1], got -0.1"),
        (1.01, "in (0, 1], got 1.01"),
        (float("nan"), "must be finite, got nan"),
        (float("inf"), "must be finite, got inf"),
        (True, "must be a real number"),
    ],
)
def test_utilization_outside_zero_to_one_is_refused(bad, says):
    with pytest.raises(SizingError, match=r"^utilization ") as info:
        requested_memory(GiB, bad)
    assert says in str(info.value)


@pytest.mark.parametrize(
    "page, num_layers, name",
    [(0, 32, "page_size_bytes"), (4096, 0, "num_layers"), (4096, 1.0, "num_layers"), (-4096, 32, "page_size_bytes")],
)
def test_zero_page_size_or_layers_is_refused(page, num_layers, name):
    with pytest.raises(SizingError, match=name):
        blocks_for_bytes(GiB, page, num_layers)


def test_zero_total_is_refused():
    with pytest.raises(SizingError, match="total must be > 0"):
        requested_memory(0, 0.9)


def test_pinned_and_growable_arguments_together_are_refused():
    with pytest.raises(SizingError, match="give one of them"):
        plan_kv_cache(pinned_bytes=GiB, free_memory=GiB, init_free_memory=GiB, page_size_bytes=4096, num_layers=1)


def test_utilization_path_without_total_is_refused():
    with pytest.raises(SizingError, match="needs total"):
        plan_kv_cache(weights=GiB, page_size_bytes=4096, num_layers=1)


def test_growable_path_needs_both_free_readings():
    with pytest.raises(SizingError, match="both init_free_memory and free_memory"):
        plan_kv_cache(total=8 * GiB, free_memory=4 * GiB, page_size_bytes=4096, num_layers=1)


def test_graph_capture_estimate_on_the_growable_path_is_refused():
    with pytest.raises(SizingError, match="graph_capture applies to the utilization path"):
        plan_kv_cache(
            total=8 * GiB,
            init_free_memory=8 * GiB,
            free_memory=6 * GiB,
            graph_capture=MiB,
            page_size_bytes=4096,
            num_layers=1,
        )


def test_pinned_size_below_one_block_is_refused():
    with pytest.raises(SizingError, match="smaller than one block"):
        plan_kv_cache(pinned_bytes=MiB, page_size_bytes=QWEN3_8B_PAGE, num_layers=QWEN3_8B_LAYERS)


# ---- the utilization path --------------------------------------------------------------------------------


def test_utilization_plan_subtracts_weights_transient_peak_non_torch_and_graphs():
    plan = plan_kv_cache(
        total=80 * GiB,
        utilization=0.9,
        weights=16 * GiB,
        transient_peak_bytes=4 * GiB,
        non_torch=GiB // 2,
        graph_capture=GiB // 4,
        page_size_bytes=QWEN3_8B_PAGE,
        num_layers=QWEN3_8B_LAYERS,
    )
    # 72 GiB requested - 20.75 GiB = 51.25 GiB = 23324 blocks of 2.25 MiB
    assert plan.path == "utilization" and plan.kv_cache_bytes == 51 * GiB + GiB // 4
    assert plan.num_blocks == 23324
    assert plan.breakdown["non_kv"] == 20 * GiB + 3 * GiB // 4


def test_utilization_plan_of_an_odd_total_rounds_the_request_up():
    plan = plan_utilization(total=1001, utilization=0.5, weights=100, page_size_bytes=1, num_layers=1)
    assert (plan.breakdown["requested"], plan.kv_cache_bytes) == (501, 401)


def test_measured_consumption_replaces_weights_plus_non_torch():
    plan = plan_kv_cache(
        total=80 * GiB,
        utilization=0.5,
        consumed=20 * GiB,
        weights=16 * GiB,
        non_torch=GiB,
        page_size_bytes=4096,
        num_layers=1,
    )
    assert plan.kv_cache_bytes == 40 * GiB - 20 * GiB


def test_shortfall_lists_every_figure_and_the_utilization_needed():
    with pytest.raises(NotEnoughMemoryError) as info:
        plan_kv_cache(
            total=80 * GiB,
            utilization=0.5,
            weights=36 * GiB,
            transient_peak_bytes=4 * GiB,
            non_torch=GiB,
            other_processes=3 * GiB,
            page_size_bytes=QWEN3_8B_PAGE,
            num_layers=QWEN3_8B_LAYERS,
        )
    message, b = str(info.value), info.value.breakdown
    for words in (
        "requested 40.00 GiB",
        "weights 36.00 GiB",
        "transient peak 4.00 GiB",
        "non-torch 1.00 GiB",
        "other processes 3.00 GiB",
        "at least 0.513",
    ):
        assert words in message
    assert b["kv_cache"] == -GiB and b["other_processes"] == 3 * GiB and b["needed_utilization"] == 0.513


def test_the_utilization_named_in_a_shortfall_is_enough():
    figures = dict(
        total=80 * GiB,
        weights=36 * GiB,
        transient_peak_bytes=4 * GiB,
        non_torch=GiB,
        page_size_bytes=QWEN3_8B_PAGE,
        num_layers=QWEN3_8B_LAYERS,
    )
    with pytest.raises(NotEnoughMemoryError) as info:
        plan_kv_cache(utilization=0.5, **figures)
    assert plan_kv_cache(utilization=info.value.breakdown["needed_utilization"], **figures).num_blocks >= 1


def test_shortfall_without_other_processes_figure_does_not_invent_one():
    with pytest.raises(NotEnoughMemoryError) as info:
        plan_kv_cache(total=8 * GiB, weights=8 * GiB, page_size_bytes=4096, num_layers=1)
    assert "other processes" not in str(info.value) and info.value.breakdown["other_processes"] is None


def test_model_larger_than_the_device_says_no_utilization_is_enough():
    with pytest.raises(NotEnoughMemoryError, match="no utilization is enough") as info:
        plan_kv_cache(total=24 * GiB, utilization=1.0, weights=30 * GiB, page_size_bytes=4096, num_layers=1)
    assert info.value.breakdown["needed_utilization"] is None


def test_budget_below_one_block_is_not_enough_memory():
    with pytest.raises(NotEnoughMemoryError, match="less than one block"):
        plan_kv_cache(total=GiB, utilization=1.0, weights=GiB - MiB, page_size_bytes=2 * MiB, num_layers=1)


# ---- the growable path: a disaggregated prefill/decode start on a DGX Spark ------------------------------

#: Raw cudaMemGetInfo readings of a disaggregated prefill/decode start on a DGX Spark (GB10), as reported.
SPARK_TOTAL = _gib(121.69)
SPARK_FREE = _gib(10.46)
SPARK_COMMITTED = _gib(0.73)
SPARK_TRANSIENT_PEAK = _gib(7.28)


@pytest.mark.parametrize("init_free", [SPARK_FREE + SPARK_COMMITTED, _gib(60.0), SPARK_TOTAL])
def test_dgx_spark_disaggregated_start_leaves_no_growable_budget(init_free):
    kv = growable_kv_cache_bytes(
        requested_memory=requested_memory(SPARK_TOTAL, 0.9),
        init_free_memory=init_free,
        free_memory=SPARK_FREE,
        committed_bytes=SPARK_COMMITTED,
        transient_peak_bytes=SPARK_TRANSIENT_PEAK,
    )
    assert kv == 0


def test_dgx_spark_headroom_term_is_minus_1_55_gib_with_a_5_46_gib_margin():
    with pytest.raises(NotEnoughMemoryError) as info:
        plan_growable(
            total=SPARK_TOTAL,
            init_free_memory=SPARK_FREE + SPARK_COMMITTED,
            free_memory=SPARK_FREE,
            committed_bytes=SPARK_COMMITTED,
            transient_peak_bytes=SPARK_TRANSIENT_PEAK,
            page_size_bytes=QWEN3_8B_PAGE,
            num_layers=QWEN3_8B_LAYERS,
        )
    b = info.value.breakdown
    assert round(b["margin"] / GiB, 2) == 5.46  # 0.75 * 7.28 GiB, above the 1 GiB floor
    assert round(b["kv_cache"] / GiB, 2) == -1.55  # 10.46 + 0.73 - 5.46 - 7.28


def test_dgx_spark_plan_raises_with_the_numbers():
    with pytest.raises(NotEnoughMemoryError) as info:
        plan_kv_cache(
            total=SPARK_TOTAL,
            utilization=0.9,
            init_free_memory=SPARK_FREE + SPARK_COMMITTED,
            free_memory=SPARK_FREE,
            committed_bytes=SPARK_COMMITTED,
            transient_peak_bytes=SPARK_TRANSIENT_PEAK,
            page_size_bytes=QWEN3_8B_PAGE,
            num_layers=QWEN3_8B_LAYERS,
        )
    message, b = str(info.value), info.value.breakdown
    for words in (
        "free 10.46 GiB",
        "committed 747.52 MiB",
        "margin 5.46 GiB",
        "transient peak 7.28 GiB",
        "= -1.55 GiB",
        "no utilization is enough",
    ):
        assert words in message
    assert b["free_cap"] - b["transient_peak"] == b["kv_cache"] and round(b["kv_cache"] / GiB, 2) == -1.55
    assert b["needed_utilization"] is None


def test_growable_plan_with_headroom_gives_blocks():
    plan = plan_kv_cache(
        total=SPARK_TOTAL,
        utilization=0.9,
        init_free_memory=_gib(100.0),
        free_memory=_gib(80.0),
        committed_bytes=_gib(2.0),
        transient_peak_bytes=SPARK_TRANSIENT_PEAK,
        page_size_bytes=QWEN3_8B_PAGE,
        num_layers=QWEN3_8B_LAYERS,
    )
    assert plan.path == "growable"
    assert round(plan.kv_cache_bytes / GiB, 2) == 69.26  # 80 + 2 - 5.46 - 7.28
    assert plan.num_blocks == 31520
    assert plan.breakdown["margin"] == 5862630360  # ceil(0.75 * 7.28 GiB)


def test_growable_plan_and_growable_budget_agree():
    figures = dict(
        init_free_memory=_gib(100.0),
        free_memory=_gib(80.0),
        committed_bytes=_gib(2.0),
        transient_peak_bytes=SPARK_TRANSIENT_PEAK,
    )
    plan = plan_growable(total=SPARK_TOTAL, page_size_bytes=QWEN3_8B_PAGE, num_layers=QWEN3_8B_LAYERS, **figures)
    assert plan.kv_cache_bytes == growable_kv_cache_bytes(
        requested_memory=requested_memory(SPARK_TOTAL, 0.9), **figures
    )


# ---- the pinned path: Qwen3-8B ---------------------------------------------------------------------------

QWEN3_8B_PINNED = 20 * GiB
#: What the profile pass of Qwen3-8B left cached in the allocator, as reported.
QWEN3_8B_CACHED = 1220 * MiB


def test_pinned_path_function_is_what_plan_kv_cache_chooses_for_a_pinned_size():
    assert plan_pinned(
        pinned_bytes=QWEN3_8B_PINNED, page_size_bytes=QWEN3_8B_PAGE, num_layers=QWEN3_8B_LAYERS
    ) == plan_kv_cache(pinned_bytes=QWEN3_8B_PINNED, page_size_bytes=QWEN3_8B_PAGE, num_layers=QWEN3_8B_LAYERS)


def test_pinned_plan_is_the_pinned_size_whatever_was_released():
    before = plan_kv_cache(pinned_bytes=QWEN3_8B_PINNED, page_size_bytes=QWEN3_8B_PAGE, num_layers=QWEN3_8B_LAYERS)
    after = plan_kv_cache(
        pinned_bytes=QWEN3_8B_PINNED,
        released_cache=QWEN3_8B_CACHED,
        page_size_bytes=QWEN3_8B_PAGE,
        num_layers=QWEN3_8B_LAYERS,
    )
    assert before.kv_cache_bytes == after.kv_cache_bytes == QWEN3_8B_PINNED
    assert before.num_blocks == after.num_blocks == 9102  # 20 GiB / (64 KiB x 36 layers)


def test_pinned_plan_reports_the_released_cache():
    plan = plan_kv_cache(
        pinned_bytes=QWEN3_8B_PINNED,
        released_cache=QWEN3_8B_CACHED,
        page_size_bytes=QWEN3_8B_PAGE,
        num_layers=QWEN3_8B_LAYERS,
    )
    assert plan.as_dict()["breakdown"]["released_cache"] == QWEN3_8B_CACHED
    assert "released allocator cache  1.19 GiB" in plan.explain()


# ---- the plan object -------------------------------------------------------------------------------------


def test_plan_is_frozen_and_its_breakdown_read_only():
    plan = plan_kv_cache(pinned_bytes=GiB, page_size_bytes=4096, num_layers=1)
    with pytest.raises(AttributeError):
        plan.kv_cache_bytes = 0  # type: ignore[misc]
    with pytest.raises(TypeError):
        plan.breakdown["pinned"] = 0  # type: ignore[index]


def test_plan_as_dict_is_json_with_exact_bytes():
    plan = plan_kv_cache(total=80 * GiB, weights=16 * GiB, page_size_bytes=4096, num_layers=2)
    data = json.loads(json.dumps(plan.as_dict()))
    assert data["kv_cache_bytes"] == plan.kv_cache_bytes and data["breakdown"]["weights"] == 16 * GiB
    assert data["path"] == "utilization" and data["utilization"] == 0.9 and data["block_bytes"] == 8192


def test_explain_says_a_utilization_as_a_person_writes_it_and_keeps_it_exact_in_the_arithmetic():
    share = 500 * MiB / (23 * GiB)  # a size as a share of the device: 0.021229...
    lines = plan_kv_cache(total=80 * GiB, utilization=share, page_size_bytes=64 * 1024, num_layers=4).explain()
    assert lines.splitlines()[1].startswith("path: utilization 0.02123 of the total") and f"({share} x total" in lines


def test_explain_names_the_result_the_path_and_each_figure():
    plan = plan_kv_cache(
        total=80 * GiB,
        weights=16 * GiB,
        transient_peak_bytes=2 * GiB,
        other_processes=GiB,
        page_size_bytes=QWEN3_8B_PAGE,
        num_layers=QWEN3_8B_LAYERS,
    )
    lines = plan.explain().splitlines()
    assert lines[0].startswith(f"KV cache: {plan.kv_cache_bytes / GiB:.2f} GiB ({plan.kv_cache_bytes} bytes)")
    assert lines[1].startswith("path: utilization 0.9")
    assert any(line.split() == ["weights", "16.00", "GiB"] for line in lines)
    assert any(
        line.split() == ["other", "processes", "1.00", "GiB", "(reported,", "not", "subtracted)"] for line in lines
    )


def test_shortfall_advice_does_not_name_other_processes_that_hold_nothing():
    with pytest.raises(devmem.NotEnoughMemoryError) as caught:
        plan_kv_cache(
            total=64 * devmem.GiB,
            utilization=0.1,
            weights=7 * devmem.GiB,
            page_size_bytes=4096,
            num_layers=2,
            other_processes=0,
        )
    assert "other processes hold" not in str(caught.value)
    assert "a utilization of at least 0.110 (7.04 GiB) would hold one block" in str(caught.value)
    assert "smaller or quantized model" in str(caught.value)


def test_shortfall_advice_names_what_other_processes_hold():
    with pytest.raises(devmem.NotEnoughMemoryError, match=r"free memory that other processes hold \(5.00 GiB\)"):
        plan_kv_cache(
            total=64 * devmem.GiB,
            utilization=0.1,
            weights=7 * devmem.GiB,
            page_size_bytes=4096,
            num_layers=2,
            other_processes=5 * devmem.GiB,
        )


def test_a_cotenants_release_between_the_growable_readings_is_not_credited_to_this_engine():
    """10 GiB requested; this engine consumed 3 GiB between the readings while a co-tenant freed 1 GiB: free memory
    fell by 2 GiB only, but the engine holds 3 GiB beside its cache, so the cache gets 7 GiB, not 8."""
    plan = plan_kv_cache(
        total=20 * GiB,
        utilization=0.5,
        init_free_memory=18 * GiB,
        free_memory=16 * GiB,
        consumed=3 * GiB,
        page_size_bytes=MiB,
        num_layers=1,
    )
    assert plan.kv_cache_bytes == 7 * GiB
    assert plan.breakdown["non_kv_used"] == 3 * GiB


def test_the_growable_path_counts_weights_and_non_torch_where_no_consumed_is_given():
    plan = plan_growable(
        total=20 * GiB,
        utilization=0.5,
        init_free_memory=18 * GiB,
        free_memory=16 * GiB,
        weights=2 * GiB,
        non_torch=GiB,
        page_size_bytes=MiB,
        num_layers=1,
    )
    assert plan.kv_cache_bytes == 7 * GiB
