"""A model given by its Hugging Face id: found in the local Hugging Face cache (HF_HUB_CACHE, HF_HOME),
never downloaded; otherwise the error says how to get the config."""

from __future__ import annotations

import json

import pytest
from model_configs import QWEN3_8B

from devmem.command.main import main
from devmem.planner.models import ModelConfigError, load_model

COMMIT = "b968826d9c46dd6066d109eabc6255188de91218"


def cache_copy(hub, repo_id: str = "Qwen/Qwen3-8B", *, ref: bool = True, **files: dict):
    """The folder huggingface_hub leaves: models--ORG--NAME/refs/main naming snapshots/<commit>/ with the files."""
    repo = hub / ("models--" + repo_id.replace("/", "--"))
    snapshot = repo / "snapshots" / COMMIT
    snapshot.mkdir(parents=True)
    if ref:
        (repo / "refs").mkdir()
        (repo / "refs" / "main").write_text(COMMIT)
    for name, content in {"config.json": QWEN3_8B, **files}.items():
        (snapshot / name.replace("__", ".")).write_text(json.dumps(content))
    return snapshot


@pytest.fixture
def hub(tmp_path, monkeypatch):
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hub"))
    monkeypatch.chdir(tmp_path)
    return tmp_path / "hub"


def test_a_model_id_resolves_to_its_snapshot_in_hf_hub_cache(hub):
    cache_copy(hub)
    assert load_model("Qwen/Qwen3-8B").kv_bytes_per_token == 147_456


def test_the_snapshot_s_safetensors_index_gives_the_weights(hub):
    cache_copy(hub, model__safetensors__index__json={"metadata": {"total_size": 16_381_470_720}, "weight_map": {}})
    m = load_model("Qwen/Qwen3-8B")
    assert (m.weights_bytes, m.weights_estimated) == (16_381_470_720, False)


def test_hf_home_is_the_cache_s_parent_without_hf_hub_cache(tmp_path, monkeypatch):
    monkeypatch.delenv("HF_HUB_CACHE", raising=False)
    monkeypatch.delenv("HUGGINGFACE_HUB_CACHE", raising=False)
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))
    monkeypatch.chdir(tmp_path)
    cache_copy(tmp_path / "hf" / "hub")
    assert load_model("Qwen/Qwen3-8B").num_layers == 36


def test_the_only_snapshot_serves_where_refs_main_is_missing(hub):
    cache_copy(hub, ref=False)
    assert load_model("Qwen/Qwen3-8B").num_layers == 36


def test_a_model_id_not_in_the_cache_says_how_to_get_its_config(hub):
    with pytest.raises(
        ModelConfigError, match="devmem does not download: get the config with `hf download Qwen/Qwen3-8B config.json`"
    ):
        load_model("Qwen/Qwen3-8B")


def test_a_path_that_exists_wins_over_a_cached_model_of_that_id(hub, tmp_path):
    cache_copy(hub)
    (tmp_path / "Qwen" / "Qwen3-8B").mkdir(parents=True)
    (tmp_path / "Qwen" / "Qwen3-8B" / "config.json").write_text(json.dumps({**QWEN3_8B, "num_hidden_layers": 2}))
    assert load_model("Qwen/Qwen3-8B").num_layers == 2


def test_plan_model_takes_a_model_id_from_the_cache(hub, capsys):
    cache_copy(hub)
    assert main(["plan", "--model", "Qwen/Qwen3-8B", "--pinned", "20GiB", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["model"]["kv_bytes_per_token"] == 147_456


def test_xdg_cache_home_holds_the_cache_without_hf_variables(tmp_path, monkeypatch):
    for name in ("HF_HUB_CACHE", "HUGGINGFACE_HUB_CACHE", "HF_HOME"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    monkeypatch.chdir(tmp_path)
    cache_copy(tmp_path / "xdg" / "huggingface" / "hub")
    assert load_model("Qwen/Qwen3-8B").num_layers == 36
