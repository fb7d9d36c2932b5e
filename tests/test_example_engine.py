"""examples/engine.py on the cpu platform: the figures it reports, and the failures it reports instead of crashing.

The engine runs in this process (``run``), except for the one test of its command line. The co-tenant that
frees memory inside the profile window is a real child process holding 1 GiB of touched host memory, far more
than the engine uses, so the host's own churn cannot hide its release.
"""

from __future__ import annotations

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

ENGINE = Path(__file__).resolve().parents[1] / "examples" / "engine.py"
SMALL = ["--weights", "4MiB", "--activation-peak", "2MiB", "--non-torch", "1MiB", "--page-size", "4KiB",
         "--layers", "4", "--decode-steps", "1"]


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
    done = subprocess.run([sys.executable, str(ENGINE), *SMALL, *requesting(64 * MiB)], capture_output=True,
                          text=True, timeout=120, env={**os.environ, "DEVMEM_PLATFORM": "cpu"})
    lines = done.stdout.strip().splitlines()
    assert done.returncode == 0 and len(lines) == 1, done.stderr
    result = json.loads(lines[0])
    for key in ("weights", "activation_peak", "utilization", "total", "requested", "kv_cache_bytes", "num_blocks",
                "process_after_kv", "free_after_kv", "timings_s", "accounting", "budgets", "failure"):
        assert key in result, key
    assert result["ok"] and result["platform"] == "cpu"


def test_process_accounting_allocates_whole_blocks_of_its_budget(engine):
    result = engine.run(SMALL + requesting(64 * MiB))
    assert result["ok"]
    assert result["kv_allocated_bytes"] == result["num_blocks"] * result["block_bytes"] <= result["kv_cache_bytes"]
    assert result["budgets"]["process"]["kv_cache_bytes"] == result["kv_cache_bytes"]


def test_device_accounting_fails_like_vllm_when_a_cotenant_frees_memory(engine):
    """vLLM asserts ``init_free >= free`` after profiling: the device-wide method fails exactly when free memory
    grew over the window, which the co-tenant's release makes happen (unless others on the host outgrow it)."""
    cotenant = allocate_host_in_subprocess(GiB)
    result = engine.run(SMALL + requesting(64 * MiB) + ["--accounting", "device"], during_profile=cotenant.free)
    grew = result["after_profile_free"] > result["init_free"]
    failure = result["failure"] or {}
    assert ((failure.get("stage"), failure.get("kind")) == ("profile", "assertion")) == grew


def test_process_accounting_survives_a_cotenant_that_frees_memory(engine):
    cotenant = allocate_host_in_subprocess(GiB)
    result = engine.run(SMALL + requesting(64 * MiB), during_profile=cotenant.free)
    assert result["ok"] and result["failure"] is None


def test_pinned_size_is_allocated_as_given(engine):
    result = engine.run(SMALL + requesting(64 * MiB) + ["--pinned", "8MiB"])
    assert result["ok"] and result["accounting"] == "pinned"
    assert result["kv_allocated_bytes"] == 8 * MiB


def test_free_memory_below_the_request_at_start_is_reported(engine):
    result = engine.run(SMALL + ["--utilization", "1.0"])
    assert not result["ok"]
    assert (result["failure"]["stage"], result["failure"]["kind"]) == ("startup", "not_enough_memory")


def test_budget_below_one_block_is_reported(engine):
    result = engine.run(SMALL + requesting(8 * MiB) + ["--weights", "16MiB"])
    assert not result["ok"]
    assert (result["failure"]["stage"], result["failure"]["kind"]) == ("plan", "not_enough_memory")
