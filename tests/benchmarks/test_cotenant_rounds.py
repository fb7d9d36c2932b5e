"""The engine co-tenancy benchmarks (vllm_cotenants.py, sglang_cotenants.py) give every round a profile store of its
own, so that a round's figures do not depend on the rounds run before it in the same command."""

from __future__ import annotations

import json

import pytest


@pytest.fixture
def round_profile_store(benchmark_module):
    return benchmark_module("common").round_profile_store


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


SCHEDULER_LOG = """\
[2026-12-05 15:37:53] server_args=ServerArgs(model_path='/tmp/m')
[2026-12-05 15:38:22] Init torch distributed begin.
[2026-12-05 15:38:25] Load weight begin. avail mem=78.50 GB
[2026-12-05 15:38:25] Load weight end. elapsed=0.54 s
  a line without a timestamp
[2026-12-05 15:38:27] Memory pool end. avail mem=63.30 GB
[2026-12-05 15:38:28] max_total_num_tokens=622591, chunked_prefill_size=2048
[2026-12-05 15:38:29] Load weight begin. (a later mark of a step does not move it)
"""


@pytest.fixture
def steps(benchmark_module):
    return benchmark_module("sglang_cotenants").steps


def test_sglangs_log_gives_each_steps_start_in_seconds_after_its_first_line(steps):
    assert steps(SCHEDULER_LOG) == {"scheduler": 29, "weights": 32, "pool": 32, "graphs": 34, "ready": 35}


def test_a_start_refused_before_its_scheduler_began_has_no_steps(steps):
    assert steps(SCHEDULER_LOG.splitlines()[0] + "\ndevmem.errors.ReservationRefused: cannot reserve") == {}


def test_the_report_prints_when_each_step_began_after_the_start_time(benchmark_module):
    row = dict(max_total_num_tokens=622591, ratio_to_solo=1.0, cap=None, start_s=44.3)
    round_ = {"shape": "tinyllama", "scenario": "solo-0.2", "mode": "plugin", "rows": [row]}
    report_round = benchmark_module("sglang_cotenants").report_round
    assert report_round(round_).endswith("44.3 s")
    row["steps_s"] = {"scheduler": 29, "weights": 32, "ready": 35}
    assert report_round(round_).endswith("44.3 s  scheduler 29 weights 32 ready 35")


@pytest.fixture
def fit(benchmark_module):
    return benchmark_module("vllm_cotenants").fit


def test_a_footprint_over_its_cap_is_said_over(fit):
    GiB = 1 << 30
    assert fit(dict(nvml_footprint=23.83 * GiB, cap=23.75 * GiB, over_cap=True)) == "23.83/23.75 OVER"
    assert fit(dict(nvml_footprint=23.31 * GiB, cap=23.75 * GiB, over_cap=False)) == "23.31/23.75 ok"


def test_a_pinned_cache_has_no_cap(fit):
    assert fit(dict(nvml_footprint=42.47 * (1 << 30), cap=None, over_cap=None)) == "42.47/- pinned"


VLLM_LOG = [
    (100.0, "Starting to load model /tmp/m..."),
    (103.5, "Model loading took 2.05 GiB and 1.2 seconds"),
    (106.25, "Available KV cache memory: 19.85 GiB"),
    (107.0, "Available KV cache memory: 19.85 GiB (a later line does not move the step)"),
    (109.9, "init engine (profile, create kv cache, warmup model) took 3.80 s"),
]


def test_vllms_log_gives_the_seconds_to_the_end_of_each_step(benchmark_module):
    steps = benchmark_module("vllm_cotenants").steps
    assert steps(VLLM_LOG, 100.0) == {"weights": 3.5, "sized": 6.25, "ready": 9.9}


def test_the_vllm_report_prints_the_steps_after_the_start_time(benchmark_module, tmp_path):
    row = dict(available_gib=19.85, num_gpu_blocks=59136, nvml_footprint=1 << 30, cap=None, start_s=9.9)
    row["steps_s"] = {"weights": 3.5, "ready": 9.9}
    round_ = {"shape": "tinyllama", "scenario": "solo-0.3", "mode": "plugin", "rows": [row]}
    (tmp_path / "r.json").write_text(json.dumps({"command": "x", "rounds": [round_]}))
    report = benchmark_module("vllm_cotenants").report([str(tmp_path / "r.json")])
    assert report.splitlines()[-1].endswith("9.9 s weights 3.5 ready 9.9")
