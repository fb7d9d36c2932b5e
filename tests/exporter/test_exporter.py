"""``devmem exporter``: its metrics against scripted devices and real processes, its bounds, and what it never does.

Devices are scripted NVIDIA GPUs (devmem_nvidia.testing) or the cpu platform; the processes on them are real
processes of this machine at their PIDs, so user and command come from psutil as on a real node; reservations are
real ones (devmem.reserve) in a private ledger directory.
"""

from __future__ import annotations

import getpass
import json
import os
import subprocess
import sys
import threading
import time
import urllib.request

import pytest

prometheus_client = pytest.importorskip("prometheus_client")
from ledger_workers import Worker  # noqa: E402
from prometheus_client.parser import text_string_to_metric_families  # noqa: E402

import devmem  # noqa: E402
from devmem.command.info import cmd_info  # noqa: E402
from devmem.command.main import build_parser, main  # noqa: E402
from devmem.cpu import REAL_FILES, CpuPlatform  # noqa: E402
from devmem.exporter.metrics import DevmemCollector  # noqa: E402
from devmem.exporter.readings import TURN_WAIT, NodeReader  # noqa: E402
from devmem.exporter.server import DEFAULT_LISTEN, parse_listen, serve  # noqa: E402
from devmem.testing import HostMemory, Scenario  # noqa: E402
from devmem.types import DevmemError, GiB  # noqa: E402
from devmem_nvidia.testing import ScriptedNvidiaGpu, ScriptedNvml, scripted_platform  # noqa: E402

LONG = "import time; time.sleep(60)  # " + "x" * 300


@pytest.fixture(scope="module")
def sleepers():
    """Three real processes that sleep, with long command lines; yields their PIDs."""
    procs = [subprocess.Popen([sys.executable, "-c", f"{LONG}{n}"]) for n in range(3)]
    yield [p.pid for p in procs]
    for p in procs:
        p.kill()
        p.wait()


def gpus(n: int) -> list[ScriptedNvidiaGpu]:
    return [
        ScriptedNvidiaGpu(uuid=f"GPU-00000000-0000-0000-0000-00000000000{i}", pci_bus_id=f"00000000:{16 + i:02x}:00.0")
        for i in range(n)
    ]


@pytest.fixture
def node(sleepers):
    """Two scripted H200s: the sleepers hold 4, 2 and 1 GiB on device 0 and 3 GiB each on device 1."""
    sc = Scenario(devices=gpus(2))
    for pid, size in zip(sleepers, (4, 2, 1), strict=True):
        sc.allocate(size * GiB, 0, pid=pid)
        sc.allocate(3 * GiB, 1, pid=pid)
    return sc


def scrape(platform, tmp_path, **kwargs) -> dict[str, list]:
    """One scrape of an exporter on ``platform`` with its ledger in ``tmp_path``: metric name -> samples."""
    collector = kwargs.pop("collector", None) or collector_for(platform, tmp_path, **kwargs)
    return parse(collector)


def collector_for(platform, tmp_path, **kwargs) -> DevmemCollector:
    kwargs.setdefault("candidates", [])
    return DevmemCollector(NodeReader(platform, tmp_path / "ledger", **kwargs))


def parse(collector: DevmemCollector) -> dict[str, list]:
    registry = prometheus_client.CollectorRegistry(auto_describe=False)
    registry.register(collector)
    return _samples(prometheus_client.generate_latest(registry).decode())


def _samples(text: str) -> dict[str, list]:
    out: dict[str, list] = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            out.setdefault(s.name, []).append(s)
    return out


def by_device(samples, name: str) -> dict[str, float]:
    return {s.labels["device"]: s.value for s in samples.get(name, [])}


def test_device_figures_equal_the_reading(node, tmp_path):
    platform = scripted_platform(node)
    m = scrape(platform, tmp_path)
    for d in (0, 1):
        info = platform.device_memory_info(d)
        assert by_device(m, "devmem_device_total_bytes")[str(d)] == info.total
        assert by_device(m, "devmem_device_free_bytes")[str(d)] == info.free
        assert by_device(m, "devmem_device_used_bytes")[str(d)] == info.total - info.free


