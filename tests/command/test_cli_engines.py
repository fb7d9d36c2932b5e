"""A serving engine's command line as a screen names it where the whole line does not fit: engine and model."""

from __future__ import annotations

import pytest

from devmem.command.engines import cut_command, engine_command

PY = "/usr/bin/python3"


@pytest.mark.parametrize(
    ("command", "shown"),
    [
        (f"{PY} /usr/local/bin/vllm serve Qwen/Qwen3-8B --gpu-memory-utilization 0.3", "vllm Qwen/Qwen3-8B"),
        ("vllm serve meta-llama/Llama-3.1-8B-Instruct --port 8000", "vllm meta-llama/Llama-3.1-8B-Instruct :8000"),
        (f"{PY} -m vllm.entrypoints.openai.api_server --model Qwen/Qwen3-8B --port=8001", "vllm Qwen/Qwen3-8B :8001"),
        (f"{PY} -m vllm.entrypoints.cli.main serve Qwen/Qwen3-8B", "vllm Qwen/Qwen3-8B"),
        (f"{PY} -u -X faulthandler -m sglang.launch_server --model-path Qwen/Qwen3-8B", "sglang Qwen/Qwen3-8B"),
        ("text-generation-launcher --model-id bigscience/bloom-560m", "tgi bigscience/bloom-560m"),
        ("trtllm-serve nvidia/Llama-3.1-8B-Instruct-FP8 --tp_size 1", "trtllm-serve nvidia/Llama-3.1-8B-Instruct-FP8"),
        ("lmdeploy serve api_server internlm/internlm2_5-7b-chat", "lmdeploy internlm/internlm2_5-7b-chat"),
    ],
    ids=["vllm-script", "vllm-serve", "vllm-api-server", "vllm-module-serve", "sglang", "tgi", "trtllm", "lmdeploy"],
)
def test_an_engines_command_is_its_engine_and_model(command, shown):
    assert engine_command(command) == shown


def test_a_local_model_path_is_named_by_its_last_part():
    assert engine_command("vllm serve /mnt/models/meta-llama/Llama-3.1-8B/ --port 9000") == "vllm Llama-3.1-8B :9000"


@pytest.mark.parametrize(
    "command",
    [f"{PY} -c import vllm", "VLLM::Worker_TP0", "vllm --version", f"{PY} train.py --model Qwen/Qwen3-8B", "bash"],
)
def test_a_command_that_names_no_engine_and_model_is_not_one(command):
    assert engine_command(command) is None


def test_a_command_that_fits_its_column_is_shown_whole():
    command = f"{PY} -m vllm.entrypoints.openai.api_server --model Qwen/Qwen3-8B"
    assert cut_command(command, len(command)) == command


def test_an_engine_command_too_long_for_its_column_is_its_engine_and_model():
    command = f"{PY} -m sglang.launch_server --model-path Qwen/Qwen3-8B --mem-fraction-static 0.3 --port 30000"
    assert cut_command(command, 40) == "sglang Qwen/Qwen3-8B :30000"


def test_another_command_too_long_is_cut_after_its_program_without_the_path():
    assert cut_command(f"{PY} serve.py --workers 4 --log-level debug", 24) == "python3 serve.py --wo..."


def test_an_engine_and_model_too_long_for_the_column_is_cut_too():
    shown = cut_command("vllm serve mistralai/Mistral-Small-3.1-24B-Instruct-2503 --port 8001", 30)
    assert shown == "vllm mistralai/Mistral-Smal..." and len(shown) == 30
