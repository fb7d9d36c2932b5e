"""devmem.records: the frozen value classes on the start-up path, without importing dataclasses."""

from __future__ import annotations

import subprocess
import sys

import pytest

import devmem
from devmem.platform import DeviceMemory, DeviceReport


def test_value_is_frozen_and_says_how_to_change_it():
    detection = devmem.Detection(True, "card present")
    with pytest.raises(AttributeError, match=r"frozen: cannot set 'reason'; use .replace\(reason=...\)"):
        detection.reason = "other"


def test_replace_validates_the_new_value():
    with pytest.raises(TypeError, match="Detection.detected must be True or False, got .yes."):
        devmem.Detection(True, "card present").replace(detected="yes")


def test_mutable_default_is_fresh_for_each_value():
    first = DeviceMemory(devmem.MemoryInfo(1, 2))
    first.sources["free"] = "scripted"
    assert DeviceMemory(devmem.MemoryInfo(1, 2)).sources == {}


def test_values_compare_and_hash_by_their_fields():
    assert devmem.Detection(True, "x") == devmem.Detection(detected=True, reason="x")
    assert len({devmem.Detection(True, "x"), devmem.Detection(True, "x"), devmem.Detection(False, "x")}) == 2


def test_construction_names_a_missing_or_unknown_argument():
    with pytest.raises(TypeError, match="missing required argument 'reason'"):
        devmem.Detection(True)
    with pytest.raises(TypeError, match="unexpected keyword argument 'found'"):
        devmem.Detection(found=True, reason="x")


def test_report_lists_its_fields_in_declaration_order():
    report = DeviceReport(0, "host memory", "cpu", 1, 2, None, "no source", None, True, True)
    assert list(report.as_dict())[:4] == ["index", "name", "platform", "free"]


def test_import_and_resolution_import_no_dataclasses():
    probe = (
        "import sys, devmem; devmem.current_platform(); print(sorted({'dataclasses', 'inspect'} & set(sys.modules)))"
    )
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "[]"