def test_device_info_names_the_device_its_uuid_and_platform(node, tmp_path):
    info = {s.labels["device"]: s.labels for s in scrape(scripted_platform(node), tmp_path)["devmem_device_info"]}
    assert info["1"]["uuid"] == "GPU-00000000-0000-0000-0000-000000000001"
    assert info["1"]["name"] == "NVIDIA H200" and info["1"]["platform"] == "nvml"


def test_process_series_carry_pid_user_command_and_bytes(node, sleepers, tmp_path):
    samples = scrape(scripted_platform(node), tmp_path)["devmem_process_used_bytes"]
    on_0 = {int(s.labels["pid"]): s for s in samples if s.labels["device"] == "0"}
    assert {pid: s.value for pid, s in on_0.items()} == dict(zip(sleepers, (4 * GiB, 2 * GiB, 1 * GiB), strict=True))
    assert on_0[sleepers[0]].labels["user"] == getpass.getuser()
    assert on_0[sleepers[0]].labels["command"].startswith(f"{sys.executable} -c import time;")


def test_long_command_lines_are_cut_to_the_command_length(node, tmp_path):
    samples = scrape(scripted_platform(node), tmp_path, command_length=40)["devmem_process_used_bytes"]
    assert {len(s.labels["command"]) for s in samples} == {40}
    assert all(s.labels["command"].endswith("...") for s in samples)


def test_processes_past_the_limit_are_counted_not_listed(node, tmp_path):
    m = scrape(scripted_platform(node), tmp_path, max_processes=2)
    on_0 = [s for s in m["devmem_process_used_bytes"] if s.labels["device"] == "0"]
    assert sorted(s.value for s in on_0) == [2 * GiB, 4 * GiB]  # the largest two
    assert by_device(m, "devmem_processes_omitted") == {"0": 1, "1": 1}
    assert by_device(m, "devmem_processes_omitted_used_bytes") == {"0": 1 * GiB, "1": 3 * GiB}
    assert by_device(m, "devmem_processes") == {"0": 3, "1": 3}


class ContainerFiles:
    """/proc as it reads where ``pid`` runs in a Docker container (cgroup v2), the real /proc elsewhere."""

    CGROUP = "/system.slice/docker-" + "ab12cd34ef56" + "0" * 52 + ".scope"

    def __init__(self, pid: int):
        self.pid = pid

    def read_text(self, path: str) -> str:
        if path == f"/proc/{self.pid}/cgroup":
            return f"0::{self.CGROUP}\n"
        return REAL_FILES.read_text(path)

    def exists(self, path: str) -> bool:
        return REAL_FILES.exists(path)

    def listdir(self, path: str) -> list[str]:
        return REAL_FILES.listdir(path)


def test_a_process_in_a_container_is_labelled_with_its_container_and_cgroup(node, sleepers, tmp_path):
    m = scrape(scripted_platform(node), tmp_path, files=ContainerFiles(sleepers[0]))
    labels = {int(s.labels["pid"]): s.labels for s in m["devmem_process_used_bytes"] if s.labels["device"] == "0"}
    assert labels[sleepers[0]]["container"] == "ab12cd34ef56"
    assert labels[sleepers[0]]["cgroup"] == ContainerFiles.CGROUP
    assert labels[sleepers[1]]["container"] == ""


def test_a_process_outside_a_container_is_labelled_with_its_own_cgroup(node, sleepers, tmp_path):
    with open(f"/proc/{sleepers[1]}/cgroup") as f:
        own = next(line[3:].rstrip("\n") for line in f if line.startswith("0::"))
    m = scrape(scripted_platform(node), tmp_path)
    labels = {int(s.labels["pid"]): s.labels for s in m["devmem_process_used_bytes"] if s.labels["device"] == "0"}
    assert labels[sleepers[1]]["cgroup"] == own


