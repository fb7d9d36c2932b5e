"""The engine co-tenancy benchmarks (vllm_cotenants.py, sglang_cotenants.py) give every round a profile store of its
own, so that a round's figures do not depend on the rounds run before it in the same command."""

from __future__ import annotations

from pathlib import Path

import pytest

BENCHMARKS = Path(__file__).resolve().parents[2] / "benchmarks"


@pytest.fixture
def round_profile_store(monkeypatch):
    monkeypatch.syspath_prepend(str(BENCHMARKS))
    from common import round_profile_store

    return round_profile_store


def test_rounds_of_other_scenarios_modes_or_shapes_get_stores_of_their_own(round_profile_store):
    stores = {
        round_profile_store("/t", "tinyllama", "graphs-solo-0.3", "plugin"),
        round_profile_store("/t", "tinyllama", "graphs-two-0.3", "plugin"),
        round_profile_store("/t", "tinyllama", "graphs-two-0.3", "stock"),
        round_profile_store("/t", "qwen3", "graphs-two-0.3", "plugin"),
    }
    assert len(stores) == 4
    assert all(store.startswith("/t/") for store in stores)


def test_a_warm_round_reads_the_store_of_the_round_it_repeats(round_profile_store):
    assert round_profile_store("/t", "qwen3", "solo-0.3-warm", "plugin") == round_profile_store(
        "/t", "qwen3", "solo-0.3", "plugin"
    )
