"""One reading of a node per scrape: per device, one :class:`~devmem.platform.DeviceReading` and everything derived
from it (who the processes are, the ledger's reservations, doctor's findings), under a deadline.

Each device is read on a daemon thread of its own that lives with the reader (a :class:`~devmem._deadline.Worker`
per device, started at the first scrape: a scrape starts no thread), and the scrape waits for them until one
deadline has passed. The readings take turns: each starts when the one before it ended, or after
:data:`TURN_WAIT` (at most a quarter of the deadline, and none past half of it), since Python threads running at
once fight for the interpreter lock (8 devices read at once took 2.2 times as long as read in turn), while a
reading that hangs holds the others up by one turn at most. A device whose reading raises or is still running at
the deadline is left out of the scrape and its failure is returned; a reading still running at the next scrape is
not started again (a hung vendor call holds its device's thread, never one more). Within a device, a ledger or
findings step that raises costs only its own metrics.
Who a process is (user, command, PID namespace, cgroup) is read for the processes a scrape shows, once per
process: a PID seen again with the same start time is the same process.
"""

from __future__ import annotations

import functools
import logging
import os
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from devmem._deadline import Call, Worker
from devmem._forksafe import ForkSafeLock
from devmem._host import REAL_FILES, Files
from devmem._processes import ProcessRow, container_id, process_cgroup, process_rows
from devmem.engine.reservations import DeviceReservations, Locks, Owner, _start_time, read_reservations
from devmem.findings import Finding, device_findings, diagnose
from devmem.platform import DeviceReport, Platform, read_device
from devmem.resolution.plugins import Candidate

log = logging.getLogger("devmem.exporter")

#: What a failure was reading: a whole device, its ledger, or doctor's findings about it.
DEVICE, RESERVATIONS, FINDINGS = "device", "reservations", "findings"
#: Why it failed: it raised, or it was still running at the deadline.
ERROR, DEADLINE = "error", "deadline"
#: The ``device`` of a failure to count the devices (which reads no device).
ALL_DEVICES = "all"
#: Seconds a device's reading waits for the one before it to end before it starts anyway.
TURN_WAIT = 0.2


@dataclass(frozen=True)
class ProcessSample:
    """One process on a device: its row (PID, user, command, bytes) and the cgroup it runs in, where readable."""

    row: ProcessRow
    cgroup: str | None
    container: str | None


@dataclass(frozen=True)
class Failure:
    """A reading left out of a scrape: ``device`` (an index, or :data:`ALL_DEVICES`), ``reading`` and ``reason``."""

    device: str
    reading: str
    reason: str
    #: What went wrong, for the log.
    detail: str = field(default="", compare=False)


@dataclass(frozen=True)
class DeviceSample:
    """Everything a scrape shows about one device, from one reading of it. ``processes`` holds the largest
    ``max_processes``; ``omitted`` and ``omitted_bytes`` count the rest. ``processes`` is ``None`` where the
    platform lists none; ``reservations`` is ``None`` where the device has no ledger (or it could not be read:
    then ``failures`` says so), ``findings`` is ``None`` where they could not be found."""

    report: DeviceReport
    uuid: str | None
    processes: tuple[ProcessSample, ...] | None
    omitted: int
    omitted_bytes: int
    reservations: DeviceReservations | None
    findings: tuple[Finding, ...] | None
    failures: tuple[Failure, ...] = ()


class _Scrape:
    """What the devices of one scrape share: the kernel's lock holders and each shown PID's start time, each read
    once."""

    def __init__(self) -> None:
        self.locks = Locks()
        self.started: dict[int, int | None] = {}

    def start_time(self, pid: int) -> int | None:
        if pid not in self.started:
            self.started[pid] = _start_time(pid)
        return self.started[pid]


