"""``devmem doctor`` findings, against scripted machines (co-tenant, WSL2, GB10, PID namespace) and the real host."""

from __future__ import annotations

import json
import subprocess
import sys

from plugin_dists import platform_dist

from devmem.command.doctor import render
from devmem.cpu import CpuPlatform
from devmem.findings import diagnose
from devmem.types import GiB, MiB
from devmem_nvidia.testing import ScriptedNvml, h200_scenario, scripted_platform, wsl2_scenario
from devmem_nvidia.wsl2 import WslPlatform
from devmem_uma.platform import UmaPlatform
from devmem_uma.testing import gb10_scenario


def by_code(findings):
    return {f.kind: f for f in findings}


nvml_platform = scripted_platform


def test_cotenants_are_listed_with_pids_and_bytes():
    sc = h200_scenario(context=True)
    sc.allocate(8 * GiB, pid=4242)
    sc.allocate(2 * GiB, pid=5151)
    found = by_code(diagnose(nvml_platform(sc)))
    assert found["co-tenants"].summary == "2 other processes hold 10.00 GiB: pid 4242 (8.00 GiB), pid 5151 (2.00 GiB)"
    assert "summing to at most 1.0" in found["co-tenants"].action


def test_working_per_process_accounting_is_reported_ok():
    sc = h200_scenario(context=True)
    found = by_code(diagnose(nvml_platform(sc)))
    assert found["per-process-accounting"].severity == "ok"
    assert "520.00 MiB" in found["per-process-accounting"].summary
    assert found["per-process-accounting"].figures == {"process": 520 * MiB}


def test_process_without_a_context_cannot_confirm_accounting():
    found = by_code(diagnose(nvml_platform(h200_scenario())))
    assert found["per-process-accounting"].severity == "info"
    assert "cannot be confirmed" in found["per-process-accounting"].summary


def test_wsl2_warns_that_accounting_is_unavailable_and_the_driver_pages():
    sc = wsl2_scenario()
    platform = WslPlatform(nvml=ScriptedNvml(sc), files=sc.fs, environ=sc.environ)
    found = by_code(diagnose(platform))
    assert found["per-process-accounting"].severity == "warning"
    assert "WDDM does not report per-process memory" in found["per-process-accounting"].summary
    assert "one engine per device" in found["per-process-accounting"].action
    assert found["pages-instead-of-failing"].severity == "warning"


def test_gb10_explains_that_page_cache_counts_as_free():
    sc = gb10_scenario()
    platform = UmaPlatform(nvml=ScriptedNvml(sc), files=sc.fs, mem_get_info=sc.mem_get_info, environ=sc.environ)
    found = by_code(diagnose(platform))
    assert "reclaimable page cache" in found["unified-memory"].summary
    assert "release_allocator_cache" in found["unified-memory"].action
    assert "pages-instead-of-failing" not in found


def test_hidden_pid_namespace_says_what_to_do():
    sc = h200_scenario()
    sc.driver_pid, sc.nspid_visible = 987654, False
    sc.allocate(GiB)  # held under the host PID this container cannot see
    found = by_code(diagnose(nvml_platform(sc, learn_pid=False)))
    accounting = found["per-process-accounting"]
    assert accounting.severity == "warning"
    assert "--pid=host" in accounting.action


def test_low_free_memory_is_a_warning():
    sc = h200_scenario()
    sc.allocate(135 * GiB, pid=4242)
    found = by_code(diagnose(nvml_platform(sc)))
    assert found["low-free-memory"].severity == "warning" and "lower u" in found["low-free-memory"].action


def test_cpu_platform_says_no_accelerator_is_in_use():
    found = by_code(diagnose(CpuPlatform()))
    assert "no accelerator platform is in use" in found["no-accelerator"].summary
    assert found["per-process-accounting"].severity == "ok"


def test_platform_whose_library_is_missing_is_a_machine_warning_with_what_to_install(site, monkeypatch):
    acme = platform_dist(
        site,
        "devmem-acme",
        "acme",
        priority=50,
        found=False,
        reason="the acme driver is loaded, but acmelib is not installed",
        action="pip install acmelib",
    )
    monkeypatch.setenv("DEVMEM_LOAD_PLUGINS", acme)
    found = by_code(diagnose(CpuPlatform()))["platform-unusable"]
    assert (found.device, found.severity, found.action) == (None, "warning", "pip install acmelib")
    assert found.summary == (
        "platform 'acme' (from devmem-acme) cannot be used: the acme driver is loaded, but acmelib is not installed"
    )


