"""The wsl2 platform: detection on WSL2 and native Windows WDDM, no per-process figures, paging."""

from __future__ import annotations

import pytest

from devmem import DevmemError, GiB, MemoryInfo
from devmem_nvidia import WslPlatform, detect_wsl2
from devmem_nvidia.testing import ScriptedNvidiaDriver, ScriptedNvml, h200_scenario, wsl2_scenario
from devmem_nvidia.wsl2 import WDDM_REASON


def wsl2(sc, **kwargs):
    return WslPlatform(nvml=ScriptedNvml(sc), files=sc.fs, environ=sc.environ, **kwargs)


def test_detected_by_dev_dxg():
    sc = wsl2_scenario()
    del sc.files["/proc/sys/kernel/osrelease"]
    assert detect_wsl2(ScriptedNvml(sc), sc.fs, "linux").detected


def test_detected_by_microsoft_kernel_release():
    sc = wsl2_scenario()
    del sc.files["/dev/dxg"]
    assert detect_wsl2(ScriptedNvml(sc), sc.fs, "linux").detected


def test_plain_linux_is_not_wsl2():
    sc = h200_scenario()
    sc.files["/proc/sys/kernel/osrelease"] = "6.8.0-49-generic\n"
    assert not detect_wsl2(ScriptedNvml(sc), sc.fs, "linux").detected


def test_wsl2_without_an_nvidia_gpu_is_not_claimed():
    sc = wsl2_scenario()
    sc.driver(ScriptedNvidiaDriver).libraries.discard("nvml")
    detection = detect_wsl2(ScriptedNvml(sc), sc.fs, "linux")
    assert not detection.detected and "LibraryNotFound" in detection.reason


def test_native_windows_with_wddm_is_detected():
    sc = wsl2_scenario()
    sc.files.clear()
    assert detect_wsl2(ScriptedNvml(sc), sc.fs, "win32").detected


def test_native_windows_with_tcc_is_left_to_nvml():
    sc = h200_scenario()
    assert not detect_wsl2(ScriptedNvml(sc), sc.fs, "win32").detected


def test_process_usage_is_none():
    sc = wsl2_scenario()
    sc.allocate(GiB)
    assert wsl2(sc).get_process_memory_usage(0) is None


def test_reason_is_wddm():
    assert wsl2(wsl2_scenario()).process_memory_reason(0) == WDDM_REASON == "WDDM does not report per-process memory"


def test_pages_instead_of_failing():
    assert wsl2(wsl2_scenario()).pages_instead_of_failing(0) is True


def test_device_memory_from_nvml():
    sc = wsl2_scenario()
    sc.allocate(2 * GiB)
    assert wsl2(sc).device_memory_info(0) == MemoryInfo(22 * GiB, 24 * GiB)


def test_runtime_is_not_asked_when_nvml_answers():
    asked = []
    wsl2(wsl2_scenario(), mem_get_info=lambda d: asked.append(d) or (0, 0)).device_memory_info(0)
    assert asked == []


def test_device_memory_from_the_runtime_when_nvml_does_not_answer():
    sc = wsl2_scenario(failures={"nvmlDeviceGetMemoryInfo*": "NotSupported"})
    sc.allocate(2 * GiB)
    assert wsl2(sc, mem_get_info=sc.mem_get_info).device_memory_info(0) == MemoryInfo(22 * GiB, 24 * GiB)


def test_runtime_source_is_named():
    sc = wsl2_scenario(failures={"nvmlDeviceGetMemoryInfo*": "NotSupported"})
    assert "mem_get_info" in wsl2(sc, mem_get_info=sc.mem_get_info).memory_sources(0)["free"]


def test_both_failing_raises_devmem_error():
    sc = wsl2_scenario(failures={"nvmlDeviceGetMemoryInfo*": "Unknown", "cudaMemGetInfo": "cudaErrorUnknown"})
    with pytest.raises(DevmemError, match="Unknown"):
        wsl2(sc, mem_get_info=sc.mem_get_info).device_memory_info(0)


def test_bad_index_raises_devmem_error():
    with pytest.raises(DevmemError, match=r"0\.\.0"):
        wsl2(wsl2_scenario()).get_process_memory_usage(1)


def test_notes_explain_paging():
    assert any("pages" in n for n in wsl2(wsl2_scenario()).notes(0))
