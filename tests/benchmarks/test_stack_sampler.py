"""benchmarks/common.py's StackSampler: where a thread spent its wall time, by the innermost function of devmem (or
an engine package) on its stack."""

from __future__ import annotations

import time
import types
import weakref

import pytest


@pytest.fixture
def sampler_class(benchmark_module):
    return benchmark_module("common").StackSampler


def _waits() -> None:
    time.sleep(0.3)


def test_the_sampler_names_the_devmem_function_the_time_was_spent_in(sampler_class):
    in_devmem = types.FunctionType(_waits.__code__, {**_waits.__globals__, "__name__": "devmem.units"}, "waits")
    with sampler_class(interval=0.01) as sampler:
        in_devmem()
    where, seconds = sampler.top(1)[0]
    assert where == "devmem.units._waits"
    assert 0.15 <= seconds <= 0.45


def test_a_call_that_holds_the_gil_is_counted_to_the_function_that_made_it(sampler_class):
    # one C call that no other thread runs beside, then the function goes on (where the GIL is handed over)
    spin = "def holds():\n    total = sum(range(30_000_000))\n    for _ in range(1000):\n        total += 1\n"
    scope = {"__name__": "devmem.units"}
    exec(spin, scope)
    began = time.perf_counter()
    with sampler_class(interval=0.01) as sampler:
        scope["holds"]()
    where, seconds = sampler.top(1)[0]
    assert where == "devmem.units.holds"
    assert seconds >= 0.5 * (time.perf_counter() - began)


def test_time_outside_the_packages_is_counted_as_such(sampler_class):
    with sampler_class(interval=0.01) as sampler:
        time.sleep(0.1)
    assert sampler.top(1)[0][0] == "(outside the packages)"
    assert not [where for where, _ in sampler.top() if where.startswith(sampler.PACKAGES)]


def test_the_sampler_keeps_no_frame_of_a_function_that_returned(sampler_class):
    # a devmem function, so that the sampler stops its walk at this frame
    work = "def work(held, gone):\n    local = held()\n    finalize(local, gone.append, True)\n    sleep(0.05)\n"
    scope = {"__name__": "devmem.units", "finalize": weakref.finalize, "sleep": time.sleep}
    exec(work, scope)
    gone: list[bool] = []
    with sampler_class(interval=0.001) as sampler:
        scope["work"](type("Held", (), {}), gone)
        freed = bool(gone)  # read before the sampler stops: a frame it held would keep ``local`` until its next sample
    assert freed
    assert sampler.top(1)[0][0] == "devmem.units.work"
