"""The conformance kit against the uma platform, driven by scenarios of unified-memory machines."""

from __future__ import annotations

from devmem.testing import PlatformConformance, scripted_fixtures
from devmem_nvidia.testing import ScriptedAllocator, ScriptedNvml
from devmem_uma import UmaPlatform
from devmem_uma.testing import gb10_scenario, jetson_orin_scenario, mi300a_scenario, strix_halo_scenario


def uma(sc):
    return UmaPlatform(
        nvml=ScriptedNvml(sc),
        files=sc.fs,
        environ=sc.environ,
        mem_get_info=sc.mem_get_info,
        allocator=ScriptedAllocator(sc),
    )


UNIFIED = {"integrated": True, "pages_instead_of_failing": True}


class TestGb10Conformance(PlatformConformance, scripted_fixtures(gb10_scenario, uma, **UNIFIED)):
    pass


class TestJetsonOrinConformance(
    PlatformConformance,
    scripted_fixtures(
        jetson_orin_scenario,
        uma,
        process_memory=False,
        **UNIFIED,
        reasons={"process_memory": "Jetson Orin has no NVML, and Tegra reports per-process memory only to root"},
    ),
):
    pass


class TestStrixHaloConformance(PlatformConformance, scripted_fixtures(strix_halo_scenario, uma, **UNIFIED)):
    pass


class TestMi300aConformance(PlatformConformance, scripted_fixtures(mi300a_scenario, uma, **UNIFIED)):
    pass
