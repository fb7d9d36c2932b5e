"""devmem.engine.block_cost: a block's cost from runs of an engine at growing block counts.

The engine here is a formula standing in for an engine's runs (the callable is the engine's side of the API): it
holds ``HELD`` bytes a block; its forward's peak is the larger of a step that reads nothing of the cache (``FLAT``)
and the attention step, which reads ``READ_BACK`` bytes a block back.
"""

from __future__ import annotations

import pytest

from devmem.engine.block_cost import (
    CAUTION,
    CONFIRM,
    BlockCost,
    BlockRun,
    grows_linearly,
    growth_per_block,
    measure_block_cost,
)
from devmem.planner.sizing import SizingError

HELD = 100
READ_BACK = 50
FLAT = 10_000
BASE = 1000


def engine_run(num_blocks: int, measured: bool = True) -> BlockRun:
    held = BASE + HELD * num_blocks
    if not measured:
        return BlockRun(num_blocks, held)
    peak = held + max(FLAT, READ_BACK * num_blocks)
    return BlockRun(num_blocks, held, peak, peak)


class Engine:
    """Runs of the formula engine, recorded."""

    def __init__(self, measured: bool = True):
        self.measured, self.sizes = measured, []

    def __call__(self, num_blocks: int) -> BlockRun:
        self.sizes.append(num_blocks)
        return engine_run(num_blocks, self.measured)


def budget_plan(budget: int):
    """The blocks a plan gives: the line through the first run's measured peak at the cost's block bytes."""

    def plan(cost: BlockCost) -> int:
        return (budget - cost.fixed_bytes(cost.runs[0].peak)) // cost.block_bytes

    return plan


def test_a_peak_that_grows_only_by_the_held_tensors_is_not_taken_as_its_linear_growth():
    runs = [engine_run(n) for n in (33, 66, 132)]  # the flat step sets the peak in all three
    assert growth_per_block(runs[-2], runs[-1]) == HELD
    assert not grows_linearly(runs)


def test_two_runs_past_the_first_runs_transient_grow_linearly():
    runs = [engine_run(n) for n in (33, 400, 800)]
    assert grows_linearly(runs)
    assert growth_per_block(runs[-2], runs[-1]) == HELD + READ_BACK


def test_a_run_still_at_the_flat_step_is_not_linear_with_the_next():
    runs = [engine_run(n) for n in (33, 150, 800)]  # at 150 blocks the attention reads 7500 < FLAT
    assert not grows_linearly(runs)


def test_growths_that_agree_after_the_attention_takes_over_are_linear():
    runs = [engine_run(n) for n in (1, 264, 528, 1056)]
    runs[0] = BlockRun(1, BASE + HELD, BASE + HELD + 10**9, BASE + HELD + 10**9)  # a first run with a huge flat step
    assert grows_linearly(runs)


def test_the_reserved_peaks_growth_is_charged_where_it_outgrows_the_allocated_one():
    before, after = engine_run(400), engine_run(800)
    after = BlockRun(800, after.held_bytes, after.peak_bytes, after.peak_bytes + 400 * 70)  # a pool: 70 B a block
    assert growth_per_block(before, after) == HELD + READ_BACK + 70


def test_without_peak_statistics_the_held_tensors_grow_linearly_from_the_first_two_runs():
    runs = [engine_run(33, measured=False), engine_run(66, measured=False)]
    assert grows_linearly(runs)
    assert growth_per_block(*runs) == HELD


def test_measuring_runs_towards_the_plan_until_two_runs_grow_linearly():
    engine = Engine()
    budget = BASE + 2000 * (HELD + READ_BACK)  # the formula engine fits 2000 blocks exactly
    cost = measure_block_cost(engine, [400], budget_plan(budget), made=[engine_run(33)])
    assert cost.linear and cost.block_bytes == HELD + READ_BACK
    assert engine.sizes[0] == 400 and len(engine.sizes) == 2
    # the run after one that did not confirm the growth is planned with the growth raised by CAUTION
    planned = budget_plan(budget)(cost)
    assert planned / (1 + CAUTION) - 400 <= engine.sizes[1] < planned <= 2000


def test_the_plan_is_the_line_through_the_first_run_above_the_peak_of_every_size():
    cost = BlockCost(HELD + READ_BACK, (engine_run(33), engine_run(400), engine_run(800)), True)
    fixed = cost.fixed_bytes(engine_run(33).peak)  # the window's transient holds its blocks
    assert fixed == engine_run(33).peak - 33 * cost.block_bytes
    assert all(fixed + n * cost.block_bytes >= engine_run(n).peak for n in range(33, 5000, 7))


