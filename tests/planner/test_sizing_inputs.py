"""Hostile inputs to sizing, the start-time check, format_size and device indices: a clear error, never a wrong
number, a traceback or a value JSON cannot write."""

from __future__ import annotations

import collections
import functools
import json
import math
import sys

import numpy as np
import pytest

from devmem import DevmemError, GiB, MiB, arguments
from devmem.command.main import main
from devmem.cpu import CpuPlatform
from devmem.engine.profiling import MemorySnapshot, check_startup_memory
from devmem.planner.sizing import SizingError, plan_kv_cache, requested_memory
from devmem.types import NotEnoughMemoryError, gib
from devmem.units import format_size

BLOCK = dict(page_size_bytes=64 * 1024, num_layers=32)


def test_pinned_cache_larger_than_the_total_is_refused():
    with pytest.raises(SizingError, match=r"pinned_bytes=.*larger than the device's total memory"):
        plan_kv_cache(pinned_bytes=100 * GiB, total=80 * GiB, **BLOCK)


def test_pinned_cache_within_the_total_reports_the_total():
    plan = plan_kv_cache(pinned_bytes=10 * GiB, total=80 * GiB, **BLOCK)
    assert plan.kv_cache_bytes == 10 * GiB and plan.breakdown["total"] == 80 * GiB


@pytest.mark.parametrize("total", ["80GiB", -1, 0, 1.5, True, np.float64(8e10)])
def test_garbage_total_is_refused_on_the_pinned_path(total):
    with pytest.raises(SizingError, match=r"^total must be"):
        plan_kv_cache(pinned_bytes=GiB, total=total, **BLOCK)


@pytest.mark.parametrize("utilization", [0, 1.5, -0.1, math.nan, "0.9", True])
def test_garbage_utilization_is_refused_on_the_pinned_path(utilization):
    with pytest.raises(SizingError, match=r"^utilization must be"):
        plan_kv_cache(pinned_bytes=GiB, utilization=utilization, **BLOCK)


@pytest.mark.parametrize("fraction", [-0.5, math.nan, math.inf, "0.75", None])
def test_garbage_margin_fraction_is_refused_on_every_path(fraction):
    for path in (dict(total=80 * GiB), dict(pinned_bytes=GiB)):
        with pytest.raises(SizingError, match=r"^margin_fraction must be"):
            plan_kv_cache(margin_fraction=fraction, **path, **BLOCK)


@pytest.mark.parametrize("committed", [-1, 1.5, "1GiB"])
def test_garbage_committed_bytes_is_refused_on_every_path(committed):
    with pytest.raises(SizingError, match=r"^committed_bytes must be"):
        plan_kv_cache(total=80 * GiB, committed_bytes=committed, **BLOCK)


def test_committed_bytes_outside_the_growable_path_is_refused():
    with pytest.raises(SizingError, match=r"committed_bytes=.*applies to the growable path"):
        plan_kv_cache(total=80 * GiB, committed_bytes=GiB, **BLOCK)


@pytest.mark.parametrize(
    "path",
    [
        dict(total=np.int64(80 * GiB), weights=np.int64(10 * GiB)),
        dict(pinned_bytes=np.int64(GiB), total=np.int64(80 * GiB)),
        dict(
            total=np.int64(80 * GiB),
            init_free_memory=np.int64(79 * GiB),
            free_memory=np.int64(60 * GiB),
            committed_bytes=np.int32(0),
        ),
    ],
)
def test_numpy_integers_give_a_plan_of_python_ints(path):
    plan = plan_kv_cache(page_size_bytes=np.int64(65536), num_layers=np.int32(32), **path)
    as_dict = plan.as_dict()
    json.dumps(as_dict)
    assert all(type(v) is int for v in as_dict["breakdown"].values())
    assert type(plan.kv_cache_bytes) is int and type(plan.num_blocks) is int


def test_numpy_integers_give_a_json_serialisable_shortfall():
    with pytest.raises(NotEnoughMemoryError) as caught:
        plan_kv_cache(total=np.int64(8 * GiB), weights=np.int64(8 * GiB), **BLOCK)
    json.dumps(caught.value.breakdown)


def _snapshot(free: int, total: int, process: int | None = None) -> MemorySnapshot:
    return MemorySnapshot(0, free=free, total=total, process=process)


def test_startup_check_with_a_total_of_zero_is_a_devmem_error():
    with pytest.raises(DevmemError, match=r"total memory must be > 0 bytes, got 0: the platform.s reading is broken"):
        check_startup_memory(_snapshot(0, 0), GiB, CpuPlatform())


@pytest.mark.parametrize("free,total", [(8999, 10000), (80 * GiB - 1, 100 * GiB), (7 * GiB + 1, 9 * GiB)])
def test_startup_advice_passes_when_followed(free, total):
    with pytest.raises(NotEnoughMemoryError) as caught:
        check_startup_memory(_snapshot(free, total), total, CpuPlatform())
    advised = caught.value.breakdown["utilization_that_fits"]
    assert f"at most {advised:.3f}" in str(caught.value)
    check_startup_memory(_snapshot(free, total), requested_memory(total, advised), CpuPlatform())


