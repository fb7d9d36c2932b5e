"""The conformance kit: test classes a backend author combines with fixtures of their own.

A backend's whole conformance file::

    from devmem.testing import PlatformConformance, PlatformFixtures, Capabilities

    class MyFixtures(PlatformFixtures):
        @pytest.fixture
        def platform(self):
            return MyPlatform(lib=...)

        @pytest.fixture
        def capabilities(self):
            return Capabilities(process_memory=True, integrated=False, pages_instead_of_failing=False)

    class TestMine(PlatformConformance, MyFixtures):
        pass

Fixtures (override them in a subclass of :class:`PlatformFixtures`, which must come after
``PlatformConformance`` in the bases):

- ``platform`` (required): the platform under test, built with its vendor library passed in: a
  :class:`devmem.PlatformBase`, or a minimal backend with only the six members devmem started from, which the
  kit tests adapted as resolution adapts it (:func:`devmem.as_platform`).
- ``capabilities``: a :class:`Capabilities`, declared once; tests needing a capability that is off skip
  with the reason. Default ``Capabilities()``: per-process memory, nothing allocatable.
- ``allocate`` (when ``can_allocate``): a callable ``(nbytes, device) -> Allocation`` holding device
  memory in this process until ``Allocation.free()``.
- ``allocate_in_other_process`` (when ``other_process_allocation``): the same, held by another process.
- ``reference_memory``: the independent reading units are cross-checked against (:class:`ReferenceMemory`),
  or a string saying why there is none. Default: :func:`independent_memory` (torch's ``mem_get_info`` in the
  platform's namespace, or /proc/meminfo for host memory); the scripted runtime's ``mem_get_info`` under
  ``scripted_fixtures``.

Ready-made mixins (:mod:`devmem.testing.fixtures`): ``HostFixtures`` (host memory, real allocations),
``TorchFixtures`` (allocations in the platform's torch device namespace on a real device), ``ScriptedFixtures`` and
``scripted_fixtures(make_scenario, make_platform, **capabilities)`` for a backend driven by a
:class:`~devmem.testing.Scenario`.

Per-call and detection times are recorded as the tests' ``user_properties``
(``devmem_call_seconds``, ``devmem_detect_seconds``); the pytest plugin prints them in the summary.
"""

from __future__ import annotations

import functools
import json
import statistics
import sys
import threading
import time
from collections.abc import Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field, fields
from typing import Any

import pytest

import devmem
from devmem._adapter import MINIMAL_CONTRACT, as_platform, missing_members
from devmem.platform import DeviceMemory, Platform, ProcessMemory, Reason, device_report, prepare_device
from devmem.testing.allocations import Allocation
from devmem.testing.probe import run_detection_probe
from devmem.types import DevmemError, GiB, MemoryInfo, MiB, gib

METHODS = (
    "memory",
    "device_memory_info",
    "process_memory",
    "get_process_memory_usage",
    "is_integrated_gpu",
    "pages_instead_of_failing",
)
#: Members that explain a device to people; PlatformBase gives each a neutral answer.
EXPLAINING = (
    "device_name",
    "process_memory_reason",
    "other_processes_memory",
    "process_roles",
    "memory_sources",
    "notes",
)
BAD_INDICES = {"minus-one": -1, "count": "count", "string": "0", "float": 1.0, "bool": True}
#: A device smaller than this is taken as figures in KiB or MiB instead of bytes.
SMALLEST_PLAUSIBLE_TOTAL = 64 * MiB
#: Figures further apart than this factor from an independent reading are in other units (KiB is 1024x off);
#: closer ones may differ by what each source counts (reserved memory, page cache, a carve-out).
UNIT_RATIO = 16
#: Free memory is compared with the independent reading only from this much up, where co-tenants moving memory
#: between the two readings cannot explain a factor of UNIT_RATIO.
COMPARABLE_FREE = GiB