def test_once_linear_a_plan_far_beyond_the_largest_run_is_confirmed_by_one_more_run_just_below_it():
    engine = Engine()
    budget = BASE + 20_000 * (HELD + READ_BACK)
    cost = measure_block_cost(engine, [400, 800], budget_plan(budget), made=[engine_run(33)])
    planned = budget_plan(budget)(cost)
    assert engine.sizes[:2] == [400, 800] and len(engine.sizes) == 3
    assert planned / (1 + 2 * CONFIRM) <= engine.sizes[2] < planned


def test_without_peak_statistics_the_sizes_given_suffice():
    engine = Engine(measured=False)
    cost = measure_block_cost(engine, [66], budget_plan(10**9), made=[engine_run(33, measured=False)])
    assert engine.sizes == [66] and cost.block_bytes == HELD and cost.linear


def test_a_growth_never_confirmed_is_charged_its_last_value_with_a_note():
    engine = Engine()
    cost = measure_block_cost(
        engine, [40, 50], budget_plan(BASE + 10**7), made=[engine_run(33)], max_runs=3
    )  # 3 runs, all at the flat step
    assert not cost.linear and "did not yet grow linearly" in cost.notes[0]


@pytest.mark.parametrize(
    ("made", "sizes"),
    [([], [10]), ([], [10, 5]), ([engine_run(33)], [33]), ([], [0, 4])],
)
def test_runs_that_do_not_grow_are_refused(made, sizes):
    with pytest.raises(SizingError, match="at least two ascending block counts"):
        measure_block_cost(Engine(), sizes, budget_plan(10**9), made=made)


@pytest.mark.parametrize("bad", [-1, 1.5, True, "4"])
def test_a_run_with_a_figure_that_is_not_a_whole_number_is_refused(bad):
    with pytest.raises(SizingError, match="BlockRun.held_bytes must be a whole number"):
        BlockRun(4, bad)


@pytest.mark.parametrize("sizes", [None, 5, "48", ["4", "8"], [4, 8.0], iter([4, 8])])
def test_sizes_that_are_not_a_list_of_block_counts_are_refused_naming_them(sizes):
    with pytest.raises(SizingError, match=r"sizes must be (a list of )?block counts"):
        measure_block_cost(Engine(), sizes, budget_plan(10**9))


def test_sizes_beyond_2_64_blocks_are_refused_before_the_engine_runs():
    engine = Engine()
    with pytest.raises(SizingError, match=r"sizes must be below 2\*\*64"):
        measure_block_cost(engine, [4, 2**70], budget_plan(10**9))
    assert engine.sizes == []


@pytest.mark.parametrize("returned", [None, {"num_blocks": 4, "held_bytes": 4}])
def test_a_run_that_returns_no_block_run_is_refused_naming_what_it_returned(returned):
    with pytest.raises(SizingError, match=r"run\(4\) must return a BlockRun .* of type"):
        measure_block_cost(lambda n: returned, [4, 8], budget_plan(10**9))


def test_a_run_at_another_block_count_than_asked_is_refused():
    with pytest.raises(SizingError, match=r"run\(4\) returned a BlockRun of 5 blocks"):
        measure_block_cost(lambda n: engine_run(n + 1), [4, 8], budget_plan(10**9))


@pytest.mark.parametrize("held", [lambda n: 0, lambda n: 10**9 - n * HELD])
def test_runs_whose_footprint_does_not_grow_with_the_blocks_are_refused(held):
    def run(n):
        return BlockRun(n, held(n), held(n), held(n))

    with pytest.raises(SizingError, match="the runs at 4 and 8 blocks did not grow"):
        measure_block_cost(run, [4, 8], budget_plan(10**9))


def test_numpy_integers_are_taken_as_python_ints():
    np = pytest.importorskip("numpy")
    run = BlockRun(np.int64(4), np.int64(4 * HELD), np.int64(4 * HELD), None)
    assert type(run.num_blocks) is int and type(run.held_bytes) is int and type(run.peak_bytes) is int
    cost = measure_block_cost(engine_run, [np.int64(40), np.int64(80)], budget_plan(10**6))
    assert [r.num_blocks for r in cost.runs][:2] == [40, 80]


def test_a_block_run_of_2_64_bytes_or_more_is_refused():
    with pytest.raises(SizingError, match=r"BlockRun.held_bytes must be below 2\*\*64"):
        BlockRun(4, 2**70)


def test_the_runs_it_places_are_rounded_up_to_the_granularity():
    engine = Engine()
    measure_block_cost(engine, [33, 66], budget_plan(10_000_000), granularity=7)
    placed = engine.sizes[2:]
    assert placed and all(n % 7 == 0 for n in placed)


@pytest.mark.parametrize("bad", [0, -2, 1.5, True, "4"])
def test_a_granularity_that_is_no_whole_number_of_blocks_is_refused_naming_it(bad):
    with pytest.raises(SizingError, match=r"granularity must be a whole number of blocks (>= 1|\(int\)), got"):
        measure_block_cost(Engine(), [33, 66], budget_plan(10_000_000), granularity=bad)
