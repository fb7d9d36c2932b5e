"""Nemotron 3 configs that give their layers only as ``layers_block_type``: NemotronHConfig derives
num_hidden_layers from its length, and so does devmem."""

from __future__ import annotations

import pytest
from model_configs_fourth import NEMOTRON_3_LAYERS_BLOCK_TYPE
from model_configs_third import NEMOTRON_3_SUPER_120B

from devmem.planner.models import ModelMemory, UnknownArchitectureError


def model(config: dict, **options) -> ModelMemory:
    return ModelMemory.from_config(config, **options)


def test_layers_block_type_alone_gives_the_layer_count_and_kinds():
    """88 entries: 8 attention layers x 2 x 2 x 128 x 2 B = 8,192 B per token, 40 Mamba2 layers, as the same
    layers given as hybrid_override_pattern with num_hidden_layers."""
    m, pattern = model(NEMOTRON_3_LAYERS_BLOCK_TYPE), model(NEMOTRON_3_SUPER_120B)
    assert (m.num_layers, m.kv_bytes_per_token, m.recurrent_layers) == (88, 8_192, 40)
    assert (m.state_bytes_per_sequence, m.weights_bytes) == (pattern.state_bytes_per_sequence, pattern.weights_bytes)


def test_the_derived_layer_count_is_said():
    assert any(
        "num_hidden_layers 88: the length of layers_block_type" in n for n in model(NEMOTRON_3_LAYERS_BLOCK_TYPE).notes
    )


def test_layer_types_is_nemotron_h_s_other_name_for_the_list():
    """NemotronHConfig's attribute_map reads layer_types as layers_block_type."""
    config = {k: v for k, v in NEMOTRON_3_LAYERS_BLOCK_TYPE.items() if k != "layers_block_type"}
    config["layer_types"] = NEMOTRON_3_LAYERS_BLOCK_TYPE["layers_block_type"]
    assert model(config).num_layers == 88


def test_a_family_whose_config_class_does_not_derive_it_still_needs_num_hidden_layers():
    """Only NemotronHConfig derives the count: the same list under another model_type is refused, not counted."""
    with pytest.raises(UnknownArchitectureError, match="lacks num_hidden_layers"):
        model({**NEMOTRON_3_LAYERS_BLOCK_TYPE, "model_type": "nemotron_h_next"})
