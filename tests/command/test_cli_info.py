"""``devmem info`` and ``devmem top``: every process on the device, watch mode, units, widths and colour.

Other processes are real processes of this machine (so psutil names their user and command) placed on a
scripted H200 (devmem_nvidia.testing) at their PIDs; the watch-mode tests run the command as a user does.
"""

from __future__ import annotations

import getpass
import json
import os
import pty
import re
import select
import shutil
import signal
import subprocess
import sys
import time

import pytest

from devmem.command.info import cmd_info
from devmem.command.main import build_parser, main
from devmem.types import GiB, MiB
from devmem_nvidia.testing import h200_scenario, scripted_platform


def info(capsys, *argv: str, platform=None, files=None) -> tuple[int, str]:
    args = build_parser().parse_args(["info", *argv])
    code = cmd_info(args, platform, files) if files is not None else cmd_info(args, platform)
    return code, capsys.readouterr().out


@pytest.fixture
def sleepers():
    """Two real processes that sleep until the test ends; yields their PIDs."""
    procs = [subprocess.Popen([sys.executable, "-c", f"import time; time.sleep(60)  # holder {n}"]) for n in (1, 2)]
    yield [p.pid for p in procs]
    for p in procs:
        p.kill()
        p.wait()


@pytest.fixture
def machine(sleepers):
    """A scripted H200 on which the two sleepers hold 2 GiB and 3 GiB."""
    sc = h200_scenario()
    sc.allocate(2 * GiB, pid=sleepers[0])
    sc.allocate(3 * GiB, pid=sleepers[1])
    return sc


def absent_pid() -> int:
    import psutil

    return next(pid for pid in range(4_000_000, 4_100_000) if not psutil.pid_exists(pid))


def test_info_lists_other_processes_with_user_command_and_bytes(capsys, machine, sleepers):
    # -v: each command whole (a pipe's screen is 80 columns, where a command is cut to its engine or program)
    code, out = info(capsys, "-v", platform=scripted_platform(machine))
    rows = {line.split()[0]: line for line in out.splitlines() if line.split() and line.split()[0].isdigit()}
    assert code == 0
    for n, (pid, size) in enumerate(zip(sleepers, ("2.00 GiB", "3.00 GiB"), strict=True), 1):
        assert rows[str(pid)].split()[1:5] == [getpass.getuser(), *size.split(), sys.executable]
        assert f"-c import time; time.sleep(60) # holder {n}" in " ".join(out.split())


def test_info_json_lists_processes_with_exact_bytes(capsys, machine, sleepers):
    code, out = info(capsys, "--json", platform=scripted_platform(machine))
    processes = {p["pid"]: p for p in json.loads(out)["devices"][0]["processes"]}
    assert code == 0
    assert processes[sleepers[0]]["used"] == 2 * GiB and processes[sleepers[1]]["used"] == 3 * GiB
    assert processes[sleepers[0]]["user"] == getpass.getuser() and processes[sleepers[0]]["role"] is None


HOSTILE_ARGV = "\x1b]0;retitled\x07\x1b[2Jcleared\nsecond line"


@pytest.fixture
def hostile_process():
    """A real process whose command line holds an escape sequence, BEL and a newline, on a scripted H200."""
    # argv[0] is "python3" whatever the interpreter's path (a virtualenv's is "python"): the cut below is fixed
    proc = subprocess.Popen(["python3", "-c", "import time; time.sleep(60)", HOSTILE_ARGV], executable=sys.executable)
    sc = h200_scenario()
    sc.allocate(2 * GiB, pid=proc.pid)
    yield sc
    proc.kill()
    proc.wait()


@pytest.mark.parametrize(
    "argv, shown",
    [
        (["info", "-v"], "\\x1b]0;retitled\\x07\\x1b[2Jcleared\\nsecondline"),
        (["top", "-v", "--count", "1"], "\\x1b]0;retitled\\x07\\x1b[2Jcleared\\nsecondline"),
        (["top", "--count", "1"], "time.sleep(60)\\x1..."),  # cut to the column
    ],
)
def test_a_command_lines_control_characters_are_shown_as_escapes(capsys, hostile_process, argv, shown):
    args = build_parser().parse_args(argv)
    assert cmd_info(args, scripted_platform(hostile_process)) == 0
    out = capsys.readouterr().out
    assert "\x1b" not in out and "\x07" not in out and shown in "".join(out.split())


def test_info_json_keeps_a_command_line_exact(capsys, hostile_process):
    _, out = info(capsys, "--json", platform=scripted_platform(hostile_process))
    commands = [p["command"] for p in json.loads(out)["devices"][0]["processes"]]
    assert any(c.endswith(HOSTILE_ARGV) for c in commands)


