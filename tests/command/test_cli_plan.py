"""``devmem plan``: the planner from the command line, human output and ``--json``, exit codes 0/1/2."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from devmem import GiB, MiB
from devmem.command.main import main
from devmem.cpu import CpuPlatform
from devmem.planner.sizing import plan_kv_cache

QWEN3_8B = ["--page-size", "64KiB", "--layers", "36"]


@pytest.fixture(autouse=True)
def wide_terminal(monkeypatch):
    """Lines checked whole: a terminal wide enough that none wraps."""
    monkeypatch.setenv("COLUMNS", "200")


def plan(capsys, *args: str) -> tuple[int, str, str]:
    code = main(["plan", *args])
    out, err = capsys.readouterr()
    return code, out, err


def test_plan_prints_the_result_path_and_figures_in_gib(capsys):
    code, out, _ = plan(capsys, "--total", "80GiB", "--weights", "16GiB", "--transient-peak", "2GiB", *QWEN3_8B)
    lines = out.splitlines()
    assert code == 0
    assert lines[0] == "KV cache: 54.00 GiB (57982058496 bytes) holds exactly 24576 blocks x 2.25 MiB (2359296 bytes)"
    assert lines[1].startswith("path: utilization 0.9")
    assert ["weights", "16.00", "GiB"] in [line.split() for line in lines]


def test_plan_json_gives_the_planners_exact_bytes(capsys):
    code, out, _ = plan(
        capsys,
        "--total",
        "1.5GB",
        "--utilization",
        "0.8",
        "--weights",
        "512MiB",
        "--non-torch",
        "1000000",
        "--graph-capture",
        "16MiB",
        "--json",
        *QWEN3_8B,
    )
    expected = plan_kv_cache(
        total=1_500_000_000,
        utilization=0.8,
        weights=512 * MiB,
        non_torch=1_000_000,
        graph_capture=16 * MiB,
        page_size_bytes=65536,
        num_layers=36,
    )
    assert code == 0 and json.loads(out) == expected.as_dict()


def test_pinned_plan_needs_no_total(capsys):
    code, out, _ = plan(capsys, "--pinned", "20GiB", "--json", *QWEN3_8B)
    data = json.loads(out)
    assert code == 0 and data["path"] == "pinned" and data["kv_cache_bytes"] == 20 * GiB
    assert data["num_blocks"] == 9102


def test_plan_without_total_uses_this_machines_device(capsys, monkeypatch):
    monkeypatch.setenv("DEVMEM_PLATFORM", "cpu")
    code, out, _ = plan(capsys, "--weights", "1GiB", "--json", *QWEN3_8B)
    assert code == 0 and json.loads(out)["breakdown"]["total"] == CpuPlatform().device_memory_info(0).total


def test_not_enough_memory_exits_1_with_one_line_naming_the_figures(capsys):
    code, out, err = plan(
        capsys, "--total", "24GiB", "--utilization", "0.5", "--weights", "11GiB", "--transient-peak", "2GiB", *QWEN3_8B
    )
    assert code == 1 and out == "" and err.count("devmem: error:") == 1  # one error, wrapped at COLUMNS
    line = " ".join(err.split())
    assert line.startswith("devmem: error: not enough memory for the KV cache (utilization path)")
    assert "weights 11.00 GiB" in line and "transient peak 2.00 GiB" in line and "at least 0.542" in line


def test_not_enough_memory_with_json_prints_the_breakdown_and_exits_1(capsys):
    code, out, _ = plan(capsys, "--total", "24GiB", "--weights", "30GiB", "--json", *QWEN3_8B)
    data = json.loads(out)
    assert code == 1 and data["breakdown"]["weights"] == 30 * GiB and data["breakdown"]["needed_utilization"] is None
    assert data["error"].startswith("not enough memory for the KV cache")


def test_a_plan_that_does_not_fit_has_kind_does_not_fit_in_json(capsys):
    _, out, _ = plan(capsys, "--total", "24GiB", "--weights", "30GiB", "--json", *QWEN3_8B)
    assert json.loads(out)["kind"] == "does_not_fit"


@pytest.mark.parametrize(
    "args, complaint",
    [
        (["--total", "24XB"], "'24XB' is not a size"),
        (["--utilization", "1.2"], "'1.2' is not a utilization"),
        (["--utilization", "\uff10.5"], "'\uff10.5' is not a utilization"),  # a full-width zero: float() reads it
        (["--utilization", "0.0_5"], "'0.0_5' is not a utilization"),
        (["--utilization", "0.5", "--pinned", "1GiB"], "not allowed with argument"),
        (["--layers", "0"], "'0' is not a layer count"),
        (["--page-size=-4KiB"], "'-4KiB' is not a size"),
    ],
)
def test_bad_arguments_are_usage_errors(capsys, args, complaint):
    with pytest.raises(SystemExit) as info:
        main(["plan", "--total", "80GiB", *QWEN3_8B, *args])
    assert info.value.code == 2 and complaint in capsys.readouterr().err


def test_zero_page_size_is_a_usage_error_naming_the_flag(capsys):
    with pytest.raises(SystemExit) as exit_:
        main(["plan", "--total", "80GiB", "--layers", "36", "--page-size", "0"])
    assert exit_.value.code == 2 and "argument --page-size: '0' is zero bytes" in capsys.readouterr().err


def test_plan_runs_as_a_command():
    result = subprocess.run(
        [sys.executable, "-m", "devmem", "plan", "--pinned", "1GiB", "--json", *QWEN3_8B],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout)["num_blocks"] == GiB // (64 * 1024 * 36)


def test_allocation_granularity_keeps_only_whole_units(capsys):
    """9,103 blocks of 2,359,296 B pinned: 10,240 whole 2 MiB units hold 9,102 of them."""
    code, out, _ = plan(
        capsys, "--pinned", str(9103 * 2_359_296), "--allocation-granularity", "2MiB", "--json", *QWEN3_8B
    )
    assert code == 0 and json.loads(out)["num_blocks"] == 9102


def test_plan_reaches_the_growable_path_with_init_free_and_free(capsys):
    code, out, _ = plan(
        capsys,
        "--total",
        "120GiB",
        "--init-free",
        "100GiB",
        "--free",
        "80GiB",
        "--committed",
        "2GiB",
        "--transient-peak",
        "4GiB",
        "--json",
        *QWEN3_8B,
    )
    expected = plan_kv_cache(
        total=120 * GiB,
        init_free_memory=100 * GiB,
        free_memory=80 * GiB,
        committed_bytes=2 * GiB,
        transient_peak_bytes=4 * GiB,
        page_size_bytes=65536,
        num_layers=36,
    )
    data = json.loads(out)
    assert code == 0 and data == expected.as_dict() and data["path"] == "growable"
    assert data["kv_cache_bytes"] == 75 * GiB  # min(108 - 18, 80 + 2 - 3) - 4


def test_growable_path_needs_both_free_readings_on_the_command_line(capsys):
    code, _, err = plan(capsys, "--total", "120GiB", "--free", "80GiB", *QWEN3_8B)
    assert code == 1 and "needs both --init-free" in err


def test_committed_without_the_growable_path_is_refused(capsys):
    code, _, err = plan(capsys, "--total", "120GiB", "--committed", "2GiB", *QWEN3_8B)
    assert code == 1 and "--committed applies to the growable path" in err


def test_plan_reads_vllms_upper_case_g_as_gib_and_says_so(capsys):
    code, out, _ = plan(capsys, "--total", "80G", *QWEN3_8B)
    assert code == 0 and "--total 80G read as 80 GiB = 85899345920 bytes" in out.splitlines()


def test_plan_reads_vllms_lower_case_g_as_gb_and_says_so(capsys):
    code, out, _ = plan(capsys, "--total", "80g", "--json", *QWEN3_8B)
    assert code == 0 and json.loads(out)["breakdown"]["total"] == 80 * 10**9
    assert "--total 80g read as 80 GB = 80000000000 bytes" in plan(capsys, "--total", "80g", *QWEN3_8B)[1]


def test_plan_says_how_a_decimal_unit_was_read(capsys):
    out = plan(capsys, "--total", "80GB", *QWEN3_8B)[1]
    assert "--total 80GB read as 80 GB = 80000000000 bytes" in out.splitlines()


def test_plan_does_not_echo_binary_units_or_plain_bytes(capsys):
    out = plan(capsys, "--total", "80GiB", "--weights", "1000", *QWEN3_8B)[1]
    assert "read as" not in out


def test_plan_shows_the_bytes_left_over_when_blocks_do_not_fill_the_cache(capsys):
    code, out, _ = plan(capsys, "--pinned", "20GiB", "--page-size", "65536", "--layers", "36")
    assert code == 0
    assert out.splitlines()[0] == (
        "KV cache: 20.00 GiB (21474836480 bytes) = 9102 blocks x 2.25 MiB = 21474312192 bytes, 524288 bytes left over"
    )


def test_pinned_larger_than_the_total_exits_1_naming_both(capsys):
    code, _, err = plan(capsys, "--pinned", "90GiB", "--total", "80GiB", *QWEN3_8B)
    assert code == 1 and "--pinned 90.00 GiB (96636764160 bytes) is larger than --total 80.00 GiB" in err


def test_pinned_plan_with_weights_larger_than_the_total_exits_1(capsys):
    code, out, _ = plan(capsys, "--pinned", "1GiB", "--total", "24GiB", "--weights", "30GiB", "--json", *QWEN3_8B)
    data = json.loads(out)
    assert code == 1 and "weights, 30.00 GiB (32212254720 bytes), are larger than --total" in data["error"]
    assert data["breakdown"]["weights"] == 30 * GiB and data["breakdown"]["total"] == 24 * GiB


def test_pinned_plan_that_does_not_fit_with_the_weights_exits_1_with_the_sum(capsys):
    code, _, err = plan(capsys, "--pinned", "20GiB", "--total", "24GiB", "--weights", "16GiB", *QWEN3_8B)
    assert code == 1 and "pinned 20.00 GiB + weights 16.00 GiB = 36.00 GiB (38654705664 bytes)" in err


def test_pinned_plan_that_fits_the_total_is_planned(capsys):
    code, out, _ = plan(capsys, "--pinned", "20GiB", "--total", "80GiB", "--weights", "16GiB", "--json", *QWEN3_8B)
    assert code == 0 and json.loads(out)["kv_cache_bytes"] == 20 * GiB
