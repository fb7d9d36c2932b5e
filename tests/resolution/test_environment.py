"""Every environment variable devmem reads is parsed into a checked range (devmem._text): a value outside it is
one DevmemError line naming the variable, the value and what is allowed, or the default with one log line."""

from __future__ import annotations

import logging

import pytest

import devmem
from devmem._text import env_choice, env_seconds, env_text, parse_decimal
from devmem.command.main import main
from devmem.resolution.discovery import MAX_DETECT_TIMEOUT, detect_timeout
from devmem.testing import Scenario
from devmem.types import DevmemError, GiB
from devmem_nvidia.limits import env_limits
from devmem_nvidia.testing import (
    H200_RUNTIME_TOTAL,
    ScriptedMpsControl,
    ScriptedNvidiaGpu,
    h200_scenario,
    mps_scenario,
    scripted_platform,
)

REFUSED_SECONDS = ["1e11", "1e308", "1e309", "nan", "inf", "-1", "0", "0.0", "1e-400", "１０", "1_0", "0x10", "3601"]


@pytest.mark.parametrize("value", REFUSED_SECONDS)
def test_detect_timeout_outside_its_range_is_one_error_naming_the_range(monkeypatch, value):
    monkeypatch.setenv("DEVMEM_DETECT_TIMEOUT", value)
    with pytest.raises(devmem.PluginError, match=f"DEVMEM_DETECT_TIMEOUT='{value}'.* up to 3600") as caught:
        devmem.current_platform()
    assert "\n" not in str(caught.value)


@pytest.mark.parametrize(("value", "seconds"), [("0.5", 0.5), ("3600", 3600.0), ("+2", 2.0), (" 1e1 ", 10.0)])
def test_detect_timeout_in_its_range_is_taken(monkeypatch, value, seconds):
    monkeypatch.setenv("DEVMEM_DETECT_TIMEOUT", value)
    assert detect_timeout() == seconds


def test_detect_timeout_unset_or_empty_is_the_default(monkeypatch):
    monkeypatch.setenv("DEVMEM_DETECT_TIMEOUT", " ")
    assert detect_timeout() == 10.0


def test_cli_reports_a_detect_timeout_too_large_in_one_line(monkeypatch, capsys):
    monkeypatch.setenv("DEVMEM_DETECT_TIMEOUT", "1e308")
    assert main(["plugins"]) == 1
    err = capsys.readouterr().err
    assert err.startswith("devmem: error: DEVMEM_DETECT_TIMEOUT='1e308'") and err.count("\n") == 1


def test_forced_platform_name_longer_than_any_name_is_one_short_error(monkeypatch):
    monkeypatch.setenv("DEVMEM_PLATFORM", "x" * 100_000)
    with pytest.raises(devmem.PluginError, match="DEVMEM_PLATFORM=.* holds more than 4096 characters") as caught:
        devmem.current_platform()
    assert len(str(caught.value)) < 300


def test_text_variable_holding_a_nul_is_an_error_naming_it():
    with pytest.raises(DevmemError, match="CUDA_MPS_PIPE_DIRECTORY='/tmp/a\\\\x00b' holds a NUL character"):
        env_text("CUDA_MPS_PIPE_DIRECTORY", {"CUDA_MPS_PIPE_DIRECTORY": "/tmp/a\0b"})


def test_seconds_error_is_of_the_class_the_caller_names():
    with pytest.raises(devmem.PluginError):
        env_seconds("T", default=1, high=MAX_DETECT_TIMEOUT, environ={"T": "nan"}, error=devmem.PluginError)


@pytest.mark.parametrize("text", ["nan", "inf", "-1", "1e400", "１", "1_0", "1" * 65, "", " ", "1.2.3", "e5"])
def test_parse_decimal_refuses_what_is_no_finite_ascii_decimal(text):
    assert parse_decimal(text) is None


# ---- variables of the device runtimes ---------------------------------------------------------------------------
def test_unknown_cuda_device_order_is_fastest_first_with_one_log_line(caplog):
    caplog.set_level(logging.WARNING, logger="devmem")
    choices = ("FASTEST_FIRST", "PCI_BUS_ID")
    assert env_choice("CUDA_DEVICE_ORDER", choices, "FASTEST_FIRST", {"CUDA_DEVICE_ORDER": "x"}) == "FASTEST_FIRST"
    assert [r.getMessage() for r in caplog.records] == [
        "devmem: CUDA_DEVICE_ORDER='x' is not one of FASTEST_FIRST, PCI_BUS_ID; taken as FASTEST_FIRST"
    ]


def test_platform_with_an_unknown_cuda_device_order_says_so(caplog):
    caplog.set_level(logging.WARNING, logger="devmem")
    sc = Scenario(
        devices=[ScriptedNvidiaGpu(), ScriptedNvidiaGpu(pci_bus_id="0000:1a:00.0", uuid="GPU-b2")],
        environ={"CUDA_DEVICE_ORDER": "BUS_ORDER"},
    )
    assert scripted_platform(sc).device_count() == 2
    assert any("CUDA_DEVICE_ORDER='BUS_ORDER' is not one of" in r.getMessage() for r in caplog.records)


@pytest.mark.parametrize(
    "environ",
    [
        {"CUDA_MPS_PINNED_DEVICE_MEM_LIMIT": "0=9999999999999999999T"},
        {"CUDA_MPS_PINNED_DEVICE_MEM_LIMIT": "16777216T"},
        {"CUDA_DEVICE_MEMORY_LIMIT": "9999999999999999999G"},
        {"CUDA_DEVICE_MEMORY_LIMIT_0": "18446744073709551616"},
    ],
)
def test_limit_variable_of_2_64_bytes_or_more_is_an_error_naming_it(environ):
    (name,) = environ
    with pytest.raises(DevmemError, match=f"{name}: .* must be below 2\\*\\*64 bytes"):
        env_limits(environ, 0)


def test_limit_variable_just_below_2_64_bytes_is_taken():
    (limit,) = env_limits({"CUDA_DEVICE_MEMORY_LIMIT": "16777215T"}, 0)
    assert limit.limit == 16777215 << 40


def test_mps_pipe_directory_that_is_no_path_asks_no_daemon_with_one_log_line(caplog):
    caplog.set_level(logging.WARNING, logger="devmem")
    control = ScriptedMpsControl({0: "8G"})
    sc = mps_scenario(environ={"CUDA_MPS_PIPE_DIRECTORY": "/tmp/nvidia-mps\0"})
    assert scripted_platform(sc, mps_control=control).device_memory_info(0).total == H200_RUNTIME_TOTAL
    assert control.calls == 0
    assert any("CUDA_MPS_PIPE_DIRECTORY=" in r.getMessage() for r in caplog.records)


def test_mps_pipe_directory_from_the_environment_is_used():
    sc = h200_scenario(context=True, environ={"CUDA_MPS_PIPE_DIRECTORY": " /run/mps "})
    sc.files["/run/mps/control"] = ""
    assert scripted_platform(sc, mps_control=ScriptedMpsControl({0: "4G"})).device_memory_info(0).total == 4 * GiB
