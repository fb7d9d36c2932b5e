"""``devmem plan --model`` and ``devmem fit``: human output, ``--json`` with exact ints, exit codes 0/1/2/3."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from model_configs import QWEN3_8B, TINY_LLAMA, write_model
from model_configs_more import WHISPER_LARGE_V3

from devmem import GiB
from devmem.command.main import main


@pytest.fixture(autouse=True)
def wide_terminal(monkeypatch):
    """Lines checked whole: a terminal wide enough that none wraps (the 80-column test sets its own)."""
    monkeypatch.setenv("COLUMNS", "200")


@pytest.fixture
def qwen3(tmp_path):
    return str(write_model(tmp_path / "Qwen3-8B", QWEN3_8B))


def run(capsys, *args: str) -> tuple[int, str, str]:
    code = main(list(args))
    out, err = capsys.readouterr()
    return code, out, err


def usage_error(capsys, *args: str) -> str:
    with pytest.raises(SystemExit) as info:
        main(list(args))
    assert info.value.code == 2
    return capsys.readouterr().err


# --- devmem plan --model ---------------------------------------------------------------------------------------


def test_plan_model_prints_the_model_the_byte_plan_and_the_tokens(capsys, qwen3):
    code, out, _ = run(capsys, "plan", "--model", qwen3, "--pinned", "20GiB", "--context", "32768", "--sequences", "4")
    lines = out.splitlines()
    assert code == 0
    assert "KV per token: 36 attention layers x 4096 B = 147456 B" in lines
    assert (
        "KV cache: 20.00 GiB (21474836480 bytes) = 9102 blocks x 2.25 MiB = 21474312192 bytes, 524288 bytes left over"
    ) in lines
    assert (
        "tokens: 21474836480 B // block 2359296 B (16 tokens x 147456 B per token) = 9102 blocks = 145632 tokens"
        in lines
    )
    assert "longest context for 4 sequence(s): (21474836480 B // 4) in whole blocks = 36400 tokens" in lines


def test_plan_model_json_gives_exact_ints(capsys, qwen3):
    code, out, _ = run(
        capsys, "plan", "--model", qwen3, "--pinned", "20GiB", "--context", "32768", "--sequences", "4", "--json"
    )
    data = json.loads(out)
    assert code == 0 and data["model"]["kv_bytes_per_token"] == 147_456
    assert (data["plan"]["num_blocks"], data["capacity"]["tokens"]) == (9102, 145_632)
    assert (data["capacity"]["sequences_at_context"], data["capacity"]["longest_context"]) == (4, 36_400)


def test_plan_model_takes_the_weights_from_the_checkpoint(capsys, tmp_path):
    folder = write_model(tmp_path / "q", QWEN3_8B, total_size=16_000_000_000)
    code, out, _ = run(capsys, "plan", "--model", str(folder / "config.json"), "--total", "80GiB", "--json")
    assert code == 0 and json.loads(out)["plan"]["breakdown"]["weights"] == 16_000_000_000


def test_plan_model_weights_given_on_the_command_line_win(capsys, qwen3):
    code, out, _ = run(capsys, "plan", "--model", qwen3, "--total", "80GiB", "--weights", "1GiB", "--json")
    assert code == 0 and json.loads(out)["plan"]["breakdown"]["weights"] == GiB


def test_plan_model_without_questions_answers_at_the_models_max_context(capsys, qwen3):
    code, out, _ = run(capsys, "plan", "--model", qwen3, "--pinned", "20GiB", "--json")
    answer = json.loads(out)["capacity"]
    assert code == 0 and (answer["context"], answer["sequences"]) == (40_960, 1)


def test_plan_model_splits_over_ranks_at_fp8(capsys, qwen3):
    """--tp 2 --kv-dtype fp8: 36 layers x 2 x 4 KV heads x 128 x 1 B = 36,864 B per token."""
    code, out, _ = run(capsys, "plan", "--model", qwen3, "--pinned", "1GiB", "--tp", "2", "--kv-dtype", "fp8", "--json")
    assert code == 0 and json.loads(out)["model"]["kv_bytes_per_token"] == 36_864


def test_plan_model_block_size_sets_the_block(capsys, qwen3):
    code, out, _ = run(capsys, "plan", "--model", qwen3, "--pinned", "1GiB", "--block-size", "32", "--json")
    assert code == 0 and json.loads(out)["plan"]["block_bytes"] == 32 * 147_456


def test_plan_model_on_a_device_too_small_still_shows_what_a_token_costs_and_that_none_fits(capsys, qwen3):
    code, out, err = run(capsys, "plan", "--model", qwen3, "--total", "16GiB", "--context", "32768", "--sequences", "8")
    lines = out.splitlines()
    assert code == 1 and err.count("devmem: error: not enough memory for the KV cache") == 1
    assert "KV per token: 36 attention layers x 4096 B = 147456 B" in lines
    assert "tokens: 0 B // block 2359296 B (16 tokens x 147456 B per token) = 0 blocks = 0 tokens" in lines
    assert "longest context for 8 sequence(s): (0 B // 8) in whole blocks = 0 tokens" in lines
    assert "8 sequence(s) of 32768 tokens: do not fit (0 do); `devmem fit` says what they need" in lines


def test_plan_model_not_enough_memory_exits_1_with_the_model_in_json(capsys, qwen3):
    code, out, _ = run(capsys, "plan", "--model", qwen3, "--total", "8GiB", "--json")
    data = json.loads(out)
    assert code == 1 and data["model"]["model_type"] == "qwen3" and data["kind"] == "does_not_fit"
    assert data["error"].startswith("not enough memory for the KV cache")


def test_plan_model_unknown_architecture_exits_3_naming_the_missing_keys(capsys, tmp_path):
    folder = write_model(tmp_path / "odd", {"model_type": "mystery", "torch_dtype": "bfloat16", "n_layer": 12})
    code, out, err = run(capsys, "plan", "--model", str(folder), "--pinned", "1GiB")
    assert code == 3 and out == ""
    assert err.startswith(
        "devmem: error: config of model_type 'mystery' lacks num_hidden_layers, num_attention_heads, hidden_size"
    )


def test_plan_model_encoder_decoder_exits_3_with_one_line(capsys, tmp_path, monkeypatch):
    monkeypatch.delenv("COLUMNS")  # a log: the error whole on its line
    folder = write_model(tmp_path / "whisper", WHISPER_LARGE_V3)
    code, out, err = run(capsys, "plan", "--model", str(folder), "--pinned", "1GiB")
    assert code == 3 and out == "" and err.count("\n") == 1
    assert err.startswith("devmem: error: config of model_type 'whisper' is an encoder-decoder model")


@pytest.mark.parametrize(
    "args, complaint",
    [
        (["--model", "M", "--page-size", "64KiB"], "--page-size and --layers come from the model's config"),
        (["--context", "4096", "--page-size", "64KiB", "--layers", "36"], "--context describes a model"),
        (["--model", "M", "--kv-dtype", "int4"], "invalid choice: 'int4'"),
        (["--model", "M", "--tp", "0"], "'0' is not a tensor-parallel size"),
        (["--model", "M", "--block-size", "x"], "'x' is not a block size"),
        (["--model", "M", "--sequences", "-1"], "'-1' is not a sequence count"),
    ],
)
def test_bad_plan_model_flags_are_usage_errors(capsys, qwen3, args, complaint):
    args = [qwen3 if a == "M" else a for a in args]
    assert complaint in usage_error(capsys, "plan", "--pinned", "1GiB", *args)


# --- devmem fit ------------------------------------------------------------------------------------------------


@pytest.fixture
def tiny(tmp_path, monkeypatch):
    monkeypatch.setenv("DEVMEM_PLATFORM", "cpu")
    return str(write_model(tmp_path / "tiny-llama", TINY_LLAMA))


def test_fit_that_fits_exits_0(capsys, tiny):
    code, out, _ = run(capsys, "fit", "--model", tiny, "--context", "4096", "--sequences", "4", "--utilization", "0.01")
    assert code == 0 and out.splitlines()[0].startswith("device 0 (cpu): total ")
    assert any(line.startswith("fits: yes: 4 sequence(s) of 4096 tokens") for line in out.splitlines())


def test_fit_that_does_not_fit_exits_1_with_the_reason(capsys, tiny):
    """4096 tokens x 256 B (the float32 config served in bf16) x 10^7 sequences = 10 TB: more than any host."""
    code, out, _ = run(capsys, "fit", "--model", tiny, "--context", "4096", "--sequences", "10000000", "--json")
    data = json.loads(out)
    assert code == 1 and data["fit"]["fits"] is False and data["fit"]["needed_kv_bytes"] == 10_485_760_000_000
    assert data["fit"]["reasons"][0].startswith("the KV budget is ")
    assert data["kind"] == "does_not_fit" and data["error"].startswith("does not fit: the KV budget is ")


def test_fit_refused_model_exits_3_with_a_json_kind(capsys, tmp_path, monkeypatch):
    monkeypatch.setenv("DEVMEM_PLATFORM", "cpu")
    folder = write_model(tmp_path / "odd", {"model_type": "mystery", "n_layer": 12})
    code, out, err = run(capsys, "fit", "--model", str(folder), "--context", "64", "--sequences", "1", "--json")
    data = json.loads(out)
    assert code == 3 and err == "" and data["kind"] == "model_refused"
    assert data["missing"] == ["num_hidden_layers", "num_attention_heads", "hidden_size"]


def test_fit_that_fits_prints_no_error_kind(capsys, tiny):
    code, out, _ = run(
        capsys, "fit", "--model", tiny, "--context", "64", "--sequences", "1", "--utilization", "0.01", "--json"
    )
    assert code == 0 and "kind" not in json.loads(out)


def test_fit_json_gives_the_platform_device_and_exact_ints(capsys, tiny):
    code, out, _ = run(
        capsys, "fit", "--model", tiny, "--context", "100", "--sequences", "3", "--utilization", "0.01", "--json"
    )
    data = json.loads(out)
    assert code == 0 and (data["platform"], data["device"]) == ("cpu", 0)
    assert data["fit"]["sequence"] == {
        "context": 100,
        "block_size": 16,
        "full_blocks": 7,
        "sliding_blocks": 0,
        "chunked_blocks": 0,
        "kv_bytes": 7 * 16 * 256,
        "state_bytes": 0,
        "total_bytes": 7 * 16 * 256,
    }
    assert data["fit"]["needed_kv_bytes"] == 3 * 7 * 16 * 256


@pytest.mark.parametrize(
    "args, complaint",
    [
        (["--sequences", "1"], "the following arguments are required: --context"),
        (["--context", "1", "--sequences", "1", "--utilization", "1.5"], "'1.5' is not a utilization"),
        (["--context", "0", "--sequences", "1"], "'0' is not a context length"),
    ],
)
def test_bad_fit_flags_are_usage_errors(capsys, tiny, args, complaint):
    assert complaint in usage_error(capsys, "fit", "--model", tiny, *args)


def test_fit_runs_as_a_command(tiny):
    env = {**os.environ, "DEVMEM_PLATFORM": "cpu"}
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "devmem",
            "fit",
            "--model",
            tiny,
            "--context",
            "64",
            "--sequences",
            "1",
            "--utilization",
            "0.01",
            "--json",
        ],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
    )
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout)["fit"]["fits"] is True


def test_plan_model_pinned_larger_than_the_total_with_the_models_weights_exits_1(capsys, qwen3):
    code, _, err = run(capsys, "plan", "--model", qwen3, "--pinned", "20GiB", "--total", "20GiB")
    assert code == 1 and "more than --total 20.00 GiB" in err and "weights" in err


def test_plan_model_output_fits_80_columns_without_cutting_a_size(capsys, qwen3, monkeypatch):
    monkeypatch.setenv("COLUMNS", "80")
    code, out, _ = run(capsys, "plan", "--model", qwen3, "--pinned", "20GiB", "--context", "32768", "--sequences", "8")
    lines = out.splitlines()
    assert code == 0 and all(len(line) <= 80 for line in lines)
    assert not any(
        re.search(r"\d$", line) and re.match(r"\s*(B|KiB|MiB|GiB|TiB|bytes)\b", nxt)
        for line, nxt in zip(lines, lines[1:], strict=False)
    )
    assert "= 9102 blocks x 2.25 MiB = 21474312192 bytes, 524288 bytes left over" in " ".join(out.split())


# --- the README's quick start: the example configs -------------------------------------------------------------

README_COMMANDS = re.findall(
    r"^devmem ((?:plan|fit) --model examples/configs/[^|\n]*?)(?:\s*\|\|.*)?$",
    (Path(__file__).resolve().parents[2] / "README.md").read_text(encoding="utf-8"),
    re.M,
)


def test_readme_quick_start_runs_plan_and_fit_on_the_example_configs():
    assert {c.split()[0] for c in README_COMMANDS} == {"plan", "fit"} and len(README_COMMANDS) >= 4


@pytest.mark.parametrize("command", README_COMMANDS)
def test_readme_example_config_command_answers(capsys, monkeypatch, command):
    monkeypatch.setenv("DEVMEM_PLATFORM", "cpu")
    monkeypatch.chdir(Path(__file__).resolve().parents[2])
    code, out, err = run(capsys, *command.split())
    assert code in (0, 1) and "model:" in out and "error" not in err