def test_a_failing_device_costs_only_its_own_metrics(node, tmp_path):
    node.failures["nvmlDeviceGetMemoryInfo*@GPU-00000000-0000-0000-0000-000000000001"] = "GpuIsLost"
    m = scrape(scripted_platform(node), tmp_path)
    assert set(by_device(m, "devmem_device_total_bytes")) == {"0"}
    assert {s.labels["device"] for s in m["devmem_process_used_bytes"]} == {"0"}
    failures = {tuple(s.labels.values()): s.value for s in m["devmem_exporter_reading_failures_total"]}
    assert failures == {("1", "device", "error"): 1}


class HangingNvml(ScriptedNvml):
    """A scripted NVML whose memory query of the device ``uuid`` blocks until ``release`` is set."""

    def __init__(self, scenario, uuid: str):
        super().__init__(scenario)
        self.uuid, self.release, self.entered = uuid, threading.Event(), 0
        self.first_entered: dict[str, float] = {}

    def nvmlDeviceGetMemoryInfo(self, handle, version=None):
        self.first_entered.setdefault(self._device(handle).uuid, time.monotonic())
        if self._device(handle).uuid == self.uuid:
            self.entered += 1
            self.release.wait(30)
        return super().nvmlDeviceGetMemoryInfo(handle, version)


@pytest.fixture
def hanging(node):
    nvml = HangingNvml(node, "GPU-00000000-0000-0000-0000-000000000000")
    yield scripted_platform(node, nvml=nvml), nvml
    nvml.release.set()


def test_a_hanging_reading_is_cut_by_its_deadline_and_counted(hanging, tmp_path):
    platform, _ = hanging
    started = time.monotonic()
    m = scrape(platform, tmp_path, deadline=0.5)
    assert time.monotonic() - started < 3
    assert set(by_device(m, "devmem_device_total_bytes")) == {"1"}
    failures = {tuple(s.labels.values()): s.value for s in m["devmem_exporter_reading_failures_total"]}
    assert failures == {("0", "device", "deadline"): 1}


def test_a_reading_still_hung_is_not_started_again(hanging, tmp_path):
    platform, nvml = hanging
    collector = collector_for(platform, tmp_path, deadline=0.2)
    for _ in range(3):
        m = parse(collector)
    assert nvml.entered == 1
    failures = {tuple(s.labels.values()): s.value for s in m["devmem_exporter_reading_failures_total"]}
    assert failures == {("0", "device", "deadline"): 3}


def test_a_reading_that_keeps_failing_is_logged_once(hanging, tmp_path, caplog):
    platform, _ = hanging
    collector = collector_for(platform, tmp_path, deadline=0.2)
    with caplog.at_level("WARNING", logger="devmem.exporter"):
        for _ in range(3):
            parse(collector)
    assert [r.getMessage() for r in caplog.records] == [
        "devmem exporter: reading the device of 0 passed its deadline of 0.2 s"
    ]


def test_a_reading_that_recovers_is_shown_again(hanging, tmp_path):
    platform, nvml = hanging
    collector = collector_for(platform, tmp_path, deadline=0.2)
    parse(collector)
    nvml.release.set()
    time.sleep(0.3)  # the hung reading ends
    assert set(by_device(parse(collector), "devmem_device_total_bytes")) == {"0", "1"}


class TimedNvml(ScriptedNvml):
    """A scripted NVML whose memory query takes ``seconds`` and records when each device's began and ended."""

    def __init__(self, scenario, seconds: float):
        super().__init__(scenario)
        self.seconds, self.spans = seconds, {}

    def nvmlDeviceGetMemoryInfo(self, handle, version=None):
        began = time.monotonic()
        time.sleep(self.seconds)
        self.spans[self._device(handle).uuid] = (began, time.monotonic())
        return super().nvmlDeviceGetMemoryInfo(handle, version)


def test_healthy_devices_are_read_one_at_a_time(node, tmp_path):
    nvml = TimedNvml(node, 0.05)
    scrape(scripted_platform(node, nvml=nvml), tmp_path)
    spans = sorted(nvml.spans.values())
    assert len(spans) == 2 and spans[0][1] <= spans[1][0]


