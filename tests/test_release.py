"""The release cut: the CHANGELOG's newest release is the package's version, and it names what it deprecates."""

from __future__ import annotations

import re
from pathlib import Path

import devmem
from devmem import _old_paths as old_paths

CHANGELOG = (Path(__file__).resolve().parents[1] / "CHANGELOG.md").read_text(encoding="utf-8")
HEADINGS = re.findall(r"^## \[([^\]]+)\](?: - (\d{4}-\d{2}-\d{2}))?$", CHANGELOG, re.M)


def release(version: str) -> str:
    """The text of the CHANGELOG's section for ``version``, up to the next release's heading."""
    start = CHANGELOG.index(f"## [{version}]")
    following = CHANGELOG.find("\n## [", start + 1)
    return CHANGELOG[start : None if following < 0 else following]


def test_an_unreleased_section_comes_first_then_the_package_version_with_its_date():
    assert HEADINGS[0] == ("Unreleased", "")
    assert HEADINGS[1][0] == devmem.__version__ and HEADINGS[1][1]


def test_every_release_heading_is_dated_and_newer_above_older():
    versions = [tuple(int(p) for p in v.split(".")) for v, _ in HEADINGS[1:]]
    assert all(date for _, date in HEADINGS[1:]) and versions == sorted(versions, reverse=True)


def deprecated() -> str:
    """The release's ``### Deprecated`` section, its lines joined."""
    section = release(devmem.__version__).split("\n### Deprecated\n", 1)[1].split("\n### ", 1)[0]
    return " ".join(section.split())


def test_the_release_lists_every_name_moved_off_the_top_level_as_deprecated():
    missing = [name for name in devmem.MOVED_NAMES if f"`{name}`" not in deprecated()]
    assert missing == []


def test_the_release_lists_every_old_module_path_as_deprecated_with_its_new_home():
    text = deprecated()
    missing = [
        old
        for old, new in old_paths.MOVED.items()
        if not re.search(rf"`{re.escape(old)}` \([^)]*`{re.escape(new)}`\)", text)
    ]
    assert missing == []