@dataclass(frozen=True)
class ReferenceMemory:
    """An independent reading of a device's memory, to cross-check a platform's units against: ``read(device)``
    gives ``(free, total)`` in bytes from ``source`` (torch's ``mem_get_info``, /proc/meminfo, a scripted runtime)."""

    source: str
    read: Callable[[int], tuple[int, int]]


def _pair(reading: Any) -> tuple[int, int]:
    free, total = reading
    return int(free), int(total)


def torch_device_reason(platform: Platform) -> str | None:
    """Why torch cannot allocate on ``platform``'s devices here, or ``None`` when it can."""
    platform = as_platform(platform)
    namespace = platform.torch_device
    if namespace is None:
        return f"the {platform.name} platform declares no torch device namespace (torch_device is None)"
    try:
        import torch
    except ImportError:
        return "torch is not installed, so the kit cannot allocate device memory"
    module = getattr(torch, namespace, None)
    if module is None or not module.is_available():
        return f"torch.{namespace} is not available (no such device here, or a torch build without it)"
    if module.device_count() != platform.device_count():
        return (
            f"torch sees {module.device_count()} {namespace} devices but {platform.name} sees "
            f"{platform.device_count()}, so their indices cannot be matched"
        )
    return None


def independent_memory(platform: Platform) -> ReferenceMemory | str:
    """The independent reading for ``platform`` on this machine, or why there is none: torch's
    ``<torch_device>.mem_get_info`` where torch sees the platform's devices, /proc/meminfo (within this process's
    cgroup limit) for a platform whose device is host memory."""
    if platform.torch_device is not None:
        reason = torch_device_reason(platform)
        if reason is not None:
            return f"no independent reading of {platform.name}'s memory: {reason}"
        import torch

        module = getattr(torch, platform.torch_device)
        return ReferenceMemory(f"torch.{platform.torch_device}.mem_get_info", lambda d: _pair(module.mem_get_info(d)))
    if not sys.platform.startswith("linux"):
        return f"no independent reading of {platform.name}'s host memory: /proc/meminfo exists only on Linux"
    from devmem._host import cgroup_memory, read_meminfo

    def host(device: int) -> tuple[int, int]:
        meminfo, cgroup = read_meminfo(), cgroup_memory()
        limit, used = cgroup if cgroup is not None else (meminfo["MemTotal"], 0)
        return min(meminfo["MemAvailable"], limit - used), min(meminfo["MemTotal"], limit)

    return ReferenceMemory("/proc/meminfo (within the cgroup limit)", host)


@dataclass(frozen=True)
class Capabilities:
    """What a platform can do, declared once; the kit checks the answers against it.

    ``integrated`` and ``pages_instead_of_failing`` set to ``None`` are not compared with the
    platform's answers (their consistency still is). ``granularity`` is how far a figure may stray
    from an allocation's size (allocation granularity plus measurement noise). ``reasons`` maps a
    capability's field name to why it is off; skipped tests show it.
    """

    process_memory: bool = True
    integrated: bool | None = None
    pages_instead_of_failing: bool | None = None
    can_allocate: bool = False
    other_process_allocation: bool = False
    free_tracks_allocations: bool = False
    granularity: int = 2 * MiB
    allocation_size: int = 256 * MiB
    max_call_seconds: float = 0.05
    max_detect_seconds: float = 1.0
    reasons: Mapping[str, str] = field(default_factory=dict, compare=False)

    def __post_init__(self) -> None:
        names = {f.name for f in fields(self)}
        unknown = set(self.reasons) - names
        if unknown:
            raise ValueError(f"Capabilities.reasons names unknown capabilities: {sorted(unknown)}")

    def require(self, *names: str) -> None:
        """Skip the calling test, with the reason, unless every named capability is on."""
        for name in names:
            if not getattr(self, name):
                pytest.skip(self.reasons.get(name) or f"the platform does not declare Capabilities({name}=True)")


