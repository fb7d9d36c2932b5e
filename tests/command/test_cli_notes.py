"""A note wherever ``devmem`` assumed a figure: sizes without a unit, the total's source, whether a target fits,
how the breakdown's lines add up, and whose memory "this process" is."""

from __future__ import annotations

import re

import pytest
from model_configs import QWEN3_8B, write_model

from devmem import GiB, MiB
from devmem.command.main import main
from devmem.planner.sizing import plan_kv_cache

PAGES = ["--page-size", "65536", "--layers", "36"]


@pytest.fixture(autouse=True)
def wide_cpu(monkeypatch):
    monkeypatch.setenv("COLUMNS", "200")
    monkeypatch.setenv("DEVMEM_PLATFORM", "cpu")


def run(capsys, *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def test_a_bare_total_far_smaller_than_any_device_is_warned_about(capsys):
    code, _, err = run(capsys, "plan", "--total", "80", *PAGES)
    assert code == 1
    assert err.splitlines()[0] == (
        "devmem: warning: --total 80 has no unit, so it is 80 bytes, far less than any device's memory: "
        "write 80GiB (or vLLM's 80G) for gibibytes"
    )


def test_a_bare_total_of_device_size_is_not_warned_about(capsys):
    code, _, err = run(capsys, "plan", "--total", str(80 * GiB), *PAGES)
    assert code == 0 and err == ""


def test_sizes_without_a_unit_are_said_to_be_bytes(capsys):
    _, out, _ = run(capsys, "plan", "--total", "80GiB", *PAGES)
    assert "sizes without a unit are bytes: --page-size 65536" in out.splitlines()


def test_plan_without_total_says_where_the_total_came_from(capsys):
    _, out, _ = run(capsys, "plan", "--weights", "1GiB", *PAGES)
    line = next(line for line in out.splitlines() if line.startswith("total: "))
    assert re.fullmatch(
        r"total: \d+\.\d\d GiB is device 0 \(host memory\) of the cpu platform: --total was not given", line
    )


def test_plan_with_total_says_nothing_about_its_source(capsys):
    _, out, _ = run(capsys, "plan", "--total", "80GiB", *PAGES)
    assert not any(line.startswith("total: ") for line in out.splitlines())


@pytest.mark.parametrize(("sequences", "verdict"), [("4", "fit"), ("8", "do not fit (4 do)")])
def test_plan_model_with_context_and_sequences_says_whether_they_fit(capsys, tmp_path, sequences, verdict):
    model = str(write_model(tmp_path / "Qwen3-8B", QWEN3_8B))
    argv = ["plan", "--model", model, "--pinned", "20GiB", "--context", "32768", "--sequences", sequences]
    _, out, _ = run(capsys, *argv)
    line = next(line for line in out.splitlines() if line.startswith(f"{sequences} sequence(s) of 32768 tokens: "))
    assert line.removeprefix(f"{sequences} sequence(s) of 32768 tokens: ").startswith(verdict)


def test_the_breakdown_says_how_consumed_and_non_kv_add_up(capsys):
    _, out, _ = run(capsys, "plan", "--total", "80GiB", "--weights", "16GiB", "--non-torch", "1GiB", *PAGES)
    rows = {line.split("  ")[1].strip(): line for line in out.splitlines() if line.startswith("  ")}
    assert rows["consumed"].endswith("17.00 GiB  (weights + non-torch)")
    assert rows["non-KV"].endswith("17.00 GiB  (consumed + transient peak + graph capture)")


def test_a_measured_consumed_says_it_holds_the_weights_and_non_torch():
    plan = plan_kv_cache(
        total=GiB,
        utilization=0.5,
        weights=64 * MiB,
        non_torch=64 * MiB,
        consumed=64 * MiB,
        page_size_bytes=4096,
        num_layers=2,
    )
    line = next(line for line in plan.explain().splitlines() if line.split()[:1] == ["consumed"])
    assert line.endswith("(this process's measured growth: it holds the weights and non-torch, which may overlap)")


def test_this_process_on_the_cpu_platform_is_the_command_itself(capsys):
    _, out, _ = run(capsys, "info")
    assert re.search(r"this process +\d+\.\d\d MiB \(this devmem command itself\)", out)
