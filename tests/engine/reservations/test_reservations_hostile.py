"""The reservation ledger against what anyone on the host can write in its shared directory: a link or another
user's directory in its place, links and FIFOs in place of its files, planted, copied and edited entries, fields
past their bounds, garbage; and this process's own memory, counted on every platform."""

from __future__ import annotations

import fcntl
import json
import logging
import os
import shlex
import shutil
import stat
import subprocess
import sys
import tempfile
import threading
from contextlib import suppress
from pathlib import Path

import ledger_workers
import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

import devmem
from devmem import GiB, MemoryInfo
from devmem._adapter import as_platform
from devmem.cpu import CpuPlatform
from devmem.engine.reservations import Entry, LedgerError, Owner, ReservationRefused, _start_time, reserve
from devmem.testing.scenario import HostMemory, Scenario
from devmem_nvidia.testing import ScriptedNvidiaGpu, scripted_platform

KEY = "cpu-host_memory-0"
NOBODY = ledger_workers.NOBODY
needs_root = ledger_workers.needs_root


def plant(directory: Path, entries: list[Entry], key: str = KEY) -> None:
    """Write ``key``'s ledger file listing ``entries``, as anyone who can write the file can."""
    body = {"format": 1, "key": key, "entries": [e.as_json() for e in entries]}
    (directory / f"{key}.json").write_text(json.dumps(body))


def entries_of(directory: Path, key: str = KEY) -> list[dict]:
    path = directory / f"{key}.json"
    return json.loads(path.read_text())["entries"] if path.exists() else []


def naming(pid: int, nbytes: int = 60 * GiB, entry_id: str = "planted") -> Entry:
    """An entry naming the live process ``pid`` in this PID namespace, with its real start time (anyone can read
    it), written by hand: whoever holds its owner lock, if anyone, is not ``pid``."""
    me = Owner.current()
    return Entry(entry_id, Owner(pid, _start_time(pid) or 0, me.pidns, (pid,), "init"), nbytes, 0.0)


def real_total() -> int:
    return CpuPlatform().device_memory_info().total


# ---- the directory ---------------------------------------------------------------------------------------
def test_a_symbolic_link_as_the_ledger_directory_is_refused_and_its_target_left_alone(host, tmp_path):
    target = tmp_path / "elsewhere"
    target.mkdir(mode=0o700)
    (tmp_path / "ledger").symlink_to(target)
    with pytest.raises(LedgerError, match=r"ledger: it is a symbolic link \(to '.*elsewhere'\).*remove the link"):
        reserve(0, devmem.GiB, platform=host, ledger_dir=tmp_path / "ledger")
    assert list(target.iterdir()) == [] and stat.S_IMODE(target.stat().st_mode) == 0o700


@needs_root
@pytest.mark.parametrize("mode", [0o755, 0o1777], ids=["private", "sticky"])
def test_a_directory_another_user_owns_is_refused_naming_its_owner_and_what_they_could_do(host, tmp_path, mode):
    """Sticky or not: a directory's owner may remove or rename any file in it."""
    directory = tmp_path / "ledger"
    directory.mkdir()
    directory.chmod(mode)
    os.chown(directory, NOBODY, NOBODY)
    with pytest.raises(LedgerError, match=rf"ledger cannot be used: it is owned by uid {NOBODY}.*rename any file"):
        reserve(0, GiB, platform=host, ledger_dir=directory)
    assert list(directory.iterdir()) == []


def test_a_directory_others_may_write_without_the_sticky_bit_is_refused_saying_how_to_fix_it(host, tmp_path):
    directory = tmp_path / "ledger"
    directory.mkdir()
    directory.chmod(0o777)
    with pytest.raises(LedgerError, match=r"writable by other users and not sticky \(mode drwxrwxrwx\).*chmod \+t"):
        reserve(0, GiB, platform=host, ledger_dir=directory)


@needs_root
def test_a_shared_directory_another_user_made_before_any_engine_cannot_make_a_live_reservation_vanish(host, sticky):
    """The other user makes the ledger directory (mode 1777) before any engine, as anyone may in /dev/shm; were
    it used, they could remove a live engine's owner file and ledger file, and the next engine would be admitted
    beside it (80 GiB of a 64 GiB device)."""
    directory = sticky / "devmem"
    assert ledger_workers.as_nobody(lambda: (directory.mkdir(), directory.chmod(0o1777))[1]) == "None"
    with pytest.raises(LedgerError, match=rf"owned by uid {NOBODY} \(nobody\).*vanish.*install -d -m 1777 -o root"):
        reserve(0, 40 * GiB, platform=host, ledger_dir=directory)
    assert list(directory.iterdir()) == []


@needs_root
@pytest.mark.parametrize("owned", ["parent", "link"])
def test_a_ledger_directory_on_a_path_another_user_controls_is_refused_naming_what_they_own(host, sticky, owned):
    """Another user's directory (or symbolic link) on the way: they may rename the ledger directory away and
    put a fresh one in its place, or point the link elsewhere."""
    parent = sticky / "theirs"
    parent.mkdir()
    if owned == "link":
        os.symlink(parent, sticky / "link")
        os.lchown(sticky / "link", NOBODY, NOBODY)
        via, named = sticky / "link", "the symbolic link .*/link"
    else:
        os.chown(parent, NOBODY, NOBODY)
        via, named = parent, "the directory .*/theirs"
    with pytest.raises(LedgerError, match=rf"{named} on the way to it is owned by uid {NOBODY}"):
        reserve(0, GiB, platform=host, ledger_dir=via / "ledger")
    assert not (parent / "ledger").exists()