class PlatformFixtures:
    """The fixtures the kit uses; subclass it and override what your backend provides."""

    @pytest.fixture
    def platform(self) -> Platform:
        raise NotImplementedError(
            "Provide a `platform` fixture returning the platform under test, built with its vendor library "
            "passed in (e.g. `MyPlatform(lib=ScriptedLib(scenario))`), in a subclass of PlatformFixtures."
        )

    @pytest.fixture
    def capabilities(self) -> Capabilities:
        return Capabilities()

    @pytest.fixture
    def reference_memory(self, platform) -> ReferenceMemory | str:
        """The independent reading the units are cross-checked against (:func:`independent_memory`), or why
        there is none (the test skips with it)."""
        return independent_memory(as_platform(platform))

    @pytest.fixture
    def allocate(self) -> Callable[[int, int], Allocation]:
        raise NotImplementedError(
            "Provide an `allocate` fixture returning a callable (nbytes, device) -> devmem.testing.Allocation that "
            "holds device memory in this process, or declare Capabilities(can_allocate=False)."
        )

    @pytest.fixture
    def allocate_in_other_process(self) -> Callable[[int, int], Allocation]:
        raise NotImplementedError(
            "Provide an `allocate_in_other_process` fixture returning a callable (nbytes, device) -> "
            "devmem.testing.Allocation whose memory another process holds, or declare "
            "Capabilities(other_process_allocation=False)."
        )


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _devices(platform: Platform) -> range:
    return range(platform.device_count())


def _warm_up(allocate: Callable[[int, int], Allocation]) -> None:
    """The first allocation may initialise the runtime (a device context); make it before measuring."""
    allocate(2 * MiB, 0).free()


def _usage(platform: Platform) -> int:
    used = platform.get_process_memory_usage(0)
    assert used is not None, "get_process_memory_usage(0) returned None although Capabilities(process_memory=True)"
    return used


def _expect_change(what: str, change: int, expected: int, tolerance: int, hint: str) -> None:
    assert abs(change - expected) <= tolerance, (
        f"{what} changed by {change} bytes ({gib(change)}); expected {expected} bytes ({gib(expected)}) "
        f"within {tolerance} bytes: {hint}"
    )


