"""What the benchmarks' tests share: the benchmarks folder, and its modules imported as the benchmarks import them."""

from __future__ import annotations

import importlib
from collections.abc import Callable
from pathlib import Path
from types import ModuleType

import pytest

BENCHMARKS = Path(__file__).resolve().parents[2] / "benchmarks"


@pytest.fixture
def benchmark_module(monkeypatch) -> Callable[[str], ModuleType]:
    """``load(name)``: the module ``benchmarks/<name>.py``, with the benchmarks folder first on ``sys.path`` for
    the test (the benchmarks import ``common`` from there)."""
    monkeypatch.syspath_prepend(str(BENCHMARKS))
    return importlib.import_module