def test_platform_absent_for_want_of_hardware_is_no_finding(site, monkeypatch):
    acme = platform_dist(site, "devmem-acme", "acme", priority=50, found=False, reason="no ACME card")
    monkeypatch.setenv("DEVMEM_LOAD_PLUGINS", acme)
    assert "platform-unusable" not in by_code(diagnose(CpuPlatform()))


def test_machine_findings_are_rendered_for_the_machine(site, monkeypatch):
    acme = platform_dist(
        site, "devmem-acme", "acme", priority=50, found=False, reason="acmelib is missing", action="pip install acmelib"
    )
    monkeypatch.setenv("DEVMEM_LOAD_PLUGINS", acme)
    lines = render(diagnose(CpuPlatform()), "cpu", width=1000).splitlines()
    assert lines[1:3] == [
        "[WARN] machine: platform 'acme' (from devmem-acme) cannot be used: acmelib is missing",
        "       what to do: pip install acmelib",
    ]


def test_render_prints_each_finding_with_what_to_do():
    text = render(diagnose(CpuPlatform()), "cpu")
    assert text.splitlines()[0] == "platform: cpu" and "what to do:" in text


def test_doctor_json_runs_as_a_command():
    out = subprocess.run(
        [sys.executable, "-m", "devmem", "doctor", "--json"],
        capture_output=True,
        text=True,
        env={**__import__("os").environ, "DEVMEM_PLATFORM": "cpu"},
        check=True,
    ).stdout
    data = json.loads(out)
    assert data["platform"] == "cpu" and {f["kind"] for f in data["findings"]} >= {"per-process-accounting"}


def doctor(capsys, platform, *argv: str) -> tuple[int, str]:
    from devmem.command.doctor import cmd_doctor
    from devmem.command.main import build_parser

    code = cmd_doctor(build_parser().parse_args(["doctor", *argv]), platform)
    return code, capsys.readouterr().out


def wsl2_platform():
    sc = wsl2_scenario()
    return WslPlatform(nvml=ScriptedNvml(sc), files=sc.fs, environ=sc.environ)


def test_doctor_exits_1_when_a_finding_is_a_warning(capsys):
    assert doctor(capsys, wsl2_platform())[0] == 1


def test_doctor_exits_0_when_nothing_needs_fixing(capsys):
    sc = h200_scenario(context=True)
    sc.allocate(GiB, pid=4242)
    code, out = doctor(capsys, nvml_platform(sc))
    assert code == 0 and "[info] device 0: 1 other process holds 1.00 GiB" in out


def test_doctor_says_each_finding_once(capsys):
    _, out = doctor(capsys, wsl2_platform())
    text = " ".join(out.split())
    assert text.count("WDDM does not report per-process memory") == 1
    assert text.count("over-subscribed") == 1 and "[info]" not in text


def test_doctor_json_gives_each_finding_a_kind_and_its_bytes(capsys):
    sc = h200_scenario(context=True)
    sc.allocate(8 * GiB, pid=4242)
    code, out = doctor(capsys, nvml_platform(sc), "--json")
    data = json.loads(out)
    found = {f["kind"]: f for f in data["findings"]}
    assert code == 0 and data["warnings"] == 0
    assert found["co-tenants"]["figures"] == {"held": 8 * GiB, "processes": {"4242": 8 * GiB}}
    assert found["per-process-accounting"]["figures"] == {"process": 545259520}


def test_doctor_json_counts_the_warnings_and_exits_1(capsys):
    code, out = doctor(capsys, wsl2_platform(), "--json")
    data = json.loads(out)
    assert code == 1 and data["warnings"] == 2
    assert {f["kind"] for f in data["findings"] if f["severity"] == "warning"} == {
        "per-process-accounting",
        "pages-instead-of-failing",
    }


def test_low_free_memory_figures_are_exact_bytes():
    sc = h200_scenario()
    sc.allocate(135 * GiB, pid=4242)
    found = by_code(diagnose(nvml_platform(sc)))
    assert found["low-free-memory"].figures == {"free": sc.device_free(0), "total": 150109880320}


def test_doctor_wraps_to_80_columns_without_cutting_a_size(capsys, monkeypatch):
    monkeypatch.setenv("COLUMNS", "80")
    _, out = doctor(capsys, wsl2_platform())
    assert all(len(line) <= 80 for line in out.splitlines())
