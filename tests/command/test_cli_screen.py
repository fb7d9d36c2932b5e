"""One screen at 80x24: ``devmem`` on 1 to 8 GPUs with three serving engines each, ``devmem top`` redrawn in place
in a real terminal, the processes past what fits summed up on one line.

The node is tests/command/engine_node.py's: scripted H200s on which real processes started as vLLM and SGLang are
started (long command lines) hold memory.
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path
from unittest import mock

import pytest
from engine_node import engine_node

from devmem.command.info import cmd_info
from devmem.command.main import _with_command, build_parser
from devmem_nvidia.testing import scripted_platform

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def nodes(tmp_path_factory):
    """``nodes(gpus)``: a scripted node of that many H200s with three engines on each (each node made once)."""
    made: dict[int, object] = {}
    with contextlib.ExitStack() as stack:

        def node(gpus: int):
            if gpus not in made:
                made[gpus] = stack.enter_context(engine_node(gpus, tmp_path_factory.mktemp(f"engines{gpus}")))[0]
            return made[gpus]

        yield node


def devmem(capsys, sc, *argv: str, lines: str | None = "24") -> list[str]:
    """The lines ``devmem argv`` prints on ``sc`` at 80 columns (and ``lines`` rows, where given)."""
    env = {"COLUMNS": "80", **({"LINES": lines} if lines else {})}
    parser = build_parser()
    with mock.patch.dict(os.environ, env):
        if lines is None:
            os.environ.pop("LINES", None)
        assert cmd_info(parser.parse_args(_with_command(list(argv))), scripted_platform(sc)) == 0
    return capsys.readouterr().out.splitlines()


@pytest.mark.parametrize("gpus", [1, 2, 3, 4, 8])
def test_devmem_with_three_engines_per_gpu_fits_an_80x24_terminal(capsys, nodes, gpus):
    shown = devmem(capsys, nodes(gpus))
    assert len(shown) <= 23 and all(len(line) <= 80 for line in shown), "\n".join(shown)


@pytest.mark.parametrize("gpus", [1, 2, 3, 4, 8])
def test_every_device_has_its_line_on_the_screen(capsys, nodes, gpus):
    shown = devmem(capsys, nodes(gpus))
    named = [line for line in shown if re.match(r"(device \d+: |\s*\d+ )NVIDIA H200", line)]
    assert len(named) == gpus, "\n".join(shown)


def test_an_engine_is_named_by_its_engine_and_model(capsys, nodes):
    shown = "\n".join(devmem(capsys, nodes(1)))
    assert "vllm meta-llama/Llama-3.1-70B-Instruct :8000" in shown and "sglang Qwen/Qwen3-8B :30000" in shown, shown


def test_one_device_is_its_whole_block_with_a_line_per_engine(capsys, nodes):
    shown = devmem(capsys, nodes(1))
    assert shown[1] == "device 0: NVIDIA H200" and sum("GiB  vllm " in line for line in shown) == 2, shown


def test_processes_past_what_fits_are_one_line_with_their_count_and_bytes(capsys, nodes):
    shown = devmem(capsys, nodes(8))
    summed = [line.split("GiB  ", 1)[0].split() for line in shown if re.search(r"GiB  \d (processes|more): ", line)]
    alone, after_one = summed.count(["95.00"]), summed.count(["55.00"])
    assert alone + after_one == 8 and after_one >= 1, "\n".join(shown)


def test_lines_left_over_list_one_more_process_of_the_first_devices(capsys, nodes):
    shown = devmem(capsys, nodes(8))
    first = shown.index(next(line for line in shown if line.startswith("  0 NVIDIA H200")))
    assert "vllm meta-llama/Llama-3.1-70B-Instruct :8000" in shown[first + 1] and " 2 more: " in shown[first + 2]


def test_a_taller_terminal_lists_each_process_under_the_process_header(capsys, nodes):
    shown = devmem(capsys, nodes(8), lines="50")
    assert sum("sglang Qwen/Qwen3-8B" in line and "processes:" not in line for line in shown) == 8, shown
    assert any(line.split() == ["PID", "USER", "DEVICE", "MEM", "COMMAND"] for line in shown), shown


def test_the_screen_says_how_to_see_every_process(capsys, nodes):
    assert devmem(capsys, nodes(8))[-1].startswith("8 devices; every figure: devmem info --details")


def test_verbose_lists_every_process_with_its_whole_command(capsys, nodes):
    shown = " ".join(" ".join(devmem(capsys, nodes(8), "-v")).split())
    assert shown.count("--enable-prefix-caching") == 8 and shown.count("sglang.launch_server") == 8


def test_a_pipe_gets_every_process(capsys, nodes):
    shown = devmem(capsys, nodes(8), lines=None)
    assert sum("sglang Qwen/Qwen3-8B" in line for line in shown) == 8 and "processes:" not in "\n".join(shown)


def test_two_devices_are_the_compact_screen(capsys, nodes):
    shown = devmem(capsys, nodes(2))
    assert shown[0].startswith("devmem info on nvml") and not any(line.startswith("device ") for line in shown)


def test_details_shows_each_devices_block(capsys, nodes):
    shown = devmem(capsys, nodes(2), "--details")
    assert [line for line in shown if line.startswith("device ")] == ["device 0: NVIDIA H200", "device 1: NVIDIA H200"]


def test_a_terminal_too_short_for_every_device_says_how_many_lines_are_left(capsys, nodes):
    shown = devmem(capsys, nodes(8), lines="10")
    assert len(shown) <= 9 and shown[-1].startswith("8 devices; every figure: devmem info --details")
    assert shown[-2].startswith("... ") and "more lines" in shown[-2], shown


# --- top in a real terminal ------------------------------------------------------------------------------


def tmux_top(tmp_path, gpus: int, seconds: float, columns: int = 80, rows: int = 24) -> tuple[str, int, str]:
    """``devmem top 0.1`` on ``gpus`` GPUs in tmux at ``columns`` x ``rows`` for ``seconds``: the screen, how many
    lines went into tmux's scrollback, and the screen after ``q``."""
    if shutil.which("tmux") is None:
        pytest.skip("tmux is not installed")
    socket = str(tmp_path / "tmux.sock")
    tmux = ["tmux", "-S", socket]
    script = f"{sys.executable} {ROOT / 'tests' / 'command' / 'engine_node.py'} {gpus} top 0.1"
    command = f"env PYTHONPATH={ROOT} TERM=xterm {script}; sleep 60"
    size = ["-x", str(columns), "-y", str(rows)]
    subprocess.run([*tmux, "new-session", "-d", "-s", "top", *size, command], check=True, timeout=30)

    def tmux_out(*argv: str) -> str:
        return subprocess.run([*tmux, *argv], capture_output=True, text=True, check=True, timeout=30).stdout

    try:
        deadline = time.monotonic() + 30
        while "q or Ctrl-C to stop" not in tmux_out("capture-pane", "-p", "-t", "top"):
            assert time.monotonic() < deadline, tmux_out("capture-pane", "-p", "-t", "top")
            time.sleep(0.2)
        time.sleep(seconds)
        screen = tmux_out("capture-pane", "-p", "-t", "top")
        history = int(tmux_out("display-message", "-p", "-t", "top", "#{history_size}"))
        tmux_out("send-keys", "-t", "top", "q")
        time.sleep(1)
        after = tmux_out("capture-pane", "-p", "-t", "top", "-S", "-")
    finally:
        subprocess.run([*tmux, "kill-server"], capture_output=True, timeout=30)
    return screen, history, after


