"""devmem.planner.model_defaults holds what transformers' config class of each family fills in: checked key by key."""

from __future__ import annotations

import dataclasses

import pytest

from devmem.planner.model_defaults import FAMILY_DEFAULTS

transformers = pytest.importorskip("transformers")


@pytest.mark.parametrize("model_type", sorted(FAMILY_DEFAULTS))
def test_family_defaults_equal_the_transformers_config_class(model_type):
    class_name, defaults = FAMILY_DEFAULTS[model_type]
    config_class = getattr(transformers, class_name, None)
    if config_class is None or not dataclasses.is_dataclass(config_class):
        pytest.skip(f"this transformers has no dataclass {class_name}")
    fields = {f.name: f.default for f in dataclasses.fields(config_class)}
    assert {key: fields.get(key) for key in defaults} == defaults
