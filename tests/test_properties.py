"""Property-based checks over the public functions and the CLI: whatever the input, only the documented exception
types come out, figures come out as Python ints, and the CLI never shows a traceback.

Example counts come from the hypothesis profile (tests/conftest.py: "ci" by default, "thorough" to hunt).
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import re
from unittest import mock

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from model_configs import TINY_LLAMA, write_model

from devmem._text import MAX_DIGITS, env_choice, env_seconds, env_text, parse_decimal, parse_int, require_int
from devmem.command.main import main
from devmem.cpu import CpuPlatform
from devmem.engine.profiling import MemorySnapshot, check_startup_memory
from devmem.planner.sizing import (
    SizingError,
    blocks_for_bytes,
    growable_kv_cache_bytes,
    plan_kv_cache,
    profiled_kv_cache_bytes,
    requested_memory,
)
from devmem.sdk import (
    cgroup_memory,
    checked_memory,
    drm,
    parse_meminfo,
    process_bytes,
    process_id,
    process_list,
    vendor_text,
)
from devmem.sdk.visible import index, pick
from devmem.testing import Scenario
from devmem.types import DevmemError, GiB, NotEnoughMemoryError, gib
from devmem.units import format_size, parse_size
from devmem_nvidia.limits import env_limits

#: CLI examples build a parser and resolve a platform each: fewer of them.
CLI = settings(
    max_examples=max(10, settings.default.max_examples // 2),
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)

HOSTILE_TEXT = [
    "１",
    "１６",
    "٣",
    "²",
    "1_0",
    "9" * 5000,
    "-1",
    "0",
    "",
    " ",
    "nan",
    "inf",
    "-inf",
    "1e3",
    "0x10",
    "1.5GiB",
    "16GiB",
    "0.9",
    "1",
    "64KiB",
    "-5GiB",
    "99999999999999999999999TiB",
    "\x00",
    "\n",
    "GPU-",
    "MIG-",
    ",",
    "0,0",
    "1.0",
    "True",
    "--json",
]
text = st.one_of(
    st.sampled_from(HOSTILE_TEXT),
    st.text(max_size=24),
    st.text(alphabet="0123456789-+_. ,xkKmMgGiIbB\t\n１²", max_size=24),
)
whole = st.one_of(
    st.integers(0, 2**40),
    st.integers(0, 2**64),
    st.integers(-(2**70), 2**200),
    st.integers(0, 2**40).map(np.int64),
    st.integers(0, 2**31 - 1).map(np.int32),
)
anything = st.one_of(
    whole, whole, whole, st.floats(allow_nan=True), st.booleans(), st.none(), text, st.fractions(), st.just(10**5000)
)


def _plain_ints(value: object) -> bool:
    """Every number in a JSON-able structure is a Python int (a float only where it is a ratio)."""
    if isinstance(value, dict):
        return all(_plain_ints(v) for v in value.values())
    if isinstance(value, (list, tuple)):
        return all(_plain_ints(v) for v in value)
    return value is None or type(value) in (int, float, str, bool)


# ---- the integer parser, sizes ----------------------------------------------------------------------------------
@given(text)
def test_parse_int_gives_none_or_a_bounded_non_negative_int(raw):
    value = parse_int(raw)
    assert value is None or (type(value) is int and 0 <= value < 10**MAX_DIGITS)
    if value is not None:
        assert raw.strip().isascii()


@given(st.integers(0, 10**MAX_DIGITS - 1))
def test_parse_int_reads_back_every_bounded_int(n):
    assert parse_int(str(n)) == n and require_int(f" {n}\n", "x") == n


@given(text)
def test_require_int_raises_only_devmem_error(raw):
    try:
        assert type(require_int(raw, "VAR", signed=True)) is int
    except DevmemError as exc:
        assert "VAR" in str(exc) and len(str(exc)) < 300


@given(text)
def test_parse_size_gives_an_int_or_value_error(raw):
    try:
        value = parse_size(raw)
    except ValueError as exc:
        assert len(str(exc)) < 400
        return
    assert type(value) is int and value >= 0


@given(st.integers(0, 2**60), st.sampled_from(["", "B", "KiB", "MiB", "GiB", "kb", "MB"]))
def test_parse_size_reads_back_a_count_with_a_unit(n, unit):
    scale = {"": 1, "B": 1, "KiB": 1024, "MiB": 2**20, "GiB": 2**30, "kb": 1000, "MB": 10**6}[unit]
    if n * scale < 2**64:
        assert parse_size(f"{n}{unit}") == n * scale
    else:
        with pytest.raises(ValueError, match="larger than any memory"):
            parse_size(f"{n}{unit}")


@given(st.one_of(st.integers(-(10**6000), 10**6000), st.integers(-(2**70), 2**70), st.floats()))
def test_format_size_and_gib_always_give_text(nbytes):
    for rendered in (format_size(nbytes), gib(nbytes)):
        assert isinstance(rendered, str) and len(rendered) < 40
    if isinstance(nbytes, int) and nbytes < 0:
        assert format_size(nbytes).startswith("-")


# ---- environment variables and vendor readings ----------------------------------------------------------------
@given(text)
def test_env_seconds_gives_a_number_in_its_range_or_one_error_line(raw):
    try:
        seconds = env_seconds("DEVMEM_X", default=10.0, high=3600.0, environ={"DEVMEM_X": raw})
    except DevmemError as exc:
        assert str(exc).startswith("DEVMEM_X=") and "\n" not in str(exc) and len(str(exc)) < 300
        return
    assert type(seconds) is float and (0 < seconds <= 3600 or (seconds == 10.0 and not raw.strip()))


@given(st.floats(min_value=1e-6, max_value=3600.0))
def test_env_seconds_reads_back_every_number_in_its_range(seconds):
    assert env_seconds("DEVMEM_X", default=1.0, high=3600.0, environ={"DEVMEM_X": repr(seconds)}) == seconds


@given(text)
def test_parse_decimal_gives_none_or_a_finite_non_negative_float(raw):
    value = parse_decimal(raw)
    assert value is None or (type(value) is float and 0 <= value < float("inf"))


@given(st.one_of(text, st.text(max_size=5000)))
def test_env_text_gives_bounded_text_or_one_error_line(raw):
    try:
        value = env_text("DEVMEM_X", {"DEVMEM_X": raw}, max_length=64)
    except DevmemError as exc:
        assert str(exc).startswith("DEVMEM_X=") and "\n" not in str(exc) and len(str(exc)) < 300
        return
    assert value == raw.strip() and len(value) <= 64 and "\0" not in value


@given(text)
def test_env_choice_gives_one_of_its_choices(raw):
    with mock.patch("logging.Logger.warning"):
        value = env_choice("DEVMEM_X", ("A", "B"), "A", {"DEVMEM_X": raw})
    assert value in ("A", "B")


@given(text)
def test_limit_size_variable_gives_bytes_below_2_64_or_one_error(raw):
    try:
        limits = env_limits({"CUDA_DEVICE_MEMORY_LIMIT": raw}, 0)
    except DevmemError as exc:
        assert str(exc).startswith("CUDA_DEVICE_MEMORY_LIMIT") and "\n" not in str(exc) and len(str(exc)) < 400
        return
    assert all(type(lim.limit) is int and 0 <= lim.limit < 2**64 for lim in limits)


@given(anything)
def test_process_figure_is_none_or_bytes_below_2_63(value):
    figure = process_bytes(value)
    assert figure is None or (type(figure) is int and 0 <= figure < 2**63)
    if isinstance(value, bool):
        assert figure is None


@given(anything)
def test_process_id_is_none_or_below_2_32(value):
    pid = process_id(value)
    assert pid is None or (type(pid) is int and 0 <= pid < 2**32)


@given(st.one_of(anything, st.lists(anything, max_size=4), st.tuples(anything), st.dictionaries(text, anything)))
def test_process_list_is_none_or_a_list(value):
    entries = process_list(value)
    assert entries is None or type(entries) is list
    if isinstance(value, (list, tuple)):
        assert entries == list(value)


@given(st.one_of(st.binary(max_size=64), text, anything))
def test_vendor_text_is_text_or_none(value):
    out = vendor_text(value)
    assert out is None or type(out) is str
    if isinstance(value, (str, bytes)):
        assert out is not None


@given(anything, anything)
def test_checked_memory_gives_free_within_total_or_a_devmem_error(free, total):
    try:
        memory = checked_memory(free, total, {}, "the vendor call")
    except DevmemError as exc:
        assert "the vendor call" in str(exc)
        return
    assert type(memory.info.free) is int and type(memory.info.total) is int
    assert 0 <= memory.info.free <= memory.info.total


# ---- sizing -------------------------------------------------------------------------------------------------------
SIZING_ARGS = (
    "total",
    "utilization",
    "pinned_bytes",
    "init_free_memory",
    "free_memory",
    "committed_bytes",
    "consumed",
    "weights",
    "transient_peak_bytes",
    "non_torch",
    "graph_capture",
    "other_processes",
    "released_cache",
    "margin_floor_bytes",
    "margin_fraction",
    "allocation_granularity",
)
utilization = st.one_of(st.floats(0.01, 1.0), st.sampled_from([0.9, 0.5, 1, np.float64(0.8)]), anything)


@given(
    page=st.one_of(st.integers(1, 2**22), anything),
    layers=st.one_of(st.integers(1, 200), anything),
    kwargs=st.dictionaries(
        st.sampled_from(SIZING_ARGS), st.one_of(st.integers(0, 2**38), utilization, anything), max_size=8
    ),
)
def test_plan_kv_cache_gives_int_figures_or_a_documented_error(page, layers, kwargs):
    try:
        plan = plan_kv_cache(page_size_bytes=page, num_layers=layers, **kwargs)
    except NotEnoughMemoryError as exc:
        json.dumps(exc.breakdown)
        assert "not enough memory" in str(exc) and "hold -" not in str(exc)
        return
    except SizingError as exc:
        assert str(exc)
        return
    as_dict = plan.as_dict()
    json.dumps(as_dict)
    assert _plain_ints(as_dict) and all(type(v) is int for v in plan.breakdown.values())
    assert type(plan.kv_cache_bytes) is int and type(plan.num_blocks) is int and plan.num_blocks >= 1
    assert plan.num_blocks * plan.block_bytes <= plan.kv_cache_bytes
    if "total" in plan.breakdown:
        assert plan.kv_cache_bytes <= plan.breakdown["total"]
    assert isinstance(plan.explain(), str)


@given(total=anything, u=utilization)
def test_requested_memory_is_within_the_total(total, u):
    try:
        requested = requested_memory(total, u)
    except SizingError:
        return
    assert type(requested) is int and 0 < requested <= int(total)


@given(st.lists(anything, min_size=4, max_size=4))
def test_profiled_budget_is_an_int_or_a_sizing_error(args):
    with contextlib.suppress(SizingError):
        assert type(profiled_kv_cache_bytes(*args)) is int


@given(
    kwargs=st.dictionaries(
        st.sampled_from(["committed_bytes", "transient_peak_bytes", "margin_floor_bytes", "margin_fraction"]),
        anything,
        max_size=4,
    ),
    requested=anything,
    init_free=anything,
    free=anything,
)
def test_growable_budget_is_a_non_negative_int_or_a_sizing_error(kwargs, requested, init_free, free):
    try:
        kv = growable_kv_cache_bytes(requested_memory=requested, init_free_memory=init_free, free_memory=free, **kwargs)
    except SizingError:
        return
    assert type(kv) is int and 0 <= kv <= int(requested)


@given(anything, anything, anything)
def test_blocks_for_bytes_is_an_int_or_a_sizing_error(kv, page, layers):
    with contextlib.suppress(SizingError):
        assert type(blocks_for_bytes(kv, page, layers)) is int


# ---- snapshots and the start-time check ----------------------------------------------------------------------------
figure = st.one_of(st.integers(-(2**40), 2**45), st.integers(0, 2**64))


@given(a=st.tuples(figure, figure, st.none() | figure), b=st.tuples(figure, figure, st.none() | figure))
def test_snapshot_difference_is_the_difference_of_each_figure(a, b):
    first, second = MemorySnapshot(0, *a), MemorySnapshot(0, *b)
    delta = first - second
    assert (delta.free, delta.total, delta.used) == (a[0] - b[0], a[1] - b[1], first.used - second.used)
    assert delta.process == (None if a[2] is None or b[2] is None else a[2] - b[2])


@given(
    free=figure, total=st.one_of(figure, anything), process=st.none() | figure, requested=st.one_of(figure, anything)
)
def test_start_check_raises_only_devmem_errors_and_its_advice_passes(free, total, process, requested):
    snapshot = MemorySnapshot(0, free, total, process)
    platform = CpuPlatform()
    try:
        check_startup_memory(snapshot, requested, platform)
    except NotEnoughMemoryError as exc:
        message, fits = str(exc), exc.breakdown["utilization_that_fits"]
        assert "hold -" not in message
        if fits > 0:
            check_startup_memory(snapshot, requested_memory(int(total), fits), platform)
    except DevmemError:
        pass


# ---- host files, DRM fdinfo, visible devices ----------------------------------------------------------------------
line = st.one_of(
    text, st.builds(lambda k, v: f"{k}:{v}", st.sampled_from(["MemTotal", "MemAvailable", "MemFree"]), text)
)


@given(st.lists(line, max_size=6))
def test_parse_meminfo_gives_non_negative_ints(lines):
    assert all(type(v) is int and v >= 0 for v in parse_meminfo("\n".join(lines)).values())


@given(
    cgroup=st.lists(
        st.one_of(text, st.sampled_from(["0::/job", "0::/", "3:memory:/x", "::", "1:cpu,memory:/"])), max_size=3
    ),
    limit=text,
    current=text,
    stat=st.lists(line, max_size=3),
)
def test_cgroup_memory_gives_none_or_int_figures(cgroup, limit, current, stat):
    sc = Scenario()
    for base in ("/sys/fs/cgroup/job", "/sys/fs/cgroup", "/sys/fs/cgroup/memory"):
        sc.files.update(
            {
                f"{base}/memory.max": limit,
                f"{base}/memory.current": current,
                f"{base}/memory.limit_in_bytes": limit,
                f"{base}/memory.usage_in_bytes": current,
                f"{base}/memory.stat": "\n".join(stat).replace(":", " "),
            }
        )
    sc.files["/proc/self/cgroup"] = "\n".join(cgroup)
    found = cgroup_memory(sc.fs)
    assert found is None or (all(type(v) is int for v in found) and found[1] >= 0)
    info = CpuPlatform(files=sc.fs).device_memory_info()
    assert type(info.free) is int and type(info.total) is int and 0 <= info.free <= info.total


@given(text)
def test_drm_size_is_none_or_a_non_negative_int(raw):
    size = drm.size(raw)
    assert size is None or (type(size) is int and size >= 0)


@given(
    st.lists(
        st.tuples(
            st.sampled_from(
                ["drm-driver", "drm-pdev", "drm-client-id", "drm-total-vram", "drm-memory-vram", "drm-memory-gtt"]
            ),
            text,
        ),
        max_size=6,
    )
)
def test_drm_client_memory_is_a_process_memory_of_int_bytes(rows):
    sc = Scenario()
    rows = [("drm-driver", "amdgpu"), ("drm-pdev", "0000:c6:00.0"), *rows]
    sc.files["/proc/self/fdinfo/7"] = "".join(f"{k}:\t{v}\n" for k, v in rows)
    memory = drm.client_memory(sc.fs, "amdgpu", "0000:c6:00.0", ("vram", "gtt"))
    assert memory.used is None or (type(memory.used) is int and memory.used >= 0)


@given(text)
def test_visible_index_is_none_or_an_ascii_index(token):
    position = index(token)
    assert position is None or (type(position) is int and position >= 0 and token.strip().isascii())


@given(st.lists(text, max_size=6), st.booleans())
def test_pick_chooses_known_devices_once_in_order(tokens, repeats_end):
    devices = {"0": ["a"], "1": ["b"], "GPU-x": ["a", "b"]}
    chosen, stop = pick(tokens, devices.get, repeats_end=repeats_end)
    assert len(chosen) == len(set(chosen)) and set(chosen) <= {"a", "b"}
    assert stop is None or stop.token in tokens


# ---- the CLI -------------------------------------------------------------------------------------------------------
def run_cli(argv: list[str]) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with (
        mock.patch.dict(os.environ, {"DEVMEM_PLATFORM": "cpu"}),
        contextlib.redirect_stdout(out),
        contextlib.redirect_stderr(err),
    ):
        try:
            code = main(argv)
        except SystemExit as exc:
            code = exc.code
    return code, out.getvalue(), err.getvalue()


def check_outcome(argv: list[str], code: object, out: str, err: str) -> None:
    assert "Traceback" not in err and "Traceback" not in out, (argv, err)
    assert code in (0, 1, 2, 3), (argv, code, err)
    if code == 3:  # a refused model (plan --model, fit): one line, or with --json an object of that kind
        assert "--model" in argv or argv[:1] == ["fit"], (argv, err)
        assert ("--json" in argv and json.loads(out)["kind"] == "model_refused") or (
            err.startswith("devmem: error:") and err.count("\n") == 1
        ), (argv, err)
    if code == 2:  # a usage error: the message names the flag (or the command) it is about
        message = err.partition("error:")[2]
        assert (
            re.search(r"(^|\s|')-{1,2}[a-zA-Z]", message)
            or "unrecognized arguments: " in message
            or "invalid choice" in message
            or "required" in message
        ), (argv, err)
    elif code == 1:
        does_not_fit = argv[:1] == ["fit"] and out and not err  # `devmem fit` answers "no" with exit 1
        said = re.search(r"^devmem: error:", err, re.M)  # after any warning (`--total 4096` has no unit)
        assert said or does_not_fit or ("--json" in argv and json.loads(out)), (argv, err)
    elif "--json" in argv:
        json.loads(out)


size_value = st.one_of(st.sampled_from(["80GiB", "16GiB", "1GiB", "64KiB", "0", "2MiB", "4096"]), text)
count_value = st.one_of(st.sampled_from(["1", "32", "4096", "0"]), text)
PLAN_FLAGS = {
    "--utilization": st.one_of(st.sampled_from(["0.9", "0.5", "1", "0", "2", "nan"]), text),
    "--pinned": size_value,
    "--total": size_value,
    "--device": count_value,
    "--weights": size_value,
    "--transient-peak": size_value,
    "--non-torch": size_value,
    "--graph-capture": size_value,
    "--committed": size_value,
    "--init-free": size_value,
    "--free": size_value,
    "--page-size": size_value,
    "--layers": count_value,
    "--allocation-granularity": size_value,
    "--tp": count_value,
    "--kv-dtype": st.sampled_from(["auto", "fp8", "int3"]),
    "--dtype": st.sampled_from(["bf16", "fp64"]),
    "--block-size": count_value,
    "--context": count_value,
    "--sequences": count_value,
}


def flags(options: dict) -> st.SearchStrategy[list[str]]:
    return st.dictionaries(st.sampled_from(sorted(options)), st.just(None), max_size=7).flatmap(
        lambda chosen: st.tuples(*[options[f] for f in chosen]).map(
            lambda values, chosen=tuple(chosen): [x for pair in zip(chosen, values, strict=True) for x in pair]
        )
    )


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory) -> str:
    return str(write_model(tmp_path_factory.mktemp("model") / "tiny", TINY_LLAMA))


@CLI
@given(argv=flags(PLAN_FLAGS), json_flag=st.booleans(), with_model=st.booleans())
def test_cli_plan_exits_cleanly_whatever_the_flags(model_dir, argv, json_flag, with_model):
    argv = ["plan", *argv, *(["--json"] if json_flag else []), *(["--model", model_dir] if with_model else [])]
    check_outcome(argv, *run_cli(argv))


@CLI
@given(
    argv=flags(
        {
            k: v
            for k, v in PLAN_FLAGS.items()
            if k not in ("--pinned", "--total", "--init-free", "--free", "--committed", "--page-size", "--layers")
        }
    ),
    json_flag=st.booleans(),
)
def test_cli_fit_exits_cleanly_whatever_the_flags(model_dir, argv, json_flag):
    argv = ["fit", "--model", model_dir, *argv, *(["--json"] if json_flag else [])]
    check_outcome(argv, *run_cli(argv))


def run_cli_to_a_gone_reader(argv: list[str]) -> tuple[int, str]:
    """``main(argv)`` with a stdout that is already closed, as a reader that went away leaves it."""
    gone, err = io.StringIO(), io.StringIO()
    gone.close()
    with (
        mock.patch.dict(os.environ, {"DEVMEM_PLATFORM": "cpu"}),
        contextlib.redirect_stdout(gone),
        contextlib.redirect_stderr(err),
    ):
        try:
            code = main(argv)
        except SystemExit as exc:
            code = exc.code
    return code, err.getvalue()


@CLI
@given(argv=flags(PLAN_FLAGS), json_flag=st.booleans())
def test_cli_exit_code_does_not_depend_on_the_reader_staying(model_dir, argv, json_flag):
    argv = ["plan", *argv, *(["--json"] if json_flag else []), "--model", model_dir]
    code, _, err = run_cli(argv)
    assert run_cli_to_a_gone_reader(argv) == (code, err), argv


@CLI
@given(
    command=st.sampled_from(["info", "doctor", "plugins"]),
    argv=st.lists(st.sampled_from(["--json", "-v"]), max_size=2, unique=True),
    device=st.none() | count_value,
)
def test_cli_reports_exit_cleanly_whatever_the_flags(command, argv, device):
    argv = [
        *(["-v"] if "-v" in argv else []),
        command,
        *(["--json"] if "--json" in argv else []),
        *([] if device is None or command == "plugins" else ["--device", device]),
    ]
    check_outcome(argv, *run_cli(argv))


@CLI
@given(st.lists(text, max_size=4))
def test_cli_exits_cleanly_on_any_words(words):
    check_outcome(words, *run_cli(words))


def test_a_usage_error_names_the_flag():
    code, _, err = run_cli(["plan", "--page-size", "0", "--layers", "1", "--total", "1GiB"])
    assert code == 2 and "--page-size" in err


visible_entry = st.one_of(
    text,
    st.sampled_from(
        ["0", "1", "2", "-", "-1", "GPU-", "GPU-aaaa", "MIG-", "0x1", "01", "１", "9" * 30, " 1", "1 ", "+1"]
    ),
)
visible_list = st.lists(visible_entry, max_size=4).map(",".join)


@given(cuda=st.none() | visible_list, order=st.none() | st.sampled_from(["PCI_BUS_ID", "FASTEST_FIRST", "x"]))
def test_cuda_visible_devices_selects_some_of_the_gpus_or_says_why_not(cuda, order):
    from devmem_nvidia.testing import ScriptedNvidiaGpu, scripted_platform

    environ = {k: v for k, v in (("CUDA_VISIBLE_DEVICES", cuda), ("CUDA_DEVICE_ORDER", order)) if v is not None}
    sc = Scenario(
        devices=[
            ScriptedNvidiaGpu(),
            ScriptedNvidiaGpu(pci_bus_id="0000:19:00.0", uuid="GPU-bbbbbbbb-2222-4222-8222-222222222222"),
        ]
    )
    try:
        count = scripted_platform(sc, environ=environ).device_count()
    except DevmemError:
        return
    assert type(count) is int and 0 <= count <= 2


@given(rocr=st.none() | visible_list, hip=st.none() | visible_list, cuda=st.none() | visible_list)
def test_rocm_visible_devices_select_some_of_the_gpus_or_say_why_not(rocr, hip, cuda):
    from devmem.testing import ScriptedClock
    from devmem_rocm import RocmPlatform
    from devmem_rocm.testing import ScriptedAmdsmi, mi300x_scenario

    environ = {
        k: v
        for k, v in (("ROCR_VISIBLE_DEVICES", rocr), ("HIP_VISIBLE_DEVICES", hip), ("CUDA_VISIBLE_DEVICES", cuda))
        if v is not None
    }
    sc = mi300x_scenario(3, environ=environ)
    clock = ScriptedClock()
    try:
        count = RocmPlatform(
            amdsmi=ScriptedAmdsmi(sc), environ=sc.environ, clock=clock, sleep=clock.sleep
        ).device_count()
    except DevmemError:
        return
    assert type(count) is int and 0 <= count <= 3


@given(
    kwargs=st.fixed_dictionaries(
        {
            "context": st.one_of(st.integers(1, 2**20), anything),
            "sequences": st.one_of(st.integers(1, 512), anything),
            "total": st.one_of(st.integers(GiB, 2**40), anything),
        },
        optional={
            "utilization": utilization,
            "free": anything,
            "block_size": st.one_of(st.integers(1, 4096), anything),
            "transient_peak_bytes": anything,
            "allocation_granularity": anything,
        },
    )
)
def test_fit_gives_json_of_plain_numbers_or_a_devmem_error(model_dir, kwargs):
    from devmem.planner.capacity import fit
    from devmem.planner.models import load_model

    try:
        answer = fit(load_model(model_dir), **kwargs)
    except DevmemError:
        return
    as_dict = answer.as_dict()
    json.dumps(as_dict)
    assert _plain_ints(as_dict) and isinstance(answer.explain(), str)


# --- the model-folder reader ------------------------------------------------------------------------------------

LONG_INTEGER = "9" * 5000  # past Python's int-from-text limit
JSON_TEXT = st.just(LONG_INTEGER) | st.recursive(
    st.none() | st.booleans() | st.integers(-(10**4000), 10**4000) | st.floats() | st.text(max_size=6),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=4), inner, max_size=3),
    max_leaves=10,
).map(lambda value: json.dumps(value))


@settings(deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.binary(max_size=300) | JSON_TEXT.map(str.encode), depth=st.integers(0, 3000))
def test_model_reader_gives_an_object_or_one_model_config_error(tmp_path, data, depth):
    from devmem.planner.models import ModelConfigError, read_json

    file = tmp_path / "config.json"
    file.write_bytes(b"[" * depth + data + b"]" * depth)
    try:
        value = read_json(file)
    except ModelConfigError as exc:
        assert "\n" not in str(exc) and len(str(exc)) < 2000
        return
    assert isinstance(value, dict)


@settings(deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    key=st.sampled_from(
        sorted(TINY_LLAMA) + ["max_position_embeddings", "rope_scaling", "layer_types", "sliding_window"]
    ),
    value=JSON_TEXT,
    index=st.none() | JSON_TEXT,
    tp=st.sampled_from([1, 2, np.int64(2), np.int32(4)]),
)
def test_model_folder_sizes_or_is_refused_with_one_line(tmp_path, key, value, index, tp):
    from devmem.planner.models import load_model
    from devmem.types import DevmemError

    folder = tmp_path / "m"
    folder.mkdir(exist_ok=True)
    text = json.dumps({**TINY_LLAMA, key: None})
    (folder / "config.json").write_text(text.replace(f'"{key}": null', f'"{key}": {value}'))
    index_file = folder / "model.safetensors.index.json"
    if index is None:
        index_file.unlink(missing_ok=True)
    else:
        index_file.write_text('{"metadata": {"total_size": ' + index + "}}")
    try:
        model = load_model(folder, tp=tp)
    except DevmemError as exc:
        assert "\n" not in str(exc)
        return
    assert type(model.kv_bytes_per_token) is int and model.kv_bytes_per_token > 0
    assert type(model.weights_bytes) is int and model.weights_bytes >= 0
