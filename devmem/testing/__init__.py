"""The conformance kit for backend authors, and the vendor-neutral parts of a scripted machine.

A vendor package owns its scripted library and machine presets (``devmem_nvidia.testing``,
``devmem_rocm.testing``, ``devmem_uma.testing``, or a vendor wheel's own module), built on the
:class:`Scenario` here.
"""

from devmem.lazy import lazy_exports
from devmem.testing.scenario import HostMemory, Scenario, ScriptedClock, ScriptedDevice, ScriptedFiles, ScriptedLibrary

# The conformance kit imports pytest, so it loads on first use: `from devmem.testing import PlatformConformance`.
_KIT = {
    "Allocation": "devmem.testing.allocations",
    "Capabilities": "devmem.testing.conformance",
    "PlatformConformance": "devmem.testing.conformance",
    "PlatformFixtures": "devmem.testing.conformance",
    "HostFixtures": "devmem.testing.fixtures",
    "ScriptedFixtures": "devmem.testing.fixtures",
    "TorchFixtures": "devmem.testing.fixtures",
    "scripted_fixtures": "devmem.testing.fixtures",
}
__all__ = [
    "Allocation", "Capabilities", "HostFixtures", "HostMemory", "PlatformConformance", "PlatformFixtures", "Scenario",
    "ScriptedClock", "ScriptedDevice", "ScriptedFiles", "ScriptedFixtures", "ScriptedLibrary", "TorchFixtures", "scripted_fixtures",
]


__getattr__, __dir__ = lazy_exports(globals(), _KIT)
