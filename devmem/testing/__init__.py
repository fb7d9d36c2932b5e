"""The conformance kit for backend authors, and the vendor-neutral parts of a scripted machine.

A vendor package owns its scripted library, its device and driver parts and its machine presets in a module
of its own (each built-in backend's ``testing`` module, or a vendor wheel's), built on the :class:`Scenario`
here: a :class:`ScriptedDevice` subclass for its per-device fields, a
:class:`ScriptedDriver` subclass for its machine-level facts and the files its driver exposes, and a
:class:`ScriptedLibrary` subclass for its vendor library.
"""

from typing import TYPE_CHECKING

from devmem._lazy import lazy_exports
from devmem.testing.scenario import (
    HostMemory,
    Scenario,
    ScriptedClock,
    ScriptedDevice,
    ScriptedDriver,
    ScriptedFiles,
    ScriptedLibrary,
    drm_fdinfo,
)

if TYPE_CHECKING:  # the lazy names below, for type checkers
    from devmem.testing.allocations import Allocation
    from devmem.testing.conformance import Capabilities, PlatformConformance, PlatformFixtures, ReferenceMemory
    from devmem.testing.fixtures import HostFixtures, ScriptedFixtures, TorchFixtures, scripted_fixtures
    from devmem.testing.hooks import hook_problems

# The conformance kit imports pytest, so it loads on first use: `from devmem.testing import PlatformConformance`.
_KIT = {
    "Allocation": "devmem.testing.allocations",
    "Capabilities": "devmem.testing.conformance",
    "PlatformConformance": "devmem.testing.conformance",
    "PlatformFixtures": "devmem.testing.conformance",
    "ReferenceMemory": "devmem.testing.conformance",
    "HostFixtures": "devmem.testing.fixtures",
    "ScriptedFixtures": "devmem.testing.fixtures",
    "TorchFixtures": "devmem.testing.fixtures",
    "scripted_fixtures": "devmem.testing.fixtures",
    "hook_problems": "devmem.testing.hooks",
}
__all__ = [
    "Allocation",
    "Capabilities",
    "HostFixtures",
    "HostMemory",
    "PlatformConformance",
    "PlatformFixtures",
    "ReferenceMemory",
    "Scenario",
    "ScriptedClock",
    "ScriptedDevice",
    "ScriptedDriver",
    "ScriptedFiles",
    "ScriptedFixtures",
    "ScriptedLibrary",
    "TorchFixtures",
    "drm_fdinfo",
    "hook_problems",
    "scripted_fixtures",
]


__getattr__, __dir__ = lazy_exports(globals(), _KIT)
