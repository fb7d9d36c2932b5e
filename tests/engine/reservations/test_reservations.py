"""The reservation ledger: admission against the total, identity of owners and devices, faults, and release."""

from __future__ import annotations

import atexit
import contextlib
import errno
import fcntl
import json
import logging
import os
import re
import shutil
import stat
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import ledger_workers
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from ledger_workers import Worker

import devmem
from devmem import GiB, MiB, NotEnoughMemoryError
from devmem.cpu import CpuPlatform
from devmem.engine.reservations import (
    Entry,
    LedgerError,
    Owner,
    ReservationRefused,
    _start_time,
    account,
    device_key,
    ledger_bytes,
    parse_ledger,
    reserve,
)
from devmem.testing.scenario import HostMemory, Scenario
from devmem_nvidia.testing import H200_RUNTIME_TOTAL, h200_scenario, scripted_platform

CHILD = 5151


@pytest.fixture
def workers(tmp_path):
    made: list[Worker] = []

    def make() -> Worker:
        made.append(Worker(tmp_path))
        return made[-1]

    yield make
    for w in made:
        w.close()


def ledger_entries(tmp_path, key: str) -> list[dict]:
    path = tmp_path / f"{key}.json"
    return json.loads(path.read_text())["entries"] if path.exists() else []


def plant(directory: Path, entries: list[Entry], key: str = "cpu-host_memory-0") -> None:
    """Write ``key``'s ledger file listing ``entries``, as any process that can write the file can."""
    (directory / f"{key}.json").write_bytes(ledger_bytes(key, entries))


def real_total() -> int:
    return CpuPlatform().device_memory_info().total


# ---- admission -------------------------------------------------------------------------------------------
def test_reservation_within_the_total_is_admitted(host, tmp_path):
    with reserve(0, 40 * GiB, platform=host, ledger_dir=tmp_path) as r:
        assert r.bytes == 40 * GiB


def test_reservation_beyond_what_is_left_is_refused(host, tmp_path):
    with reserve(0, 40 * GiB, platform=host, ledger_dir=tmp_path), pytest.raises(ReservationRefused):
        reserve(0, 30 * GiB, platform=host, ledger_dir=tmp_path)


def test_refusal_is_a_not_enough_memory_error(host, tmp_path):
    with reserve(0, 40 * GiB, platform=host, ledger_dir=tmp_path), pytest.raises(NotEnoughMemoryError):
        reserve(0, 30 * GiB, platform=host, ledger_dir=tmp_path)


def test_refusal_says_what_would_fit(host, tmp_path):
    with reserve(0, 40 * GiB, platform=host, ledger_dir=tmp_path), pytest.raises(ReservationRefused) as caught:
        reserve(0, 30 * GiB, platform=host, ledger_dir=tmp_path)
    assert caught.value.breakdown["available"] == 24 * GiB
    assert "What would fit: 24.00 GiB" in str(caught.value)


def test_refusal_says_what_would_fit_on_its_first_line_and_each_holder_on_its_own(host, tmp_path):
    with reserve(0, 40 * GiB, platform=host, ledger_dir=tmp_path), pytest.raises(ReservationRefused) as caught:
        reserve(0, 30 * GiB, platform=host, ledger_dir=tmp_path)
    first, *rest = str(caught.value).splitlines()
    assert first.startswith("device 0") and "What would fit: 24.00 GiB" in first
    assert rest[-1].startswith(f"  ledger: {tmp_path}")
    assert all(line.startswith("  ") for line in rest)


def test_a_refusal_names_this_processs_own_reservations_and_what_to_do_instead(host, tmp_path):
    with reserve(0, 40 * GiB, platform=host, ledger_dir=tmp_path), pytest.raises(ReservationRefused) as caught:
        reserve(0, 30 * GiB, platform=host, ledger_dir=tmp_path)
    text = str(caught.value)
    assert f"holder: this process (PID {os.getpid()})" in text
    assert "this process already holds 1 reservation(s) on this device, 40.00 GiB in all" in text
    assert "pass the Reservation it holds (reservation=) or release() it" in text


def test_a_refusal_names_the_largest_holders_and_sums_up_the_rest():
    from devmem.engine.reservations import HOLDERS_NAMED, Holding, _holder_lines

    holders = [Holding(1000 + i, f"engine {i}", (40 - i) * GiB, None) for i in range(HOLDERS_NAMED + 3)]
    lines = _holder_lines(holders)
    assert len(lines) == HOLDERS_NAMED + 1 and lines[0].startswith("  holder: PID 1000")
    assert lines[-1] == "  and 3 more holder(s) with 93.00 GiB in all"  # 32 + 31 + 30 GiB


