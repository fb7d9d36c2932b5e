"""Who holds a reservation: an owner (PID, start time, PID namespace) and its ledger entries, with their bounds."""

from __future__ import annotations

import logging
import math
import os
import re
from typing import Any, TypeGuard

from devmem._text import shown
from devmem.records import Record

log = logging.getLogger("devmem.engine.reservations")

#: Seconds to wait for a device's ledger lock before failing.
DEFAULT_LOCK_TIMEOUT = 10.0
#: The ledger file's format version.
FORMAT = 1
#: A ledger file larger than this is corrupt (and is not read).
MAX_FILE_BYTES = 1 << 22
#: The most an entry takes in a ledger file, its fields at their bounds (an owner file larger than this is no owner
#: file); a test checks that the largest entry fits.
MAX_ENTRY_BYTES = 16 << 10
#: The most reservations one device's ledger holds: so many entries at their largest fit in :data:`MAX_FILE_BYTES`
#: (a further request is refused, and a file listing more is corrupt).
MAX_ENTRIES = (MAX_FILE_BYTES - 4096) // MAX_ENTRY_BYTES
#: The longest entry id a ledger holds (devmem writes 16 hex digits); a longer one is corrupt.
MAX_ID = 64
#: The most PID namespaces nest (the kernel's limit): an entry's ``nspid`` lists at most this many PIDs.
MAX_NESTING = 32
#: The largest PID the kernel gives (``PID_MAX_LIMIT`` on 64-bit Linux).
MAX_PID = 1 << 22
#: The bound of an entry's byte count, start time and namespace inode (64-bit figures).
MAX_FIGURE = (1 << 64) - 1

_UNSAFE = re.compile(r"[^A-Za-z0-9._-]+")


# ---- owners -------------------------------------------------------------------------------------------


def _start_time(pid: int) -> int | None:
    """``pid``'s start time in clock ticks since boot (``/proc/<pid>/stat`` field 22); ``None`` if it is gone or
    a zombie (killed, not yet reaped by its parent). Without ``/proc`` (not Linux): psutil's creation time in
    hundredths of a second."""
    try:
        fd = os.open(f"/proc/{pid}/stat", os.O_RDONLY)  # no buffered file object: the exporter asks every scrape
        try:
            text = os.read(fd, 4096)
        finally:
            os.close(fd)
        fields = text.decode("ascii", "replace").rsplit(")", 1)[1].split()
        return None if fields[0] in ("Z", "X", "x") else int(fields[19])
    except (OSError, IndexError, ValueError):
        if os.path.isdir("/proc/self"):
            return None
    import psutil

    try:
        return int(psutil.Process(pid).create_time() * 100)
    except psutil.Error:
        return None


def _pid_namespace(pid: int | str = "self") -> int:
    """The inode of ``pid``'s PID namespace (0 where unknown)."""
    try:
        return os.stat(f"/proc/{pid}/ns/pid").st_ino
    except OSError:
        return 0


def _namespace_pids() -> tuple[int, ...]:
    """This process's PIDs from the outermost PID namespace this ``/proc`` shows to its own (``NSpid``)."""
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("NSpid:"):
                    return tuple(int(p) for p in line.split()[1:] if p.isdigit())
    except OSError:
        pass
    return (os.getpid(),)


#: The longest command line an entry keeps (characters): it is for people, and a longer one would let one
#: entry push the ledger file past :data:`MAX_FILE_BYTES`.
MAX_COMMAND = 1024


def _command(pid: int) -> str:
    """``pid``'s command line, cut to :data:`MAX_COMMAND` characters."""
    return _cut(_full_command(pid))


def _cut(command: str) -> str:
    return command if len(command) <= MAX_COMMAND else command[: MAX_COMMAND - 3] + "..."