def test_a_hung_device_holds_the_next_reading_up_by_one_turn_at_most(hanging, tmp_path):
    platform, nvml = hanging
    collector = collector_for(platform, tmp_path, deadline=2.0)
    started = time.monotonic()
    m = parse(collector)  # the hung device is read first
    assert set(by_device(m, "devmem_device_total_bytes")) == {"1"}
    assert nvml.first_entered["GPU-00000000-0000-0000-0000-000000000001"] - started < TURN_WAIT + 0.15


def test_a_reservation_is_exported_with_its_holder_pid_and_bytes(node, tmp_path):
    platform = scripted_platform(node)
    with devmem.reserve(1, bytes=10 * GiB, platform=platform, ledger_dir=tmp_path / "ledger"):
        m = scrape(platform, tmp_path)
    (sample,) = m["devmem_reservation_reserved_bytes"]
    assert sample.labels["device"] == "1" and sample.labels["pid"] == str(os.getpid())
    assert sample.value == 10 * GiB
    assert by_device(m, "devmem_reservations_reserved_bytes") == {"1": 10 * GiB}
    assert by_device(m, "devmem_reservations_holders") == {"1": 1}


def test_over_commitment_is_exported_with_doctors_finding(node, sleepers, tmp_path):
    platform = scripted_platform(node)
    total = platform.device_memory_info(0).total
    with devmem.reserve(0, bytes=total - 8 * GiB, platform=platform, ledger_dir=tmp_path / "ledger"):
        node.allocate(2 * GiB, 0, pid=sleepers[2])  # after admission: 9 GiB used without a reservation
        m = scrape(platform, tmp_path)
    committed = by_device(m, "devmem_reservations_committed_bytes")["0"]
    assert committed > total
    assert by_device(m, "devmem_reservations_overcommitted_bytes") == {"0": committed - total}
    findings = {(s.labels["device"], s.labels["kind"], s.labels["severity"]) for s in m["devmem_doctor_findings"]}
    assert ("0", "reservations-over-committed", "warning") in findings


def test_a_dead_owners_reservation_is_exported_as_stale(tmp_path):
    worker = Worker(tmp_path / "ledger")
    assert worker.reserve(1 << 20)
    worker.kill()
    m = scrape(CpuPlatform(), tmp_path)
    assert by_device(m, "devmem_reservations_stale") == {"0": 1}
    assert by_device(m, "devmem_reservations_stale_bytes") == {"0": 1 << 20}
    assert "devmem_reservation_reserved_bytes" not in m
    findings = {(s.labels["kind"], s.labels["severity"]) for s in m["devmem_doctor_findings"]}
    assert ("stale-reservations", "info") in findings  # stale entries block no one (doctor)


def test_a_scrape_never_creates_the_ledger_directory(node, tmp_path):
    scrape(scripted_platform(node), tmp_path)
    assert not (tmp_path / "ledger").exists()


def test_a_scrape_writes_nothing_in_the_ledger(tmp_path):
    ledger = tmp_path / "ledger"
    with devmem.reserve(0, bytes=1 << 20, platform=CpuPlatform(), ledger_dir=ledger):
        for lock in ledger.glob("*.lock"):
            lock.unlink()
        before = {p.name: p.stat().st_mtime_ns for p in ledger.iterdir()}
        m = scrape(CpuPlatform(), tmp_path)
        assert {p.name: p.stat().st_mtime_ns for p in ledger.iterdir()} == before
    assert by_device(m, "devmem_reservations_holders") == {"0": 1}


def test_a_corrupt_ledger_is_flagged_and_costs_no_scrape(tmp_path):
    ledger = tmp_path / "ledger"
    with devmem.reserve(0, bytes=1 << 20, platform=CpuPlatform(), ledger_dir=ledger):
        (path,) = ledger.glob("*.json")
        path.write_text("{not json")
        m = scrape(CpuPlatform(), tmp_path)
    assert by_device(m, "devmem_reservations_ledger_corrupt") == {"0": 1}
    assert set(by_device(m, "devmem_device_total_bytes")) == {"0"}


