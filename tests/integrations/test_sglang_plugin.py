"""devmem's SGLang plugin on SGLang's real classes, applied through SGLang's own ``load_plugins()``, its sizing on a
scripted H200 (tests/integrations/sglang_driver.py, one process per installed SGLang copy).

The copies are the folders under ``$DEVMEM_SGLANG_COPIES`` (default ``/tmp/devmem-sglang``): one per release
(``0.5.11/``, ``0.5.16/``, ...), each SGLang installed there with ``pip install --no-deps --target``, beside
``deps/``, the modules its scheduler path imports (.ci/run installs them). Where there is none, or where this
interpreter cannot import one (a fresh virtualenv without them), its tests skip with the reason.
"""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest
import tomllib

from devmem import GiB, MiB
from devmem.integrations import sglang as plugin
from devmem.integrations.sglang import runner

ROOT = Path(__file__).parents[2]
COPIES = Path(os.environ.get("DEVMEM_SGLANG_COPIES", "/tmp/devmem-sglang"))
TINYLLAMA = {
    "architectures": ["LlamaForCausalLM"],
    "model_type": "llama",
    "hidden_size": 2048,
    "intermediate_size": 5632,
    "num_attention_heads": 32,
    "num_key_value_heads": 4,
    "num_hidden_layers": 22,
    "vocab_size": 32000,
    "max_position_embeddings": 2048,
    "rms_norm_eps": 1e-05,
    "torch_dtype": "bfloat16",
}
FRACTION = 0.3  # the driver's mem_fraction_static


def _copies() -> list[str]:
    if not (COPIES / "deps").is_dir():
        return []
    return sorted(p.name for p in COPIES.iterdir() if p.name != "deps" and (p / "sglang").is_dir())


