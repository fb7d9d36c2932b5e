"""The command's output streams: the exit code survives a reader that went away or a closed stdout, a full disk
is one error line, escape sequences go only to a terminal that shows them, and a pipe gets lines whole."""

from __future__ import annotations

import contextlib
import io
import os
import pty
import signal
import subprocess
import sys
import time

import pytest
from model_configs import TINY_LLAMA, write_model
from plugin_dists import write_dist
from test_cli_info import env_with, interruptible, run_on_a_terminal

from devmem.command.main import main

DEVMEM = [sys.executable, "-m", "devmem"]


def to_a_gone_reader(*argv: str) -> subprocess.CompletedProcess:
    """``devmem argv | true``: stdout is a pipe whose reader has already gone."""
    read, write = os.pipe()
    os.close(read)
    try:
        return subprocess.run(
            [*DEVMEM, *argv], stdout=write, stderr=subprocess.PIPE, text=True, env=env_with(), timeout=60
        )
    finally:
        os.close(write)


def with_stdout_closed(*argv: str, timeout: float = 30) -> subprocess.CompletedProcess:
    """``devmem argv >&-``."""
    return subprocess.run(
        [*DEVMEM, *argv],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        env=env_with(),
        preexec_fn=lambda: os.close(1),
        timeout=timeout,
    )


@pytest.fixture
def tiny(tmp_path):
    return str(write_model(tmp_path / "tiny-llama", TINY_LLAMA))


def test_fit_keeps_exit_1_when_its_reader_went_away(tiny):
    result = to_a_gone_reader("fit", "--model", tiny, "--context", "4096", "--sequences", "10000000")
    assert result.returncode == 1 and result.stderr == ""


def test_fit_keeps_exit_0_when_its_reader_went_away(tiny):
    result = to_a_gone_reader("fit", "--model", tiny, "--context", "64", "--sequences", "1", "--utilization", "0.01")
    assert result.returncode == 0 and result.stderr == ""


def test_plan_json_keeps_exit_1_when_its_reader_went_away():
    argv = ["plan", "--json", "--total", "1GiB", "--weights", "2GiB", "--page-size", "64KiB", "--layers", "32"]
    result = to_a_gone_reader(*argv)
    assert result.returncode == 1 and result.stderr == ""


def test_fit_keeps_its_exit_code_with_stdout_closed(tiny):
    result = with_stdout_closed("fit", "--model", tiny, "--context", "4096", "--sequences", "10000000")
    assert result.returncode == 1 and result.stderr == ""


@pytest.mark.parametrize("argv", [["top"], ["top", "--json"]], ids=["top", "top --json"])
def test_top_with_stdout_closed_stops_with_exit_0(argv):
    result = with_stdout_closed(*argv, "0.2")
    assert result.returncode == 0 and result.stderr == ""


def test_top_stops_when_its_reader_goes_away():
    top = subprocess.Popen([*DEVMEM, "top", "0.1"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env_with())
    assert top.stdout is not None and top.stdout.readline()
    top.stdout.close()
    assert top.wait(30) == 0 and top.stderr is not None and top.stderr.read() == b""


@pytest.mark.parametrize("argv", [["--help"], ["--version"], ["plan", "--help"]])
def test_help_or_version_to_a_full_disk_is_one_error_line_and_exit_1(argv):
    with open("/dev/full", "w") as full:
        result = subprocess.run(
            [*DEVMEM, *argv], stdout=full, stderr=subprocess.PIPE, text=True, env=env_with(), timeout=60
        )
    assert (result.returncode, result.stderr) == (
        1,
        "devmem: error: cannot write the output to stdout: No space left on device (errno 28)\n",
    )


SLOW_DETECTION = """
import pathlib, time
import devmem

def detect():
    pathlib.Path({started!r}).touch()
    time.sleep(60)
    return devmem.Detection(False, "never")

@devmem.hookimpl
def devmem_platforms():
    yield devmem.PlatformSpec(name="slow", priority=1, description="a driver that hangs", detect=detect,
                              factory=lambda: None)
"""


def test_ctrl_c_while_a_platform_is_detected_exits_130_without_a_traceback(site, tmp_path):
    started = tmp_path / "detecting"
    write_dist(site, "slow-vendor", SLOW_DETECTION.format(started=str(started)))
    env = {k: v for k, v in env_with().items() if k != "DEVMEM_PLATFORM"}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(site), env.get("PYTHONPATH")]))
    proc = subprocess.Popen(
        [*DEVMEM, "plugins"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=env,
        text=True,
        preexec_fn=interruptible,
    )
    deadline = time.monotonic() + 30
    while not started.exists() and time.monotonic() < deadline and proc.poll() is None:
        time.sleep(0.05)
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=30)
    assert started.exists() and proc.returncode == 130 and "Traceback" not in err, err


