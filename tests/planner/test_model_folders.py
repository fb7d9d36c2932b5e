"""Hostile model folders and configs: every one is a number or one ModelConfigError naming the value, through the
one bounded reader (devmem.planner.models.read_json and the shard reader); the CLI exits 3 with one line."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
from model_configs import QWEN3_8B, TINY_LLAMA, write_model

from devmem.command.main import main
from devmem.planner.models import ModelConfigError, load_model, read_json, reading


def test_integer_of_5000_digits_under_a_sizing_key_is_refused_naming_it(tmp_path):
    text = json.dumps(QWEN3_8B).replace('"num_hidden_layers": 36', '"num_hidden_layers": ' + "9" * 5000)
    (tmp_path / "config.json").write_text(text)
    with pytest.raises(ModelConfigError, match=r"num_hidden_layers=<an integer of 5000 digits> must be"):
        load_model(tmp_path)


def test_integer_of_5000_digits_under_a_key_devmem_does_not_read_leaves_the_size(tmp_path):
    text = json.dumps({**QWEN3_8B, "bos_token_id": 0}).replace('"bos_token_id": 0', '"bos_token_id": ' + "9" * 5000)
    (tmp_path / "config.json").write_text(text)
    assert load_model(tmp_path).kv_bytes_per_token == 147_456


def test_json_nested_100000_deep_is_refused(tmp_path):
    (tmp_path / "config.json").write_text('{"model_type": "qwen3", "x": ' + "[" * 100_000 + "]" * 100_000 + "}")
    with pytest.raises(ModelConfigError, match="nests deeper than 64 levels"):
        load_model(tmp_path)


def test_safetensors_index_nested_100000_deep_is_refused(tmp_path):
    write_model(tmp_path, QWEN3_8B)
    (tmp_path / "model.safetensors.index.json").write_text('{"metadata": ' + "[" * 100_000 + "]" * 100_000 + "}")
    with pytest.raises(ModelConfigError, match="safetensors index .* nests deeper"):
        load_model(tmp_path)


def test_shard_that_is_a_dangling_symlink_is_refused_naming_its_target(tmp_path):
    write_model(tmp_path, QWEN3_8B)
    os.symlink(tmp_path / "blobs" / "gone", tmp_path / "model-00001-of-00002.safetensors")
    with pytest.raises(ModelConfigError, match=r"is a symbolic link to '.*blobs/gone', which does not exist"):
        load_model(tmp_path)


def test_directory_named_like_a_shard_is_refused(tmp_path):
    write_model(tmp_path, QWEN3_8B)
    (tmp_path / "model.safetensors").mkdir()
    with pytest.raises(ModelConfigError, match="checkpoint shard .*model.safetensors' is a directory"):
        load_model(tmp_path)


def test_device_file_is_refused_without_reading_it():
    with pytest.raises(ModelConfigError, match="'/dev/zero' is not a regular file"):
        load_model("/dev/zero")


def test_fifo_is_refused_without_blocking(tmp_path):
    os.mkfifo(tmp_path / "config.json")
    with pytest.raises(ModelConfigError, match="is not a regular file"):
        read_json(tmp_path / "config.json")


def test_non_utf8_config_is_refused_naming_the_byte(tmp_path):
    (tmp_path / "config.json").write_bytes(b'{"model_type": "\xff"}')
    with pytest.raises(ModelConfigError, match=r"is not UTF-8 text \(byte 16\)"):
        load_model(tmp_path)


def test_config_larger_than_the_bound_is_refused(tmp_path, monkeypatch):
    monkeypatch.setattr(reading, "MAX_JSON_BYTES", 100)  # the bound lives with the reader
    (tmp_path / "config.json").write_text(json.dumps(QWEN3_8B))
    with pytest.raises(ModelConfigError, match="is larger than 100 bytes"):
        load_model(tmp_path)


def test_safetensors_total_size_of_5000_digits_is_refused_naming_it(tmp_path):
    write_model(tmp_path, QWEN3_8B)
    (tmp_path / "model.safetensors.index.json").write_text('{"metadata": {"total_size": ' + "9" * 5000 + "}}")
    with pytest.raises(ModelConfigError, match=r"total_size must be a byte count > 0, got <an integer of 5000"):
        load_model(tmp_path)


def test_cli_max_position_embeddings_of_zero_names_the_key_not_a_context(tmp_path, capsys):
    folder = write_model(tmp_path / "m", {**TINY_LLAMA, "max_position_embeddings": 0})
    code = main(["plan", "--model", str(folder), "--total", "1GiB"])
    err = capsys.readouterr().err
    assert code == 3 and "max_position_embeddings=0" in err and "--context" not in err


def test_cli_dev_zero_exits_3_with_one_line():
    done = subprocess.run(
        [sys.executable, "-m", "devmem", "plan", "--model", "/dev/zero", "--total", "1GiB"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 3 and done.stdout == ""
    assert done.stderr.count("\n") == 1 and "Traceback" not in done.stderr