@dataclass(frozen=True)
class NodeReading:
    """One scrape's reading: the devices read in time, the machine's own findings, and what was left out."""

    devices: tuple[DeviceSample, ...]
    machine_findings: tuple[Finding, ...]
    failures: tuple[Failure, ...]
    seconds: float


@dataclass
class NodeReader:
    """Reads ``platform``'s devices for a scrape.

    ``deadline``: seconds a scrape waits for its readings; ``max_processes``: processes per device shown one by
    one (the rest are counted); ``command_length``: characters of a command line kept; ``ledger_dir``: the
    reservation ledger's directory; ``files``: where ``/proc`` is read; ``candidates``: the registered platforms
    doctor's machine findings are about (this machine's by default)."""

    platform: Platform
    ledger_dir: str | os.PathLike[str]
    deadline: float = 5.0
    max_processes: int = 32
    command_length: int = 64
    files: Files = REAL_FILES
    candidates: Sequence[Candidate] | None = None
    _workers: dict[str, Worker] = field(default_factory=dict, init=False, repr=False)
    #: Who each process the last scrape showed is, by PID: (its start time, its sample on the device it was read for).
    _who: dict[int, tuple[int, ProcessSample]] = field(default_factory=dict, init=False, repr=False)
    _who_lock: ForkSafeLock = field(default_factory=ForkSafeLock, init=False, repr=False)
    _failing: set[tuple[str, str]] = field(default_factory=set, init=False, repr=False)
    _me: Owner = field(default_factory=Owner.current, init=False, repr=False)

    def read(self) -> NodeReading:
        """One reading of every device, each left out (with its failure) where it raised or passed the deadline."""
        started = time.monotonic()
        deadline = started + self.deadline
        count = self._outcome(ALL_DEVICES, DEVICE, self._start(ALL_DEVICES, self.platform.device_count), deadline)
        failures: list[Failure] = [] if isinstance(count, int) else [count]
        scrape = _Scrape()
        jobs: dict[str, Call[DeviceSample] | None] = {}
        turn, turns_end = min(TURN_WAIT, self.deadline / 4), started + self.deadline / 2
        for d in range(0 if failures else count):
            job = jobs[str(d)] = self._start(str(d), functools.partial(self._device, d, scrape))
            if job is not None:  # the next starts when this one ends, or a turn later
                job.done_by(min(time.monotonic() + turn, turns_end))
        machine_job = self._start("machine", self._machine_findings)
        devices = []
        for name, job in jobs.items():
            sample = self._outcome(name, DEVICE, job, deadline)
            if isinstance(sample, Failure):
                failures.append(sample)
            else:
                devices.append(sample)
                failures += [self._noted(f, f.detail) for f in sample.failures]
                self._recovered(name, {RESERVATIONS, FINDINGS} - {f.reading for f in sample.failures})
        machine = self._outcome("machine", FINDINGS, machine_job, deadline)
        if isinstance(machine, Failure):
            failures.append(machine)
            machine = []
        self._who = {pid: who for pid, who in self._who.items() if pid in scrape.started}  # the processes shown now
        return NodeReading(tuple(devices), tuple(machine), tuple(failures), time.monotonic() - started)

    # ---- bounded calls ---------------------------------------------------------------------------------
    def _start(self, name: str, call: Callable[[], Any]) -> Call[Any] | None:
        """``call`` handed to ``name``'s worker, or ``None`` where the one an earlier scrape gave it still runs."""
        worker = self._workers.get(name)
        if worker is None:
            worker = self._workers[name] = Worker("devmem-exporter-reading")
        return None if worker.busy else worker.submit(call)

    def _outcome(self, name: str, reading: str, job: Call[Any] | None, deadline: float) -> Any:
        """The value of ``job``, or the :class:`Failure` of ``reading`` on ``name`` where it raised or is late."""
        if job is None or not job.done_by(deadline):
            return self._noted(Failure(name, reading, DEADLINE), f"passed its deadline of {self.deadline:g} s")
        if job.error is not None:
            return self._noted(Failure(name, reading, ERROR), f"failed: {job.error}")
        self._recovered(name, {reading})
        return job.value

    def _recovered(self, name: str, readings: set[str]) -> None:
        """Log, once, each of ``readings`` of ``name`` that works again after failing."""
        for reading in sorted(readings):
            if (name, reading) in self._failing:
                self._failing.discard((name, reading))
                log.info("devmem exporter: reading the %s of %s works again", reading, name)

    def _noted(self, failure: Failure, why: str = "failed") -> Failure:
        """``failure``, logged the first time in a row that it happens (a hung device fails every scrape)."""
        if (failure.device, failure.reading) not in self._failing:
            self._failing.add((failure.device, failure.reading))
            log.warning("devmem exporter: reading the %s of %s %s", failure.reading, failure.device, why)
        return failure

    # ---- one device ------------------------------------------------------------------------------------
    def _device(self, device: int, scrape: _Scrape) -> DeviceSample:
        reading = read_device(self.platform, device)
        report = DeviceReport.from_reading(self.platform.name, reading)
        failures: list[Failure] = []
        others = report.other_processes
        processes: tuple[ProcessSample, ...] | None = None
        omitted = omitted_bytes = 0
        if others is not None:
            ranked = sorted(others.items(), key=lambda kv: (-kv[1], kv[0]))
            shown = dict(ranked[: self.max_processes])
            omitted, omitted_bytes = len(ranked) - len(shown), sum(used for _, used in ranked[len(shown) :])
            processes = self._processes(shown, dict(reading.roles), scrape)
        get_uuid = getattr(self.platform, "device_uuid", None)
        uuid = get_uuid(device) if callable(get_uuid) else None
        reservations = None
        try:
            # the metrics name reservation holders only (from their entries): no process without one is looked up
            reservations = read_reservations(
                self.platform, device, report, self.ledger_dir, self._me, locks=scrape.locks, commands=False
            )
        except Exception as exc:
            failures.append(Failure(str(device), RESERVATIONS, ERROR, f"failed: {exc}"))
        findings = None
        if not failures:  # doctor's reservation findings need the ledger
            try:
                findings = tuple(device_findings(self.platform, report, reservations))
            except Exception as exc:
                failures.append(Failure(str(device), FINDINGS, ERROR, f"failed: {exc}"))
        return DeviceSample(report, uuid, processes, omitted, omitted_bytes, reservations, findings, tuple(failures))

    def _processes(self, shown: dict[int, int], roles: dict[int, str], scrape: _Scrape) -> tuple[ProcessSample, ...]:
        """Samples of the processes ``shown`` (PID -> bytes), largest first. Who a process is (psutil, its ``/proc``
        status and cgroup) is read the first time a scrape shows it, on whichever device: a PID shown again with the
        same start time (``/proc/<pid>/stat``, read once a scrape) is the same process."""
        samples = []
        for pid, used in shown.items():
            started = scrape.start_time(pid)
            seen = self._who.get(pid)
            if seen is None or started is None or seen[0] != started:
                with self._who_lock:  # two devices showing one new process read it once
                    seen = self._who.get(pid)
                    if seen is None or started is None or seen[0] != started:
                        (row,) = process_rows({pid: used}, self.files, roles)
                        cgroup = process_cgroup(self.files, pid)
                        seen = (started or 0, ProcessSample(row, cgroup, container_id(cgroup)))
                        if started is not None:
                            self._who[pid] = seen
            known, row = seen[1], seen[1].row
            row = ProcessRow(pid, used, row.user, row.command, row.namespace_pid, roles.get(pid))
            samples.append(ProcessSample(row, known.cgroup, known.container))
        return tuple(samples)

    def _machine_findings(self) -> list[Finding]:
        """Doctor's findings about the machine (platforms that cannot be used), reading no device."""
        return diagnose(self.platform, [], None if self.candidates is None else list(self.candidates))