def test_a_full_disk_is_one_error_line_and_exit_1():
    with open("/dev/full", "w") as full:
        result = subprocess.run(
            [*DEVMEM, "info"], stdout=full, stderr=subprocess.PIPE, text=True, env=env_with(), timeout=60
        )
    assert result.returncode == 1
    assert result.stderr.splitlines() == [
        "devmem: error: cannot write the output to stdout: No space left on device (errno 28)"
    ]


@pytest.mark.parametrize("argv", [["info"], ["doctor"], ["top", "0.2"]])
def test_a_dumb_terminal_gets_no_escape_sequences(argv):
    out = run_on_a_terminal(argv, env_with(TERM="dumb"), stop_after=2 if argv[0] == "top" else None)
    assert "cpu" in out and "\x1b" not in out


def test_top_redraws_in_place_on_a_terminal_that_can():
    out = run_on_a_terminal(["top", "0.2"], env_with(TERM="xterm"), stop_after=2)
    assert out.startswith("\x1b[?7l\x1b[H\x1b[2J") and out.count("\x1b[J") >= 2


def test_a_pipe_gets_each_line_whole():
    """`devmem plan | grep "KV cache:"` keeps the byte count: lines to a pipe are not wrapped."""
    argv = ["plan", "--total", "80GiB", "--weights", "16GiB", "--page-size", "64KiB", "--layers", "36"]
    env = {k: v for k, v in env_with().items() if k != "COLUMNS"}
    result = subprocess.run([*DEVMEM, *argv], capture_output=True, text=True, env=env, timeout=60)
    line = next(line for line in result.stdout.splitlines() if line.startswith("KV cache:"))
    assert len(line) > 80 and line.endswith("60129017856 bytes, 524288 bytes left over"), line


def test_a_gone_reader_silences_only_its_own_stream(capsys, monkeypatch):
    """In one process (an engine calling the CLI twice, the tests): a new stdout is written to again."""
    monkeypatch.setenv("DEVMEM_PLATFORM", "cpu")
    gone = io.StringIO()
    gone.close()
    with contextlib.redirect_stdout(gone):
        assert main(["info", "--json"]) == 0
    assert main(["info", "--json"]) == 0 and '"platform": "cpu"' in capsys.readouterr().out


# ---- text from outside devmem, escaped at the sink ---------------------------------------------------------------
HOSTILE = "\x1b]0;retitled\x07\x1b[2J\x9b31m\u202e"


@pytest.mark.parametrize(
    "argv",
    [["plan", "--model"], ["fit", "--context", "1000", "--sequences", "1", "--model"]],
    ids=["plan", "fit"],
)
@pytest.mark.parametrize("model_type", ["llama", "unknown", "refused"])
def test_a_configs_model_type_reaches_no_terminal_as_escape_sequences(tmp_path, argv, model_type):
    """A downloaded config.json names its model_type: printed in the model's line, or in the refusal, escaped."""
    config = {**TINY_LLAMA, "model_type": model_type + HOSTILE}
    if model_type == "refused":
        del config["num_hidden_layers"]
    folder = write_model(tmp_path / "model", config)
    leader, follower = pty.openpty()
    proc = subprocess.Popen([*DEVMEM, *argv, str(folder)], stdout=follower, stderr=follower, env=env_with(TERM="xterm"))
    os.close(follower)
    chunks = []
    with contextlib.suppress(OSError):  # the terminal closed with the process
        while chunk := os.read(leader, 65536):
            chunks.append(chunk)
    os.close(leader)
    assert proc.wait(30) == 3 if model_type == "refused" else proc.wait(30) in (0, 1)  # 1: it does not fit here
    out = b"".join(chunks).decode()
    assert model_type + "\\x1b]0;retitled\\x07\\x1b[2J\\x9b31m\\u202e" in out.replace("\r\n", "\n")
    assert "\x1b]" not in out and "\x1b[2J" not in out and "\x9b" not in out and "\u202e" not in out


def test_the_sink_keeps_devmems_own_colours_and_escapes_every_other_sequence():
    from devmem.command.format import Painter
    from devmem.command.output import for_terminal

    coloured = Painter(True)("WARN", "yellow")
    assert for_terminal(f"{coloured} a\x1b[2Jb\r\nc\x1b[31m") == f"{coloured} a\\x1b[2Jb\\r\nc\x1b[31m"
    assert for_terminal("x\x1b[8mhidden\x1b]0;t\x07") == "x\\x1b[8mhidden\\x1b]0;t\\x07"


def test_a_frames_lines_are_escaped_around_devmems_own_cursor_moves(capsys):
    from devmem.command.output import Output

    Output().frame(["x\x1b]0;retitled\x07", "y\x1b[2J"], first=False)
    written = capsys.readouterr().out
    assert written == "\x1b[?7l\x1b[H\x1b[Kx\\x1b]0;retitled\\x07\n\x1b[Ky\\x1b[2J\n\x1b[J\x1b[?7h"
