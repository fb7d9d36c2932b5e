"""``devmem top``: a line per device and per process, the static facts once, an interval as ``watch`` takes it.

The node is a scripted 8-GPU machine (devmem_nvidia.testing) on which real processes of this machine, with long
command lines, hold memory; ``top`` runs in-process until an interval timer interrupts it as Ctrl-C does.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import os
import re
import signal
import subprocess
import sys
import time
from unittest import mock

import pytest

from devmem.command.info import cmd_info
from devmem.command.main import build_parser, main
from devmem.testing import Scenario
from devmem.types import GiB
from devmem_nvidia.testing import ScriptedNvidiaGpu, scripted_platform

LONG = "import time; time.sleep(60)  # " + "a long command line that no column holds " * 3


@pytest.fixture(scope="module")
def ranks():
    """Two real processes with long command lines; yields their PIDs."""
    procs = [subprocess.Popen([sys.executable, "-c", f"{LONG}{n}"]) for n in (1, 2)]
    yield [p.pid for p in procs]
    for p in procs:
        p.kill()
        p.wait()


@pytest.fixture(scope="module")
def node(ranks):
    """Eight scripted H200s; on each, the two processes hold 20 GiB and 1 GiB."""
    gpus = [
        ScriptedNvidiaGpu(uuid=f"GPU-00000000-0000-0000-0000-00000000000{i}", pci_bus_id=f"00000000:{16 + i:02x}:00.0")
        for i in range(8)
    ]
    sc = Scenario(devices=gpus)
    for device in range(8):
        sc.allocate(20 * GiB, device, pid=ranks[0])
        sc.allocate(1 * GiB, device, pid=ranks[1])
    return sc


def run_top(sc, argv: tuple[str, ...], seconds: float = 2.5) -> tuple[int, str]:
    """``devmem top argv`` on ``sc`` with COLUMNS=80 through a pipe, stopped after ``seconds`` as Ctrl-C stops it."""
    args = build_parser().parse_args(["top", *argv])
    if args.interval is not None:
        args.watch = args.interval

    def interrupt(signum, frame):
        raise KeyboardInterrupt

    out = io.StringIO()
    previous = signal.signal(signal.SIGALRM, interrupt)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        with mock.patch.dict(os.environ, {"COLUMNS": "80"}), contextlib.redirect_stdout(out):
            code = cmd_info(args, scripted_platform(sc))
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)
    return code, out.getvalue()


@pytest.fixture(scope="module")
def top(node):
    """``top(*argv)``: the exit code and output of ``devmem top argv`` on the node; each argv runs once."""
    runs: dict[tuple[str, ...], tuple[int, str]] = {}

    def run(*argv: str) -> tuple[int, str]:
        if argv not in runs:
            runs[argv] = run_top(node, argv)
        return runs[argv]

    return run


def samples(out: str) -> list[list[str]]:
    """The samples of a piped ``top``, each as its lines (the static facts stay with the first)."""
    return [s.splitlines() for s in out.strip("\n").split("\n\n")]


def test_an_8_gpu_node_fits_a_50_line_terminal_at_80_columns(top):
    code, out = top("0.4")
    first = samples(out)[0]
    assert code == 0 and len(first) <= 50, "\n".join(first)
    assert all(len(line) <= 80 for line in out.splitlines()), [line for line in out.splitlines() if len(line) > 80]


def test_each_device_has_one_header_line_with_used_free_total_a_bar_and_the_share(top):
    _, out = top("0.4")
    devices = [line for line in samples(out)[0] if re.match(r" *\d NVIDIA H200 ", line)]
    assert [line.split()[0] for line in devices] == [str(i) for i in range(8)]
    assert all(line.split()[-7:] == ["15%", "21.00", "GiB", "118.80", "GiB", "139.80", "GiB"] for line in devices)


def test_each_process_has_one_line_with_its_command_cut_to_the_column(top, ranks):
    _, out = top("0.4")
    lines = [line for line in samples(out)[0] if line.split()[:1] == [str(ranks[0])]]
    assert len(lines) == 8 and all(line.endswith("...") and len(line) == 80 for line in lines)


def test_a_cut_command_names_its_program_without_the_path(top, ranks):
    _, out = top("0.4")
    line = next(line for line in samples(out)[0] if line.split()[:1] == [str(ranks[0])])
    assert line.split("GiB  ", 1)[1].startswith(f"{os.path.basename(sys.executable)} -c import time")


def test_verbose_shows_the_whole_command(top, ranks):
    _, out = top("-v", "0.4")
    assert " ".join(f"{LONG}1".split()) in " ".join(" ".join(samples(out)[0]).split())


def test_static_facts_are_written_once_not_every_sample(top):
    _, out = top("0.4")
    assert len(samples(out)) >= 2
    assert out.count("pages instead of failing: no") == 1 and out.count("total from:") == 1


def test_the_timestamp_is_to_the_second(top):
    _, out = top("0.4")
    stamps = [line.split("  ")[0] for line in out.splitlines() if line.endswith("every 0.4 s")]
    assert stamps and all(re.fullmatch(r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d \S+", s) for s in stamps), stamps


def test_an_interval_is_taken_as_watch_and_nvidia_smi_l_take_it(top):
    _, out = top("0.4")
    assert "every 0.4 s" in out and len(samples(out)) >= 2


def test_through_a_pipe_the_samples_say_their_interval_but_not_how_to_stop(top):
    _, out = top("0.4")
    assert "every 0.4 s" in out and "to stop" not in out, out


def stderr_on_a_terminal(*argv: str, seconds: float = 30) -> tuple[int, str]:
    """``devmem argv`` on the cpu platform with stdout through a pipe and stderr on an 80x24 pseudo-terminal:
    its exit code and what the terminal got."""
    import fcntl
    import pty
    import struct
    import termios
    import threading

    master, slave = pty.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 24, 80, 0, 0))
    chunks: list[bytes] = []

    def drain() -> None:
        with contextlib.suppress(OSError):  # EIO: the other end was closed
            while chunk := os.read(master, 65536):
                chunks.append(chunk)

    reader = threading.Thread(target=drain)
    reader.start()
    try:
        code = subprocess.run(
            [sys.executable, "-m", "devmem", *argv],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=slave,
            env={**os.environ, "DEVMEM_PLATFORM": "cpu", "TERM": "xterm"},
            timeout=seconds,
        ).returncode
    finally:
        os.close(slave)
        reader.join(timeout=30)
        os.close(master)
    return code, b"".join(chunks).decode(errors="replace")


@pytest.mark.parametrize(
    ("argv", "line"),
    [
        (("top", "-l", "0.1", "-n", "3", "--json"), "devmem top, every 0.1 s (Ctrl-C to stop): 3/3 samples"),
        (("info", "--watch", "0.1", "-n", "2"), "devmem info --watch, every 0.1 s (Ctrl-C to stop): 2/2 samples"),
    ],
    ids=["top", "info --watch"],
)
def test_samples_written_to_a_pipe_are_counted_on_stderr_where_it_is_a_terminal(argv, line):
    code, terminal = stderr_on_a_terminal(*argv)
    assert code == 0 and line in terminal, terminal


@pytest.mark.parametrize("interval", ["0", "soon"])
def test_an_interval_that_is_not_a_duration_is_a_usage_error(capsys, interval):
    with pytest.raises(SystemExit) as exited:
        main(["top", interval])
    assert exited.value.code == 2 and "is not a watch interval" in capsys.readouterr().err


def test_top_on_a_real_terminal_fits_50_lines_at_80_columns(tmp_path):
    """`devmem top` in tmux at 80x50: every line of the screen is within it (on the cpu platform)."""
    import shutil

    if shutil.which("tmux") is None:
        pytest.skip("tmux is not installed")
    session = f"devmem-top-{time.monotonic_ns()}"
    socket = str(tmp_path / "tmux.sock")
    tmux = ["tmux", "-S", socket]
    command = f"DEVMEM_PLATFORM=cpu {sys.executable} -m devmem top 0.5"
    subprocess.run([*tmux, "new-session", "-d", "-s", session, "-x", "80", "-y", "50", command], check=True, timeout=30)
    try:
        time.sleep(3)
        screen = subprocess.run(
            [*tmux, "capture-pane", "-p", "-t", session], capture_output=True, text=True, check=True, timeout=30
        ).stdout
    finally:
        subprocess.run([*tmux, "kill-server"], capture_output=True, timeout=30)
    lines = screen.rstrip("\n").splitlines()
    assert "devmem top on cpu" in screen and "host memory" in screen, screen
    assert screen.count("devmem top on cpu") == 1 and screen.count("every 0.5 s") == 1, screen
    assert len(lines) <= 50 and all(len(line) <= 80 for line in lines)


@pytest.mark.parametrize("argv", [["top", "0.05"], ["info", "--watch", "0.05"]], ids=["top", "info --watch"])
def test_count_stops_after_that_many_samples_with_exit_0(argv):
    env = {**os.environ, "DEVMEM_PLATFORM": "cpu"}
    result = subprocess.run(
        [sys.executable, "-m", "devmem", *argv, "--json", "--count", "3"],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
    )
    assert result.returncode == 0 and result.stderr == ""
    assert [json.loads(line)["platform"] for line in result.stdout.splitlines()] == ["cpu"] * 3


def test_count_without_watch_is_a_usage_error(capsys, monkeypatch):
    monkeypatch.setenv("DEVMEM_PLATFORM", "cpu")
    with pytest.raises(SystemExit) as exit_:
        main(["info", "--count", "2"])
    assert exit_.value.code == 2 and "--count applies to --watch" in capsys.readouterr().err


@pytest.mark.parametrize("flag", ["-l", "--loop", "--interval", "--watch"])
def test_top_takes_the_interval_flags_of_nvidia_smi_gpustat_and_nvitop(flag):
    assert build_parser().parse_args(["top", flag, "0.5"]).watch == 0.5


@pytest.mark.parametrize("flag", ["-l", "--loop", "--interval"])
def test_info_watch_takes_the_interval_flags_of_nvidia_smi_gpustat_and_nvitop(flag):
    assert build_parser().parse_args(["info", flag, "0.5"]).watch == 0.5


@pytest.mark.parametrize("flag", ["-l", "--loop", "--interval", "--watch"])
def test_top_takes_an_interval_flag_without_a_value_as_the_default_interval(flag):
    assert build_parser().parse_args(["top", flag, "-n", "2"]).watch == 2.0


@pytest.mark.parametrize("command", ["top", "info"])
@pytest.mark.parametrize("flag", ["-lms", "--loop-ms"])
def test_the_nvidia_smi_loop_ms_flag_takes_milliseconds(command, flag):
    assert build_parser().parse_args([command, flag, "500"]).watch == 0.5


def test_a_loop_ms_below_50_is_a_usage_error_naming_milliseconds(capsys):
    with pytest.raises(SystemExit) as exit_:
        build_parser().parse_args(["top", "-lms", "10"])
    assert exit_.value.code == 2 and "'10' is not a watch interval in milliseconds" in capsys.readouterr().err


@pytest.mark.parametrize("argv", [["top", "-l", "0.05", "-n", "2"], ["info", "--interval", "0.05", "-n", "2"]])
def test_a_loop_flag_with_n_stops_after_n_samples(argv):
    result = subprocess.run(
        [sys.executable, "-m", "devmem", *argv, "--json"],
        capture_output=True,
        text=True,
        env={**os.environ, "DEVMEM_PLATFORM": "cpu"},
        timeout=60,
    )
    assert result.returncode == 0 and len(result.stdout.splitlines()) == 2, result


def test_top_shows_a_live_reservation_under_its_device():
    from devmem.engine.reservations import reserve

    sc = Scenario(devices=[ScriptedNvidiaGpu()])
    with reserve(0, 10 * GiB, platform=scripted_platform(sc)):
        _, out = run_top(sc, ("0.2", "--count", "1"))
    lines = samples(out)[0]
    assert any(line.strip().startswith("reservations: 1 hold 10.00 GiB of") for line in lines), out
    assert any(line.split()[:3] == [str(os.getpid()), "10.00", "GiB"] for line in lines), out


def test_q_quits_top_on_a_terminal_with_exit_0_and_restores_its_mode():
    import pty
    import select
    import termios

    master, slave = pty.openpty()
    before = termios.tcgetattr(slave)
    env = {**os.environ, "DEVMEM_PLATFORM": "cpu", "TERM": "xterm", "COLUMNS": "80", "LINES": "40"}
    proc = subprocess.Popen(
        [sys.executable, "-m", "devmem", "top", "30"], stdin=slave, stdout=slave, stderr=slave, env=env
    )
    try:
        screen = b""
        deadline = time.monotonic() + 30
        while b"q or Ctrl-C to stop" not in screen and time.monotonic() < deadline:
            if select.select([master], [], [], 1)[0]:  # never a read that blocks past the deadline
                screen += os.read(master, 65536)
        os.write(master, b"q")
        assert proc.wait(timeout=10) == 0 and b"q or Ctrl-C to stop" in screen
        assert termios.tcgetattr(slave) == before
    finally:
        proc.kill()
        os.close(master)
        os.close(slave)


@pytest.mark.parametrize("text", ["\uff12", "1_0", "\u0662"])  # full-width 2, an underscore, Arabic-Indic 2
def test_a_watch_interval_that_float_reads_but_is_no_ascii_decimal_is_refused(text):
    from devmem.command.flags import interval

    with pytest.raises(argparse.ArgumentTypeError, match="is not a watch interval"):
        interval(text)
