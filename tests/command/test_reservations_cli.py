"""Reservations as operators see them: ``devmem info``/``top`` lines and JSON, and ``devmem doctor``'s findings.

Owners are real processes of this machine (a reservation is alive while its PID runs with its start time), placed
on a scripted H200 (devmem_nvidia.testing) where the test needs what they use now.
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from ledger_workers import NOBODY, needs_root, no_hang

from devmem.command.info import cmd_info
from devmem.command.main import build_parser
from devmem.engine.reservations import Entry, Ledger, Owner, _start_time, device_key, ledger_bytes, reserve
from devmem.findings import diagnose
from devmem.types import GiB
from devmem_nvidia.testing import h200_scenario, scripted_platform


def info(capsys, *argv: str, platform=None) -> str:
    assert cmd_info(build_parser().parse_args(["info", *argv]), platform) == 0
    return capsys.readouterr().out


#: An engine that holds the owner lock of the file named on its stdin, as reserve() does, and sleeps.
LOCKER = (
    "import fcntl, os, sys, time\n"
    "fd = os.open(sys.stdin.readline().strip(), os.O_RDWR | os.O_CREAT)\n"
    "fcntl.flock(fd, fcntl.LOCK_EX)\n"
    "print('locked', flush=True)\n"
    "time.sleep(60)  # an engine\n"
)


@pytest.fixture
def sleeper():
    proc = subprocess.Popen([sys.executable, "-c", LOCKER], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    while _start_time(proc.pid) is None:
        pass
    yield proc
    proc.kill()
    proc.wait()


def owned_by(proc, platform, nbytes: int, command: str = "python engine.py") -> Entry:
    """``proc`` holds a reservation of ``nbytes`` on the platform's device 0 (written as its reserve() would: the
    entry, and the owner lock ``proc`` holds)."""
    me = Owner.current()
    owner = Owner(proc.pid, _start_time(proc.pid) or 0, me.pidns, (proc.pid,), command)
    entry = Entry("e1", owner, nbytes, 0.0)
    ledger = Ledger()
    ledger.directory.mkdir(parents=True, exist_ok=True)
    key = device_key(platform, 0)[0]
    proc.stdin.write(f"{ledger.directory / f'{key}.{entry.id}.owner'}\n")
    proc.stdin.flush()
    assert proc.stdout.readline().strip() == "locked"
    ledger.path(key).write_bytes(ledger_bytes(key, [entry]))
    return entry


def test_info_json_lists_each_reservation_with_reserved_and_used_now(capsys, sleeper):
    sc = h200_scenario()
    platform = scripted_platform(sc)
    owned_by(sleeper, platform, 40 * GiB)
    sc.allocate(30 * GiB, pid=sleeper.pid)
    (holder,) = json.loads(info(capsys, "--json", platform=platform))["devices"][0]["reservations"]["holders"]
    assert (holder["pid"], holder["reserved"], holder["used"], holder["over"]) == (
        sleeper.pid,
        40 * GiB,
        30 * GiB,
        -10 * GiB,
    )


def test_info_shows_a_reservation_under_its_owner(capsys, sleeper, monkeypatch):
    monkeypatch.setenv("COLUMNS", "120")
    sc = h200_scenario()
    platform = scripted_platform(sc)
    owned_by(sleeper, platform, 40 * GiB)
    sc.allocate(30 * GiB, pid=sleeper.pid)
    out = info(capsys, platform=platform)
    assert f"{sleeper.pid}  40.00 GiB  30.00 GiB  10.00 GiB under  python engine.py" in out


def test_info_json_lists_a_live_reservation_whose_ledger_file_was_removed(capsys, sleeper):
    platform = scripted_platform(h200_scenario())
    entry = owned_by(sleeper, platform, 40 * GiB)
    ledger, key = Ledger(), device_key(platform, 0)[0]
    (ledger.directory / f"{key}.{entry.id}.owner").write_text(json.dumps(entry.as_json()))  # as its owner writes it
    ledger.path(key).unlink()
    (holder,) = json.loads(info(capsys, "--json", platform=platform))["devices"][0]["reservations"]["holders"]
    assert (holder["pid"], holder["reserved"]) == (sleeper.pid, 40 * GiB)


def test_info_json_has_no_reservations_without_a_ledger(capsys):
    assert (
        json.loads(info(capsys, "--json", platform=scripted_platform(h200_scenario())))["devices"][0]["reservations"]
        is None
    )


def test_doctor_flags_an_owner_above_its_reservation(sleeper):
    sc = h200_scenario()
    platform = scripted_platform(sc)
    owned_by(sleeper, platform, 10 * GiB)
    sc.allocate(30 * GiB, pid=sleeper.pid)
    (found,) = [f for f in diagnose(platform, candidates=[]) if f.kind == "above-reservation"]
    assert found.figures == {str(sleeper.pid): {"reserved": 10 * GiB, "used": 30 * GiB}}


def test_doctor_flags_over_commitment(sleeper):
    sc = h200_scenario()
    platform = scripted_platform(sc)
    owned_by(sleeper, platform, 100 * GiB)
    sc.allocate(60 * GiB, pid=4242)
    (found,) = [f for f in diagnose(platform, candidates=[]) if f.kind == "reservations-over-committed"]
    assert found.severity == "warning" and found.figures["unreserved"] == 60 * GiB


def test_doctor_flags_stale_entries_of_dead_owners(sleeper):
    platform = scripted_platform(h200_scenario())
    owned_by(sleeper, platform, 10 * GiB)
    sleeper.kill()
    sleeper.wait()
    (found,) = [f for f in diagnose(platform, candidates=[]) if f.kind == "stale-reservations"]
    assert found.figures == {str(sleeper.pid): 10 * GiB}


def test_doctor_with_only_stale_entries_exits_0_as_its_advice_says_nothing_blocks(capsys, sleeper):
    from devmem.command.doctor import cmd_doctor

    platform = scripted_platform(h200_scenario())
    owned_by(sleeper, platform, 10 * GiB)
    sleeper.kill()
    sleeper.wait()
    code = cmd_doctor(build_parser().parse_args(["doctor"]), platform)
    out = capsys.readouterr().out
    assert code == 0 and "[info] device 0: 1 reservation(s) of processes that are gone" in out, out


def test_doctor_says_nothing_of_reservations_that_fit():
    platform = scripted_platform(h200_scenario())
    with reserve(0, 10 * GiB, platform=platform):
        kinds = {f.kind for f in diagnose(platform, candidates=[])}
    assert not kinds & {"reservations-over-committed", "above-reservation", "stale-reservations", "ledger-corrupt"}


def test_info_with_a_relative_ledger_dir_warns_and_reports_the_rest(capsys, caplog, monkeypatch):
    import logging

    monkeypatch.setenv("DEVMEM_LEDGER_DIR", "relative/ledger")
    with caplog.at_level(logging.WARNING, logger="devmem.engine.reservations"):
        device = json.loads(info(capsys, "--json", platform=scripted_platform(h200_scenario())))["devices"][0]
    assert device["reservations"] is None and device["total"] > 0
    assert "DEVMEM_LEDGER_DIR must be an absolute path" in caplog.text


@needs_root
def test_top_says_once_that_a_ledger_directory_another_user_owns_cannot_be_used(tmp_path):
    import os

    directory = tmp_path / "ledger"
    directory.mkdir()
    directory.chmod(0o1777)
    os.chown(directory, NOBODY, NOBODY)
    env = {**os.environ, "DEVMEM_PLATFORM": "cpu", "DEVMEM_LEDGER_DIR": str(directory)}
    run = [sys.executable, "-m", "devmem", "top", "-n", "3", "--interval", "0.05"]
    result = subprocess.run(run, capture_output=True, text=True, env=env, timeout=60)
    assert result.returncode == 0 and result.stdout.count(" 0 host memory") == 3, result.stderr
    [line] = [line for line in result.stderr.splitlines() if "ledger" in line]
    assert f"owned by uid {NOBODY}" in line and "vanish" in line


def test_info_with_a_fifo_in_place_of_the_ledger_file_reports_it_corrupt(capsys, tmp_path, monkeypatch):
    import os

    platform = scripted_platform(h200_scenario())
    monkeypatch.setenv("DEVMEM_LEDGER_DIR", str(tmp_path))
    os.mkfifo(tmp_path / f"{device_key(platform, 0)[0]}.json")
    with no_hang():
        notes = json.loads(info(capsys, "--json", platform=platform))["devices"][0]["reservations"]["notes"]
    assert any("is not a regular file" in note for note in notes)


def test_info_shows_a_reservations_control_characters_as_escapes(capsys, sleeper):
    platform = scripted_platform(h200_scenario())
    owned_by(sleeper, platform, GiB, "engine\x1b]0;retitled\x07")
    out = info(capsys, platform=platform)
    assert "\x1b" not in out and "\x07" not in out and "engine\\x1b]0;retitled\\x07" in out


def test_a_long_command_is_cut_to_its_column_not_broken_inside_a_path(tmp_path):
    from devmem.command.reservations import reservation_table
    from devmem.engine.reservations import Accounting, DeviceReservations, Holding

    command = "/opt/torch/.venv/bin/python3 /work/main/benchmarks/vllm_cotenants.py instance --model /tmp/m"
    holding = Holding(4242, command, 8 * 1024**3, 1024**3)
    view = DeviceReservations("key", str(tmp_path / "key.json"), Accounting(80 * 1024**3, (holding,)), (), None)
    lines = reservation_table(view, 80)
    assert len(lines) == 2 and all(len(line) <= 80 for line in lines)
    assert lines[1].endswith("...") and " python3 /work/main/benchmarks/" in lines[1]


def test_a_cut_reservation_command_names_its_program_without_its_path_as_top_does(tmp_path):
    from devmem.command.reservations import reservation_table
    from devmem.engine.reservations import Accounting, DeviceReservations, Holding

    holdings = tuple(
        Holding(pid, f"/root/.pyenv/versions/3.11.7/bin/python3 -m {module} --port 800{pid}", GiB, None)
        for pid, module in ((1, "vllm.entrypoints.openai.api_server"), (2, "sglang.launch_server"))
    )
    view = DeviceReservations("key", str(tmp_path / "key.json"), Accounting(80 * GiB, holdings), (), None)
    lines = reservation_table(view, 80)
    assert "python3 -m vllm.entrypoints" in lines[1] and "python3 -m sglang.launch_server" in lines[2], lines


def test_info_on_host_memory_does_not_list_the_command_itself_as_a_holder(capsys, sleeper):
    from devmem.cpu import CpuPlatform

    platform = CpuPlatform()
    owned_by(sleeper, platform, 64 << 20)
    data = json.loads(info(capsys, "--json", platform=platform))
    holders = data["devices"][0]["reservations"]["holders"]
    assert [h["pid"] for h in holders] == [sleeper.pid], holders


def test_doctor_on_host_memory_leaves_the_command_itself_out_of_the_accounting(capsys, sleeper):
    from devmem.command.doctor import cmd_doctor
    from devmem.cpu import CpuPlatform

    platform = CpuPlatform()
    owned_by(sleeper, platform, 1 << 60)  # far above the host's memory: over-committed whoever else counts
    cmd_doctor(build_parser().parse_args(["doctor", "--json"]), platform)
    [found] = [f for f in json.loads(capsys.readouterr().out)["findings"] if f["kind"] == "reservations-over-committed"]
    assert found["figures"]["unreserved"] == 0, found


def test_an_engine_on_host_memory_counts_its_own_memory(sleeper):
    from devmem.cpu import CpuPlatform

    platform = CpuPlatform()
    owned_by(sleeper, platform, 1 << 60)
    [found] = [f for f in diagnose(platform) if f.kind == "reservations-over-committed"]
    assert found.figures["unreserved"] > 0, found
