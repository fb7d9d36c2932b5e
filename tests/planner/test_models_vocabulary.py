"""No silent guess: every config key about attention is read by devmem or listed as leaving the cache
unchanged; a config setting another such key is refused naming it, never planned as something else."""

from __future__ import annotations

import ast
import json
from pathlib import Path

import model_configs
import model_configs_fourth
import model_configs_more
import model_configs_third
import pytest
from model_configs_fourth import DEEPSEEK_V4_SHAPED, MINIMAX_M3_SHAPED

import devmem.planner
from devmem.planner.models import ModelMemory, UnknownArchitectureError
from devmem.planner.models.vocabulary import ABOUT_ATTENTION, IRRELEVANT, READ, REFUSED

REPO = Path(__file__).resolve().parents[2]


def _configs() -> dict[str, dict]:
    """Every config the tests hold and every config shipped in examples/configs, but the one that shows a key
    devmem does not know refused (MINIMAX_M3_SHAPED, below)."""
    found = {}
    for module in (model_configs, model_configs_more, model_configs_third, model_configs_fourth):
        for name, value in vars(module).items():
            if value is MINIMAX_M3_SHAPED:
                continue
            if name.isupper() and isinstance(value, dict) and ("model_type" in value or "text_config" in value):
                found[f"{module.__name__}.{name}"] = value
    for file in sorted((REPO / "examples" / "configs").glob("*.json")):
        found[str(file.relative_to(REPO))] = json.loads(file.read_text())
    return found


@pytest.mark.parametrize(("name", "config"), sorted(_configs().items()))
def test_every_attention_key_of_a_tested_config_is_read_listed_irrelevant_or_refused(name, config):
    text = config.get("text_config") if isinstance(config.get("text_config"), dict) else {}
    keys = {k for k in (*config, *text) if ABOUT_ATTENTION.search(k)}
    assert sorted(keys - READ - IRRELEVANT.keys() - REFUSED.keys()) == []


def test_every_key_listed_as_read_is_read_by_a_planner_module():
    """READ cannot claim a key no module of devmem/planner names."""
    named: set[str] = set()
    for file in Path(devmem.planner.__file__).parent.rglob("*.py"):
        if file.name == "vocabulary.py":
            continue
        for node in ast.walk(ast.parse(file.read_text())):
            if isinstance(node, ast.Constant) and isinstance(node.value, str):
                named.update(node.value.split("."))
    assert sorted(READ - named) == []


def test_no_key_is_both_read_and_listed_irrelevant():
    assert sorted(READ & IRRELEVANT.keys()) == []


def test_sparse_attention_settings_devmem_does_not_model_are_refused_not_planned_dense():
    """MiniMax-M3's sparse_attention_config: planned before as dense attention, 60 x 2 x 4 x 128 x 2 B = 122,880 B
    per token, its lightning indexer and sparse blocks ignored."""
    with pytest.raises(UnknownArchitectureError, match="'minimax_m3' sets sparse_attention_config: attention") as info:
        ModelMemory.from_config(MINIMAX_M3_SHAPED)
    assert info.value.missing == ("sparse_attention_config",)


def test_deepseek_v4_compressed_caches_are_refused_naming_the_key_that_compresses_them():
    """Refused before for 'MLA without kv_lora_rank', the wrong cause: its layers cache one entry per 4 or 128
    tokens beside a sliding window, with no single bytes-per-token figure."""
    with pytest.raises(UnknownArchitectureError, match="sets compress_ratios: compressed KV caches") as info:
        ModelMemory.from_config(DEEPSEEK_V4_SHAPED)
    assert info.value.missing == ("compress_ratios",)


def test_a_key_about_attention_that_is_null_is_absent():
    """A key written null is not set (as transformers reads it): nothing to refuse."""
    config = {**MINIMAX_M3_SHAPED, "sparse_attention_config": None}
    assert ModelMemory.from_config(config).kv_bytes_per_token == 122_880
