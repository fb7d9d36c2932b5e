"""Help and errors fitted to the terminal: every ``--help`` within its width, usage errors saying the problem first,
errors of at most two lines that point to the command explaining more."""

from __future__ import annotations

import os
import pty
import subprocess
import sys

import pytest
from test_cli_info import env_with

COMMANDS = ["info", "top", "plugins", "doctor", "plan", "fit"]


def devmem(*argv: str, **env: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "devmem", *argv], capture_output=True, text=True, env=env_with(**env), timeout=60
    )


@pytest.mark.parametrize("columns", [80, 60, 40])
@pytest.mark.parametrize("command", [None, *COMMANDS, "exporter"])
def test_help_fits_the_terminal_width(command, columns):
    result = devmem(*([command] if command else []), "--help", COLUMNS=str(columns))
    too_long = [line for line in result.stdout.splitlines() if len(line) > columns]
    assert result.returncode == 0 and too_long == []


def test_help_names_an_options_value_once_after_its_spellings():
    out = devmem("top", "--help", COLUMNS="80").stdout
    assert "\n  -n, --count N " in out and "\n  -l, --loop, --interval [SECONDS]\n" in out


def test_usage_too_wide_for_the_terminal_keeps_each_option_whole_under_a_short_indent():
    usage = devmem("plan", "--help", COLUMNS="40").stdout.split("\n\n")[0].splitlines()
    assert usage[0].startswith("usage: devmem plan") and "    [--utilization U | --pinned SIZE]" in usage


def test_help_keeps_each_example_on_its_own_line():
    out = devmem("plan", "--help", COLUMNS="80").stdout
    assert "\n  devmem plan --model ./Qwen3-8B --pinned 20GiB --json\n" in out


def test_a_usage_error_says_the_problem_first_and_points_to_help():
    result = devmem("plan", "--total", "1x", "--page-size", "64KiB", "--layers", "32")
    assert result.returncode == 2
    [line] = result.stderr.splitlines()
    assert line == (
        "devmem plan: error: argument --total: '1x' is not a size: give bytes or a unit (KB..TB; KiB, MiB, GiB, "
        "TiB; vLLM's 80G = 80 GiB) (see `devmem plan --help`)"
    )
    assert len(line) <= 160  # two lines of a terminal 80 columns wide


def test_an_unknown_platform_is_an_error_of_at_most_two_lines_pointing_to_devmem_plugins():
    result = devmem(DEVMEM_PLATFORM="nope")
    [line] = result.stderr.splitlines()
    assert result.returncode == 1 and len(line) <= 160 and "`devmem plugins`" in line
    assert line.startswith("devmem: error: DEVMEM_PLATFORM='nope' names no registered platform (cpu, ")


def test_an_error_on_a_terminal_is_wrapped_to_its_width():
    leader, follower = pty.openpty()
    env = env_with(DEVMEM_PLATFORM="nope", COLUMNS="50")
    proc = subprocess.Popen([sys.executable, "-m", "devmem"], stdout=subprocess.DEVNULL, stderr=follower, env=env)
    os.close(follower)
    chunks = []
    while True:
        try:
            chunk = os.read(leader, 65536)
        except OSError:
            break
        if not chunk:
            break
        chunks.append(chunk)
    assert proc.wait(30) == 1
    os.close(leader)
    lines = b"".join(chunks).decode().splitlines()
    assert 2 <= len(lines) <= 4 and all(len(line) <= 50 for line in lines), lines


def test_plugins_on_a_narrow_terminal_gives_each_reason_the_whole_width():
    lines = devmem("plugins", COLUMNS="80").stdout.splitlines()
    cpu = next(i for i, line in enumerate(lines) if line.split()[:2] == ["*", "cpu"])
    assert lines[cpu + 1] == "      host memory is always available" and all(len(line) <= 80 for line in lines)
    assert lines[0].split() == ["name", "priority", "distribution", "version", "detected"]


@pytest.mark.parametrize("argv", [["plan", "--model", "/nonexistent/config.json"], ["fit", "--model", "/nonexistent"]])
def test_a_refused_model_is_an_error_wrapped_to_columns(argv):
    result = devmem(*argv, "--context", "1", "--sequences", "1", COLUMNS="40")
    lines = result.stderr.splitlines()
    assert result.returncode == 3 and len(lines) >= 2 and all(len(line) <= 40 for line in lines), lines


def test_a_logged_warning_is_wrapped_to_columns():
    result = devmem("plugins", DEVMEM_LOAD_PLUGINS="zzz", COLUMNS="40")
    lines = result.stderr.splitlines()
    assert lines[0].startswith("devmem: DEVMEM_LOAD_PLUGINS='zzz'") and len(lines) >= 3
    assert all(len(line) <= 40 for line in lines), lines


def test_a_logged_warning_in_a_log_stays_one_line():
    [line] = devmem("plugins", DEVMEM_LOAD_PLUGINS="zzz", COLUMNS="").stderr.splitlines()
    assert line.startswith("devmem: DEVMEM_LOAD_PLUGINS='zzz'") and line.endswith("wsl2")


@pytest.mark.parametrize("flag", ["-V", "--version"])
def test_version_is_shown_by_V_as_nvitop_and_python_take_it(flag):
    from devmem import __version__

    result = devmem(flag)
    assert result.returncode == 0 and result.stdout == f"devmem {__version__}\n"


@pytest.mark.parametrize("columns", ["1", "2", "3", "19"])
@pytest.mark.parametrize(
    "argv,code",
    [(["--help"], 0), (["fit", "--help"], 0), (["info"], 0), (["info", "--nope"], 2), (["doctor"], None)],
    ids=["help", "fit-help", "info", "usage-error", "doctor"],
)
def test_any_columns_lays_out_at_the_narrowest_width_without_an_error(monkeypatch, capsys, columns, argv, code):
    """At ``COLUMNS=1`` or ``2`` argparse's width (``COLUMNS - 2``) was 0 or less, and every command raised."""
    from devmem.command.main import main

    monkeypatch.setenv("COLUMNS", columns)
    monkeypatch.setenv("DEVMEM_PLATFORM", "cpu")
    try:
        result = main(argv)
    except SystemExit as exit_:
        result = exit_.code
    out, err = capsys.readouterr()
    assert (code is None and result in (0, 1)) or result == code
    assert out or err