def test_a_ledger_directory_under_a_folder_others_may_write_without_the_sticky_bit_is_refused(host, tmp_path):
    parent = tmp_path / "open"
    parent.mkdir()
    parent.chmod(0o777)
    with pytest.raises(LedgerError, match=r"open on the way to it is writable by other users and not sticky"):
        reserve(0, GiB, platform=host, ledger_dir=parent / "ledger")


def test_a_ledger_directory_through_a_link_of_this_users_is_used(host, tmp_path):
    (tmp_path / "real").mkdir()
    (tmp_path / "via").symlink_to(tmp_path / "real")
    reserve(0, GiB, platform=host, ledger_dir=tmp_path / "via" / "ledger").release()
    assert (tmp_path / "real" / "ledger").is_dir()


def test_a_ledger_directory_nested_deeper_than_a_path_may_hold_is_a_ledger_error(host, tmp_path):
    with pytest.raises(LedgerError, match="nests more folders than a path may hold"):
        reserve(0, GiB, platform=host, ledger_dir=tmp_path / ("a/" * 3000))


def test_a_directory_it_creates_is_sticky_and_shared_by_every_user(host, tmp_path):
    reserve(0, GiB, platform=host, ledger_dir=tmp_path / "new" / "ledger").release()
    assert stat.S_IMODE((tmp_path / "new" / "ledger").stat().st_mode) == 0o1777


def test_a_directory_of_this_user_that_exists_keeps_its_mode(host, tmp_path):
    directory = tmp_path / "ledger"
    directory.mkdir(mode=0o700)
    reserve(0, GiB, platform=host, ledger_dir=directory).release()
    assert stat.S_IMODE(directory.stat().st_mode) == 0o700


def test_a_directory_swapped_for_a_link_as_it_is_created_never_has_its_target_made_shared(host, tmp_path, monkeypatch):
    """The race between creating the directory and sharing it: a link planted in between is never chmod'ed."""
    victim = tmp_path / "home"
    victim.mkdir(mode=0o700)
    made = tmp_path / "ledger"
    mkdir = os.mkdir

    def raced(path, mode=0o777, **kwargs):
        mkdir(path, mode, **kwargs)
        if Path(path) == made:  # another user swaps what was just made for a link to the engine user's folder
            os.rmdir(path)
            os.symlink(victim, path)

    monkeypatch.setattr(os, "mkdir", raced)
    with pytest.raises(LedgerError, match="symbolic link"):
        reserve(0, GiB, platform=host, ledger_dir=made)
    assert stat.S_IMODE(victim.stat().st_mode) == 0o700 and list(victim.iterdir()) == []


# ---- files in it -----------------------------------------------------------------------------------------
def test_a_linked_ledger_file_is_never_read_through_and_is_replaced_by_a_file(host, tmp_path, caplog):
    me = Owner.current()
    far = Entry("far", Owner(7, 1, me.pidns + 1, (7,), "another container"), 60 * GiB, 0.0)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    plant(elsewhere, [far])  # a ledger whose entry is alive (its owner lock is held), reachable only by the link
    target = elsewhere / f"{KEY}.json"
    before = target.read_bytes()
    ledger = tmp_path / "ledger"
    ledger.mkdir()
    (ledger / f"{KEY}.json").symlink_to(target)
    fd = os.open(ledger / f"{KEY}.far.owner", os.O_RDWR | os.O_CREAT)
    fcntl.flock(fd, fcntl.LOCK_EX)
    try:
        with caplog.at_level(logging.WARNING, logger="devmem.engine.reservations"):
            reserve(0, 10 * GiB, platform=host, ledger_dir=ledger).release()
    finally:
        os.close(fd)
    assert "is a symbolic link (never followed)" in caplog.text
    assert target.read_bytes() == before and not (ledger / f"{KEY}.json").is_symlink()


@pytest.mark.parametrize("kind", ["fifo", "link", "directory"])
def test_an_owner_file_that_is_no_regular_file_keeps_no_planted_entry_alive(host, tmp_path, kind, caplog):
    """An entry naming PID 1 (its real start time) whose owner file cannot be a live owner's: the entry is dead."""
    plant(tmp_path, [naming(1)])
    owner = tmp_path / f"{KEY}.planted.owner"
    held = tmp_path / "held"
    fd = os.open(held, os.O_RDWR | os.O_CREAT)
    fcntl.flock(fd, fcntl.LOCK_EX)  # a link's target whose lock is held: never followed, so never asked
    {"fifo": lambda: os.mkfifo(owner), "link": lambda: owner.symlink_to(held), "directory": owner.mkdir}[kind]()
    try:
        with ledger_workers.no_hang(), caplog.at_level(logging.WARNING, logger="devmem.engine.reservations"):
            reserve(0, 60 * GiB, platform=host, ledger_dir=tmp_path).release()
    finally:
        os.close(fd)
    assert f"{KEY}.planted.owner is no owner file" in caplog.text


def test_a_broken_owner_file_is_warned_about_once(host, tmp_path, caplog):
    plant(tmp_path, [naming(1)])
    os.mkfifo(tmp_path / f"{KEY}.planted.owner")
    with caplog.at_level(logging.WARNING, logger="devmem.engine.reservations"):
        for _ in range(2):
            reserve(0, GiB, platform=host, ledger_dir=tmp_path).release()
            plant(tmp_path, [naming(1)])
    assert caplog.text.count("planted.owner is no owner file") == 1