def test_refusal_names_the_holder_pid_and_command(workers, tmp_path):
    total = real_total()
    holder = workers()
    assert holder.reserve(total // 2)
    with pytest.raises(ReservationRefused) as caught:
        reserve(0, total // 2 + 1, platform=CpuPlatform(), ledger_dir=tmp_path)
    assert f"PID {holder.pid} (" in str(caught.value) and "python" in str(caught.value)
    others = [(h.pid, h.reserved) for h in caught.value.holders if not h.mine]  # this process counts, too
    assert others == [(holder.pid, total // 2)]


def test_utilization_is_a_share_of_the_total(host, tmp_path):
    with reserve(0, utilization=0.25, platform=host, ledger_dir=tmp_path) as r:
        assert r.bytes == 16 * GiB


@pytest.mark.parametrize(
    "kwargs",
    [{}, {"bytes": GiB, "utilization": 0.5}, {"bytes": 0}, {"bytes": 65 * GiB}, {"bytes": True}, {"bytes": 1.5}],
)
def test_a_bad_byte_request_names_the_value(host, tmp_path, kwargs):
    with pytest.raises(devmem.DevmemError, match="bytes"):
        reserve(0, platform=host, ledger_dir=tmp_path, **kwargs)


@pytest.mark.parametrize("utilization", [0, 1.5, 1.0000001, -0.1, float("nan"), True])
def test_a_bad_utilization_names_the_value(host, tmp_path, utilization):
    with pytest.raises(devmem.SizingError, match="utilization must be"):
        reserve(0, utilization=utilization, platform=host, ledger_dir=tmp_path)


def test_a_bad_device_index_names_the_valid_range(host, tmp_path):
    with pytest.raises(devmem.DevmemError, match="valid indices"):
        reserve(3, GiB, platform=host, ledger_dir=tmp_path)


def test_release_gives_the_share_back(host, tmp_path):
    reserve(0, 40 * GiB, platform=host, ledger_dir=tmp_path).release()
    with reserve(0, 40 * GiB, platform=host, ledger_dir=tmp_path):
        pass


def test_leaving_the_context_releases(host, tmp_path):
    with reserve(0, 40 * GiB, platform=host, ledger_dir=tmp_path):
        pass
    assert ledger_entries(tmp_path, "cpu-host_memory-0") == []


def test_release_twice_is_harmless(host, tmp_path):
    r = reserve(0, GiB, platform=host, ledger_dir=tmp_path)
    r.release()
    r.release()
    assert r.released


def test_memory_of_a_process_without_a_reservation_counts(tmp_path):
    sc = h200_scenario()
    sc.allocate(100 * GiB, pid=CHILD)
    with pytest.raises(ReservationRefused, match=f"PID {CHILD}.* uses 100.00 GiB without a reservation"):
        reserve(0, utilization=0.5, platform=scripted_platform(sc), ledger_dir=tmp_path)


def test_an_owner_using_more_than_it_reserved_counts_its_use():
    me = Owner.current()
    other = Owner(CHILD, 1, me.pidns, (CHILD,), "engine")
    entry = Entry("a", other, 10 * GiB, 0.0)
    accounting = account(100 * GiB, 70 * GiB, [entry], {CHILD: 30 * GiB}, 0, False, me)
    assert accounting.committed == 30 * GiB


def test_a_discrete_device_without_per_process_figures_counts_all_memory_in_use():
    me = Owner.current()
    accounting = account(100 * GiB, 70 * GiB, [], None, None, False, me)
    assert accounting.committed == 30 * GiB


def test_admission_takes_a_few_milliseconds(host, tmp_path):
    """Not a benchmark (benchmarks/reservations.py is): a guard against a lock that waits for nothing."""
    started = time.perf_counter()
    reserve(0, GiB, platform=host, ledger_dir=tmp_path).release()
    assert time.perf_counter() - started < 1.0


# ---- one reading -----------------------------------------------------------------------------------------
def counted_h200(**kwargs):
    from devmem_nvidia.testing import ScriptedNvml

    sc = h200_scenario(**kwargs)
    nvml = ScriptedNvml(sc)
    platform = scripted_platform(sc, nvml=nvml)
    return sc, platform, nvml


def test_a_reservation_given_a_reading_asks_nvml_nothing(tmp_path):
    _, platform, nvml = counted_h200()
    reading = platform.read(0)
    nvml.calls.clear()
    reserve(0, GiB, platform=platform, ledger_dir=tmp_path, reading=reading).release()
    assert not nvml.calls, dict(nvml.calls)


def test_a_reservation_counts_the_figures_of_the_reading_given(tmp_path):
    sc, platform, _ = counted_h200()
    sc.allocate(100 * GiB, pid=CHILD)  # a co-tenant, in the reading
    reading = platform.read(0)
    sc.release(100 * GiB, pid=CHILD)  # gone since: admission must count what the reading says, not ask again
    with pytest.raises(ReservationRefused, match=f"PID {CHILD}"):
        reserve(0, 60 * GiB, platform=platform, ledger_dir=tmp_path, reading=reading)


def test_a_reading_of_another_device_is_refused_naming_both(tmp_path):
    from devmem_nvidia.testing import ScriptedNvidiaGpu

    second = ScriptedNvidiaGpu(uuid="GPU-00000000-0000-4000-8000-000000000001", pci_bus_id="00000000:1A:00.0")
    platform = scripted_platform(Scenario(devices=[ScriptedNvidiaGpu(), second]))
    with pytest.raises(devmem.DevmemError, match=r"reading given to reserve is of device 1 .*not of device 0"):
        reserve(0, GiB, platform=platform, ledger_dir=tmp_path, reading=platform.read(1))


def test_a_reading_that_is_no_reading_is_refused_naming_it(host, tmp_path):
    with pytest.raises(devmem.DevmemError, match=r"reading must be a devmem.platform.DeviceReading.*got 42"):
        reserve(0, GiB, platform=host, ledger_dir=tmp_path, reading=42)


# ---- identity --------------------------------------------------------------------------------------------
def test_nvml_devices_are_keyed_by_uuid():
    platform = scripted_platform(h200_scenario())
    assert device_key(platform, 0)[0] == platform.visible_device(0).uuid


def test_a_platform_without_uuids_is_keyed_by_name_and_index(host):
    assert device_key(host, 0) == (
        "cpu-host_memory-0",
        "platform 'cpu', device name and index 0 (the platform gives no UUID: processes that number the devices "
        "differently see different ledgers)",
    )


def test_the_nvml_total_is_the_runtime_total(tmp_path):
    with reserve(0, utilization=1.0, platform=scripted_platform(h200_scenario()), ledger_dir=tmp_path) as r:
        assert r.total == H200_RUNTIME_TOTAL


def test_a_reused_pid_with_another_start_time_is_reclaimed(host, tmp_path):
    me = Owner.current()
    impostor = Owner(me.pid, me.start_time + 1, me.pidns, me.nspid, "an engine that died")
    plant(tmp_path, [Entry("old", impostor, 60 * GiB, 0.0)])
    with reserve(0, 60 * GiB, platform=host, ledger_dir=tmp_path) as r:
        assert [e["id"] for e in ledger_entries(tmp_path, "cpu-host_memory-0")] == [r.entry.id]


def _other_namespace_entry(tmp_path, entry_id: str) -> Entry:
    me = Owner.current()
    stranger = Owner(7, 1, me.pidns + 1, (7,), "an engine in another container")
    entry = Entry(entry_id, stranger, 60 * GiB, 0.0)
    plant(tmp_path, [entry])
    return entry


def test_an_owner_in_another_pid_namespace_is_alive_while_it_holds_its_owner_lock(host, tmp_path):
    _other_namespace_entry(tmp_path, "far")
    fd = os.open(tmp_path / "cpu-host_memory-0.far.owner", os.O_RDWR | os.O_CREAT)
    fcntl.flock(fd, fcntl.LOCK_EX)
    try:
        with pytest.raises(ReservationRefused):
            reserve(0, 10 * GiB, platform=host, ledger_dir=tmp_path)
    finally:
        os.close(fd)


def test_an_owner_in_another_pid_namespace_is_dead_once_its_owner_lock_is_free(host, tmp_path):
    _other_namespace_entry(tmp_path, "far")
    (tmp_path / "cpu-host_memory-0.far.owner").write_text("{}")
    with reserve(0, 10 * GiB, platform=host, ledger_dir=tmp_path):
        pass


# ---- liveness from the kernel ----------------------------------------------------------------------------
def _planted(tmp_path, pid: int, start_time: int | None, nbytes: int = 60 * GiB) -> Entry:
    """An entry naming ``pid`` (its real start time, as anyone can read it), written by hand: no owner lock."""
    me = Owner.current()
    entry = Entry("planted", Owner(pid, start_time or 0, me.pidns, (pid,), "init"), nbytes, 0.0)
    plant(tmp_path, [entry])
    return entry


def test_an_entry_naming_pid_1_without_its_owner_lock_does_not_block(host, tmp_path):
    _planted(tmp_path, 1, _start_time(1))
    with reserve(0, 60 * GiB, platform=host, ledger_dir=tmp_path):
        assert [e["owner"] if "owner" in e else e["pid"] for e in ledger_entries(tmp_path, "cpu-host_memory-0")] == [
            os.getpid()
        ]


def test_an_entry_naming_a_live_process_whose_owner_lock_another_holds_does_not_block(host, tmp_path):
    _planted(tmp_path, 1, _start_time(1))
    fd = os.open(tmp_path / "cpu-host_memory-0.planted.owner", os.O_RDWR | os.O_CREAT)
    fcntl.flock(fd, fcntl.LOCK_EX)  # held by this process, not by PID 1
    try:
        with reserve(0, 60 * GiB, platform=host, ledger_dir=tmp_path):
            pass
    finally:
        os.close(fd)


def test_a_live_owner_whose_proc_entry_cannot_be_matched_is_alive_while_it_holds_its_lock(workers, tmp_path):
    """What a ``/proc`` mounted ``hidepid`` shows of another user's engine: no start time to match. The lock says."""
    total = real_total()
    holder = workers()
    assert holder.reserve(total // 2)
    (entry,) = parse_ledger((tmp_path / "cpu-host_memory-0.json").read_bytes())
    hidden = Entry(entry.id, Owner(entry.owner.pid, 0, entry.owner.pidns, entry.owner.nspid, "?"), entry.bytes, 0.0)
    plant(tmp_path, [hidden])
    with pytest.raises(ReservationRefused, match=f"PID {holder.pid}"):
        reserve(0, total - total // 4, platform=CpuPlatform(), ledger_dir=tmp_path)


def test_an_owner_with_a_command_line_of_4_mib_keeps_its_reservation(workers, tmp_path):
    total = real_total()
    holder = ledger_workers.Worker(tmp_path, command_bytes=4 << 20)
    try:
        assert holder.reserve(total // 2)
        (entry,) = ledger_entries(tmp_path, "cpu-host_memory-0")
        assert len(entry["command"]) <= 1024
        with pytest.raises(ReservationRefused, match=f"PID {holder.pid}"):
            reserve(0, total - total // 4, platform=CpuPlatform(), ledger_dir=tmp_path)
    finally:
        holder.close()


def test_an_entry_read_with_a_huge_command_keeps_it_cut():
    me = Owner.current()
    entry = Entry("e", Owner(me.pid, 1, me.pidns, me.nspid, "x" * (4 << 20)), GiB, 0.0)
    assert len(Entry.from_json(entry.as_json()).owner.command) <= 1024


# ---- death and exit --------------------------------------------------------------------------------------
def test_a_killed_owner_is_reclaimed_at_the_next_admission(workers, tmp_path):
    total = real_total()
    holder = workers()
    assert holder.reserve(total // 2)
    holder.kill()
    with reserve(0, total - total // 4, platform=CpuPlatform(), ledger_dir=tmp_path):
        pass


def test_an_owner_that_exits_releases_its_reservation(workers, tmp_path):
    holder = workers()
    assert holder.reserve(GiB)
    holder.close()
    assert ledger_entries(tmp_path, "cpu-host_memory-0") == []


def test_a_forked_child_does_not_release_its_parents_reservation(host, tmp_path):
    with reserve(0, GiB, platform=host, ledger_dir=tmp_path) as r:
        pid = os.fork()
        if pid == 0:  # the child runs the exit handlers, as a forked child that exits normally does
            atexit._run_exitfuncs()
            os._exit(0)
        os.waitpid(pid, 0)
        assert [e["id"] for e in ledger_entries(tmp_path, "cpu-host_memory-0")] == [r.entry.id]


# ---- faults ----------------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "content",
    [b"", b'{"format": 1, "entries": [', b"\x00\xff", b"null", b'{"format": 1, "entries": [{"pid": -1}]}'],
    ids=["empty", "truncated", "binary", "null", "bad-entry"],
)
def test_a_corrupt_ledger_never_over_admits(workers, tmp_path, content):
    total = real_total()
    holder = workers()
    assert holder.reserve(total // 2)
    (tmp_path / "cpu-host_memory-0.json").write_bytes(content)
    with pytest.raises(ReservationRefused, match=f"PID {holder.pid}"):
        reserve(0, total // 2 + 1, platform=CpuPlatform(), ledger_dir=tmp_path)


def test_a_corrupt_ledger_is_rebuilt_with_a_warning(host, tmp_path, caplog):
    held = reserve(0, 10 * GiB, platform=host, ledger_dir=tmp_path)
    (tmp_path / "cpu-host_memory-0.json").write_bytes(b'{"format": 1, "entr')
    with caplog.at_level(logging.WARNING, logger="devmem.engine.reservations"):
        reserve(0, GiB, platform=host, ledger_dir=tmp_path).release()
    assert "is corrupt" in caplog.text and "rebuilt from the 1 live owner(s)" in caplog.text
    assert [e["id"] for e in ledger_entries(tmp_path, "cpu-host_memory-0")] == [held.entry.id]
    held.release()


def test_an_unusable_directory_is_an_error_naming_it(host, tmp_path):
    blocked = tmp_path / "a-file"
    blocked.write_text("")
    with pytest.raises(LedgerError, match=f"{blocked}/devmem.*DEVMEM_LEDGER_DIR"):
        reserve(0, GiB, platform=host, ledger_dir=blocked / "devmem")


def test_a_dangling_symlink_as_the_directory_is_an_error_naming_its_target(host, tmp_path):
    (tmp_path / "ledger").symlink_to(tmp_path / "nowhere")
    with pytest.raises(LedgerError, match=r"ledger: it is a symbolic link \(to '.*nowhere'\), and the ledger does not"):
        reserve(0, GiB, platform=host, ledger_dir=tmp_path / "ledger")


def test_a_file_as_the_directory_is_an_error_saying_so(host, tmp_path):
    (tmp_path / "ledger").write_text("")
    with pytest.raises(LedgerError, match="ledger: a file that is no directory is in its place"):
        reserve(0, GiB, platform=host, ledger_dir=tmp_path / "ledger")


def test_the_directory_comes_from_devmem_ledger_dir(host, tmp_path, monkeypatch):
    monkeypatch.setenv("DEVMEM_LEDGER_DIR", str(tmp_path / "shared"))
    with reserve(0, GiB, platform=host) as r:
        assert r.path == tmp_path / "shared" / "cpu-host_memory-0.json"


def test_a_relative_ledger_directory_is_refused_as_processes_in_other_folders_would_see_another(
    host, tmp_path, monkeypatch
):
    monkeypatch.chdir(tmp_path)
    with pytest.raises(devmem.LedgerError, match=r"must be an absolute path.*got 'ledger'"):
        reserve(0, GiB, platform=host, ledger_dir="ledger")
    assert not (tmp_path / "ledger").exists()


@pytest.mark.parametrize("timeout", [float("inf"), float("nan"), -1.0, 0, "10", 1e308, 2**70, 3600.5])
def test_a_lock_timeout_that_cannot_end_is_refused_naming_it(host, tmp_path, timeout):
    expected = rf"lock_timeout must be a finite number.*at most 3600.*got {re.escape(repr(timeout))}"
    with pytest.raises(devmem.DevmemError, match=expected):
        reserve(0, GiB, platform=host, ledger_dir=tmp_path, lock_timeout=timeout)


def test_a_lock_timeout_past_what_a_float_holds_is_refused_naming_it(host, tmp_path):
    with pytest.raises(devmem.DevmemError, match=r"lock_timeout must be a finite number.*got 1000000000"):
        reserve(0, GiB, platform=host, ledger_dir=tmp_path, lock_timeout=10**400)


@pytest.mark.parametrize("platform", ["cpu", object(), CpuPlatform])
def test_a_platform_that_is_no_platform_is_refused_naming_it(tmp_path, platform):
    with pytest.raises(devmem.DevmemError, match="platform must be a devmem Platform"):
        reserve(0, GiB, platform=platform, ledger_dir=tmp_path)


@pytest.mark.parametrize("request_", [{"utilization": 0.5}, {"bytes": GiB}])
def test_a_device_whose_total_reads_zero_is_a_clear_error(tmp_path, request_):
    from devmem_nvidia.testing import ScriptedNvidiaGpu

    platform = scripted_platform(Scenario(devices=[ScriptedNvidiaGpu(total=0, reserved=0)]))
    with pytest.raises(devmem.DevmemError, match=r"device 0 \(NVIDIA H200\) reports a total of 0 bytes"):
        reserve(0, platform=platform, ledger_dir=tmp_path, **request_)


def test_a_held_lock_fails_within_the_timeout_naming_it(host, tmp_path):
    fd = os.open(tmp_path / "cpu-host_memory-0.lock", os.O_RDWR | os.O_CREAT)
    fcntl.flock(fd, fcntl.LOCK_EX)
    started = time.monotonic()
    try:
        with pytest.raises(LedgerError, match=r"waited 0.2 s .*cpu-host_memory-0\.lock"):
            reserve(0, GiB, platform=host, ledger_dir=tmp_path, lock_timeout=0.2)
    finally:
        os.close(fd)
    assert time.monotonic() - started < 1.0


@pytest.fixture
def no_hang():
    with ledger_workers.no_hang():
        yield


def test_a_fifo_in_place_of_the_ledger_file_is_rebuilt_not_waited_on(host, tmp_path, no_hang, caplog):
    os.mkfifo(tmp_path / "cpu-host_memory-0.json")
    with caplog.at_level(logging.WARNING, logger="devmem.engine.reservations"):
        reserve(0, GiB, platform=host, ledger_dir=tmp_path).release()
    assert "is not a regular file" in caplog.text


def test_a_fifo_in_place_of_an_owner_file_is_not_waited_on(host, tmp_path, no_hang):
    _other_namespace_entry(tmp_path, "far")
    os.mkfifo(tmp_path / "cpu-host_memory-0.far.owner")
    reserve(0, 10 * GiB, platform=host, ledger_dir=tmp_path).release()


def test_a_fifo_among_the_owner_files_of_a_corrupt_ledger_is_not_waited_on(host, tmp_path, no_hang):
    (tmp_path / "cpu-host_memory-0.json").write_bytes(b"{")
    os.mkfifo(tmp_path / "cpu-host_memory-0.planted.owner")
    reserve(0, GiB, platform=host, ledger_dir=tmp_path).release()


def test_a_deeply_nested_ledger_is_rebuilt_not_a_recursion_error(host, tmp_path, caplog):
    (tmp_path / "cpu-host_memory-0.json").write_bytes(b"[" * 100_000)
    with caplog.at_level(logging.WARNING, logger="devmem.engine.reservations"):
        reserve(0, GiB, platform=host, ledger_dir=tmp_path).release()
    assert "is corrupt (RecursionError" in caplog.text


def test_a_ledger_file_larger_than_the_bound_is_not_read(host, tmp_path, caplog):
    from devmem.engine.reservations import MAX_FILE_BYTES

    (tmp_path / "cpu-host_memory-0.json").write_bytes(b'{"format": 1, "entries": []}' + b" " * MAX_FILE_BYTES)
    with caplog.at_level(logging.WARNING, logger="devmem.engine.reservations"):
        reserve(0, GiB, platform=host, ledger_dir=tmp_path).release()
    assert f"is larger than {MAX_FILE_BYTES} bytes" in caplog.text


def test_a_directory_in_place_of_the_ledger_file_is_a_ledger_error_naming_it(host, tmp_path):
    (tmp_path / "cpu-host_memory-0.json").mkdir()
    with pytest.raises(LedgerError, match=r"cpu-host_memory-0\.json: Is a directory"):
        reserve(0, GiB, platform=host, ledger_dir=tmp_path)


def test_a_symlink_in_place_of_the_lock_file_is_refused_and_its_target_left_alone(host, tmp_path):
    target = tmp_path / "private"
    target.write_text("secret")
    target.chmod(0o600)
    (tmp_path / "ledger").mkdir()
    (tmp_path / "ledger" / "cpu-host_memory-0.lock").symlink_to(target)
    with pytest.raises(LedgerError, match=r"cpu-host_memory-0\.lock.*the ledger does not follow links"):
        reserve(0, GiB, platform=host, ledger_dir=tmp_path / "ledger")
    assert stat.S_IMODE(target.stat().st_mode) == 0o600


def test_a_fifo_in_place_of_the_lock_file_is_a_ledger_error_naming_it(host, tmp_path, no_hang):
    os.mkfifo(tmp_path / "cpu-host_memory-0.lock")
    with pytest.raises(LedgerError, match=r"cpu-host_memory-0\.lock is not a regular file .*; remove it"):
        reserve(0, GiB, platform=host, ledger_dir=tmp_path)


def test_a_stale_entry_with_an_overlong_id_makes_the_ledger_corrupt_not_an_os_error(host, tmp_path, caplog):
    me = Owner.current()
    entry = Entry("a", Owner(me.pid, me.start_time + 1, me.pidns, me.nspid, "gone"), GiB, 0.0).as_json()
    body = {"format": 1, "entries": [{**entry, "id": "a" * 300}]}
    (tmp_path / "cpu-host_memory-0.json").write_text(json.dumps(body))
    with caplog.at_level(logging.WARNING, logger="devmem.engine.reservations"):
        reserve(0, GiB, platform=host, ledger_dir=tmp_path).release()
    assert "'id' must be a plain name of at most 64 characters" in caplog.text


def test_a_filesystem_without_flock_is_a_ledger_error_naming_the_lock(host, tmp_path, monkeypatch):
    def no_locks(fd: int, operation: int) -> None:
        raise OSError(errno.ENOLCK, os.strerror(errno.ENOLCK))

    monkeypatch.setattr(fcntl, "flock", no_locks)
    with pytest.raises(LedgerError, match=r"cannot lock \(flock\) .*cpu-host_memory-0\.lock: No locks available"):
        reserve(0, GiB, platform=host, ledger_dir=tmp_path)


def test_a_relative_devmem_ledger_dir_is_refused_naming_it(host, monkeypatch):
    monkeypatch.setenv("DEVMEM_LEDGER_DIR", "relative/ledger")
    with pytest.raises(LedgerError, match="DEVMEM_LEDGER_DIR must be an absolute path.*'relative/ledger'"):
        reserve(0, GiB, platform=host)


@pytest.mark.parametrize("directory", ["", "  ", "/tmp/a\0b", 3], ids=["empty", "blank", "nul", "int"])
def test_a_ledger_directory_that_is_no_path_is_refused_naming_it(host, directory):
    with pytest.raises(LedgerError, match="the ledger directory must be a path"):
        reserve(0, GiB, platform=host, ledger_dir=directory)


def test_numpy_integers_and_floats_are_requests(host, tmp_path):
    np = pytest.importorskip("numpy")
    with reserve(0, np.int64(GiB), platform=host, ledger_dir=tmp_path) as r:
        assert r.bytes == GiB and type(r.bytes) is int
    with reserve(0, utilization=np.float32(0.25), platform=host, ledger_dir=tmp_path) as r:
        assert r.bytes == 16 * GiB


def test_a_huge_byte_request_is_named_cut_short(host, tmp_path):
    with pytest.raises(devmem.DevmemError, match=r"bytes must be below 2\*\*64 bytes .*, got 1000.*\(401 characters\)"):
        reserve(0, 10**400, platform=host, ledger_dir=tmp_path)


needs_root = ledger_workers.needs_root


@needs_root
def test_another_user_reserves_on_a_ledger_file_it_does_not_own(host, sticky):
    with reserve(0, GiB, platform=host, ledger_dir=sticky):
        answer = ledger_workers.as_nobody(lambda: reserve(0, GiB, platform=host, ledger_dir=sticky).release())
        assert answer == "None"
        assert len(ledger_entries(sticky, "cpu-host_memory-0")) == 1


@needs_root
def test_a_lock_file_another_user_left_read_only_still_locks(host, sticky):
    lock = sticky / "cpu-host_memory-0.lock"
    lock.write_text("")
    lock.chmod(0o644)
    assert ledger_workers.as_nobody(lambda: reserve(0, GiB, platform=host, ledger_dir=sticky).release()) == "None"


@needs_root
def test_a_ledger_file_another_user_left_read_only_is_a_ledger_error_naming_its_owner(host, sticky):
    reserve(0, GiB, platform=host, ledger_dir=sticky).release()
    (sticky / "cpu-host_memory-0.json").chmod(0o644)
    answer = ledger_workers.as_nobody(lambda: reserve(0, GiB, platform=host, ledger_dir=sticky))
    assert answer.startswith("LedgerError: cannot write the reservation ledger file")
    assert "(owned by uid 0, mode -rw-r--r--): Permission denied" in answer


@needs_root
def test_a_directory_this_user_cannot_write_is_an_error_naming_it(host, tmp_path):
    directory = Path(tempfile.mkdtemp(prefix="devmem-ledger-"))  # root's, mode 0700 -> 0755: nobody reads only
    directory.chmod(0o755)
    try:
        answer = ledger_workers.as_nobody(lambda: reserve(0, GiB, platform=host, ledger_dir=directory))
    finally:
        shutil.rmtree(directory)
    assert answer.startswith(f"LedgerError: the reservation ledger directory {directory} is not writable")


# ---- races and interleavings -----------------------------------------------------------------------------
def test_threads_racing_never_admit_more_than_the_total(host, tmp_path):
    admitted: list[int] = []

    def one() -> None:
        with contextlib.suppress(ReservationRefused):
            admitted.append(reserve(0, 10 * GiB, platform=host, ledger_dir=tmp_path).bytes)

    threads = [threading.Thread(target=one) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(admitted) == 6


OPS = st.lists(
    st.tuples(st.integers(0, 2), st.sampled_from(["reserve", "release", "kill"]), st.integers(1, 5)),
    min_size=1,
    max_size=10,
)


@settings(max_examples=8, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(ops=OPS)
def test_interleavings_of_reserve_release_and_death_never_admit_more_than_the_total(tmp_path_factory, ops):
    directory = tmp_path_factory.mktemp("ledger")
    unit = real_total() // 9  # eight units fit beside a worker's own memory, nine do not
    pool = [Worker(directory) for _ in range(3)]
    try:
        for index, op, units in ops:
            w = pool[index]
            if op == "reserve":
                fits = sum(p.held for p in pool) + units * unit <= 8 * unit
                assert w.reserve(units * unit) == fits
            elif op == "release":
                w.release()
            else:
                w.kill()
                pool[index] = Worker(directory)
            live = {p.pid for p in pool}
            held = sum(e["bytes"] for e in ledger_entries(directory, "cpu-host_memory-0") if e["pid"] in live)
            assert held == sum(p.held for p in pool) <= real_total()
    finally:
        for w in pool:
            w.close()


def test_processes_racing_never_admit_more_than_the_total(tmp_path):
    total = real_total()
    code = (
        "import sys\nfrom devmem.cpu import CpuPlatform\n"
        "from devmem.engine.reservations import reserve, ReservationRefused\n"
        "try:\n    reserve(0, int(sys.argv[2]), ledger_dir=sys.argv[1], platform=CpuPlatform())\n    print('ok')\n"
        "except ReservationRefused:\n    print('refused')\nsys.stdin.read()\n"
    )
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", code, str(tmp_path), str(total * 2 // 9)],  # four fit beside their own memory
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
            cwd=str(Path(__file__).resolve().parents[3]),
        )
        for _ in range(6)
    ]
    answers = [p.stdout.readline().strip() for p in procs]  # type: ignore[union-attr]
    for p in procs:
        p.communicate("")
    assert sorted(answers) == ["ok"] * 4 + ["refused"] * 2


def test_rocm_devices_are_keyed_by_the_amdsmi_uuid_whatever_the_visible_order():
    from devmem_rocm import RocmPlatform
    from devmem_rocm.testing import ScriptedAmdsmi, ScriptedClock, mi300x_scenario

    def platform(sc) -> RocmPlatform:
        clock = ScriptedClock()
        return RocmPlatform(amdsmi=ScriptedAmdsmi(sc, clock=clock), environ=sc.environ, clock=clock, sleep=clock.sleep)

    second = device_key(platform(mi300x_scenario(2)), 1)[0]
    only_second = mi300x_scenario(2)
    only_second.environ["HIP_VISIBLE_DEVICES"] = "1"
    assert device_key(platform(only_second), 0)[0] == second == mi300x_scenario(2).devices[1].uuid


def test_sixteen_processes_racing_never_admit_more_than_the_total(tmp_path):
    unit = real_total() * 2 // 21  # ten fit beside their own memory, eleven do not
    pool = [Worker(tmp_path) for _ in range(16)]
    try:
        for w in pool:  # every request is sent before any answer is read: the admissions race
            assert w.proc.stdin is not None
            w.proc.stdin.write(f"reserve {unit}\n")
            w.proc.stdin.flush()
        answers = [w.proc.stdout.readline().strip() for w in pool]  # type: ignore[union-attr]
        assert sorted(answers) == [f"ok {unit}"] * 10 + ["refused"] * 6
        assert sum(e["bytes"] for e in ledger_entries(tmp_path, "cpu-host_memory-0")) == 10 * unit
    finally:
        for w in pool:
            w.close()


def test_memory_in_use_that_no_listed_process_holds_counts_on_top_of_the_reservations():
    """The driver's own memory: five shares of 0.2 sum to the total, and do not all fit beside it."""
    me = Owner.current()
    other = Owner(CHILD, 1, me.pidns, (CHILD,), "engine")
    entries = [Entry(str(i), other, 20 * GiB, 0.0) for i in range(4)]
    accounting = account(100 * GiB, 100 * GiB - 512 * MiB, entries, {}, 0, False, me)
    assert accounting.committed == 80 * GiB + 512 * MiB
    assert accounting.committed + 20 * GiB > accounting.total


# ---- a release or a device identity that fails ----------------------------------------------------------------
def test_a_release_that_cannot_write_the_ledger_never_replaces_the_engines_own_exception(host, tmp_path, caplog):
    """The engine fails; as its share is released, the ledger directory cannot be used (here: made writable by
    every user): the engine's exception is what the caller gets, the release is one warning, and the share, its
    owner lock dropped, is reclaimed by the next admission."""
    failing = pytest.raises(RuntimeError, match="the engine's own failure")
    with failing, devmem.EngineMemory(0, utilization=0.5, platform=host, ledger_dir=tmp_path):
        tmp_path.chmod(0o777)
        raise RuntimeError("the engine's own failure")
    assert "could not be removed from the ledger" in caplog.text
    tmp_path.chmod(0o700)
    reserve(0, 60 * GiB, platform=host, ledger_dir=tmp_path).release()


def test_a_reservation_released_by_its_with_block_keeps_the_blocks_own_exception(host, tmp_path):
    with pytest.raises(KeyError, match="the block's own failure"), reserve(0, GiB, platform=host, ledger_dir=tmp_path):
        tmp_path.chmod(0o777)
        raise KeyError("the block's own failure")
    tmp_path.chmod(0o700)


class UuidFails(CpuPlatform):
    """A vendor wheel's backend whose device_uuid raises (its driver in a bad state)."""

    name = "uuid-fails"

    def _device_uuid(self, device: int) -> str | None:
        raise RuntimeError("the driver's state is corrupted")


def test_a_device_uuid_that_raises_is_a_ledger_error_naming_the_platform_and_the_call(tmp_path):
    platform = UuidFails(files=Scenario(host=HostMemory(total=64 * GiB, free=60 * GiB)).fs)
    with pytest.raises(LedgerError, match=r"'uuid-fails': device_uuid\(0\) raised RuntimeError: the driver's state"):
        reserve(0, GiB, platform=platform, ledger_dir=tmp_path)
    assert list(tmp_path.iterdir()) == []


def test_info_on_a_device_whose_uuid_raises_warns_and_reports_the_rest(tmp_path, caplog):
    platform = UuidFails(files=Scenario(host=HostMemory(total=64 * GiB, free=60 * GiB)).fs)
    report = devmem.device_report(platform, 0)
    assert devmem.engine.reservations.device_reservations(platform, 0, report, tmp_path) is None
    assert "device_uuid(0) raised RuntimeError" in caplog.text
