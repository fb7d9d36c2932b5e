"""Tools for testing memory logic without the hardware, and the conformance kit for backend authors."""

from devmem.testing.nvml import ScriptedAllocator, ScriptedNvml, h200_scenario, mig_scenario, wsl2_scenario
from devmem.testing.scenario import HostMemory, Scenario, ScriptedDevice, ScriptedFiles

__all__ = ["HostMemory", "Scenario", "ScriptedAllocator", "ScriptedDevice", "ScriptedFiles", "ScriptedNvml",
           "h200_scenario", "mig_scenario", "wsl2_scenario"]
