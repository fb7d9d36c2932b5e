"""Usage errors exit 2 and name the flag: zero sizes where a size must be positive, digits that are not ASCII."""

from __future__ import annotations

import pytest

from devmem.command.main import main


def usage_error(capsys, monkeypatch, *argv: str) -> str:
    monkeypatch.setenv("DEVMEM_PLATFORM", "cpu")
    with pytest.raises(SystemExit) as exit_:
        main(list(argv))
    assert exit_.value.code == 2
    return capsys.readouterr().err


@pytest.mark.parametrize("flag", ["--total", "--pinned", "--page-size", "--allocation-granularity"])
def test_a_zero_size_where_one_must_be_positive_names_the_flag(capsys, monkeypatch, flag):
    argv = {"--total": "80GiB", "--page-size": "64KiB", "--layers": "32", flag: "0"}
    err = usage_error(capsys, monkeypatch, "plan", *[x for kv in argv.items() for x in kv])
    assert f"argument {flag}: '0' is zero bytes" in err


@pytest.mark.parametrize(
    "argv,flag",
    [
        (["plan", "--total", "8GiB", "--page-size", "1KiB", "--layers", "３２"], "--layers"),
        (["plan", "--total", "8GiB", "--page-size", "1KiB", "--layers", "1" * 5000], "--layers"),
        (["info", "--device", "１"], "-i/--id/--device"),
        (["doctor", "--device", "1_0"], "-i/--id/--device"),
        (["info", "--device", "-1"], "-i/--id/--device"),
    ],
)
def test_non_ascii_or_huge_numbers_are_usage_errors_naming_the_flag(capsys, monkeypatch, argv, flag):
    assert f"argument {flag}:" in usage_error(capsys, monkeypatch, *argv)


@pytest.mark.parametrize(
    "argv,nearest",
    [(["top", "--jsn"], "--json"), (["info", "--devce", "0"], "--device"), (["doctor", "--jason"], "--json")],
)
def test_a_mistyped_flag_is_answered_with_the_commands_nearest_flag(capsys, monkeypatch, argv, nearest):
    assert f"did you mean {nearest}?" in usage_error(capsys, monkeypatch, *argv)


def test_a_flag_the_command_does_not_take_points_to_the_commands_own_help(capsys, monkeypatch):
    assert "(see `devmem top --help`)" in usage_error(capsys, monkeypatch, "top", "--jsn")


def test_a_mistyped_required_flag_is_answered_with_the_nearest_flag_beside_what_is_missing(capsys, monkeypatch):
    err = usage_error(capsys, monkeypatch, "fit", "--modle", "m.json", "--context", "4096", "--sequences", "8")
    assert "the following arguments are required: --model" in err and "did you mean --model?" in err, err


@pytest.mark.parametrize("typed,nearest", [("inf", "info"), ("tpo", "top"), ("docter", "doctor")])
def test_a_mistyped_command_is_answered_with_the_nearest_command(capsys, monkeypatch, typed, nearest):
    assert f"did you mean {nearest}?" in usage_error(capsys, monkeypatch, typed)


def test_an_unknown_flag_far_from_every_flag_gets_no_suggestion(capsys, monkeypatch):
    err = usage_error(capsys, monkeypatch, "top", "--zzzzzzzz")
    assert "unrecognized arguments: --zzzzzzzz" in err and "did you mean" not in err


def test_an_error_wraps_at_columns_80_through_a_pipe(capsys, monkeypatch):
    monkeypatch.setenv("COLUMNS", "80")
    monkeypatch.setenv("DEVMEM_PLATFORM", "no-such-platform")
    assert main(["info"]) == 1
    err = capsys.readouterr().err
    assert "names no registered platform" in " ".join(err.split())
    assert len(err.splitlines()) > 1 and all(len(line) <= 80 for line in err.splitlines()), err


@pytest.mark.parametrize("text", ["５００", "\u0665\u0660\u0660", "5_00", "500\u00a0", "nan", "inf"])
def test_loop_ms_in_anything_but_ascii_decimals_is_a_usage_error_naming_it(capsys, monkeypatch, text):
    """nvidia-smi's -lms is read as every other number is: ASCII decimals only (float() took full-width and
    Arabic-Indic digits and underscores)."""
    # one sample where a regression takes the value: the test fails instead of watching forever
    assert "argument -lms/--loop-ms:" in usage_error(capsys, monkeypatch, "top", "-n", "1", "--loop-ms", text)


@pytest.mark.parametrize(
    "argv",
    [
        ["top", "--loop-ms"],
        ["info", "--device"],
        ["plan", "--total", "8GiB", "--page-size", "1KiB", "--layers"],
        ["plan", "--layers", "32", "--page-size", "1KiB", "--total"],
        ["exporter", "--deadline"],
    ],
    ids=["loop-ms", "device", "layers", "zero-size", "exporter"],
)
def test_a_huge_refused_value_is_echoed_cut_short(capsys, monkeypatch, argv):
    err = usage_error(capsys, monkeypatch, *argv, "0" * 100_000)
    assert "(100002 characters)" in err and len(err) < 1000  # repr adds its quotes
