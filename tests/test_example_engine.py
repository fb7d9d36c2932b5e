"""examples/engine.py on the cpu platform, serving a tiny transformers model: the figures it reports, and the
failures it reports instead of crashing.

The engine runs in this process (``run``), except for the one test of its command line. The co-tenant that
frees memory inside the profile window is a real child process holding 1 GiB of touched host memory, far more
than the engine uses, so the host's own churn cannot hide its release.
"""

from __future__ import annotations

import contextlib
import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

import devmem
from devmem import GiB, MiB
from devmem.testing.allocations import allocate_host_in_subprocess

pytestmark = pytest.mark.slow  # each test serves a model on the CPU: `pytest -m slow` and CI run them

ENGINE = Path(__file__).resolve().parents[1] / "examples" / "engine.py"
SMALL = ["--model", "tiny", "--batch-tokens", "128", "--sequences", "4", "--decode-steps", "2"]
REQUEST = 512 * MiB

pytest.importorskip("transformers")


@pytest.fixture(scope="module")
def engine():
    spec = importlib.util.spec_from_file_location("devmem_example_engine_under_test", ENGINE)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(autouse=True)
def cpu_platform(monkeypatch):
    monkeypatch.setenv("DEVMEM_PLATFORM", "cpu")


def requesting(nbytes: int) -> list[str]:
    """``--utilization`` that requests about ``nbytes`` of this host's memory."""
    total = devmem.current_platform().device_memory_info(0).total
    return ["--utilization", f"{max(nbytes / total, 1e-6):.6f}"]


def test_command_line_prints_one_json_line_with_every_figure():
    done = subprocess.run(
        [sys.executable, str(ENGINE), *SMALL, *requesting(REQUEST)],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "DEVMEM_PLATFORM": "cpu"},
    )
    lines = done.stdout.strip().splitlines()
    assert done.returncode == 0 and len(lines) == 1, done.stderr
    result = json.loads(lines[0])
    for key in (
        "weights",
        "utilization",
        "total",
        "requested",
        "kv_cache_bytes",
        "num_blocks",
        "kv_tokens",
        "page_size",
        "process_after_serve",
        "free_after_serve",
        "footprint",
        "timings_s",
        "accounting",
        "budgets",
        "failure",
        "generated_tokens",
    ):
        assert key in result, key
    assert result["ok"] and result["platform"] == "cpu"


def test_process_accounting_allocates_whole_blocks_of_its_budget(engine):
    result = engine.run(SMALL + requesting(REQUEST))
    assert result["ok"]
    assert result["kv_allocated_bytes"] == result["num_blocks"] * result["block_bytes"] <= result["kv_cache_bytes"]
    assert result["budgets"]["process"]["kv_cache_bytes"] == result["kv_cache_bytes"]


def test_block_bytes_are_block_size_tokens_of_keys_and_values_on_every_layer(engine):
    """tiny: 2 layers, 2 KV heads of dim 16 (64 / 4 heads), float32 on the CPU: 16 tokens x 2 x 2 x 16 x 4 bytes."""
    result = engine.run(SMALL + requesting(REQUEST))
    assert result["page_size"] == 16 * 2 * 2 * 16 * 4
    assert result["block_bytes"] == 2 * result["page_size"]
    assert result["kv_tokens"] == 16 * result["num_blocks"]


def test_engine_serves_every_round_with_the_cache_in_place(engine):
    result = engine.run(SMALL + requesting(REQUEST) + ["--rounds", "3"])
    assert result["ok"] and result["prefill_tokens"] == 3 * 128
    assert result["generated_tokens"] == 3 * 4 * 2


def test_moe_model_is_served_too(engine):
    result = engine.run([*SMALL[2:], "--model", "tiny-moe", *requesting(REQUEST)])
    assert result["ok"] and result["model_type"] == "mixtral"


def test_batch_that_does_not_split_into_whole_blocks_is_reported(engine):
    result = engine.run(SMALL + requesting(REQUEST) + ["--batch-tokens", "100"])
    assert not result["ok"] and result["failure"]["kind"] == "bad_input"