@pytest.fixture(scope="module", params=_copies() or [None])
def run(request, tmp_path_factory):
    """What the driver saw on one SGLang copy (its JSON)."""
    version = request.param
    if version is None:
        pytest.skip(f"no SGLang copy under {COPIES} (.ci/run's install_sglang installs them there)")
    tmp = tmp_path_factory.mktemp(f"sglang-{version}")
    (tmp / "model").mkdir()
    (tmp / "model" / "config.json").write_text(json.dumps(TINYLLAMA))
    dist = tmp / "dist" / "devmem_kv-0.0.0.dist-info"  # pyproject's sglang entry point, as an install declares it
    dist.mkdir(parents=True)
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: devmem-kv\nVersion: 0.0.0\n")
    points = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["entry-points"]["sglang.srt.plugins"]
    (dist / "entry_points.txt").write_text(
        "[sglang.srt.plugins]\n" + "".join(f"{k} = {v}\n" for k, v in points.items())
    )
    path = [str(tmp / "dist"), str(ROOT), str(COPIES / version), str(COPIES / "deps")]
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join(path),
        "DEVMEM_TEST_MODEL": str(tmp / "model"),
        "DEVMEM_PROFILE_DIR": str(tmp / "profiles"),
        "HF_HUB_OFFLINE": "1",
        "TRANSFORMERS_OFFLINE": "1",
    }
    probe = subprocess.run(
        [sys.executable, str(ROOT / "tests" / "integrations" / "sglang_driver.py"), "probe"],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    if probe.returncode != 0:
        pytest.skip(f"SGLang {version} does not import here: {probe.stderr.strip().splitlines()[-1:]}")
    done = subprocess.run(
        [sys.executable, str(ROOT / "tests" / "integrations" / "sglang_driver.py")],
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    lines = [line for line in done.stdout.splitlines() if line.startswith("DEVMEM-RESULT ")]
    assert done.returncode == 0 and lines, done.stderr[-4000:]
    return json.loads(lines[-1].removeprefix("DEVMEM-RESULT "))


@pytest.mark.slow
def test_load_plugins_hooks_sglangs_real_methods_with_devmems_steps(run):
    assert len(run["registration"]["hooked"]) == 3
    assert all(run["registration"]["hooked"].values())


@pytest.mark.slow
def test_the_pool_is_sized_where_the_release_sizes_it(run):
    budget = run["registration"]["targets"][1]
    owner = "KVCacheConfigurator" if tuple(map(int, run["version"].split(".")[:3])) >= (0, 5, 16) else "Mixin"
    assert owner in budget and budget.endswith("._profile_available_bytes")


@pytest.mark.slow
def test_devmem_sglang_0_registers_no_hook(run):
    assert run["off_hooks"] == []


@pytest.mark.slow
def test_the_pool_is_the_static_part_less_what_the_process_holds(run):
    alone = run["alone"]
    static = FRACTION * (alone["total"] - alone["held_at_baseline"])
    room = static - alone["held_before_pool"]
    pool = alone["tokens"] * alone["cell"]
    rounding = 2 * alone["page"] * alone["cell"] + 2 * alone["layers"] * 2 * MiB
    assert room - rounding <= pool <= room


@pytest.mark.slow
def test_the_footprint_with_the_pool_stays_within_the_share(run):
    assert run["alone"]["footprint"] <= run["alone"]["share"]


@pytest.mark.slow
def test_the_share_covers_the_static_part_and_sglangs_activation_estimate(run):
    alone = run["alone"]
    static = FRACTION * (alone["total"] - alone["held_at_baseline"])
    assert alone["share"] - static == pytest.approx((512 + 2048 * 1.5 + 128) * MiB, abs=1)


@pytest.mark.slow
def test_a_co_tenant_churning_during_the_start_changes_nothing(run):
    assert run["churn"]["tokens"] == run["alone"]["tokens"]


@pytest.mark.slow
def test_a_co_tenant_loading_meanwhile_fails_stock_sglang_and_leaves_devmems_pool_alone(run):
    assert run["cotenant"]["devmem_tokens"] == run["alone"]["tokens"]
    stock = run["cotenant"]["stock"]  # SGLang's budget refuses (0.5.14 on), or its pool configurator does (before)
    assert any(error in str(stock) for error in ("Loaded weights leave no GPU memory", "Not enough memory"))


@pytest.mark.slow
def test_an_over_committed_start_is_refused_before_its_weights_naming_the_holders(run):
    assert "cannot reserve" in run["overcommit"] and "holder: this process" in run["overcommit"]


@pytest.mark.slow
def test_a_failed_graph_capture_gives_the_share_back(run):
    assert run["retry_after_failure"] > 0.6 * 139 * GiB  # admitted: the failed start holds nothing


@pytest.mark.slow
def test_a_second_graph_capture_is_sglangs_own_and_keeps_the_share(run):
    assert run["recapture"] == {"ran": True, "still_reserved": True}


@pytest.mark.slow
def test_sglangs_own_mem_fraction_static_is_the_one_devmem_sizes_with(run):
    defaults = run["defaults"]
    assert defaults["sglang_fraction"] is not None
    assert defaults["devmem_fraction"] == defaults["sglang_fraction"]


@pytest.mark.slow
def test_the_activation_estimate_follows_the_chunked_prefill_size_sglang_resolved(run):
    defaults = run["defaults"]
    sglangs = (512 + max(defaults["sglang_chunk"], 2048) * 1.5 + 128) * MiB  # its formula, tp = pp = 1
    assert defaults["activations"] == pytest.approx(sglangs, abs=1)


@pytest.mark.slow
def test_the_graph_estimate_is_sglangs_own_where_the_release_has_one(run):
    defaults = run["defaults"]
    if defaults["sglang_graphs"] is None:
        pytest.skip(f"SGLang {run['version']} has no graph estimate of its own (devmem's formula stands for it)")
    assert defaults["graphs"] == defaults["sglang_graphs"]


def test_pyproject_registers_the_plugin_with_sglang():
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    assert project["entry-points"]["sglang.srt.plugins"] == {"devmem": "devmem.integrations.sglang:register"}


def test_without_sglang_register_warns_once_and_leaves_it_alone(caplog, monkeypatch):
    monkeypatch.setattr(plugin, "RUNNER", "devmem_no_such_engine.ModelRunner")
    with caplog.at_level(logging.WARNING, logger="sglang.devmem"):
        plugin.register()
    assert [r.getMessage() for r in caplog.records] == [
        "devmem: SGLang has no devmem_no_such_engine.ModelRunner; SGLang sizes its KV pool itself"
    ]


def test_sglangs_activation_estimate_follows_its_chunked_prefill_size():
    args = SimpleNamespace(chunked_prefill_size=8192, max_prefill_tokens=16384, tp_size=1, pp_size=1)
    assert runner.activation_estimate(args) == (512 + 8192 * 1.5 + 128) * MiB


def test_sglangs_activation_estimate_without_chunked_prefill_uses_its_prefill_tokens():
    args = SimpleNamespace(chunked_prefill_size=-1, max_prefill_tokens=16384, tp_size=2, pp_size=1)
    assert runner.activation_estimate(args) == (512 + 16384 * 1.5 + 256) * MiB


def test_sglangs_graph_estimate_is_its_own_reserve_where_the_release_has_one():
    args = SimpleNamespace(reserve_for_graph_mb=lambda: 520.0)
    assert runner.graph_estimate(args) == 520 * MiB


def test_sglangs_graph_estimate_before_0_5_16_is_two_mib_per_decode_batch():
    args = SimpleNamespace(disable_cuda_graph=False, cuda_graph_max_bs=160)
    assert runner.graph_estimate(args) == 320 * MiB


def test_no_graphs_no_graph_estimate():
    assert runner.graph_estimate(SimpleNamespace(disable_cuda_graph=True, cuda_graph_max_bs=160)) == 0


@pytest.mark.slow
def test_sglangs_post_capture_resize_is_turned_off_where_devmem_sizes_the_pool(run):
    if run["post_capture"] is None:
        pytest.skip(f"SGLang {run['version']} has no post-capture resize")
    assert run["post_capture"] == {"before": True, "after": False}


@pytest.mark.slow
def test_a_pool_owner_without_a_page_size_is_left_to_sglang(run):
    assert run["pageless"] == {"budget": 1234}


@pytest.mark.slow
def test_sglangs_multimodal_caches_are_kept_out_of_the_pool(run):
    reserve, alone = run["multimodal"]["reserve"], run["alone"]
    if reserve == 0:
        pytest.skip(f"SGLang {run['version']} keeps nothing out of the pool for multimodal caches")
    fewer = (alone["tokens"] - run["multimodal"]["tokens"]) * alone["cell"]
    assert reserve <= fewer <= reserve + 2 * alone["page"] * alone["cell"]
