"""Admission's own mechanics: the lock (a process that finds it held waits in the kernel's queue for it, a blocking
``flock``, and is admitted once it is released; one that gives up at its ``lock_timeout`` leaves nothing held), and
what a release reads again (an entry the process checked at its admission is taken as it was only where the file
still says exactly that)."""

from __future__ import annotations

import fcntl
import json
import os
import threading

import pytest
from ledger_workers import Worker

from devmem import GiB, LedgerError, MiB
from devmem.cpu import CpuPlatform
from devmem.engine.reservations import reserve

LOCK = "cpu-host_memory-0.lock"


def hold_lock(tmp_path) -> int:
    """The device's admission lock, taken as another process holding it would; close the descriptor to drop it."""
    fd = os.open(tmp_path / LOCK, os.O_RDWR | os.O_CREAT)
    fcntl.flock(fd, fcntl.LOCK_EX)
    return fd


def test_a_waiter_is_admitted_once_the_holder_of_the_lock_releases_it(host, tmp_path):
    fd = hold_lock(tmp_path)
    answers: list[object] = []
    waiting = threading.Thread(
        target=lambda: answers.append(reserve(0, GiB, platform=host, ledger_dir=tmp_path, lock_timeout=60))
    )
    waiting.start()
    waiting.join(0.3)
    queued = waiting.is_alive() and not answers
    os.close(fd)
    waiting.join(60)
    assert queued and len(answers) == 1 and answers[0].bytes == GiB  # type: ignore[attr-defined]
    answers[0].release()  # type: ignore[attr-defined]


def test_a_waiter_that_gave_up_leaves_the_lock_free_once_its_holder_releases_it(host, tmp_path):
    fd = hold_lock(tmp_path)
    with pytest.raises(LedgerError, match=r"waited 0.2 s for the reservation ledger lock"):
        reserve(0, GiB, platform=host, ledger_dir=tmp_path, lock_timeout=0.2)
    os.close(fd)
    # the wait given up gets the lock now and drops it: a lock kept would time this one out
    with reserve(0, GiB, platform=host, ledger_dir=tmp_path, lock_timeout=30) as held:
        assert held.bytes == GiB
    probe = os.open(tmp_path / LOCK, os.O_RDONLY)
    try:
        fcntl.flock(probe, fcntl.LOCK_EX | fcntl.LOCK_NB)  # nobody holds it once every admission is done
    finally:
        os.close(probe)


@pytest.fixture
def worker(tmp_path):
    """A real process holding a reservation of 1 MiB on this host's ledger in ``tmp_path``."""
    held = Worker(tmp_path)
    assert held.reserve(MiB)
    yield held
    held.close()


def edit_ledger(tmp_path, change) -> bytes:
    """Rewrite the ledger file with ``change(entry)`` applied to each entry not of this process, as any process
    that can write the file can; its new bytes."""
    path = tmp_path / "cpu-host_memory-0.json"
    ledger = json.loads(path.read_bytes())
    for entry in ledger["entries"]:
        if entry["pid"] != os.getpid():
            change(entry)
    path.write_bytes(json.dumps(ledger).encode())
    return path.read_bytes()


def test_a_release_writes_back_an_entry_edited_since_its_admission_as_it_now_reads(tmp_path, worker):
    mine = reserve(0, MiB, platform=CpuPlatform(), ledger_dir=tmp_path)
    edit_ledger(tmp_path, lambda entry: entry.update(bytes=2 * MiB))
    mine.release()
    entries = json.loads((tmp_path / "cpu-host_memory-0.json").read_bytes())["entries"]
    assert [(e["pid"], e["bytes"]) for e in entries] == [(worker.pid, 2 * MiB)]


def test_a_release_leaves_a_ledger_whose_entry_was_made_invalid_since_its_admission_unwritten(tmp_path, worker):
    mine = reserve(0, MiB, platform=CpuPlatform(), ledger_dir=tmp_path)
    planted = edit_ledger(tmp_path, lambda entry: entry.update(pid=-1))
    mine.release()
    assert (tmp_path / "cpu-host_memory-0.json").read_bytes() == planted  # corrupt: the next admission rebuilds it
