"""Tools for testing memory logic without the hardware, and the conformance kit for backend authors."""

from devmem.lazy import lazy_exports
from devmem.testing.amdsmi import ScriptedAmdsmi, ScriptedClock, mi300x_scenario, radeon_scenario
from devmem.testing.nvml import ScriptedAllocator, ScriptedNvml, h200_scenario, mig_scenario, wsl2_scenario
from devmem.testing.scenario import HostMemory, Scenario, ScriptedDevice, ScriptedFiles
from devmem.testing.uma import gb10_scenario, jetson_orin_scenario, mi300a_scenario, strix_halo_scenario

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
__all__ = sorted([
    "HostMemory", "Scenario", "ScriptedDevice", "ScriptedFiles",
    "ScriptedAllocator", "ScriptedNvml", "h200_scenario", "mig_scenario", "wsl2_scenario",
    "ScriptedAmdsmi", "ScriptedClock", "mi300x_scenario", "radeon_scenario",
    "gb10_scenario", "jetson_orin_scenario", "mi300a_scenario", "strix_halo_scenario",
    *_KIT,
])


__getattr__, __dir__ = lazy_exports(globals(), _KIT)
