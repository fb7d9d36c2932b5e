"""ACME's parts of a scripted machine, on devmem's vendor-neutral :class:`devmem.testing.Scenario`, built as the
built-in backends build theirs: a device (:class:`ScriptedAcmeDevice`), its driver with the files it exposes
(:class:`ScriptedAcmeDriver`) and the vendor library (:class:`ScriptedPsutil`).

ACME's device memory is host memory, so the scenario's host (``Scenario.host``) is the device and an allocation
on device 0 is charged to it (the device is ``integrated``)::

    sc = acme_scenario()
    platform = AcmePlatform(psutil=ScriptedPsutil(sc), files=sc.fs)
    sc.allocate(1 * GiB)                   # this process
    sc.allocate(1 * GiB, pid=sc.other_pid)  # another process

``Scenario.failures`` maps ``"virtual_memory"`` or ``"memory_info"`` to an error name: the call raises
``psutil.Error`` with it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from types import SimpleNamespace

from devmem import GiB, MiB
from devmem.testing import HostMemory, Scenario, ScriptedDevice, ScriptedDriver, ScriptedLibrary
from devmem_acme.platform import DRIVER_VERSION

#: What an idle interpreter holds before any allocation (its resident set).
BASE_RSS = 48 * MiB


@dataclass
class ScriptedAcmeDriver(ScriptedDriver):
    """The acme kernel module, at ``version``, with psutil installed; it states its version in sysfs."""

    version: str = "0.3.1"
    libraries: set[str] = field(default_factory=lambda: {"psutil"})

    def files(self, scenario: Scenario) -> dict[str, str]:
        return {DRIVER_VERSION: f"{self.version}\n"} if scenario.indices(ScriptedAcmeDevice) else {}


@dataclass(kw_only=True)
class ScriptedAcmeDevice(ScriptedDevice):
    """The ACME reference accelerator: no memory of its own, it computes in host memory."""

    driver_type = ScriptedAcmeDriver

    name: str = "ACME reference accelerator (host memory)"
    total: int = 0
    integrated: bool = True


class Error(Exception):
    """``psutil.Error``."""


class ScriptedPsutil(ScriptedLibrary):
    """The two calls :class:`devmem_acme.platform.AcmePlatform` makes, as psutil answers them; ``calls`` counts
    them by name."""

    Error = Error

    def error(self, name: str) -> Exception:
        return Error(name)

    def virtual_memory(self) -> SimpleNamespace:
        self._enter("virtual_memory", needs_init=False)  # psutil has no init call
        host = self.scenario.host
        return SimpleNamespace(total=host.total, available=host.available, free=host.free)

    def Process(self, pid: int | None = None) -> SimpleNamespace:
        sc = self.scenario
        owner = sc.own_driver_pid if pid is None else pid

        def memory_info() -> SimpleNamespace:
            self._enter("memory_info", needs_init=False)
            return SimpleNamespace(rss=BASE_RSS + sum(sc.usage.get(owner, {}).values()))

        return SimpleNamespace(pid=owner, memory_info=memory_info)


def acme_scenario(**kwargs: object) -> Scenario:
    """One ACME accelerator on a 64 GiB host."""
    return Scenario(
        devices=[ScriptedAcmeDevice()], host=HostMemory(total=64 * GiB, free=40 * GiB, page_cache=8 * GiB), **kwargs
    )
