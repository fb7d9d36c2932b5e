"""Every devmem error is defined in devmem.errors and is a DevmemError; every result type answers explain() with a
str and as_dict() with a JSON-able dict."""

from __future__ import annotations

import json
import warnings

import pytest
from model_configs import QWEN3_8B

import devmem
import devmem.errors
from devmem.planner.capacity import capacity, fit
from devmem.planner.models import ModelMemory
from devmem.planner.sizing import plan_kv_cache
from devmem.platform import Reason, ReasonKind
from devmem.units import parse_size

GiB = devmem.GiB
MODEL = ModelMemory.from_config(QWEN3_8B)


@pytest.mark.parametrize("name", devmem.errors.__all__)
def test_every_error_is_a_devmem_error(name):
    assert issubclass(getattr(devmem.errors, name), devmem.DevmemError)


@pytest.mark.parametrize(
    ("module", "name"),
    [
        ("devmem.types", "DevmemError"),
        ("devmem.types", "PluginError"),
        ("devmem.types", "NotEnoughMemoryError"),
        ("devmem.planner.sizing", "SizingError"),
        ("devmem.planner.models", "ModelConfigError"),
        ("devmem.planner.models", "UnknownArchitectureError"),
        ("devmem.sdk.sessions", "LibraryUnavailable"),
        ("devmem", "SizingError"),
        ("devmem.sdk", "LibraryUnavailable"),
    ],
)
def test_the_old_import_paths_give_the_same_error(module, name):
    import importlib

    assert getattr(importlib.import_module(module), name) is getattr(devmem.errors, name)


def test_a_bad_size_is_a_devmem_error_and_a_value_error():
    with pytest.raises(devmem.DevmemError) as info:
        parse_size("8 parsecs")
    assert isinstance(info.value, ValueError)


def test_a_bad_record_field_is_a_devmem_error_and_a_type_error():
    with pytest.raises(devmem.DevmemError) as info:
        Reason(ReasonKind.NO_SOURCE, "")
    assert isinstance(info.value, TypeError)


def results() -> dict[str, object]:
    plan = plan_kv_cache(total=80 * GiB, utilization=0.9, weights=16 * GiB, page_size_bytes=65_536, num_layers=36)
    return {
        "KvCachePlan": plan,
        "ModelMemory": MODEL,
        "Capacity": capacity(MODEL, plan.kv_cache_bytes, context=8192, sequences=4),
        "Fit": fit(MODEL, context=8192, sequences=4, total=80 * GiB),
        "DeviceReport": devmem.device_report(devmem.current_platform(), 0),
    }


@pytest.mark.parametrize("kind", list(results()))
def test_explain_is_text_for_people(kind):
    text = results()[kind].explain()
    assert type(text) is str and text.strip()


@pytest.mark.parametrize("kind", list(results()))
def test_as_dict_is_json(kind):
    assert isinstance(json.loads(json.dumps(results()[kind].as_dict())), dict)


def test_explain_itself_warns_nothing():
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        for result in results().values():
            result.explain()
