"""Benchmarks' smoke runs reserve in a ledger of their own, never the machine's shared one."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

BENCHMARKS = Path(__file__).resolve().parents[2] / "benchmarks"


@pytest.fixture
def common(monkeypatch):
    monkeypatch.syspath_prepend(str(BENCHMARKS))
    import common

    return common


def test_a_private_ledger_takes_the_reservations_made_inside_it(common, monkeypatch):
    import devmem

    monkeypatch.setenv("DEVMEM_PLATFORM", "cpu")
    with common.private_ledger() as directory:
        assert os.environ["DEVMEM_LEDGER_DIR"] == directory
        with devmem.reserve(0, 1 << 20):
            assert any(Path(directory).iterdir())


def test_a_private_ledger_restores_the_shared_one_and_removes_its_directory(common, monkeypatch):
    monkeypatch.setenv("DEVMEM_LEDGER_DIR", "/tmp/the-shared-ledger")
    with common.private_ledger() as directory:
        pass
    assert os.environ["DEVMEM_LEDGER_DIR"] == "/tmp/the-shared-ledger" and not Path(directory).exists()
