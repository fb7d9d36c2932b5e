"""The release cut: the CHANGELOG's newest release is the package's version."""

from __future__ import annotations

import re
from pathlib import Path

import devmem

CHANGELOG = (Path(__file__).resolve().parents[1] / "CHANGELOG.md").read_text(encoding="utf-8")
HEADINGS = re.findall(r"^## \[([^\]]+)\](?: - (\d{4}-\d{2}-\d{2}))?$", CHANGELOG, re.M)


def test_an_unreleased_section_comes_first_then_the_package_version_with_its_date():
    assert HEADINGS[0] == ("Unreleased", "")
    assert HEADINGS[1][0] == devmem.__version__ and HEADINGS[1][1]


def test_every_release_heading_is_dated_and_newer_above_older():
    versions = [tuple(int(p) for p in v.split(".")) for v, _ in HEADINGS[1:]]
    assert all(date for _, date in HEADINGS[1:]) and versions == sorted(versions, reverse=True)
