"""Ready-made fixture mixins for the conformance kit: host memory, torch devices, scripted scenarios.

A scripted backend's conformance file is one class::

    class TestMineConformance(PlatformConformance, scripted_fixtures(
            lambda: Scenario(),
            lambda sc: MyPlatform(lib=ScriptedLib(sc), files=sc.fs, environ=sc.environ),
            integrated=False, pages_instead_of_failing=False)):
        pass
"""

from __future__ import annotations

import functools
import os
from collections.abc import Callable
from typing import Any

import pytest

import devmem
from devmem.platform import Platform
from devmem.testing.allocations import (
    Allocation,
    allocate_host,
    allocate_host_in_subprocess,
    allocate_torch,
    allocate_torch_in_subprocess,
)
from devmem.testing.conformance import Capabilities, PlatformFixtures, ReferenceMemory, torch_device_reason
from devmem.testing.scenario import Scenario
from devmem.types import MiB

#: Host figures move with the interpreter's own heap and the page tables: allow this much noise.
HOST_GRANULARITY = 32 * MiB
#: torch's caching allocator and the driver round allocations; the first one also maps kernels.
TORCH_GRANULARITY = 32 * MiB


class HostFixtures(PlatformFixtures):
    """Device memory is host RAM: real allocations with touched pages, here and in a child process."""

    @pytest.fixture
    def capabilities(self) -> Capabilities:
        return Capabilities(
            integrated=True,
            pages_instead_of_failing=True,
            can_allocate=True,
            other_process_allocation=True,
            granularity=HOST_GRANULARITY,
            reasons={
                "free_tracks_allocations": "host memory is shared with every process on the machine, "
                "so free moves with them"
            },
        )

    @pytest.fixture
    def allocate(self) -> Callable[[int, int], Allocation]:
        return allocate_host

    @pytest.fixture
    def allocate_in_other_process(self) -> Callable[[int, int], Allocation]:
        return allocate_host_in_subprocess


def installed_platform(name: str) -> Platform:
    """The registered platform ``name``, built exactly as ``DEVMEM_PLATFORM=name`` builds it."""
    saved = os.environ.get("DEVMEM_PLATFORM")
    os.environ["DEVMEM_PLATFORM"] = name
    devmem.clear_cache()
    try:
        return devmem.current_platform()
    finally:
        if saved is None:
            del os.environ["DEVMEM_PLATFORM"]
        else:
            os.environ["DEVMEM_PLATFORM"] = saved
        devmem.clear_cache()


class TorchFixtures(PlatformFixtures):
    """Real device memory through the torch namespace the platform declares, here and in a child process."""

    @pytest.fixture
    def capabilities(self, platform) -> Capabilities:
        reason = torch_device_reason(platform)
        reasons = {"free_tracks_allocations": "other processes may use the device meanwhile"}
        if reason is not None:
            reasons.update(can_allocate=reason, other_process_allocation=reason)
        return Capabilities(
            can_allocate=reason is None,
            other_process_allocation=reason is None,
            granularity=TORCH_GRANULARITY,
            reasons=reasons,
        )

    @pytest.fixture
    def allocate(self, platform) -> Callable[[int, int], Allocation]:
        return functools.partial(allocate_torch, namespace=platform.torch_device)

    @pytest.fixture
    def allocate_in_other_process(self, platform) -> Callable[[int, int], Allocation]:
        return functools.partial(allocate_torch_in_subprocess, namespace=platform.torch_device)


def scenario_allocation(scenario: Scenario, nbytes: int, device: int = 0, pid: int | None = None) -> Allocation:
    """``pid`` (this process by default) allocates ``nbytes`` on a scripted device until freed."""
    pid = scenario.own_driver_pid if pid is None else pid
    scenario.allocate(nbytes, device, pid=pid)
    return Allocation(nbytes, device, pid, lambda: scenario.release(nbytes, device, pid=pid))


class ScriptedFixtures(PlatformFixtures):
    """A backend driven by a :class:`Scenario`: provide ``scenario`` and ``make_platform``.

    Allocations go through the scenario (``Scenario.allocate(pid=...)``), so the scripted vendor
    library sees them exactly as the driver would.
    """

    @pytest.fixture
    def scenario(self) -> Scenario:
        raise NotImplementedError(
            "Provide a `scenario` fixture returning a fresh devmem.testing.Scenario of the machine to simulate."
        )

    @pytest.fixture
    def make_platform(self) -> Callable[[Scenario], Platform]:
        raise NotImplementedError(
            "Provide a `make_platform` fixture returning a callable that builds the platform under test from the "
            "Scenario, e.g. `lambda sc: MyPlatform(lib=ScriptedLib(sc), files=sc.fs, environ=sc.environ)`."
        )

    @pytest.fixture
    def platform(self, scenario, make_platform) -> Platform:
        return make_platform(scenario)

    @pytest.fixture
    def capabilities(self) -> Capabilities:
        return Capabilities(can_allocate=True, other_process_allocation=True, free_tracks_allocations=True)

    @pytest.fixture
    def reference_memory(self, scenario, platform) -> ReferenceMemory | str:
        if platform.device_count() != len(scenario.devices):  # MIG instances or hidden devices: no 1:1 runtime view
            return (
                f"{platform.name} shows {platform.device_count()} devices of the scenario's "
                f"{len(scenario.devices)}: the scripted runtime's mem_get_info cannot be matched to them"
            )
        return ReferenceMemory("the scripted runtime's mem_get_info", scenario.mem_get_info)

    @pytest.fixture
    def allocate(self, scenario) -> Callable[[int, int], Allocation]:
        return functools.partial(scenario_allocation, scenario)

    @pytest.fixture
    def allocate_in_other_process(self, scenario) -> Callable[[int, int], Allocation]:
        return functools.partial(scenario_allocation, scenario, pid=scenario.other_pid)


def scripted_fixtures(
    make_scenario: Callable[[], Scenario], make_platform: Callable[[Scenario], Platform], **capabilities: Any
) -> type[ScriptedFixtures]:
    """A :class:`ScriptedFixtures` subclass for ``make_platform(make_scenario())``.

    ``capabilities`` are :class:`Capabilities` fields; allocation here and in another process, and
    free tracking allocations, are on unless given.
    """
    declared = Capabilities(
        **{"can_allocate": True, "other_process_allocation": True, "free_tracks_allocations": True, **capabilities}
    )
    build = make_platform

    class Fixtures(ScriptedFixtures):
        @pytest.fixture
        def scenario(self) -> Scenario:
            return make_scenario()

        @pytest.fixture
        def make_platform(self) -> Callable[[Scenario], Platform]:
            return build

        @pytest.fixture
        def capabilities(self) -> Capabilities:
            return declared

    return Fixtures
