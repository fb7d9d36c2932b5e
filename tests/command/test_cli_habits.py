"""nvidia-smi's habits in ``devmem``: ``-i``/``--id`` pick devices (one, or a comma list), ``-l``/``--loop`` is
the refresh interval. The node is eight scripted H200s (devmem_nvidia.testing), each with its own load."""

from __future__ import annotations

import json

import pytest

from devmem.command.doctor import cmd_doctor
from devmem.command.info import cmd_info
from devmem.command.main import _with_command, build_parser
from devmem.testing import Scenario
from devmem.types import GiB, MiB
from devmem_nvidia.testing import H200_RESERVED, H200_TOTAL, ScriptedNvidiaGpu, scripted_platform


@pytest.fixture
def node():
    """Eight scripted H200s; device i has (i + 1) GiB in use by this process."""
    gpus = [
        ScriptedNvidiaGpu(uuid=f"GPU-00000000-0000-0000-0000-00000000000{i}", pci_bus_id=f"00000000:{16 + i:02x}:00.0")
        for i in range(8)
    ]
    sc = Scenario(devices=gpus)
    for device in range(8):
        sc.allocate((device + 1) * GiB, device)
    return scripted_platform(sc)


def parse(*argv: str):
    parser = build_parser()
    return parser.parse_args(_with_command(list(argv)))


def indices_shown(capsys, node, *argv: str) -> list[int]:
    assert cmd_info(parse(*argv, "--json"), node) == 0
    return [d["index"] for d in json.loads(capsys.readouterr().out)["devices"]]


@pytest.mark.parametrize("flag", ["-i", "--id", "--device"])
def test_devmem_i_1_shows_device_1_only(capsys, node, flag):
    assert indices_shown(capsys, node, flag, "1") == [1]


def test_id_with_an_equals_sign_as_nvidia_smi_writes_it(capsys, node):
    assert indices_shown(capsys, node, "--id=1") == [1]


def test_a_comma_list_shows_those_devices_in_its_order(capsys, node):
    assert indices_shown(capsys, node, "-i", "5,2") == [5, 2]


def test_a_device_named_twice_is_shown_once(capsys, node):
    assert indices_shown(capsys, node, "-i", "3,3") == [3]


def test_top_i_1_watches_device_1_only(capsys, node):
    args = parse("top", "-i", "1", "--json", "-n", "1")
    assert cmd_info(args, node) == 0
    assert [d["index"] for d in json.loads(capsys.readouterr().out)["devices"]] == [1]


def test_doctor_i_1_looks_at_device_1_only(capsys, node):
    cmd_doctor(parse("doctor", "-i", "1", "--json"), node)
    findings = json.loads(capsys.readouterr().out)["findings"]
    assert {f["device"] for f in findings if f["device"] is not None} == {1}


@pytest.mark.parametrize("argv", [["-i", "0,2"], ["--id", "1", "--json"], ["-l", "1", "-i", "0"]])
def test_devmem_alone_with_device_flags_is_devmem_info(argv):
    assert _with_command(list(argv)) == ["info", *argv]


@pytest.mark.parametrize("text", ["x", "1,", ",1", "1;2", "-1", "\uff11"])
def test_a_device_list_that_is_not_one_is_a_usage_error_naming_the_flag(capsys, text):
    with pytest.raises(SystemExit) as exited:
        parse("info", "-i", text)
    err = capsys.readouterr().err
    assert exited.value.code == 2 and "argument -i/--id/--device:" in err and "separated by commas" in err, err


def test_an_index_past_the_last_device_is_an_error_naming_the_valid_ones(capsys, node):
    from devmem.types import DevmemError

    with pytest.raises(DevmemError, match=r"valid indices: 0\.\.7"):
        cmd_info(parse("-i", "1,8"), node)


def test_i_is_no_longer_an_interval(capsys):
    args = parse("top", "-i", "1")
    assert args.device == [1] and args.watch == 2.0


@pytest.mark.parametrize("flag", ["-l", "--loop"])
def test_the_loop_flag_of_nvidia_smi_is_in_tops_help(capsys, flag):
    with pytest.raises(SystemExit):
        parse("top", "--help")
    assert flag in capsys.readouterr().out


# --- --query-gpu --format=csv, as nvidia-smi answers it --------------------------------------------------------


def query(capsys, node, *argv: str) -> list[str]:
    assert cmd_info(parse(*argv), node) == 0
    return capsys.readouterr().out.splitlines()


def test_query_gpu_answers_as_nvidia_smi_does(capsys, node):
    lines = query(capsys, node, "--query-gpu=index,memory.used", "--format=csv")
    assert lines[0] == "index, memory.used [MiB]" and lines[1:] == [f"{i}, {(i + 1) * 1024} MiB" for i in range(8)]


def test_query_gpu_noheader_nounits_gives_the_values_alone(capsys, node):
    lines = query(capsys, node, "--query-gpu=index,memory.used", "--format=csv,noheader,nounits", "-i", "1")
    assert lines == ["1, 2048"]


def test_query_gpu_without_format_is_csv(capsys, node):
    assert query(capsys, node, "--query-gpu=index", "-i", "0")[0] == "index"


def test_query_gpu_names_the_device_and_its_sizes_in_mib(capsys, node):
    [line] = query(capsys, node, "--query-gpu=name,count,memory.total,memory.free", "--format=csv,noheader", "-i", "7")
    total = (H200_TOTAL - H200_RESERVED) // MiB  # what the runtime can use: nvidia-smi's total less the reserve
    assert line == f"NVIDIA H200, 8, {total} MiB, {total - 8 * 1024} MiB"


def test_query_gpu_with_loop_writes_the_header_once_and_rows_each_sample(capsys, node):
    lines = query(capsys, node, "--query-gpu=index", "--format=csv", "-i", "3", "-l", "0.05", "-n", "3")
    assert lines == ["index", "3", "3", "3"]


@pytest.mark.parametrize(
    ("argv", "said"),
    [
        (["--query-gpu=index,bogus"], "'bogus' is not a field devmem answers"),
        (["--query-gpu=index", "--format=json"], "'json' is not an output format"),
        (["--query-gpu=index", "--format=noheader"], "is not an output format"),
        (["--query-gpu=index", "--json"], "--query-gpu writes CSV"),
        (["--format=csv"], "--format applies to --query-gpu"),
    ],
)
def test_a_query_devmem_cannot_answer_is_a_usage_error(capsys, node, argv, said):
    with pytest.raises(SystemExit) as exited:
        cmd_info(parse(*argv), node)
    assert exited.value.code == 2 and said in capsys.readouterr().err