def test_a_ledger_directory_that_cannot_be_used_costs_only_the_reservation_metrics(tmp_path):
    ledger = tmp_path / "ledger"
    with devmem.reserve(0, bytes=1 << 20, platform=CpuPlatform(), ledger_dir=ledger):
        ledger.chmod(0o777)  # writable by every user without the sticky bit: nothing in it can be trusted
        m = scrape(CpuPlatform(), tmp_path)
        ledger.chmod(0o1777)
    assert "devmem_reservations_holders" not in m
    assert set(by_device(m, "devmem_device_total_bytes")) == {"0"}
    failures = {tuple(s.labels.values()) for s in m["devmem_exporter_reading_failures_total"]}
    assert failures == {("0", "reservations", "error")}


def test_a_link_in_the_ledger_files_place_is_flagged_corrupt_and_its_owner_still_counted(tmp_path):
    ledger = tmp_path / "ledger"
    with devmem.reserve(0, bytes=1 << 20, platform=CpuPlatform(), ledger_dir=ledger):
        (path,) = ledger.glob("*.json")
        path.rename(tmp_path / "elsewhere.json")
        path.symlink_to(tmp_path / "elsewhere.json")  # never followed
        m = scrape(CpuPlatform(), tmp_path)
    assert by_device(m, "devmem_reservations_ledger_corrupt") == {"0": 1}
    assert by_device(m, "devmem_reservations_reserved_bytes") == {"0": 1 << 20}


def _tamper(ledger, how: str) -> None:
    (path,) = ledger.glob("*.json")
    if how == "removed":
        path.unlink()
    else:
        data = {"emptied": b"", "truncated": path.read_bytes()[:40], "no entries": b'{"format": 1, "entries": []}'}
        path.write_bytes(data[how])


@pytest.mark.parametrize("how", ["emptied", "truncated", "removed", "no entries"])
def test_a_ledger_file_anyone_tampered_with_is_exported_as_admission_counts_it(tmp_path, capsys, monkeypatch, how):
    """The ledger file is writable by every user: whatever they leave of it, the exporter counts the live owners
    that admission and `devmem info` count (their owner files), so the over-commitment alert can still fire."""
    platform = CpuPlatform(files=Scenario(host=HostMemory(total=64 * GiB, free=60 * GiB)).fs)
    ledger = tmp_path / "ledger"
    with devmem.reserve(0, bytes=40 * GiB, platform=platform, ledger_dir=ledger):
        _tamper(ledger, how)
        m = scrape(platform, tmp_path)
        with pytest.raises(devmem.ReservationRefused, match="reserved 40.00 GiB"):
            devmem.reserve(0, bytes=30 * GiB, platform=platform, ledger_dir=ledger)
        monkeypatch.setenv("DEVMEM_LEDGER_DIR", str(ledger))
        assert cmd_info(build_parser().parse_args(["info", "--json"]), platform) == 0
    info = json.loads(capsys.readouterr().out)["devices"][0]["reservations"]
    assert by_device(m, "devmem_reservations_holders") == {"0": 1}
    assert by_device(m, "devmem_reservations_reserved_bytes") == {"0": 40 * GiB} == {"0": info["reserved"]}
    assert by_device(m, "devmem_reservations_committed_bytes") == {"0": info["committed"]}


NAMES = {
    "devmem_exporter_build_info": "gauge",
    "devmem_exporter_scrape_duration_seconds": "gauge",
    "devmem_device_info": "gauge",
    "devmem_device_total_bytes": "gauge",
    "devmem_device_free_bytes": "gauge",
    "devmem_device_used_bytes": "gauge",
    "devmem_process_used_bytes": "gauge",
    "devmem_processes": "gauge",
    "devmem_processes_omitted": "gauge",
    "devmem_processes_omitted_used_bytes": "gauge",
    "devmem_reservation_reserved_bytes": "gauge",
    "devmem_reservation_used_bytes": "gauge",
    "devmem_reservations_reserved_bytes": "gauge",
    "devmem_reservations_committed_bytes": "gauge",
    "devmem_reservations_unreserved_bytes": "gauge",
    "devmem_reservations_overcommitted_bytes": "gauge",
    "devmem_reservations_holders": "gauge",
    "devmem_reservations_stale": "gauge",
    "devmem_reservations_stale_bytes": "gauge",
    "devmem_reservations_ledger_corrupt": "gauge",
    "devmem_doctor_findings": "gauge",
    "devmem_exporter_reading_failures": "counter",
}


