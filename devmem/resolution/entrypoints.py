"""A fast reader of one entry-point group, for resolution at engine import time.

``importlib.metadata.entry_points()`` builds a Distribution for every installed package and imports
the email parser: about 35 ms on a machine with 200 packages, most of devmem's whole start-up budget.
This module scans ``sys.path`` for ``*.dist-info``/``*.egg-info`` directories whose
``entry_points.txt`` mentions the group, and reads name and version from the ``METADATA`` header of
those alone. Semantics follow importlib.metadata: the first distribution of a given (normalised) name
on ``sys.path`` wins.
"""

from __future__ import annotations

import os
import re
import sys
from typing import NamedTuple

from devmem._lazy import load_object


class EntryPoint(NamedTuple):
    """One ``name = module[:attr]`` line of a distribution's entry points (a tuple: cheaper to define than a
    dataclass, which matters at import time)."""

    name: str
    value: str
    distribution: str
    version: str

    def load(self) -> object:
        return load_object(self.value)


def _normalise(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def _group_lines(text: str, group: str) -> list[tuple[str, str]]:
    out, inside = [], False
    for raw in text.splitlines():
        line = raw.strip()
        if not line or line[0] in "#;":
            continue
        if line.startswith("["):
            inside = line == f"[{group}]"
        elif inside and "=" in line:
            name, _, value = line.partition("=")
            out.append((name.strip(), value.strip()))
    return out


def _read(path: str) -> str | None:
    try:
        with open(path, encoding="utf-8") as f:
            return f.read()
    except OSError:
        return None


def _name_and_version(info_dir: str, fallback: str) -> tuple[str, str]:
    name, version = fallback, "unknown"
    for filename in ("METADATA", "PKG-INFO"):
        text = _read(os.path.join(info_dir, filename))
        if text is None:
            continue
        for line in text.splitlines():
            if not line:
                break  # end of the header
            key, _, value = line.partition(":")
            if key == "Name":
                name = value.strip()
            elif key == "Version":
                version = value.strip()
        break
    return name, version


def entry_points(group: str) -> list[EntryPoint]:
    """Every entry point of ``group`` on ``sys.path``, in path order."""
    found: list[EntryPoint] = []
    seen: set[str] = set()
    tag = f"[{group}]"
    for base in sys.path:
        try:
            names = sorted(os.listdir(base or "."))
        except OSError:
            continue
        for entry in names:
            if not entry.endswith((".dist-info", ".egg-info")):
                continue
            dist_guess = entry.rsplit(".", 1)[0].split("-", 1)[0]
            key = _normalise(dist_guess)
            if key in seen:
                continue
            seen.add(key)
            info_dir = os.path.join(base or ".", entry)
            text = _read(os.path.join(info_dir, "entry_points.txt"))
            if text is None or tag not in text:
                continue
            dist, version = _name_and_version(info_dir, dist_guess)
            found.extend(EntryPoint(name, value, dist, version) for name, value in _group_lines(text, group))
    return found