def test_info_lists_processes_largest_first(capsys, machine, sleepers):
    _, out = info(capsys, "--json", platform=scripted_platform(machine))
    assert [p["pid"] for p in json.loads(out)["devices"][0]["processes"]] == [sleepers[1], sleepers[0]]


def test_info_shows_a_dash_for_a_pid_this_namespace_cannot_see(capsys):
    sc = h200_scenario()
    hidden = absent_pid()
    sc.allocate(GiB, pid=hidden)
    _, out = info(capsys, platform=scripted_platform(sc))
    row = next(line for line in out.splitlines() if line.split()[:1] == [str(hidden)])
    assert row.split() == [str(hidden), "-", "1.00", "GiB", "-"]
    data = json.loads(info(capsys, "--json", platform=scripted_platform(sc))[1])
    assert data["devices"][0]["processes"][0] == {
        "pid": hidden,
        "used": GiB,
        "user": None,
        "command": None,
        "namespace_pid": None,
        "role": None,
    }


def test_info_shows_the_pid_a_containerised_process_has_in_its_namespace(capsys, machine, sleepers):
    machine.files[f"/proc/{sleepers[0]}/status"] = f"Name:\tpython3\nNSpid:\t{sleepers[0]}\t7\n"
    _, out = info(capsys, platform=scripted_platform(machine), files=machine.fs)
    header = next(line for line in out.splitlines() if "COMMAND" in line)
    row = next(line for line in out.splitlines() if line.split()[:1] == [str(sleepers[0])])
    assert header.split()[:3] == ["PID", "NS", "PID"] and row.split()[1] == "7"


def test_info_marks_an_mps_server(capsys, tmp_path):
    server = tmp_path / "nvidia-cuda-mps-server"
    server.symlink_to(shutil.which("sleep"))
    proc = subprocess.Popen([str(server), "60"])
    try:
        sc = h200_scenario()
        sc.allocate(32 * MiB, pid=proc.pid)
        time.sleep(0.2)  # let exec finish, so /proc shows the server's name
        with open(f"/proc/{proc.pid}/comm") as comm:  # the platform reads the process's name from its /proc
            sc.files[f"/proc/{proc.pid}/comm"] = comm.read()
        _, out = info(capsys, platform=scripted_platform(sc))
        data = json.loads(info(capsys, "--json", platform=scripted_platform(sc))[1])
    finally:
        proc.kill()
        proc.wait()
    assert "[MPS server]" in next(line for line in out.splitlines() if line.split()[:1] == [str(proc.pid)])
    assert data["devices"][0]["processes"][0]["role"] == "MPS server"


def test_info_on_a_gpu_without_a_context_prints_no_this_process_line(capsys):
    code, out = info(capsys, platform=scripted_platform(h200_scenario()))
    assert code == 0 and "this process" not in out
    assert "a new process can allocate up to 139.80 GiB (free now)" in " ".join(out.split())


def test_info_on_the_host_platform_shows_this_process(capsys, monkeypatch):
    monkeypatch.setenv("DEVMEM_PLATFORM", "cpu")
    code, out = info(capsys)
    assert code == 0 and re.search(r"this process +\d+\.\d\d (KiB|MiB|GiB)", out)


def test_info_says_no_process_holds_memory_on_an_idle_device(capsys):
    _, out = info(capsys, platform=scripted_platform(h200_scenario()))
    assert re.search(r"processes +none hold memory", out)


# --- widths and colour -------------------------------------------------------------------------------------

SIZE = re.compile(r"\d+(\.\d+)? (B|KiB|MiB|GiB|TiB)\b")


@pytest.mark.parametrize("columns", [80, 60])
def test_info_fits_the_terminal_width_without_cutting_a_size(capsys, monkeypatch, machine, columns):
    monkeypatch.setenv("COLUMNS", str(columns))
    _, out = info(capsys, platform=scripted_platform(machine))
    lines = out.splitlines()
    assert all(len(line) <= columns for line in lines), [line for line in lines if len(line) > columns]
    assert not any(
        re.search(r"\d$", line) and re.match(r"\s*(B|KiB|MiB|GiB|TiB)\b", nxt)
        for line, nxt in zip(lines, lines[1:], strict=False)
    )


