"""examples/engine.py's summary for a person (on a terminal; ``--json`` and a pipe get the JSON line)."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

from devmem import GiB, MiB

ENGINE = Path(__file__).resolve().parents[1] / "examples" / "engine.py"


@pytest.fixture(scope="module")
def engine():
    spec = importlib.util.spec_from_file_location("devmem_example_engine_summary", ENGINE)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


#: A result as ``run`` returns one for a tiny model on the cpu platform (the figures a summary reads).
SERVED = {
    "model": "tiny",
    "model_type": "llama",
    "layers": 2,
    "dtype": "float32",
    "platform": "cpu",
    "device": 0,
    "torch_device": "cpu",
    "ok": True,
    "total": 24 * GiB,
    "init_free": 20 * GiB,
    "utilization": 0.021240179382545236,
    "requested": 522 * MiB,
    "pinned": None,
    "kv_cache_bytes": 350 * MiB,
    "num_blocks": 44800,
    "block_size": 16,
    "kv_tokens": 716800,
    "accounting": "process",
    "prefill_tokens": 256,
    "generated_tokens": 16,
    "process_after_serve": 630 * MiB,
    "failure": None,
    "timings_s": {"ready_s": 5.54, "total_s": 31.3},
}


def test_a_served_engine_is_summed_up_in_a_few_lines(engine):
    assert engine.summary(SERVED).splitlines() == [
        "engine: tiny (llama, 2 layers, float32) on cpu device 0 (torch device cpu): ok",
        "device: 20.00 GiB free of 24.00 GiB at start; asked for utilization 0.02124, 522.00 MiB",
        "KV cache: 350.00 MiB = 44800 blocks of 16 tokens (716800 tokens), sized by process accounting",
        "served: 256 prefill tokens, 16 generated; this process held 630.00 MiB",
        "time: ready 5.5 s, total 31.3 s",
        "every figure: --json",
    ]


def test_a_failure_is_said_with_its_stage_and_kind(engine):
    failed = {
        **SERVED,
        "ok": False,
        "num_blocks": None,
        "generated_tokens": None,
        "failure": {"stage": "plan", "kind": "not_enough_memory", "message": "the budget holds no block"},
    }
    lines = engine.summary(failed).splitlines()
    assert lines[0].endswith(": failed") and "failure at plan: not_enough_memory: the budget holds no block" in lines


def test_json_is_a_flag_of_the_engine(engine):
    assert engine.parse_args(["--json"]).json and not engine.parse_args([]).json
