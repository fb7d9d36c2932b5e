"""amdsmi access: the silent import, one initialisation under threads, errors, shut-down at exit."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
import textwrap
import threading
from pathlib import Path

import pytest

from devmem.sdk.sessions import shutdown_all
from devmem.testing import ScriptedClock
from devmem.types import DevmemError
from devmem_rocm.driver import NO_DRIVER, driver_loaded
from devmem_rocm.smi import (
    LIBRARY_MISSING,
    NOT_INSTALLED,
    AmdsmiCallError,
    AmdsmiSession,
    AmdsmiUnavailable,
    import_silently,
)
from devmem_rocm.testing import ScriptedAmdsmi, mi300x_scenario


def _rocm_library_present() -> bool:
    spec = importlib.util.find_spec("amdsmi")
    if spec is None:
        return False
    here = Path(spec.origin).parent / "libamd_smi.so"
    rocm = Path(os.environ.get("ROCM_PATH", "/opt/rocm")) / "lib" / "libamd_smi.so"
    return here.exists() or rocm.exists()


needs_wheel_without_rocm = pytest.mark.skipif(
    importlib.util.find_spec("amdsmi") is None or _rocm_library_present(),
    reason="needs the amdsmi wheel installed on a machine without ROCm's libamd_smi.so",
)


@needs_wheel_without_rocm
def test_resolution_with_the_real_wheel_and_no_rocm_prints_nothing():
    probe = textwrap.dedent("""
        import json, sys
        import devmem
        candidates = devmem.platform_candidates()
        rocm = [c.reason for c in candidates if c.name == "rocm"]
        sys.stderr.write("RESULT " + json.dumps(rocm) + "\\n")
    """)
    env = {k: v for k, v in os.environ.items() if k not in ("DEVMEM_PLATFORM", "DEVMEM_LOAD_PLUGINS")}
    done = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, env=env, timeout=120, check=True
    )
    assert done.stdout == ""
    result = [line for line in done.stderr.splitlines() if line.startswith("RESULT ")]
    assert json.loads(result[0].removeprefix("RESULT ")) == [
        f"the amdgpu driver is loaded, but {LIBRARY_MISSING}" if driver_loaded() else NO_DRIVER
    ]


@needs_wheel_without_rocm
def test_detection_with_the_real_wheel_where_amdgpu_is_loaded_but_rocm_is_not_prints_nothing():
    probe = textwrap.dedent("""
        import sys
        from devmem_rocm.testing import mi300x_scenario
        from devmem_rocm.platform import detect
        sys.stderr.write("RESULT " + detect(files=mi300x_scenario(1).fs, environ={}).reason + "\\n")
    """)
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=120, check=True)
    assert done.stdout == ""
    assert [line for line in done.stderr.splitlines() if line.startswith("RESULT ")] == [
        f"RESULT the amdgpu driver is loaded, but {LIBRARY_MISSING}"
    ]


@needs_wheel_without_rocm
def test_import_devmem_and_its_rocm_plugin_with_the_real_wheel_prints_nothing():
    done = subprocess.run(
        [sys.executable, "-c", "import devmem, devmem_rocm.plugin, devmem_rocm"],
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    assert (done.stdout, done.stderr) == ("", "")


MISBEHAVING = """
print("libamd_smi.so: cannot open shared object file: No such file or directory")
print("Unable to find libamd_smi.so library try installing amd-smi-lib from your package manager")
_libraries = {}
amdsmi_free_name_value_pairs = _libraries["libamd_smi.so"].amdsmi_free_name_value_pairs
"""


def test_a_module_that_prints_and_raises_like_amdsmi_is_imported_silently(site, capsys):
    (site / "fake_amdsmi_wrapper.py").write_text(MISBEHAVING)
    module, reason = import_silently("fake_amdsmi_wrapper")
    assert module is None and reason == LIBRARY_MISSING
    assert capsys.readouterr() == ("", "")


def test_missing_amdsmi_package_is_reported_as_not_installed():
    module, reason = import_silently("amdsmi_that_is_not_installed")
    assert module is None and reason == NOT_INSTALLED


def test_library_older_than_the_package_is_reported_as_a_mismatch(site):
    (site / "fake_amdsmi_old_lib.py").write_text(
        "raise AttributeError('/opt/rocm/lib/libamd_smi.so: undefined symbol: amdsmi_get_gpu_enumeration_info')\n"
    )
    _, reason = import_silently("fake_amdsmi_old_lib")
    assert "does not match ROCm's libamd_smi.so" in reason and "undefined symbol" in reason


def test_amdsmi_is_initialised_once_by_many_threads():
    fake = ScriptedAmdsmi(mi300x_scenario())
    session = AmdsmiSession(fake)
    barrier = threading.Barrier(8)

    def work():
        barrier.wait(timeout=10)
        for _ in range(50):
            session.call("amdsmi_get_processor_handles")

    threads = [threading.Thread(target=work) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert fake.calls["amdsmi_init"] == 1 and fake.initialised == 1
    assert fake.calls["amdsmi_get_processor_handles"] == 400


def test_amdsmi_is_initialised_for_gpus_only():
    fake = ScriptedAmdsmi(mi300x_scenario())
    seen = []
    original = fake.amdsmi_init
    fake.amdsmi_init = lambda flag=fake.AmdSmiInitFlags.INIT_AMD_GPUS: (seen.append(flag), original(flag))
    AmdsmiSession(fake).call("amdsmi_get_processor_handles")
    assert seen == [fake.AmdSmiInitFlags.INIT_AMD_GPUS]


def test_shutdown_at_exit_releases_amdsmi_and_a_later_call_initialises_again():
    fake = ScriptedAmdsmi(mi300x_scenario())
    session = AmdsmiSession(fake)
    session.call("amdsmi_get_processor_handles")
    shutdown_all()
    assert fake.initialised == 0 and fake.calls["amdsmi_shut_down"] == 1
    session.call("amdsmi_get_processor_handles")
    assert fake.initialised == 1


def test_amdsmi_is_shut_down_when_the_interpreter_exits():
    code = textwrap.dedent("""
        import atexit
        from devmem_rocm.testing import ScriptedAmdsmi, mi300x_scenario
        from devmem_rocm.smi import AmdsmiSession
        fake = ScriptedAmdsmi(mi300x_scenario())
        atexit.register(lambda: print("shut down", fake.calls["amdsmi_shut_down"], "initialised", fake.initialised))
        session = AmdsmiSession(fake)
        session.call("amdsmi_get_processor_handles")
    """)  # atexit runs handlers last-registered first: devmem's, registered at init, runs before the print
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True)
    assert done.stdout.strip() == "shut down 1 initialised 0"


def test_an_amdsmi_error_becomes_a_devmem_error_with_its_status():
    sc = mi300x_scenario(failures={"amdsmi_get_processor_handles": "NoPermission"})
    with pytest.raises(AmdsmiCallError) as info:
        AmdsmiSession(ScriptedAmdsmi(sc)).call("amdsmi_get_processor_handles")
    assert isinstance(info.value, DevmemError)
    assert info.value.status == "AMDSMI_STATUS_NO_PERM" and info.value.code == 10
    assert "Permission Denied" in str(info.value)


def test_a_failed_init_is_reported_as_unavailable_with_the_status():
    sc = mi300x_scenario(failures={"amdsmi_init": "DRIVER_NOT_LOADED"})
    with pytest.raises(AmdsmiUnavailable, match="amdsmi_init failed: AMDSMI_STATUS_DRIVER_NOT_LOADED"):
        AmdsmiSession(ScriptedAmdsmi(sc)).call("amdsmi_get_processor_handles")


def test_a_function_this_amdsmi_lacks_is_a_devmem_error():
    session = AmdsmiSession(ScriptedAmdsmi(mi300x_scenario(), missing={"amdsmi_get_gpu_enumeration_info"}))
    assert not session.has("amdsmi_get_gpu_enumeration_info")
    with pytest.raises(AmdsmiCallError, match="no such function"):
        session.call("amdsmi_get_gpu_enumeration_info", None)


def test_settle_waits_only_for_what_is_left_of_the_delay():
    clock = ScriptedClock()
    session = AmdsmiSession(ScriptedAmdsmi(mi300x_scenario(), clock=clock), clock=clock, sleep=clock.sleep)
    session.call("amdsmi_get_processor_handles")
    clock.advance(0.25)
    session.settle(1.0)
    session.settle(1.0)
    assert clock.slept == [0.75]
