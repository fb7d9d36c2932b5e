"""The metrics of one node reading, as a ``prometheus_client`` collector that reads the node afresh at every scrape.

Names follow Prometheus' conventions: a ``devmem_`` prefix, the unit in the name (``_bytes``, ``_seconds``), a
``_total`` counter. Every series of a device carries its index as ``device``; what does not change between scrapes
(name, UUID, platform) is on ``devmem_device_info`` alone, to join on. Labels are bounded: a device shows at most
``max_processes`` processes (and reservation holders) one by one, commands and cgroups are cut, and doctor's
findings are labelled by their kind and severity, never by their text.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from devmem import __version__
from devmem._forksafe import ForkSafeLock
from devmem._text import printable
from devmem.engine.reservations import short_command
from devmem.exporter.readings import DeviceSample, NodeReader, NodeReading

#: The longest cgroup path kept in a label: its end, where the container is named.
CGROUP_LENGTH = 128


def _gauge(name: str, doc: str, labels: tuple[str, ...]) -> GaugeMetricFamily:
    return GaugeMetricFamily(name, doc, labels=list(labels))


def _cut_end(text: str, limit: int) -> str:
    return text if len(text) <= limit else "..." + text[-(limit - 3) :]


class DevmemCollector(Collector):
    """Every scrape reads the node once through ``reader`` and yields its metrics; a failed reading's metrics are
    left out and counted in ``devmem_exporter_reading_failures_total``. Scrapes that overlap take turns."""

    def __init__(self, reader: NodeReader):
        self.reader = reader
        self.failures: Counter[tuple[str, str, str]] = Counter()
        self._lock = ForkSafeLock()

    def describe(self) -> list[Metric]:
        """Nothing: registering the collector must not read the devices (the registry calls this instead)."""
        return []

    def collect(self) -> Iterator[Metric]:
        with self._lock:
            reading = self.reader.read()
            self.failures.update((f.device, f.reading, f.reason) for f in reading.failures)
            failures = dict(self.failures)
        yield from node_metrics(
            reading, self.reader.platform.name, self.reader.command_length, self.reader.max_processes
        )
        counter = CounterMetricFamily(
            "devmem_exporter_reading_failures",
            "Readings left out of a scrape since the exporter started, by device, what was read "
            "(device, reservations, findings) and why (error, deadline).",
            labels=["device", "reading", "reason"],
        )
        for (device, what, reason), n in sorted(failures.items()):
            counter.add_metric([device, what, reason], n)
        yield counter


def node_metrics(
    reading: NodeReading, platform: str, command_length: int = 64, max_holders: int = 32
) -> Iterator[Metric]:
    """The metric families of ``reading`` (of a node on the platform named ``platform``): command lines cut to
    ``command_length`` characters, at most ``max_holders`` reservation holders per device one by one."""
    info = _gauge(
        "devmem_exporter_build_info", "The exporter's devmem version and platform (always 1).", ("version", "platform")
    )
    info.add_metric([__version__, platform], 1)
    yield info
    duration = GaugeMetricFamily(
        "devmem_exporter_scrape_duration_seconds", "Seconds this scrape took to read the node."
    )
    duration.add_metric([], reading.seconds)
    yield duration
    yield from _device_metrics(reading.devices)
    yield from _process_metrics(reading.devices, command_length)
    yield from _reservation_metrics(reading.devices, command_length, max_holders)
    yield from _finding_metrics(reading)


def _device_metrics(devices: tuple[DeviceSample, ...]) -> Iterator[Metric]:
    info = _gauge(
        "devmem_device_info",
        "A device devmem reads (always 1): its name, UUID (empty where the platform has none) and platform.",
        ("device", "name", "uuid", "platform", "integrated"),
    )
    total = _gauge("devmem_device_total_bytes", "Device memory, as the platform counts it.", ("device",))
    free = _gauge("devmem_device_free_bytes", "Device memory a new process can allocate now.", ("device",))
    used = _gauge("devmem_device_used_bytes", "Device memory in use (total less free).", ("device",))
    for d in devices:
        r, index = d.report, [str(d.report.index)]
        info.add_metric([*index, printable(r.name), d.uuid or "", r.platform, str(r.integrated).lower()], 1)
        total.add_metric(index, r.total)
        free.add_metric(index, r.free)
        used.add_metric(index, r.total - r.free)
    yield from (info, total, free, used)


def _process_metrics(devices: tuple[DeviceSample, ...], command_length: int) -> Iterator[Metric]:
    labels = ("device", "pid", "user", "command", "container", "cgroup")
    used = _gauge(
        "devmem_process_used_bytes",
        "Device memory the driver attributes to a process (the largest per device; the rest are counted in "
        "devmem_processes_omitted).",
        labels,
    )
    count = _gauge(
        "devmem_processes", "Processes holding memory on the device, as the platform lists them.", ("device",)
    )
    omitted = _gauge(
        "devmem_processes_omitted", "Processes on the device past the exporter's per-device limit.", ("device",)
    )
    omitted_bytes = _gauge(
        "devmem_processes_omitted_used_bytes", "Device memory of the processes past the limit.", ("device",)
    )
    for d in devices:
        if d.processes is None:  # the platform lists no processes: none of these series
            continue
        index = str(d.report.index)
        for p in d.processes:
            row = p.row
            command = printable(short_command(row.command, command_length)) if row.command else ""
            cgroup = printable(_cut_end(p.cgroup, CGROUP_LENGTH)) if p.cgroup else ""
            user = printable(row.user) if row.user else ""
            used.add_metric([index, str(row.pid), user, command, p.container or "", cgroup], row.used)
        count.add_metric([index], len(d.processes) + d.omitted)
        omitted.add_metric([index], d.omitted)
        omitted_bytes.add_metric([index], d.omitted_bytes)
    yield from (used, count, omitted, omitted_bytes)


def _reservation_metrics(devices: tuple[DeviceSample, ...], command_length: int, max_holders: int) -> Iterator[Metric]:
    holder = ("device", "pid", "command")
    reserved = _gauge("devmem_reservation_reserved_bytes", "What a live owner reserved on the device.", holder)
    used = _gauge(
        "devmem_reservation_used_bytes", "What a live owner of a reservation uses now, where the platform says.", holder
    )
    per_device: dict[str, GaugeMetricFamily] = {
        name: _gauge(f"devmem_reservations_{name}", doc, ("device",))
        for name, doc in (
            ("reserved_bytes", "Live reservations on the device, summed."),
            (
                "committed_bytes",
                "What admission counts: each reservation (or its use, where larger) and unreserved use.",
            ),
            ("unreserved_bytes", "Memory used on the device by processes without a reservation."),
            ("overcommitted_bytes", "Committed memory beyond the device's total (0 where it fits)."),
            ("holders", "Live owners of reservations on the device (each shown up to the per-device limit)."),
            ("stale", "Reservations of owners that are gone (reclaimed at the next admission)."),
            ("stale_bytes", "Bytes of the stale reservations."),
            ("ledger_corrupt", "1 where the device's ledger file is no ledger (rebuilt at the next admission)."),
        )
    }
    for d in devices:
        view = d.reservations
        if view is None:
            continue
        index, a = str(d.report.index), view.accounting
        owners = sorted((h for h in a.holdings if h.reserved is not None), key=lambda h: -(h.reserved or 0))
        for h in owners[:max_holders]:
            labels = [index, str(h.pid), printable(short_command(h.command, command_length)) if h.command else ""]
            reserved.add_metric(labels, h.reserved or 0)
            if h.used is not None:
                used.add_metric(labels, h.used)
        figures = {
            "reserved_bytes": a.reserved,
            "committed_bytes": a.committed,
            "unreserved_bytes": a.unreserved,
            "overcommitted_bytes": max(0, a.committed - a.total),
            "holders": len(owners),
            "stale": len(view.stale),
            "stale_bytes": sum(e.bytes for e in view.stale),
            "ledger_corrupt": int(view.problem is not None),
        }
        for name, value in figures.items():
            per_device[name].add_metric([index], value)
    yield from (reserved, used, *per_device.values())


def _finding_metrics(reading: NodeReading) -> Iterator[Metric]:
    findings = _gauge(
        "devmem_doctor_findings",
        "devmem doctor's findings, by device (machine: about the machine), kind and severity (ok, info, warning).",
        ("device", "kind", "severity"),
    )
    counts: Counter[tuple[str, str, str]] = Counter()
    for f in reading.machine_findings:
        counts["machine", f.kind, f.severity] += 1
    for d in reading.devices:
        for f in d.findings or ():
            counts[str(d.report.index), f.kind, f.severity] += 1
    for labels, n in sorted(counts.items()):
        findings.add_metric(list(labels), n)
    yield findings