class PlatformConformance:
    """What every devmem platform must do. Combine with your fixtures:
    ``class TestMine(PlatformConformance, MyFixtures)``."""

    # ---- shape, types and units -------------------------------------------------------------------
    @pytest.fixture
    def contract(self, platform) -> Platform:
        """The platform under test as a full :class:`devmem.Platform`: itself, or a minimal backend (the six members
        devmem started from) adapted as resolution adapts it (:func:`devmem.as_platform`); each device prepared
        (:func:`devmem.engine.prepare_device`) as an engine prepares it before reading."""
        missing = missing_members(platform)
        if missing:
            pytest.fail(
                f"{platform!r} lacks {', '.join(missing)}: a devmem backend implements at least "
                f"{', '.join(MINIMAL_CONTRACT)} (or subclasses devmem.PlatformBase)"
            )
        contract = as_platform(platform)
        for device in _devices(contract):
            prepare_device(contract, device)
        return contract

    def test_platform_satisfies_the_protocol(self, platform):
        missing = missing_members(platform)
        assert not missing, f"{platform!r} lacks {', '.join(missing)}, of the members every backend implements"
        assert isinstance(platform.name, str) and platform.name, f"platform.name is {platform.name!r}, not a name"

    def test_device_count_is_a_positive_int(self, contract):
        count = contract.device_count()
        assert _is_int(count), f"device_count() returned {count!r} ({type(count).__name__}), not an int"
        assert count >= 1, f"device_count() returned {count}: a detected platform has at least one device"

    def test_memory_info_is_int_bytes(self, contract):
        for d in _devices(contract):
            info = contract.device_memory_info(d)
            assert isinstance(info, MemoryInfo), f"device_memory_info({d}) returned {info!r}, not a devmem.MemoryInfo"
            for key, value in info._asdict().items():
                assert _is_int(value), (
                    f"device_memory_info({d}).{key} is {value!r} ({type(value).__name__}): figures must be int bytes"
                )

    def test_total_is_in_bytes(self, contract):
        for d in _devices(contract):
            total = contract.device_memory_info(d).total
            assert total >= SMALLEST_PLAUSIBLE_TOTAL, (
                f"device_memory_info({d}).total is {total} bytes, less than 64 MiB: the figures are probably in "
                "KiB or MiB instead of bytes (wrong units)"
            )

    def test_figures_agree_with_an_independent_source(self, contract, reference_memory):
        if isinstance(reference_memory, str):
            pytest.skip(reference_memory)
        source = reference_memory.source
        for d in _devices(contract):
            free, total = contract.device_memory_info(d)
            ref_free, ref_total = reference_memory.read(d)
            assert ref_total / UNIT_RATIO <= total <= ref_total * UNIT_RATIO, (
                f"device_memory_info({d}).total is {total} bytes ({gib(total)}) but {source} reads {ref_total} bytes "
                f"({gib(ref_total)}): more than {UNIT_RATIO}x apart, so one is in other units (KiB or MiB instead "
                "of bytes: wrong units)"
            )
            if ref_free < COMPARABLE_FREE:
                continue
            assert free >= ref_free / UNIT_RATIO, (
                f"device_memory_info({d}).free is {free} bytes ({gib(free)}) but {source} reads {ref_free} bytes "
                f"({gib(ref_free)}) free: more than {UNIT_RATIO}x less, so free is in other units than bytes (wrong "
                "units; free and total must both be bytes)"
            )
            if not contract.is_integrated_gpu(d):  # unified memory: runtimes count free memory their own way
                assert free <= ref_free * UNIT_RATIO, (
                    f"device_memory_info({d}).free is {free} bytes ({gib(free)}) but {source} reads {ref_free} "
                    f"bytes ({gib(ref_free)}) free: more than {UNIT_RATIO}x more (wrong units)"
                )

    def test_free_is_positive_and_at_most_total(self, contract):
        for d in _devices(contract):
            free, total = contract.device_memory_info(d)
            assert 0 < free <= total, f"device_memory_info({d}) gave free={free}, total={total}: need 0 < free <= total"

    def test_flags_are_bools(self, contract):
        for d in _devices(contract):
            for method in ("is_integrated_gpu", "pages_instead_of_failing"):
                value = getattr(contract, method)(d)
                assert isinstance(value, bool), f"{method}({d}) returned {value!r}, not a bool"

    def test_device_report_gives_json_for_every_device(self, contract):
        for d in _devices(contract):
            json.dumps(device_report(contract, d).as_dict())

    def test_memory_reading_carries_its_sources(self, contract):
        for d in _devices(contract):
            memory = contract.memory(d)
            assert isinstance(memory, DeviceMemory), f"memory({d}) returned {memory!r}, not a devmem.sdk.DeviceMemory"
            assert isinstance(memory.info, MemoryInfo), f"memory({d}).info is {memory.info!r}, not a devmem.MemoryInfo"
            assert all(isinstance(k, str) and isinstance(v, str) for k, v in memory.sources.items()), (
                f"memory({d}).sources is {memory.sources!r}, not text for people keyed by figure"
            )

    # ---- bad device indices -----------------------------------------------------------------------
    @pytest.mark.parametrize("method", METHODS + EXPLAINING)
    @pytest.mark.parametrize("bad", list(BAD_INDICES.values()), ids=list(BAD_INDICES))
    def test_bad_index_raises_devmem_error(self, contract, method, bad):
        index = contract.device_count() if bad == "count" else bad
        try:
            result = getattr(contract, method)(index)
        except DevmemError:
            return
        except Exception as exc:
            pytest.fail(
                f"{method}({index!r}) raised {type(exc).__name__}: {exc}, instead of devmem.DevmemError "
                "(the wrong error on a bad device index); call self.check_device(device) first"
            )
        pytest.fail(
            f"{method}({index!r}) returned {result!r} instead of raising devmem.DevmemError "
            "on a bad device index; call self.check_device(device) first"
        )

    def test_bad_index_error_names_the_valid_range(self, contract):
        count = contract.device_count()
        with pytest.raises(Exception) as info:
            contract.device_memory_info(count)
        assert isinstance(info.value, DevmemError), (
            f"device_memory_info({count}) raised {type(info.value).__name__}, not devmem.DevmemError: {info.value}"
        )
        assert str(count - 1) in str(info.value), (
            f"the error for device index {count} does not name the valid range 0..{count - 1}: {info.value}"
        )

    # ---- what the platform says it is ---------------------------------------------------------------
    def test_integrated_implies_pages_instead_of_failing(self, contract):
        for d in _devices(contract):
            if contract.is_integrated_gpu(d):
                assert contract.pages_instead_of_failing(d), (
                    f"is_integrated_gpu({d}) is True but pages_instead_of_failing({d}) is False: on an integrated "
                    "device an over-subscription takes memory from the OS instead of failing"
                )

    def test_flags_match_declared_capabilities(self, contract, capabilities):
        declared = {
            "is_integrated_gpu": capabilities.integrated,
            "pages_instead_of_failing": capabilities.pages_instead_of_failing,
        }
        if all(v is None for v in declared.values()):
            pytest.skip("Capabilities(integrated=..., pages_instead_of_failing=...) are not declared")
        for d in _devices(contract):
            for method, expected in declared.items():
                if expected is not None:
                    got = getattr(contract, method)(d)
                    assert got == expected, f"{method}({d}) returned {got!r}, but the capabilities declare {expected!r}"

    def test_process_usage_is_none_only_where_declared(self, contract, capabilities):
        for d in _devices(contract):
            used = contract.get_process_memory_usage(d)
            if not capabilities.process_memory:
                assert used is None, (
                    f"get_process_memory_usage({d}) returned {used!r} although the capabilities "
                    "declare process_memory=False"
                )
                answer = contract.process_memory(d)
                assert isinstance(answer, ProcessMemory) and isinstance(answer.reason, Reason), (
                    f"get_process_memory_usage({d}) is None but process_memory({d}) gives no Reason: {answer!r}"
                )
                assert contract.process_memory_reason(d) == answer.reason.text, (
                    f"process_memory_reason({d}) is not the text of process_memory({d}).reason"
                )
                continue
            assert used is not None, (
                f"get_process_memory_usage({d}) returned None although the capabilities declare process_memory=True"
            )
            assert _is_int(used), (
                f"get_process_memory_usage({d}) returned {used!r} ({type(used).__name__}), not int bytes"
            )
            total = contract.device_memory_info(d).total
            assert 0 <= used <= total, f"get_process_memory_usage({d}) = {used} bytes is outside 0..total ({total})"

    def test_explaining_members_return_documented_types(self, contract):
        checks = {
            "device_name": lambda v: isinstance(v, str) and v,
            "process_memory_reason": lambda v: v is None or isinstance(v, str),
            "other_processes_memory": lambda v: (
                v is None or (isinstance(v, dict) and all(_is_int(k) and _is_int(b) for k, b in v.items()))
            ),
            "process_roles": lambda v: (
                isinstance(v, dict) and all(_is_int(k) and isinstance(r, str) and r for k, r in v.items())
            ),
            "memory_sources": lambda v: (
                isinstance(v, dict) and all(isinstance(k, str) and isinstance(s, str) for k, s in v.items())
            ),
            "notes": lambda v: isinstance(v, list) and all(isinstance(n, str) for n in v),
        }
        for d in _devices(contract):
            for member, ok in checks.items():
                value = getattr(contract, member)(d)
                assert ok(value), f"{member}({d}) returned {value!r}, which is not of its documented type"

    # ---- allocations --------------------------------------------------------------------------------
    def test_process_usage_rises_by_an_allocation(self, contract, capabilities, request):
        capabilities.require("process_memory", "can_allocate")
        allocate = request.getfixturevalue("allocate")
        _warm_up(allocate)
        n = capabilities.allocation_size
        before = _usage(contract)
        with allocate(n, 0):
            after = _usage(contract)
        _expect_change(
            "get_process_memory_usage(0)",
            after - before,
            n,
            capabilities.granularity,
            "process usage must rise by what this process allocates, in bytes",
        )

    def test_process_usage_is_in_bytes(self, contract, capabilities, request):
        capabilities.require("process_memory", "can_allocate")
        allocate = request.getfixturevalue("allocate")
        _warm_up(allocate)
        n = capabilities.allocation_size
        with allocate(n, 0):
            used = _usage(contract)
        assert used >= n - capabilities.granularity, (
            f"get_process_memory_usage(0) is {used} bytes while this process holds an allocation of {n} bytes "
            f"({gib(n)}): the figure is probably in KiB or MiB instead of bytes (wrong units)"
        )

    def test_process_usage_falls_back_after_free(self, contract, capabilities, request):
        capabilities.require("process_memory", "can_allocate")
        allocate = request.getfixturevalue("allocate")
        _warm_up(allocate)
        before = _usage(contract)
        allocate(capabilities.allocation_size, 0).free()
        after = _usage(contract)
        _expect_change(
            "get_process_memory_usage(0) after allocating and freeing",
            after - before,
            0,
            capabilities.granularity,
            "process usage must fall back once the memory is freed",
        )

    def test_free_falls_by_an_allocation(self, contract, capabilities, request):
        capabilities.require("can_allocate", "free_tracks_allocations")
        allocate = request.getfixturevalue("allocate")
        _warm_up(allocate)
        n = capabilities.allocation_size
        before = contract.device_memory_info(0).free
        with allocate(n, 0):
            after = contract.device_memory_info(0).free
        _expect_change(
            "device_memory_info(0).free",
            before - after,
            n,
            capabilities.granularity,
            "free must fall by what an allocation takes, in bytes",
        )

    def test_other_process_allocation_is_not_counted(self, contract, capabilities, request):
        capabilities.require("process_memory", "other_process_allocation")
        allocate_elsewhere = request.getfixturevalue("allocate_in_other_process")
        n = capabilities.allocation_size
        before = _usage(contract)
        with allocate_elsewhere(n, 0):
            after = _usage(contract)
        assert abs(after - before) <= capabilities.granularity, (
            f"get_process_memory_usage(0) changed by {after - before} bytes when another process allocated {n} "
            "bytes: another process's allocation was counted as this process's memory (counting other processes)"
        )

    def test_other_processes_memory_counts_the_other_allocation(self, contract, capabilities, request):
        capabilities.require("other_process_allocation")
        listing = contract.other_processes_memory
        if listing(0) is None:
            pytest.skip("the platform does not list other processes' memory (other_processes_memory gives None)")
        allocate_elsewhere = request.getfixturevalue("allocate_in_other_process")
        n = capabilities.allocation_size
        before = sum(listing(0).values())
        with allocate_elsewhere(n, 0) as held:
            others = listing(0) or {}
        assert sum(others.values()) - before >= n - capabilities.granularity, (
            f"other_processes_memory(0) grew by {sum(others.values()) - before} bytes while process {held.pid} "
            f"held {n} bytes: {others}"
        )

    # ---- concurrency and cost -------------------------------------------------------------------------
    def test_eight_threads_get_consistent_answers(self, contract):
        def answers() -> list[tuple]:
            out = []
            for d in _devices(contract):
                free, total = contract.device_memory_info(d)
                used = contract.get_process_memory_usage(d)
                assert 0 < free <= total, f"a thread saw free={free}, total={total} on device {d}"
                out.append(
                    (d, total, used is None, contract.is_integrated_gpu(d), contract.pages_instead_of_failing(d))
                )
            return out

        expected = answers()
        barrier = threading.Barrier(8)

        def work() -> set:
            barrier.wait(timeout=30)
            return {tuple(answers()) for _ in range(20)}

        with ThreadPoolExecutor(8) as pool:
            futures = [pool.submit(work) for _ in range(8)]
        seen: set = set()
        for future in futures:
            exc = future.exception()
            if exc is not None:
                pytest.fail(f"a call raised {type(exc).__name__} while 8 threads called every method at once: {exc}")
            seen |= future.result()
        assert seen == {tuple(expected)}, (
            f"8 threads calling every method at once got inconsistent answers (device, total, process is None, "
            f"integrated, pages): expected {expected}, saw {sorted(seen)}"
        )

    def test_every_call_is_cheap(self, contract, capabilities, request):
        calls: dict[str, Callable[[], object]] = {"device_count": contract.device_count}
        for member in METHODS + EXPLAINING:
            calls[member] = functools.partial(getattr(contract, member), 0)
        seconds: dict[str, float] = {}
        for member, call in calls.items():
            call()  # a first call may initialise lazily
            samples: list[float] = []
            while len(samples) < 25 and sum(samples) < 1.0:
                start = time.perf_counter()
                call()
                samples.append(time.perf_counter() - start)
            seconds[member] = statistics.median(samples)
        request.node.user_properties.append(("devmem_call_seconds", seconds))
        slow = {m: f"{s * 1e3:.1f} ms" for m, s in seconds.items() if s > capabilities.max_call_seconds}
        assert not slow, (
            f"calls slower than {capabilities.max_call_seconds * 1e3:.0f} ms (median): {slow}; "
            "every call must stay cheap"
        )

    def test_hook_implementations_match_devmems_specs(self, contract):
        registered = [c for c in devmem.platform_candidates() if c.name == contract.name]
        if not registered:
            pytest.skip(
                f"platform {contract.name!r} is not registered through the 'devmem' entry-point group here, "
                "so its plugin's hooks cannot be found"
            )
        from devmem.resolution.entrypoints import entry_points
        from devmem.testing.hooks import hook_problems

        plugin = next(ep for ep in entry_points("devmem") if ep.name == registered[0].plugin).load()
        problems = hook_problems(plugin)
        assert not problems, f"plugin {registered[0].plugin!r}'s hook implementations: {'; '.join(problems)}"

    def test_detection_in_a_fresh_process_is_cheap(self, contract, capabilities, request):
        registered = [c for c in devmem.platform_candidates() if c.name == contract.name]
        if not registered:
            pytest.skip(
                f"platform {contract.name!r} is not registered through the 'devmem' entry-point group here, "
                "so its detection cannot be run in a fresh process"
            )
        probe = run_detection_probe(registered[0].plugin)
        request.node.user_properties.append(("devmem_detect_seconds", probe["seconds"]))
        assert contract.name in [c["name"] for c in probe["candidates"]], (
            f"plugin {registered[0].plugin!r} did not yield platform {contract.name!r} in a fresh process: {probe}"
        )
        assert not probe["torch"], (
            "detection imported torch; detect() must be a cheap probe (no torch, no device context)"
        )
        assert not probe["runtimes"], (
            f"detection loaded or initialised {probe['runtimes']} (the device runtime, by "
            "the markers the platform declares): it must create no device context; probe "
            "with the vendor's management library or sysfs instead"
        )
        assert probe["cpu_seconds"] <= capabilities.max_detect_seconds, (
            f"resolution with plugin {registered[0].plugin!r} took {probe['cpu_seconds']:.3f} s of CPU time in a "
            f"fresh process ({probe['seconds']:.3f} s of wall time), more than {capabilities.max_detect_seconds} s: "
            "detection must stay cheap"
        )
