"""A scripted ``psutil`` for the ACME platform, answering from a :class:`devmem.testing.Scenario`.

ACME's device memory is host memory, so the scenario's host (``Scenario.host``) is the device and an allocation
on device 0 is charged to it (an ``integrated`` :class:`~devmem.testing.ScriptedDevice`)::

    sc = acme_scenario()
    platform = AcmePlatform(psutil=ScriptedPsutil(sc))
    sc.allocate(1 * GiB)                   # this process
    sc.allocate(1 * GiB, pid=sc.other_pid)  # another process

``Scenario.failures`` maps ``"virtual_memory"`` or ``"memory_info"`` to an error name: the call raises
``psutil.Error`` with it.
"""

from __future__ import annotations

from types import SimpleNamespace

from devmem.testing import HostMemory, Scenario, ScriptedDevice
from devmem.types import GiB, MiB

#: What an idle interpreter holds before any allocation (its resident set).
BASE_RSS = 48 * MiB


class Error(Exception):
    """``psutil.Error``."""


class ScriptedPsutil:
    """The two calls :class:`devmem_acme.platform.AcmePlatform` makes, as psutil answers them."""

    Error = Error

    def __init__(self, scenario: Scenario):
        self.scenario = scenario

    def _check(self, call: str) -> None:
        error = self.scenario.failure(call)
        if error is not None:
            raise Error(f"{call}: {error}")

    def virtual_memory(self) -> SimpleNamespace:
        self._check("virtual_memory")
        host = self.scenario.host
        return SimpleNamespace(total=host.total, available=host.available, free=host.free)

    def Process(self, pid: int | None = None) -> SimpleNamespace:
        sc = self.scenario
        owner = sc.own_driver_pid if pid is None else pid

        def memory_info() -> SimpleNamespace:
            self._check("memory_info")
            return SimpleNamespace(rss=BASE_RSS + sum(sc.usage.get(owner, {}).values()))

        return SimpleNamespace(pid=owner, memory_info=memory_info)


def acme_scenario(**kwargs: object) -> Scenario:
    """One ACME accelerator on a 64 GiB host."""
    device = ScriptedDevice(
        name="ACME reference accelerator (host memory)", vendor="acme", total=0, reserved=0, integrated=True
    )
    return Scenario(
        devices=[device],
        host=HostMemory(total=64 * GiB, free=40 * GiB, page_cache=8 * GiB),
        libraries={"psutil"},
        **kwargs,
    )
