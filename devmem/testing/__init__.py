"""Tools for testing memory logic without the hardware, and the conformance kit for backend authors."""

from devmem.testing.scenario import HostMemory, Scenario, ScriptedDevice, ScriptedFiles

__all__ = ["HostMemory", "Scenario", "ScriptedDevice", "ScriptedFiles"]