def interruptible() -> None:
    """In a child before it runs devmem: Ctrl-C interrupts it, as from an interactive shell (a test run started in
    the background by a non-interactive shell passes SIGINT on ignored)."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def run_on_a_terminal(
    argv: list[str], env: dict[str, str], stop_after: float | None = None, seconds: float = 30
) -> str:
    """``devmem argv`` with its stdout on a pseudo-terminal, interrupted after ``stop_after`` seconds where given;
    its output. Fails (and kills it) where it has not ended ``seconds`` later."""
    leader, follower = pty.openpty()
    proc = subprocess.Popen(
        [sys.executable, "-m", "devmem", *argv],
        stdout=follower,
        stderr=subprocess.PIPE,
        env=env,
        preexec_fn=interruptible,
    )
    os.close(follower)
    chunks, deadline = [], time.monotonic() + seconds + (stop_after or 0)
    interrupt_at = None if stop_after is None else time.monotonic() + stop_after
    try:
        while time.monotonic() < deadline:
            if interrupt_at is not None and time.monotonic() >= interrupt_at:
                proc.send_signal(signal.SIGINT)
                interrupt_at = None
            if not select.select([leader], [], [], 0.1)[0]:
                continue
            try:
                chunk = os.read(leader, 65536)
            except OSError:  # the terminal closed with the process
                break
            if not chunk:
                break
            chunks.append(chunk)
        else:
            raise AssertionError(f"devmem {' '.join(argv)} still ran {seconds:g} s after it should have ended")
        assert proc.wait(seconds) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        os.close(leader)
    return b"".join(chunks).decode()


def env_with(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("NO_COLOR", "DEVMEM_PLATFORM")}
    return {**env, "DEVMEM_PLATFORM": "cpu", **extra}


def test_info_on_a_terminal_is_coloured():
    assert "\x1b[1m" in run_on_a_terminal(["info"], env_with())


def test_no_color_turns_colour_off_on_a_terminal():
    assert "\x1b[" not in run_on_a_terminal(["info"], env_with(NO_COLOR="1"))


def test_info_through_a_pipe_has_no_escape_codes():
    result = subprocess.run(
        [sys.executable, "-m", "devmem", "info"], capture_output=True, text=True, env=env_with(), timeout=60
    )
    assert result.returncode == 0 and "\x1b" not in result.stdout


def test_doctor_through_a_pipe_has_no_escape_codes():
    result = subprocess.run(
        [sys.executable, "-m", "devmem", "doctor"], capture_output=True, text=True, env=env_with(), timeout=60
    )
    assert result.returncode == 0 and "\x1b" not in result.stdout


# --- watch mode --------------------------------------------------------------------------------------------


def watch(argv: list[str], seconds: float, stop: int) -> subprocess.CompletedProcess:
    proc = subprocess.Popen(
        [sys.executable, "-m", "devmem", *argv],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env_with(),
        preexec_fn=interruptible,
    )
    time.sleep(seconds)
    proc.send_signal(stop)
    out, err = proc.communicate(timeout=10)
    return subprocess.CompletedProcess(proc.args, proc.returncode, out, err)


@pytest.mark.slow  # watches for 6 s
def test_watch_samples_at_least_10_times_in_6_seconds_and_exits_0_on_sigint():
    result = watch(["info", "--watch", "0.5", "--json"], 6, signal.SIGINT)
    samples = [json.loads(line) for line in result.stdout.splitlines()]
    assert result.returncode == 0 and result.stderr == ""
    assert len(samples) >= 10 and all(s["devices"][0]["total"] > 0 for s in samples)


def test_watch_exits_0_on_sigterm():
    result = watch(["top", "--watch", "0.5", "--json"], 2, signal.SIGTERM)
    assert result.returncode == 0 and result.stderr == "" and len(result.stdout.splitlines()) >= 2


def test_watch_through_a_pipe_appends_screens_without_escape_codes():
    argv = [sys.executable, "-m", "devmem", "info", "--watch", "0.05", "--count", "2"]
    result = subprocess.run(argv, capture_output=True, text=True, env=env_with(), timeout=60)
    assert result.returncode == 0 and "\x1b" not in result.stdout and result.stdout.count("device 0:") == 2


def test_watch_on_a_terminal_redraws_in_place():
    leader, follower = pty.openpty()
    proc = subprocess.Popen(
        [sys.executable, "-m", "devmem", "info", "--watch", "0.5"],
        stdout=follower,
        stderr=subprocess.PIPE,
        env=env_with(),
        preexec_fn=interruptible,
    )
    os.close(follower)
    out, deadline = "", time.monotonic() + 2
    while time.monotonic() < deadline:
        if select.select([leader], [], [], 0.1)[0]:
            out += os.read(leader, 1 << 20).decode()
    proc.send_signal(signal.SIGINT)
    assert proc.wait(10) == 0
    os.close(leader)
    # the screen cleared once, as `clear` does; each later frame drawn over it from the top-left corner
    frames = out.split("\x1b[?7l\x1b[H")
    assert out.startswith("\x1b[?7l\x1b[H\x1b[2J") and out.count("\x1b[2J") == 1 and len(frames) >= 4, out


@pytest.mark.parametrize("interval", ["0", "-1", "nan", "soon"])
def test_watch_interval_that_is_not_a_duration_is_a_usage_error(capsys, interval):
    with pytest.raises(SystemExit) as exited:
        main(["info", "--watch", interval])
    assert exited.value.code == 2 and "is not a watch interval" in capsys.readouterr().err


# --- devmem alone is devmem info ---------------------------------------------------------------------------


def devmem(*argv: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "devmem", *argv], capture_output=True, text=True, env=env_with(), timeout=60
    )


def test_devmem_json_is_devmem_info_json():
    result = devmem("--json")
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout)["devices"][0]["index"] == 0


def test_devmem_device_flag_is_devmem_info_device():
    result = devmem("--device", "0")
    assert result.returncode == 0 and "device 0: host memory" in result.stdout


def test_info_accepts_verbose_after_the_command():
    result = devmem("info", "-v")
    assert result.returncode == 0, result.stderr
    assert "device 0: host memory" in result.stdout


def test_an_unknown_command_is_a_usage_error_naming_the_commands():
    result = devmem("infp")
    assert result.returncode == 2 and "invalid choice: 'infp'" in result.stderr


# --- help --------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("command", ["info", "top", "plugins", "doctor", "plan", "fit"])
def test_each_command_help_has_a_description_examples_environment_and_exit_codes(command):
    result = devmem(command, "--help")
    assert result.returncode == 0
    for part in (
        "examples:",
        f"devmem {command}" if command != "info" else "devmem info",
        "environment:",
        "DEVMEM_PLATFORM",
        "DEVMEM_LOAD_PLUGINS",
        "CUDA_VISIBLE_DEVICES",
        "NO_COLOR",
        "exit codes:",
    ):
        assert part in result.stdout, (command, part)


def test_plan_help_says_how_to_get_a_page_size_from_a_model():
    out = re.sub(r"\s+", " ", devmem("plan", "--help").stdout)
    assert "--model DIR" in out and "reads it from the config" in out and "= 65536" in out


def test_plan_help_says_how_vllm_size_spellings_are_read():
    out = re.sub(r"\s+", " ", devmem("plan", "--help").stdout)
    assert "80G = 80 GiB and 80g = 80 GB" in out


def eight_gpu_info(capsys, monkeypatch, *argv: str) -> list[str]:
    """``devmem info argv`` at 80 columns on eight scripted H200s, each holding two of this machine's processes."""
    from devmem.testing import Scenario
    from devmem_nvidia.testing import ScriptedNvidiaGpu

    monkeypatch.setenv("COLUMNS", "80")
    gpus = [
        ScriptedNvidiaGpu(uuid=f"GPU-00000000-0000-0000-0000-00000000000{i}", pci_bus_id=f"00000000:{16 + i:02x}:00.0")
        for i in range(8)
    ]
    sc = Scenario(devices=gpus)
    for device in range(8):
        sc.allocate(20 * GiB, device, pid=os.getpid())
        sc.allocate(1 * GiB, device, pid=os.getppid())
    assert cmd_info(build_parser().parse_args(["info", *argv]), scripted_platform(sc)) == 0
    return capsys.readouterr().out.splitlines()


def test_info_of_an_8_gpu_node_fits_50_lines_of_80_columns(capsys, monkeypatch):
    lines = eight_gpu_info(capsys, monkeypatch)
    assert len(lines) <= 50 and all(len(line) <= 80 for line in lines), "\n".join(lines)
    assert [line.split()[0] for line in lines if "NVIDIA H200" in line] == [str(i) for i in range(8)]


def test_info_details_shows_every_devices_block_on_many_devices(capsys, monkeypatch):
    lines = eight_gpu_info(capsys, monkeypatch, "--details")
    assert [line for line in lines if line.startswith("device ")] == [f"device {i}: NVIDIA H200" for i in range(8)]


def test_info_of_one_device_of_many_shows_its_whole_block(capsys, monkeypatch):
    lines = eight_gpu_info(capsys, monkeypatch, "--device", "3")
    assert "device 3: NVIDIA H200" in lines and any(line.split()[:2] == ["free", "from"] for line in lines)