def test_startup_check_never_says_other_processes_hold_a_negative_amount():
    with pytest.raises(NotEnoughMemoryError) as caught:
        check_startup_memory(_snapshot(10 * GiB, 80 * GiB, process=75 * GiB), 72 * GiB, CpuPlatform())
    message = str(caught.value)
    assert "-5.00 GiB" not in message and "what other processes hold is unknown" in message


@pytest.mark.parametrize(
    "nbytes,text",
    [
        (10**30, "8.674e+11 EiB"),
        (10**400, "8.674e+381 EiB"),
        (-5 * GiB, "-5.00 GiB"),
        (-3 * MiB, "-3.00 MiB"),
        (-12, "-12 B"),
        (2**50, "1.00 PiB"),
        (3 * 2**60, "3.00 EiB"),
    ],
)
def test_format_size_of_absurd_or_negative_sizes(nbytes, text):
    assert format_size(nbytes) == text


def test_gib_of_an_absurd_size_does_not_overflow():
    assert gib(10**400) == "8.674e+381 EiB"


@pytest.mark.parametrize("device", ["0", 1.0, 0.0, None, True])
def test_a_device_index_of_the_wrong_type_says_it_must_be_an_int(device):
    with pytest.raises(DevmemError, match=r"device must be a device index .* of type .*; valid indices"):
        CpuPlatform().device_memory_info(device)


def test_a_numpy_integer_device_index_is_accepted():
    assert CpuPlatform().device_name(np.int64(0)) == "host memory"


@pytest.mark.parametrize("text", ["99999999999999999999999TiB", "9" * 5000, "16EiB", "18446744073709551616"])
def test_parse_size_refuses_sizes_past_16_eib(text):
    from devmem.units import parse_size

    with pytest.raises(ValueError, match=r"larger than any memory: a size must be below 2\*\*64 bytes|not a size"):
        parse_size(text)


def test_cli_total_past_16_eib_is_a_usage_error_naming_the_flag(capsys):
    with pytest.raises(SystemExit) as exit_:
        main(["plan", "--total", "99999999999999999999999TiB", "--page-size", "64KiB", "--layers", "32"])
    assert exit_.value.code == 2 and "argument --total:" in capsys.readouterr().err


@pytest.mark.parametrize("arg", ["total", "weights", "page_size_bytes"])
def test_sizing_refuses_a_figure_past_16_eib_with_a_short_message(arg):
    kwargs = dict(total=80 * GiB, **BLOCK)
    kwargs[arg] = 10**5000
    with pytest.raises(SizingError, match=rf"^{arg} must be below 2\*\*64 bytes \(16 EiB\), got a number too long"):
        plan_kv_cache(**kwargs)


def test_requested_memory_of_numpy_inputs_is_a_python_int():
    assert type(requested_memory(np.int64(80 * GiB), np.int64(1))) is int


def test_capacity_and_fit_of_numpy_inputs_give_json(tmp_path):
    from model_configs import TINY_LLAMA, write_model

    from devmem.planner.capacity import capacity, fit
    from devmem.planner.models import load_model

    model = load_model(write_model(tmp_path / "tiny", TINY_LLAMA))
    json.dumps(
        fit(
            model,
            context=np.int64(1),
            sequences=np.int64(1),
            total=np.int64(GiB),
            block_size=np.int64(16),
            free=np.int64(GiB),
        ).as_dict()
    )
    json.dumps(
        capacity(model, np.int64(GiB), block_size=np.int64(16), context=np.int64(64), sequences=np.int64(2)).as_dict()
    )


@pytest.mark.parametrize(
    "path",
    [
        dict(total=80 * GiB, utilization=0.9, consumed=GiB, graph_capture=MiB),
        dict(pinned_bytes=10 * GiB, total=80 * GiB),
        dict(total=80 * GiB, init_free_memory=70 * GiB, free_memory=60 * GiB, committed_bytes=GiB),
    ],
    ids=["utilization", "pinned", "growable"],
)
def test_plan_kv_cache_checks_each_argument_once(path, monkeypatch):
    calls: collections.Counter[str] = collections.Counter()

    def counted(validator):
        @functools.wraps(validator)
        def wrapper(*args, **kwargs):
            if sys._getframe(1).f_globals.get("__name__", "").startswith("devmem.planner"):
                calls[kwargs.get("name") or (args[0] if args and isinstance(args[0], str) else "utilization")] += 1
            return validator(*args, **kwargs)

        return wrapper

    for name in ("byte_count", "count", "real", "utilization"):
        monkeypatch.setattr(arguments, name, counted(getattr(arguments, name)))
    plan_kv_cache(weights=GiB, transient_peak_bytes=MiB, allocations=2, **BLOCK, **path)
    assert calls and max(calls.values()) == 1, calls