def test_device_accounting_fails_like_vllm_when_a_cotenant_frees_memory(engine):
    """vLLM asserts ``init_free >= free`` after profiling: the device-wide method fails exactly when free memory
    grew over the window, which the co-tenant's release makes happen (unless others on the host outgrow it)."""
    cotenant = allocate_host_in_subprocess(GiB)
    result = engine.run(SMALL + requesting(REQUEST) + ["--accounting", "device"], during_profile=cotenant.free)
    grew = result["after_profile_free"] > result["init_free"]
    failure = result["failure"] or {}
    assert ((failure.get("stage"), failure.get("kind")) == ("profile", "assertion")) == grew


def test_process_accounting_survives_a_cotenant_that_frees_memory(engine):
    cotenant = allocate_host_in_subprocess(GiB)
    result = engine.run(SMALL + requesting(REQUEST), during_profile=cotenant.free)
    assert result["ok"] and result["failure"] is None


def test_pinned_size_is_allocated_as_given(engine):
    result = engine.run(SMALL + requesting(REQUEST) + ["--pinned", "8MiB"])
    assert result["ok"] and result["accounting"] == "pinned"
    assert result["kv_allocated_bytes"] == 8 * MiB // result["block_bytes"] * result["block_bytes"]


def test_free_memory_below_the_request_at_start_is_reported(engine):
    result = engine.run(SMALL + ["--utilization", "1.0"])
    assert not result["ok"]
    assert (result["failure"]["stage"], result["failure"]["kind"]) == ("startup", "not_enough_memory")


def test_budget_below_one_block_is_reported(engine):
    result = engine.run(SMALL + requesting(REQUEST) + ["--model", "tiny", "--config", str(_wide_config())])
    assert not result["ok"]
    assert (result["failure"]["stage"], result["failure"]["kind"]) == ("plan", "not_enough_memory")


def _wide_config():
    """A config whose weights (a 1M-token vocabulary: 2 x 256 MiB of embeddings in float32) outgrow the request."""
    import tempfile

    path = Path(tempfile.mkdtemp()) / "config.json"
    path.write_text(
        json.dumps(
            {
                "model_type": "llama",
                "hidden_size": 64,
                "intermediate_size": 128,
                "num_hidden_layers": 2,
                "num_attention_heads": 4,
                "num_key_value_heads": 2,
                "vocab_size": 1 << 20,
            }
        )
    )
    return path


def test_engine_allocating_one_tensor_per_layer_is_planned_for_it(engine):
    result = engine.run(SMALL + requesting(REQUEST) + ["--kv-layout", "per-layer"])
    assert result["ok"] and result["kv_allocated_bytes"] == result["num_blocks"] * result["block_bytes"]
    assert "2 equal tensors allocated separately" in result["explain"]


def test_graphs_asked_for_on_the_cpu_are_skipped_with_a_note(engine):
    result = engine.run(SMALL + requesting(REQUEST) + ["--graphs"])
    assert result["ok"] and result["graphs"] == {"captured": [], "note": "no CUDA graphs on the CPU"}
    assert result["memory"]["graphs"]["error"] is None and result["memory"]["graph_capture_bytes"] is not None


def test_command_line_on_a_terminal_prints_a_summary_for_a_person():
    import pty

    leader, follower = pty.openpty()
    proc = subprocess.Popen(
        [sys.executable, str(ENGINE), *SMALL, *requesting(REQUEST)],
        stdout=follower,
        stderr=subprocess.DEVNULL,
        env={**os.environ, "DEVMEM_PLATFORM": "cpu"},
    )
    os.close(follower)
    out = b""
    with contextlib.suppress(OSError):  # EIO: the engine exited and closed its end
        while chunk := os.read(leader, 65536):
            out += chunk
    os.close(leader)
    lines = out.decode().splitlines()
    assert proc.wait(timeout=120) == 0 and lines[0].startswith("engine: tiny (llama"), lines
    assert lines[-1] == "every figure: --json" and not any(line.startswith("{") for line in lines), lines
