"""The ``devmem`` command, run as a user runs it: in a subprocess."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest


def devmem(*args: str, env_platform: str | None = "cpu", **extra: str) -> subprocess.CompletedProcess:
    import os

    env = dict(os.environ)
    env.pop("DEVMEM_PLATFORM", None)
    if env_platform:
        env["DEVMEM_PLATFORM"] = env_platform
    env.update(extra)
    return subprocess.run([sys.executable, "-m", "devmem", *args], capture_output=True, text=True, env=env, timeout=60)


def test_bare_command_prints_the_device_table():
    result = devmem()
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith("platform: cpu (forced by DEVMEM_PLATFORM")
    assert "device 0: host memory" in result.stdout and "free / total" in result.stdout


def test_info_json_gives_exact_bytes():
    result = devmem("info", "--json")
    assert result.returncode == 0, result.stderr
    data = json.loads(result.stdout)
    device = data["devices"][0]
    assert data["platform"] == "cpu" and data["device_count"] == 1
    assert isinstance(device["free"], int) and 0 < device["free"] <= device["total"]
    assert isinstance(device["process"], int) and device["process"] > 0


def test_plugins_json_lists_every_candidate_with_its_status():
    result = devmem("plugins", "--json", env_platform=None)
    assert result.returncode == 0, result.stderr
    cands = {c["name"]: c for c in json.loads(result.stdout)}
    assert cands["cpu"]["detected"] is True and cands["cpu"]["distribution"] == "devmem-kv"
    assert sum(c["chosen"] for c in cands.values()) == 1
    assert {"priority", "version", "reason", "plugin"} <= set(cands["cpu"])


def test_bad_flag_exits_with_usage_error():
    result = devmem("--no-such-flag")
    assert result.returncode == 2 and "unrecognized arguments" in result.stderr


def test_devmem_error_exits_1_with_one_line_and_no_traceback():
    result = devmem("info", env_platform="nope")
    assert result.returncode == 1
    errors = [line for line in result.stderr.splitlines() if line.startswith("devmem: error:")]
    assert len(errors) == 1 and errors[0].startswith("devmem: error: DEVMEM_PLATFORM='nope'")
    assert "Traceback" not in result.stderr


def test_bad_device_index_is_a_devmem_error():
    result = devmem("info", "--device", "7")
    assert result.returncode == 1 and "valid indices: 0..0" in result.stderr


@pytest.mark.parametrize(
    "argv",
    [["info", "--device", "7"], ["doctor", "--device", "7"], ["top", "--device", "7", "-n", "1"]],
    ids=["info", "doctor", "top"],
)
def test_an_error_with_json_is_also_a_json_document_on_stdout(argv):
    result = devmem(*argv, "--json")
    assert result.returncode == 1 and "valid indices: 0..0" in result.stderr
    assert json.loads(result.stdout) == {
        "kind": "error",
        "error": result.stderr.removeprefix("devmem: error: ").strip(),
    }


def test_a_platform_error_with_json_is_a_json_document_on_stdout():
    result = devmem("info", "--json", env_platform="nope")
    assert result.returncode == 1 and json.loads(result.stdout)["kind"] == "error"


def test_a_ledger_directory_name_too_long_is_one_warning_not_a_traceback():
    result = devmem("info", DEVMEM_LEDGER_DIR="/" + "x" * 300)
    assert result.returncode == 0 and "device 0: host memory" in result.stdout
    [line] = result.stderr.splitlines()
    assert line.startswith("devmem: cannot open the reservation ledger directory '/xxx")
    assert "File name too long" in line
    assert len(line) < 300


def test_a_ledger_directory_variable_past_its_bound_is_one_warning_naming_it():
    result = devmem("info", DEVMEM_LEDGER_DIR="/" + "x" * 5000)
    assert result.returncode == 0 and "device 0: host memory" in result.stdout
    [line] = result.stderr.splitlines()
    assert line.startswith("devmem: DEVMEM_LEDGER_DIR='/xxx") and "holds more than 4096 characters" in line
    assert len(line) < 300


def test_a_long_unknown_plugin_name_is_warned_about_without_repeating_it_whole():
    result = devmem("plugins", env_platform=None, DEVMEM_LOAD_PLUGINS="\u00e9" * 3000)
    assert result.returncode == 0 and "neither a plugin nor a platform" in result.stderr
    assert len(result.stderr) < 600 and "(3002 characters)" in result.stderr