def _full_command(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            argv = f.read(4 * MAX_COMMAND).split(b"\0")
        text = " ".join(a.decode("utf-8", "replace") for a in argv if a)
        if text:
            return text
    except OSError:
        pass
    import psutil

    try:
        return " ".join(psutil.Process(pid).cmdline()) or psutil.Process(pid).name()
    except psutil.Error:
        return "?"


class Owner(Record):
    """A process that holds a reservation: PID, start time and PID namespace identify it; the rest is for people."""

    pid: int
    start_time: int
    pidns: int
    nspid: tuple[int, ...]
    command: str

    @classmethod
    def current(cls) -> Owner:
        pid = os.getpid()
        return cls(pid, _start_time(pid) or 0, _pid_namespace(), _namespace_pids(), _command(pid))

    def same_process(self, other: Owner) -> bool:
        return (self.pid, self.start_time, self.pidns) == (other.pid, other.start_time, other.pidns)

    def visible_pid(self, reader: Owner) -> int | None:
        """This owner's PID as ``reader``'s PID namespace and the platform's process list name it, where known."""
        if self.pidns == reader.pidns:
            return self.pid
        return self.nspid[0] if len(self.nspid) > 1 else None


class Entry(Record):
    """One reservation on the ledger."""

    id: str
    owner: Owner
    bytes: int
    created: float

    def as_json(self) -> dict[str, Any]:
        o = self.owner
        owner = {"pid": o.pid, "start_time": o.start_time, "pidns": o.pidns, "nspid": list(o.nspid)}
        return {"id": self.id, "bytes": self.bytes, "created": self.created, **owner, "command": o.command}

    @classmethod
    def from_json(cls, d: Any) -> Entry:
        """The entry ``d`` describes, each field within its bound (a command line longer than
        :data:`MAX_COMMAND` is cut); ``ValueError`` for anything else."""
        if not isinstance(d, dict):
            raise ValueError(f"an entry must be an object, got {shown(d)}")
        for k, bound in _FIGURES:
            v = d.get(k)
            if not _whole(v) or not 0 <= v <= bound:
                raise ValueError(f"entry field {k!r} must be a whole number from 0 to {bound}, got {shown(v)}")
        nspid = d.get("nspid")
        if (
            not isinstance(nspid, list)
            or len(nspid) > MAX_NESTING
            or not all(_whole(p) and 0 <= p <= MAX_PID for p in nspid)
        ):
            raise ValueError(
                f"entry field 'nspid' must be a list of at most {MAX_NESTING} PIDs (0 to {MAX_PID}), got {shown(nspid)}"
            )
        entry_id = d.get("id")
        if not isinstance(entry_id, str) or _UNSAFE.search(entry_id) or not 0 < len(entry_id) <= MAX_ID:
            raise ValueError(
                f"entry field 'id' must be a plain name of at most {MAX_ID} characters, got {shown(entry_id)}"
            )
        created = d.get("created")
        when = float(created) if isinstance(created, (int, float)) and _time_like(created) else math.nan
        if not math.isfinite(when):
            raise ValueError(f"entry field 'created' must be a time (seconds since the epoch), got {shown(created)}")
        command = d.get("command", "?")
        command = _cut(command) if isinstance(command, str) else "?"
        return cls(entry_id, Owner(d["pid"], d["start_time"], d["pidns"], tuple(nspid), command), d["bytes"], when)


#: An entry's whole-number fields and their bounds.
_FIGURES = (("pid", MAX_PID), ("start_time", MAX_FIGURE), ("pidns", MAX_FIGURE), ("bytes", MAX_FIGURE))


def _whole(value: Any) -> TypeGuard[int]:
    """An int, not a bool (what JSON reads as a whole number)."""
    return type(value) is int or (isinstance(value, int) and not isinstance(value, bool))


def _time_like(value: float) -> bool:
    """A float, or an int small enough to be one exactly (no bool)."""
    return isinstance(value, float) or (not isinstance(value, bool) and abs(value) < 1 << 53)
