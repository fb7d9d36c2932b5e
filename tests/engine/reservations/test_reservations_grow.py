"""A reservation raised after admission (``Reservation.grow``): what an engine found it needs beyond what it reserved
before loading, admitted as a new share of that size would be, its own entry left out."""

from __future__ import annotations

import json
import os

import pytest

from devmem import DevmemError, GiB
from devmem.engine.reservations import ReservationRefused, reserve
from devmem.errors import ArgumentError

KEY = "cpu-host_memory-0"


def test_a_reservation_grows_where_the_growth_fits(host, tmp_path):
    with reserve(0, 10 * GiB, platform=host, ledger_dir=tmp_path) as held:
        held.grow(50 * GiB, host)
        assert held.bytes == 50 * GiB


def test_the_next_admission_counts_the_grown_reservation(host, tmp_path):
    with reserve(0, 10 * GiB, platform=host, ledger_dir=tmp_path) as held:
        held.grow(50 * GiB, host)
        with pytest.raises(ReservationRefused) as caught:
            reserve(0, 20 * GiB, platform=host, ledger_dir=tmp_path)
    assert caught.value.breakdown["available"] == 14 * GiB


def test_a_growth_that_does_not_fit_is_refused_saying_what_would_fit(host, tmp_path):
    with (
        reserve(0, 30 * GiB, platform=host, ledger_dir=tmp_path),
        reserve(0, 20 * GiB, platform=host, ledger_dir=tmp_path) as held,
        pytest.raises(ReservationRefused) as caught,
    ):
        held.grow(40 * GiB, host)
    assert caught.value.breakdown["available"] == 34 * GiB  # the other 30 GiB counted, this one's own 20 left out


def test_a_refused_growth_leaves_the_reservation_as_it_was(host, tmp_path):
    with (
        reserve(0, 30 * GiB, platform=host, ledger_dir=tmp_path),
        reserve(0, 20 * GiB, platform=host, ledger_dir=tmp_path) as held,
    ):
        with pytest.raises(ReservationRefused):
            held.grow(40 * GiB, host)
        assert held.bytes == 20 * GiB
        assert sorted(e["bytes"] for e in json.loads((tmp_path / f"{KEY}.json").read_text())["entries"]) == [
            20 * GiB,
            30 * GiB,
        ]


def test_the_owner_file_holds_the_grown_bytes(host, tmp_path):
    # the ledger is rebuilt from the owner files where its own file is lost: they must say the grown figure
    with reserve(0, 10 * GiB, platform=host, ledger_dir=tmp_path) as held:
        held.grow(12 * GiB, host)
        owner = tmp_path / held.ledger._owner_name(KEY, held.entry.id)
        assert json.loads(owner.read_text())["bytes"] == 12 * GiB


def test_growing_to_no_more_than_it_holds_changes_nothing(host, tmp_path):
    with reserve(0, 10 * GiB, platform=host, ledger_dir=tmp_path) as held:
        held.grow(4 * GiB, host)
        assert held.bytes == 10 * GiB


def test_a_released_reservation_does_not_grow(host, tmp_path):
    held = reserve(0, 10 * GiB, platform=host, ledger_dir=tmp_path)
    held.release()
    with pytest.raises(DevmemError, match="was released: nothing grows"):
        held.grow(20 * GiB, host)


@pytest.mark.parametrize("nbytes", [-1, 1.5, "20 GiB", True])
def test_a_growth_of_no_byte_count_is_refused_naming_the_value(host, tmp_path, nbytes):
    with reserve(0, 10 * GiB, platform=host, ledger_dir=tmp_path) as held, pytest.raises(ArgumentError) as caught:
        held.grow(nbytes, host)
    assert "nbytes" in str(caught.value) and repr(nbytes) in str(caught.value)


def test_a_forked_child_cannot_grow_its_parents_reservation(host, tmp_path):
    with reserve(0, 10 * GiB, platform=host, ledger_dir=tmp_path) as held:
        read, write = os.pipe()
        pid = os.fork()
        if pid == 0:
            try:
                held.grow(20 * GiB, host)
                said = b"grown"
            except DevmemError as exc:
                said = str(exc).encode()
            os.write(write, said)
            os._exit(0)
        os.close(write)
        os.waitpid(pid, 0)
        said = os.read(read, 4096).decode()
        os.close(read)
        assert f"is PID {os.getpid()}'s, not this process's" in said
        assert held.bytes == 10 * GiB
