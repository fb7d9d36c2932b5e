"""The reservation benchmarks run end to end in their small cpu-platform configurations, so neither can rot
between GPU runs; the figures are checked for what holds on any host (admission, refusal, reclaim), not for the
timing goals."""

from __future__ import annotations

import importlib
import json
from pathlib import Path

import pytest

BENCHMARKS = Path(__file__).resolve().parents[2] / "benchmarks"


@pytest.fixture
def bench(monkeypatch, tmp_path):
    """``run(name, *argv)``: the benchmark's ``main`` on the cpu platform, writing into tmp_path."""
    monkeypatch.setenv("DEVMEM_PLATFORM", "cpu")
    monkeypatch.syspath_prepend(str(BENCHMARKS))

    def run(name: str, *argv: str) -> dict:
        result = importlib.import_module(name).main([*argv, "--out", str(tmp_path)])
        assert json.loads((tmp_path / f"{name}.json").read_text())["benchmark"] == name
        return result

    return run


def test_racing_processes_are_admitted_one_more_refused_and_a_killed_share_reclaimed(bench):
    result = bench("reservations", "--quick")
    goals = result["goals"]
    assert goals["all_admitted"] and goals["extra_refused_naming_holders"] and result["race"]["newcomer_admitted"]


@pytest.mark.slow  # seven engine processes, each importing transformers: `pytest -m slow` and CI run it
def test_engines_beyond_the_device_are_refused_naming_the_holders(bench):
    result = bench("reserved_engines", "--quick", "--engines", "3", "--share", "0.45", "--hold", "0")
    refused = [r for r in result["with_reservations"] if r.get("refused")]
    assert len(refused) == 1 and result["goals"]["refusal_names_the_holders"]
    assert result["goals"]["admitted_and_serving"]
    assert len(result["without_reservations"]) == 3
