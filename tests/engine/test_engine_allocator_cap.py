"""devmem.engine.allocator_cap: torch's caching allocator capped at a share, through torch's own calls (replaced at
that boundary: no GPU here)."""

from __future__ import annotations

import pytest

from devmem import GiB
from devmem.engine.allocator_cap import limit_allocator

torch = pytest.importorskip("torch")
TOTAL = 80 * GiB


@pytest.fixture
def fractions(monkeypatch):
    """What torch's ``set_per_process_memory_fraction`` was told, on a device of ``TOTAL`` bytes."""
    told = []
    monkeypatch.setattr(torch.cuda, "set_per_process_memory_fraction", lambda f, d: told.append((f, str(d))))
    monkeypatch.setattr(torch.cuda, "mem_get_info", lambda d: (TOTAL // 2, TOTAL))
    return told


def test_the_cap_is_the_share_as_a_fraction_of_the_devices_total(fractions):
    assert limit_allocator(torch.device("cuda", 0), TOTAL // 4) == 0.25
    assert fractions == [(0.25, "cuda:0")]
    limit_allocator(torch.device("cuda", 0), None)


def test_lifting_a_cap_set_here_gives_the_allocator_the_whole_device(fractions):
    limit_allocator(torch.device("cuda", 0), TOTAL // 4)
    assert limit_allocator(torch.device("cuda", 0), None) is None
    assert fractions[-1] == (1.0, "cuda:0")


def test_lifting_where_no_cap_was_set_here_leaves_the_allocator_alone(fractions):
    limit_allocator(torch.device("cuda", 1), None)
    assert fractions == []


def test_the_cpu_has_no_cap():
    assert limit_allocator(torch.device("cpu"), GiB) is None