@needs_root
def test_an_owner_file_this_user_cannot_open_keeps_no_planted_entry_alive(host, sticky):
    """An entry naming a live process of the reader's own user (its start time readable), whose owner file another
    user made unreadable: no owner of devmem's makes one so, and the entry is dead."""
    sleeper = subprocess.Popen(["sleep", "60"], user=NOBODY)
    try:
        while _start_time(sleeper.pid) is None:
            pass
        plant(sticky, [naming(sleeper.pid)])
        (sticky / f"{KEY}.json").chmod(0o666)
        owner = sticky / f"{KEY}.planted.owner"
        owner.write_text("")
        owner.chmod(0)
        assert (
            ledger_workers.as_nobody(lambda: reserve(0, 60 * GiB, platform=host, ledger_dir=sticky).release()) == "None"
        )
    finally:
        sleeper.kill()
        sleeper.wait()


def test_copies_of_a_live_owners_entry_count_once(tmp_path):
    total = real_total()
    holder = ledger_workers.Worker(tmp_path)
    try:
        assert holder.reserve(total // 4)
        (entry,) = entries_of(tmp_path)
        body = json.loads((tmp_path / f"{KEY}.json").read_text())
        body["entries"] = [entry] * 4
        (tmp_path / f"{KEY}.json").write_text(json.dumps(body))
        with reserve(0, total // 2, platform=CpuPlatform(), ledger_dir=tmp_path):
            pass
    finally:
        holder.close()


def test_an_entry_edited_in_the_ledger_file_counts_as_its_owner_recorded_it(tmp_path):
    total = real_total()
    holder = ledger_workers.Worker(tmp_path)
    try:
        assert holder.reserve(total // 4)
        body = json.loads((tmp_path / f"{KEY}.json").read_text())
        body["entries"][0]["bytes"] = total  # anyone may write the ledger file; only the owner its owner file
        (tmp_path / f"{KEY}.json").write_text(json.dumps(body))
        with reserve(0, total // 2, platform=CpuPlatform(), ledger_dir=tmp_path) as r:
            assert sorted(e["bytes"] for e in entries_of(tmp_path)) == sorted([total // 4, r.bytes])
    finally:
        holder.close()


def test_an_entry_edited_after_this_process_read_it_still_counts_as_its_owner_recorded_it(tmp_path):
    """This process keeps what it read (the ledger's entries, the owner files' bytes) to check only what changed:
    an edit made after a first reading is never taken from what it kept."""
    total = real_total()
    holder = ledger_workers.Worker(tmp_path)
    try:
        assert holder.reserve(total // 4)
        reserve(0, total // 8, platform=CpuPlatform(), ledger_dir=tmp_path).release()  # read and kept
        body = json.loads((tmp_path / f"{KEY}.json").read_text())
        body["entries"][0]["bytes"] = total
        (tmp_path / f"{KEY}.json").write_text(json.dumps(body))
        with reserve(0, total // 2, platform=CpuPlatform(), ledger_dir=tmp_path) as r:
            assert sorted(e["bytes"] for e in entries_of(tmp_path)) == sorted([total // 4, r.bytes])
    finally:
        holder.close()


def test_an_owner_file_rewritten_after_this_process_read_it_is_read_anew(tmp_path):
    total = real_total()
    holder = ledger_workers.Worker(tmp_path)
    try:
        assert holder.reserve(total // 4)
        reserve(0, total // 8, platform=CpuPlatform(), ledger_dir=tmp_path).release()  # read and kept
        (owner_file,) = tmp_path.glob(f"{KEY}.*.owner")
        recorded = json.loads(owner_file.read_text())
        owner_file.write_text(json.dumps({**recorded, "bytes": total // 2}))  # as its owner would, in place
        with pytest.raises(ReservationRefused):
            reserve(0, total // 2 + total // 8, platform=CpuPlatform(), ledger_dir=tmp_path)
    finally:
        holder.close()


@pytest.mark.parametrize("how", ["emptied", "removed"])
def test_a_ledger_file_emptied_or_removed_while_its_owner_lives_keeps_its_reservation(host, tmp_path, how):
    """Anyone may write or remove the ledger file (a careless clean-up too): the live owner's owner file counts."""
    total = 64 * GiB
    with reserve(0, total // 4, platform=host, ledger_dir=tmp_path):
        if how == "emptied":
            plant(tmp_path, [])
        else:
            (tmp_path / f"{KEY}.json").unlink()
        with reserve(0, total // 2, platform=host, ledger_dir=tmp_path):
            with pytest.raises(ReservationRefused):
                reserve(0, total // 4 + 1, platform=host, ledger_dir=tmp_path)
            assert len(entries_of(tmp_path)) == 2  # the next write lists it again


#: Set while a test watches every ``flock`` this process takes (an audit hook cannot be removed once added).
_WATCHED: list[Path] = []
_SEEN_UNLOCKED: list[str] = []


def _owner_visible_before_locked(event: str, args: tuple) -> None:
    """At each exclusive ``flock`` (before it is taken): the owner files already under their name that are the
    file being locked, as any reader listing the directory would find them, unlocked and maybe empty."""
    if event != "fcntl.flock" or not _WATCHED or not args[1] & fcntl.LOCK_EX:
        return
    inode = os.fstat(args[0]).st_ino
    for path in _WATCHED[0].glob("*.owner"):
        with suppress(OSError):
            if path.lstat().st_ino == inode:
                _SEEN_UNLOCKED.append(f"{path.name} ({path.stat().st_size} bytes)")


sys.addaudithook(_owner_visible_before_locked)


def test_an_owner_file_appears_under_its_name_only_locked_and_written(host, tmp_path):
    """Readers that take no ledger lock (the exporter, `devmem info`) probe owner files' locks: one that appeared
    unlocked or empty would be taken for a dead owner's, and a probe holding its lock as the owner took it failed
    the admission."""
    _WATCHED.append(tmp_path)
    try:
        reserve(0, GiB, platform=host, ledger_dir=tmp_path).release()
    finally:
        _WATCHED.clear()
    assert _SEEN_UNLOCKED == []


def test_a_reader_probing_a_dead_owners_file_does_not_make_it_look_alive(host, tmp_path):
    """A reader (`devmem info`, the exporter, another admission) holds an owner file's lock for the instant it
    probes it: a dead owner of another PID namespace (where /proc/locks cannot name the holder) stays dead."""
    me = Owner.current()
    far = Entry("far", Owner(7, 1, me.pidns + 1, (7,), "another container"), 60 * GiB, 0.0)
    plant(tmp_path, [far])
    owner = tmp_path / f"{KEY}.far.owner"
    owner.write_text(json.dumps(far.as_json()))
    fd = os.open(owner, os.O_RDONLY)
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)  # the reader, mid-probe
        reserve(0, 32 * GiB, platform=host, ledger_dir=tmp_path).release()
    finally:
        os.close(fd)


def test_an_owner_file_is_writable_by_its_owner_only(host, tmp_path):
    with reserve(0, GiB, platform=host, ledger_dir=tmp_path) as r:
        mode = (tmp_path / f"{KEY}.{r.entry.id}.owner").stat().st_mode
        assert stat.S_IMODE(mode) == 0o644


# ---- bounds ----------------------------------------------------------------------------------------------
def largest_entry(entry_id: str) -> Entry:
    from devmem.engine.reservations import MAX_COMMAND, MAX_FIGURE, MAX_ID, MAX_NESTING, MAX_PID

    owner = Owner(MAX_PID, MAX_FIGURE, MAX_FIGURE, (MAX_PID,) * MAX_NESTING, "\U0001f600" * MAX_COMMAND)
    return Entry(entry_id.rjust(MAX_ID, "0"), owner, MAX_FIGURE, -1.7976931348623157e308)


def test_the_most_entries_at_their_largest_fit_the_file_bound():
    from devmem.engine.reservations import MAX_ENTRIES, MAX_ENTRY_BYTES, MAX_FILE_BYTES, ledger_bytes

    assert len(json.dumps(largest_entry("1").as_json()).encode()) <= MAX_ENTRY_BYTES  # an owner file
    key = "k" * 128  # the longest key
    assert len(ledger_bytes(key, [largest_entry(str(i)) for i in range(MAX_ENTRIES)])) <= MAX_FILE_BYTES


def test_a_device_whose_ledger_holds_the_most_entries_refuses_one_more(host, tmp_path):
    from devmem.engine.reservations import MAX_ENTRIES

    held = [reserve(0, 1, platform=host, ledger_dir=tmp_path) for _ in range(MAX_ENTRIES)]
    try:
        with pytest.raises(ReservationRefused, match=f"ledger holds {MAX_ENTRIES} reservations, the most one device"):
            reserve(0, 1, platform=host, ledger_dir=tmp_path)
    finally:
        for r in held:
            r.release()


def test_a_ledger_file_listing_more_than_the_most_entries_is_rebuilt(host, tmp_path, caplog):
    from devmem.engine.reservations import MAX_ENTRIES

    plant(tmp_path, [naming(1, 1, f"e{i}") for i in range(MAX_ENTRIES + 1)])
    with caplog.at_level(logging.WARNING, logger="devmem.engine.reservations"):
        reserve(0, GiB, platform=host, ledger_dir=tmp_path).release()
    assert f"a list of at most {MAX_ENTRIES} entries" in caplog.text


@pytest.mark.parametrize(
    "field",
    [
        {"bytes": 1 << 64},
        {"pid": (1 << 22) + 1},
        {"created": 10**400},
        {"created": float("inf")},
        {"start_time": -1},
        {"nspid": [-1]},
        {"nspid": [1] * 33},
        {"command": ["not", "text"]},
    ],
    ids=lambda f: next(iter(f)),
)
def test_an_entry_with_a_field_past_its_bound_is_corrupt_not_an_error(host, tmp_path, field, caplog):
    me = Owner.current()
    entry = {**Entry("a", Owner(me.pid, 1, me.pidns, me.nspid, "x"), GiB, 0.0).as_json(), **field}
    (tmp_path / f"{KEY}.json").write_text(json.dumps({"format": 1, "entries": [entry]}))
    with caplog.at_level(logging.WARNING, logger="devmem.engine.reservations"):
        reserve(0, GiB, platform=host, ledger_dir=tmp_path).release()
    if "command" not in field:  # a command that is no text is shown as "?"
        assert "is corrupt" in caplog.text


# ---- this process's own memory ---------------------------------------------------------------------------
class Classic:
    """A minimal backend (devmem._adapter): 80 GiB, of which this process uses 40, and no other process listed."""

    name = "classic"

    def __init__(self, integrated: bool):
        self.integrated = integrated

    def device_count(self) -> int:
        return 1

    def device_memory_info(self, device: int = 0) -> MemoryInfo:
        return MemoryInfo(free=40 * GiB, total=80 * GiB)

    def get_process_memory_usage(self, device: int = 0) -> int:
        return 40 * GiB

    def is_integrated_gpu(self, device: int = 0) -> bool:
        return self.integrated

    def pages_instead_of_failing(self, device: int = 0) -> bool:
        return False


def nvml_using_40_of_80():
    sc = Scenario(devices=[ScriptedNvidiaGpu(total=80 * GiB, reserved=0)])
    sc.allocate(40 * GiB)
    return scripted_platform(sc)


def host_using_40_of_80():
    sc = Scenario(host=HostMemory(total=80 * GiB, free=40 * GiB, page_cache=0), status_memory_kib={})
    sc.status_memory_kib.update(RssAnon=40 * GiB // 1024, RssShmem=0)
    return CpuPlatform(files=sc.fs)


PLATFORMS = {
    "discrete, processes listed": nvml_using_40_of_80,
    "discrete, no processes listed": lambda: as_platform(Classic(integrated=False)),
    "integrated, no processes listed": lambda: as_platform(Classic(integrated=True)),
    "host memory": host_using_40_of_80,
}


@pytest.mark.parametrize("make", PLATFORMS.values(), ids=PLATFORMS.keys())
def test_this_processs_own_memory_counts_on_top_of_a_new_request(tmp_path, make):
    platform = make()
    assert platform.read(0).process.used == 40 * GiB
    with pytest.raises(ReservationRefused, match=r"What would fit: 40.00 GiB") as caught:
        reserve(0, utilization=0.9, platform=platform, ledger_dir=tmp_path)
    assert caught.value.holders == []  # nothing to stop but this process itself


@pytest.mark.parametrize("make", PLATFORMS.values(), ids=PLATFORMS.keys())
def test_what_fits_beside_this_processs_own_memory_is_admitted(tmp_path, make):
    with reserve(0, utilization=0.5, platform=make(), ledger_dir=tmp_path) as r:
        assert r.bytes == 40 * GiB


def test_own_use_beyond_this_processs_reservations_counts_on_top_of_a_new_one(tmp_path):
    sc = Scenario(devices=[ScriptedNvidiaGpu(total=80 * GiB, reserved=0)])
    platform = scripted_platform(sc)
    with reserve(0, 20 * GiB, platform=platform, ledger_dir=tmp_path):
        sc.allocate(50 * GiB)  # an engine above its reservation: 30 GiB beyond it
        with pytest.raises(ReservationRefused, match=r"What would fit: 30.00 GiB"):
            reserve(0, 31 * GiB, platform=platform, ledger_dir=tmp_path)


def test_what_a_share_covers_of_this_processs_memory_is_not_counted_again(tmp_path):
    """An engine created after its model (its share holds the 40 GiB it loaded): 0.9 of 80 fits."""
    with reserve(0, utilization=0.9, platform=nvml_using_40_of_80(), ledger_dir=tmp_path, held_outside=0) as r:
        assert r.bytes == 72 * GiB


def test_an_engine_memory_created_after_its_model_reserves_its_share_around_what_it_holds(tmp_path):
    memory = devmem.EngineMemory(0, utilization=0.9, platform=nvml_using_40_of_80(), ledger_dir=tmp_path, late=True)
    assert memory.reservation is not None and memory.reservation.bytes == 72 * GiB


def test_an_engine_memory_whose_baseline_came_before_its_model_counts_only_what_it_held_then(tmp_path):
    sc = Scenario(devices=[ScriptedNvidiaGpu(total=80 * GiB, reserved=0)])
    platform = scripted_platform(sc)
    sc.allocate(8 * GiB)  # held before the engine's baseline: outside its share
    baseline = devmem.engine.MemorySnapshot.measure(0, platform)
    sc.allocate(32 * GiB)  # the model, loaded since the baseline: inside it
    with pytest.raises(ReservationRefused, match=r"What would fit: 72.00 GiB"):
        devmem.EngineMemory(0, utilization=0.95, platform=platform, ledger_dir=tmp_path, baseline=baseline)
    memory = devmem.EngineMemory(0, utilization=0.9, platform=platform, ledger_dir=tmp_path, baseline=baseline)
    assert memory.reservation.bytes == 72 * GiB


# ---- another user, /proc hidden --------------------------------------------------------------------------
HIDDEN_READER = """
import os, sys
from devmem.cpu import CpuPlatform
from devmem.engine.reservations import ReservationRefused, reserve
from devmem.platform import read_device
read_device(CpuPlatform(), 0)  # everything it imports, imported while this user can read the interpreter's files
os.setgid(65534)
os.setuid(65534)
assert not os.path.exists(f"/proc/{sys.argv[2]}"), "the owner is not hidden"
try:
    reserve(0, int(sys.argv[3]), platform=CpuPlatform(), ledger_dir=sys.argv[1]).release()
    print("admitted")
except ReservationRefused as exc:
    print("refused", [h.pid for h in exc.holders if not h.mine])
"""


@needs_root
@pytest.mark.skipif(shutil.which("unshare") is None, reason="needs unshare(1), to mount /proc with hidepid")
def test_another_users_live_owner_is_alive_where_proc_hides_it(sticky):
    """/proc mounted ``hidepid=invisible``: another user's engine shows no /proc entry; its owner lock says."""
    total = real_total()
    holder = ledger_workers.Worker(sticky)
    try:
        assert holder.reserve(total // 2)
        script = (
            "mount -t proc -o hidepid=invisible proc /proc && exec "
            f"{sys.executable} -c {shlex.quote(HIDDEN_READER)} {sticky} {holder.pid} {total - total // 4}"
        )
        run = ["unshare", "--mount", "--propagation", "private", "sh", "-c", script]
        result = subprocess.run(run, capture_output=True, text=True, cwd=ledger_workers.ROOT, timeout=60)
        if "mount" in result.stderr and result.returncode:
            pytest.skip(f"cannot mount /proc with hidepid here: {result.stderr.strip()}")
        assert result.stdout.strip() == f"refused [{holder.pid}]", result.stderr
    finally:
        holder.close()


# ---- property: hostile writers never over-admit and never block ------------------------------------------
def _gone_pid() -> int:
    child = subprocess.Popen(["true"])
    child.wait()
    return child.pid


PIDS = {"init": lambda: 1, "parent": os.getppid, "gone": _gone_pid, "largest": lambda: 1 << 22}

HOSTILE_ENTRY = st.fixed_dictionaries(
    {
        "pid": st.sampled_from(sorted(PIDS)),
        "start_time": st.one_of(st.just("real"), st.integers(0, (1 << 64) - 1)),
        "pidns": st.sampled_from(["mine", "other", "unknown"]),
        "bytes": st.one_of(st.integers(0, (1 << 64) - 1), st.just(64 * GiB)),
        "command": st.sampled_from(["", "engine", "\x1b]0;retitled\x07", "\u00e9" * 2000, "x" * (5 << 20)]),
        "id": st.text("abcdef0123456789._-", min_size=1, max_size=64),
        # what is in place of its owner file; a lock this process holds keeps no entry of another PID alive
        "owner": st.sampled_from(["none", "unlocked", "locked", "fifo", "link", "directory", "stray"]),
    }
)
#: What is in place of the ledger file: hostile entries, garbage, a cut ledger, a link to a ledger, a FIFO.
LEDGER_FILE = st.sampled_from(["entries", "garbage", "truncated", "link", "fifo", "directory"])
#: What the hostile writer does to the genuine entry: nothing, copies it, or edits a field.
GENUINE = st.sampled_from(["keep", "copy", "bytes", "pid", "start_time", "drop"])


def _hostile_entry(spec: dict, me: Owner) -> Entry:
    pid = PIDS[spec["pid"]]()
    start = (_start_time(pid) or 0) if spec["start_time"] == "real" else spec["start_time"]
    pidns = {"mine": me.pidns, "other": me.pidns + 1, "unknown": 0}[spec["pidns"]]
    return Entry(spec["id"], Owner(pid, start, pidns, (pid,), spec["command"]), spec["bytes"], 0.0)


def _plant_owner(directory: Path, spec: dict, entry: Entry, held: list[int]) -> None:
    owner = directory / f"{KEY}.{entry.id}.owner"
    kind = spec["owner"]
    if kind == "locked" and spec["pidns"] != "mine":
        kind = "unlocked"  # a lock held for an entry of another namespace is a live owner's, by design
    if owner.exists() or owner.is_symlink() or kind == "none":
        return
    if kind in ("unlocked", "locked", "stray"):
        owner.write_text(json.dumps(entry.as_json()) if kind != "stray" else "{")
        if kind == "locked":
            fd = os.open(owner, os.O_RDONLY)
            fcntl.flock(fd, fcntl.LOCK_EX)
            held.append(fd)
    elif kind == "fifo":
        os.mkfifo(owner)
    elif kind == "link":
        lock = directory / f"held-{len(held)}"
        fd = os.open(lock, os.O_RDWR | os.O_CREAT)
        fcntl.flock(fd, fcntl.LOCK_EX)
        held.append(fd)
        owner.symlink_to(lock)
    else:
        owner.mkdir()


def _plant_ledger(directory: Path, kind: str, entries: list[dict], data: bytes) -> None:
    path = directory / f"{KEY}.json"
    path.unlink(missing_ok=True)
    body = json.dumps({"format": 1, "key": KEY, "entries": entries}).encode()
    if kind == "entries":
        path.write_bytes(body)
    elif kind == "garbage":
        path.write_bytes(data)
    elif kind == "truncated":
        path.write_bytes(body[: len(data) % max(1, len(body))])
    elif kind == "link":
        (directory / "elsewhere.json").write_bytes(body)
        path.symlink_to(directory / "elsewhere.json")
    elif kind == "fifo":
        os.mkfifo(path)
    else:
        path.mkdir()


def _edited(genuine: dict, how: str) -> list[dict]:
    if how == "keep":
        return [genuine]
    if how == "copy":
        return [genuine, genuine, genuine]
    if how == "drop":
        return []
    return [{**genuine, how: {"bytes": 1 << 40, "pid": 1, "start_time": 0}[how]}]


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    hostile=st.lists(HOSTILE_ENTRY, max_size=6),
    ledger_file=LEDGER_FILE,
    genuine=GENUINE,
    garbage=st.binary(max_size=200),
)
def test_hostile_writers_never_make_the_ledger_admit_more_than_the_total_or_block(
    hostile, ledger_file, genuine, garbage
):
    """Whatever anyone wrote in the directory, an admission counts exactly the live owners' reservations: it
    neither admits beyond the total nor is blocked by an entry no live owner holds; it raises nothing but
    LedgerError (a directory in the ledger file's place) and ReservationRefused."""
    total = 64 * GiB
    platform = CpuPlatform(files=Scenario(host=HostMemory(total=total, free=60 * GiB)).fs)
    directory = Path(tempfile.mkdtemp(prefix="devmem-hostile-"))
    held: list[int] = []
    me = Owner.current()
    mine = reserve(0, total // 4, platform=platform, ledger_dir=directory)
    try:
        planted = [_hostile_entry(spec, me) for spec in hostile]
        for spec, entry in zip(hostile, planted, strict=True):
            _plant_owner(directory, spec, entry, held)
        entries = _edited(entries_of(directory)[0], genuine) + [e.as_json() for e in planted]
        _plant_ledger(directory, ledger_file, entries, garbage)
        with ledger_workers.no_hang():
            if ledger_file == "directory":  # never written through: an error naming it
                with pytest.raises(LedgerError, match=rf"{KEY}\.json"):
                    reserve(0, total // 2, platform=platform, ledger_dir=directory)
                return
            second = reserve(0, total // 2, platform=platform, ledger_dir=directory)  # fits beside the first
            with pytest.raises(ReservationRefused):  # the total and one byte: never admitted
                reserve(0, total // 4 + 1, platform=platform, ledger_dir=directory)
            second.release()
            mine.release()
            reserve(0, total - GiB, platform=platform, ledger_dir=directory).release()  # nothing holds it now
    finally:
        mine.release()
        for fd in held:
            os.close(fd)
        shutil.rmtree(directory)


def _answers(platform, directory: Path, total: int) -> str:
    """As the reader: what reserving half the total (which fits), then the rest and a byte (which never does), gives."""
    answers = []
    for nbytes in (total // 2, total // 4 + 1):
        try:
            reserve(0, nbytes, platform=platform, ledger_dir=directory)
            answers.append("admitted")
        except ReservationRefused:
            answers.append("refused")
        except LedgerError:
            answers.append("LedgerError")
    return " ".join(answers)


@needs_root
@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    hostile=st.lists(HOSTILE_ENTRY.filter(lambda s: len(s["command"]) < 5000), max_size=4),
    ledger_file=st.sampled_from(["entries", "read-only", "link", "garbage"]),
    owner_mode=st.sampled_from([0o644, 0o600, 0]),
)
def test_another_users_hostile_files_never_make_the_ledger_over_admit_or_block(hostile, ledger_file, owner_mode):
    """The files of another user (root, to the reader ``nobody``) in a shared sticky directory: whatever they hold,
    the reader is admitted what fits beside the live reservations and refused the rest, or told with a LedgerError
    where another user's ledger file cannot be replaced or written."""
    total = 64 * GiB
    platform = CpuPlatform(files=Scenario(host=HostMemory(total=total, free=60 * GiB)).fs)
    directory = Path(tempfile.mkdtemp(prefix="devmem-hostile-"))
    directory.chmod(0o1777)
    held: list[int] = []
    me = Owner.current()
    mine = reserve(0, total // 4, platform=platform, ledger_dir=directory)  # a live owner, of another user
    try:
        planted = [_hostile_entry(spec, me) for spec in hostile]
        for spec, entry in zip(hostile, planted, strict=True):
            _plant_owner(directory, spec, entry, held)
            owner = directory / f"{KEY}.{entry.id}.owner"
            if owner.is_file() and not owner.is_symlink():
                owner.chmod(owner_mode)
        entries = entries_of(directory) + [e.as_json() for e in planted]
        _plant_ledger(directory, "link" if ledger_file == "link" else "entries", entries, b"")
        if ledger_file == "garbage":
            (directory / f"{KEY}.json").write_bytes(b'{"format": 1, "entries": [')
        if ledger_file != "link":
            (directory / f"{KEY}.json").chmod(0o644 if ledger_file == "read-only" else 0o666)
        answer = ledger_workers.as_nobody(lambda: _answers(platform, directory, total))
        if ledger_file in ("read-only", "link"):  # another user's, which this user may neither replace nor write
            assert answer == "LedgerError LedgerError"
        else:
            assert answer == "admitted refused"
    finally:
        mine.release()
        for fd in held:
            os.close(fd)
        shutil.rmtree(directory)


def _as_directory_owner(ledger: Path, action: str) -> None:
    """What the user owning the ledger directory (or the folder holding it) may do to it, as that user."""
    names = sorted(ledger.iterdir()) if ledger.is_dir() else []
    if action == "delete":
        for name in names:
            with suppress(OSError):
                name.unlink()
    elif action == "rename":
        for i, name in enumerate(names):
            with suppress(OSError):
                name.rename(ledger / f"moved-{i}")
    elif action == "replace":
        with suppress(OSError):
            (ledger / f"{KEY}.json").unlink()
            (ledger / f"{KEY}.json").write_text(json.dumps({"format": 1, "key": KEY, "entries": []}))
    elif action == "swap":  # the whole directory renamed away and a fresh one of theirs put in its place
        with suppress(OSError):
            ledger.rename(ledger.with_name(f"old-{len(list(ledger.parent.iterdir()))}"))
            ledger.mkdir()
            ledger.chmod(0o1777)
    else:
        with suppress(OSError):
            ledger.chmod({"sticky": 0o1777, "open": 0o777, "private": 0o755}[action])


@needs_root
@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    owns=st.sampled_from(["directory", "parent"]),
    steps=st.lists(
        st.one_of(
            st.sampled_from([16, 24, 40, 64]).map(lambda gib: gib * GiB),
            st.sampled_from(["delete", "rename", "replace", "swap", "sticky", "open", "private"]),
        ),
        min_size=1,
        max_size=8,
    ),
)
@example(owns="directory", steps=[40 * GiB, "delete", 40 * GiB])  # an engine's files removed
@example(owns="parent", steps=[40 * GiB, "swap", 40 * GiB])  # the directory renamed away, a fresh one in its place
def test_a_ledger_directory_another_user_controls_never_admits_more_than_the_device_holds(owns, steps):
    """Another user owns the ledger directory, or the folder it is in, and deletes, renames and replaces its files
    (and the directory itself) between admissions: whatever they do, the reservations admitted never add up to
    more than the device holds (each admission is refused, naming the owner, and nothing else is raised)."""
    total = 64 * GiB
    platform = CpuPlatform(files=Scenario(host=HostMemory(total=total, free=60 * GiB)).fs)
    base = Path(tempfile.mkdtemp(prefix="devmem-owned-"))
    base.chmod(0o1777)
    held = []
    try:
        if owns == "parent":  # theirs, with a shared ledger directory of root's in it
            assert ledger_workers.as_nobody(lambda: (base / "theirs").mkdir()) == "None"
            ledger = base / "theirs" / "ledger"
            ledger.mkdir()
            ledger.chmod(0o1777)
        else:  # made by them before any engine, as anyone may in /dev/shm
            ledger = base / "ledger"
            assert ledger_workers.as_nobody(lambda: (ledger.mkdir(), ledger.chmod(0o1777))[1]) == "None"
        for step in steps:
            if isinstance(step, str):
                ledger_workers.as_nobody(lambda step=step: _as_directory_owner(ledger, step))
                continue
            with ledger_workers.no_hang():
                try:
                    held.append(reserve(0, step, platform=platform, ledger_dir=ledger))
                except ReservationRefused:
                    pass
                except LedgerError as exc:
                    assert f"uid {NOBODY}" in str(exc)
            assert sum(r.bytes for r in held) <= total
    finally:
        for r in held:
            r.release()
        shutil.rmtree(base)


@needs_root
def test_a_file_planted_where_the_writer_could_be_foreseen_to_write_is_never_taken_as_the_ledger(host, sticky):
    """Another user plants files, theirs and writable by all, under the temporary names this process's PID and
    thread would give: the ledger file is still written by this user, and the planted files are left as they were."""
    planted = [sticky / f".{KEY}.{os.getpid()}.{threading.get_ident()}.tmp", sticky / f".{KEY}.{os.getpid()}.tmp"]
    for path in planted:
        path.write_bytes(b"")
        path.chmod(0o666)
        os.chown(path, NOBODY, NOBODY)
    with reserve(0, GiB, platform=host, ledger_dir=sticky):
        assert (sticky / f"{KEY}.json").stat().st_uid == os.geteuid()
    assert all(p.stat().st_uid == NOBODY and p.read_bytes() == b"" for p in planted)


def test_a_holders_command_with_control_characters_is_escaped_in_a_refusal(host, tmp_path):
    """An owner writes its own owner file: a command holding escape sequences, a newline or a bidirectional
    override reaches the refusal an engine logs as escapes, never as a sequence a terminal runs."""
    held = reserve(0, 32 * GiB, platform=host, ledger_dir=tmp_path)
    try:
        e = held.entry
        evil = "\x1b[2J\x1b]0;retitled\x07x\nholder: PID 1 reserved 999 TiB\u202e"
        forged = Entry(e.id, Owner(e.owner.pid, e.owner.start_time, e.owner.pidns, e.owner.nspid, evil), e.bytes, 0.0)
        (tmp_path / f"{KEY}.{e.id}.owner").write_text(json.dumps(forged.as_json()))
        plant(tmp_path, [forged])
        with pytest.raises(ReservationRefused) as refused:
            reserve(0, 60 * GiB, platform=host, ledger_dir=tmp_path)
    finally:
        held.release()
    text = str(refused.value)
    assert "\\x1b[2J" in text and not any(c in text for c in "\x1b\x07\u202e")
    assert "\nholder: PID 1" not in text


def test_a_holders_command_with_lone_surrogates_is_escaped_in_a_refusal_that_can_be_written(host, tmp_path):
    """JSON can spell a lone surrogate (``"\\ud800"``), which no encoding writes: an engine logging the refusal
    would lose it to an encoding error."""
    held = reserve(0, 32 * GiB, platform=host, ledger_dir=tmp_path)
    try:
        e = held.entry
        evil = "engine \udcff\ud800"  # low before high: no pair, two lone ones
        forged = Entry(e.id, Owner(e.owner.pid, e.owner.start_time, e.owner.pidns, e.owner.nspid, evil), e.bytes, 0.0)
        (tmp_path / f"{KEY}.{e.id}.owner").write_text(json.dumps(forged.as_json()))
        with pytest.raises(ReservationRefused) as refused:
            reserve(0, 60 * GiB, platform=host, ledger_dir=tmp_path)
    finally:
        held.release()
    assert "engine \\udcff\\ud800" in str(refused.value).encode("utf-8").decode()


def test_a_ledger_write_leaves_no_temporary_file(host, tmp_path):
    with reserve(0, GiB, platform=host, ledger_dir=tmp_path):
        pass
    assert [p.name for p in tmp_path.iterdir() if p.name.endswith(".tmp")] == []


def test_a_device_with_a_very_long_name_gets_a_ledger_of_its_own(tmp_path):
    long = ScriptedNvidiaGpu(name="N" * 300)
    longer = ScriptedNvidiaGpu(name="N" * 300 + "2")
    for gpu in (long, longer):
        gpu.uuid = ""  # no UUID: keyed by name

    keys = set()
    for gpu in (long, longer):
        with reserve(0, GiB, platform=scripted_platform(Scenario(devices=[gpu])), ledger_dir=tmp_path) as r:
            keys.add(r.key)
            assert len(r.key) <= 128
    assert len(keys) == 2