def test_metric_names_carry_the_prefix_their_unit_and_type(node, tmp_path):
    platform = scripted_platform(node)
    with devmem.reserve(0, bytes=GiB, platform=platform, ledger_dir=tmp_path / "ledger"):
        registry = prometheus_client.CollectorRegistry(auto_describe=False)
        registry.register(collector_for(platform, tmp_path))
        text = prometheus_client.generate_latest(registry).decode()
    assert {f.name: f.type for f in text_string_to_metric_families(text)} == NAMES
    assert "devmem_exporter_reading_failures_total" in text.replace("# TYPE devmem_exporter_reading_failures_total", "")


def test_the_exporter_listens_on_localhost_by_default():
    args = build_parser().parse_args(["exporter"])
    assert parse_listen(args.listen) == ("127.0.0.1", 9633) and args.listen == DEFAULT_LISTEN


def test_listen_takes_an_ipv6_host():
    assert parse_listen("[::1]:9100") == ("::1", 9100)


def test_listen_takes_a_bare_ipv6_address_as_a_pods_address_comes():
    assert parse_listen("fd00::5:9633") == ("fd00::5", 9633)


@pytest.mark.parametrize("text", ["9633", "localhost:", "host:99999", ":9633", "host:port"])
def test_a_bad_listen_address_is_a_usage_error_naming_it(text, capsys):
    with pytest.raises(SystemExit) as exit_:
        build_parser().parse_args(["exporter", "--listen", text])
    assert exit_.value.code == 2 and repr(text) in capsys.readouterr().err


@pytest.mark.parametrize(
    "flag, text",
    [("--deadline", "\uff15"), ("--deadline", "1_0"), ("--max-processes", "\uff18"), ("--max-processes", "3_2")],
)
def test_a_number_flag_in_unicode_digits_or_with_underscores_is_a_usage_error_naming_it(flag, text, capsys):
    with pytest.raises(SystemExit) as exit_:
        build_parser().parse_args(["exporter", flag, text])
    assert exit_.value.code == 2 and repr(text) in capsys.readouterr().err


def test_without_prometheus_client_the_command_says_what_to_install(monkeypatch, capsys):
    monkeypatch.setitem(sys.modules, "prometheus_client", None)
    assert main(["exporter"]) == 1
    err = capsys.readouterr().err
    assert "pip install prometheus-client (from a devmem checkout, pip install -e '.[exporter]')" in err


def test_the_server_serves_a_fresh_reading_at_every_scrape(node, sleepers, tmp_path):
    server = serve(collector_for(scripted_platform(node), tmp_path), "127.0.0.1", 0)
    try:
        url = f"http://127.0.0.1:{server.server_port}/metrics"
        first = _samples(urllib.request.urlopen(url, timeout=10).read().decode())
        node.allocate(5 * GiB, 1, pid=sleepers[2])
        second = _samples(urllib.request.urlopen(url, timeout=10).read().decode())
    finally:
        server.shutdown()
        server.server_close()
    assert by_device(second, "devmem_device_used_bytes")["1"] - by_device(first, "devmem_device_used_bytes")["1"] == (
        5 * GiB
    )


def test_an_address_in_use_is_one_error_naming_it(node, tmp_path):
    server = serve(collector_for(scripted_platform(node), tmp_path), "127.0.0.1", 0)
    try:
        with pytest.raises(DevmemError, match=f"127.0.0.1:{server.server_port}"):
            serve(collector_for(scripted_platform(node), tmp_path), "127.0.0.1", server.server_port)
    finally:
        server.shutdown()
        server.server_close()