@pytest.fixture(scope="module")
def top_8_gpus(tmp_path_factory):
    return tmux_top(tmp_path_factory.mktemp("tmux"), 8, 3)


def test_top_on_8_gpus_at_80x24_keeps_its_title_time_and_how_to_stop_on_screen(top_8_gpus):
    screen, _, _ = top_8_gpus
    lines = screen.rstrip("\n").splitlines()
    assert lines[0].startswith("devmem top on nvml") and "every 0.1 s, q or Ctrl-C to stop" in screen, screen
    assert len(lines) <= 23 and all(len(line) <= 80 for line in lines), screen


def test_top_on_8_gpus_at_80x24_shows_every_device(top_8_gpus):
    screen, _, _ = top_8_gpus
    assert [line.split()[0] for line in screen.splitlines() if "NVIDIA H200" in line] == [str(i) for i in range(8)]


def test_top_redrawn_30_times_leaves_nothing_in_the_scrollback(top_8_gpus):
    _, history, after = top_8_gpus
    assert history == 0 and after.count("devmem top on nvml") == 1, after


@pytest.mark.slow  # ten seconds of redraws, as an operator watches it
def test_top_redrawn_for_10_seconds_leaves_nothing_in_the_scrollback(tmp_path):
    screen, history, after = tmux_top(tmp_path, 8, 10)
    assert history == 0 and after.count("devmem top on nvml") == 1, after


def test_top_in_a_small_terminal_fits_it(tmp_path):
    screen, history, _ = tmux_top(tmp_path, 8, 1, columns=70, rows=12)
    lines = screen.rstrip("\n").splitlines()
    assert history == 0 and len(lines) <= 11 and all(len(line) <= 70 for line in lines), screen
    assert "q or Ctrl-C to stop" in screen and lines[-1].startswith("... "), screen
