"""Who the processes holding memory on a device are, as an operator reads them in nvitop: PID, user, command, bytes.

The platform says which PIDs hold how many bytes (``other_processes_memory``) and which of them serve other
processes (``process_roles``: a server holding memory for its clients); who they are comes from this machine's
process table (psutil) for PIDs visible in this PID namespace, and ``None`` otherwise. A process in a container
shows the PID it has inside its own namespace (the last ``NSpid`` entry) where that differs; its cgroup
(``/proc/<pid>/cgroup``) names the container it runs in, where a runtime put the container's ID in it.
The ``devmem`` command's process tables, the exporter's process metrics and the ledger's holders all read it here.
"""

from __future__ import annotations

import re
from collections.abc import Mapping

from devmem._host import REAL_FILES, Files
from devmem.records import Record


class ProcessRow(Record):
    """One process on a device. ``user``/``command`` are ``None`` where this PID namespace cannot see it; ``role``
    is what the platform calls a process that serves others (``None`` for an ordinary one)."""

    pid: int
    used: int
    user: str | None
    command: str | None
    namespace_pid: int | None
    role: str | None

    def as_dict(self) -> dict[str, object]:
        return dict(self.__dict__)


def _namespace_pid(files: Files, pid: int) -> int | None:
    try:
        status = files.read_text(f"/proc/{pid}/status")
    except OSError:
        return None
    for line in status.splitlines():
        if line.startswith("NSpid:"):
            pids = line.split()[1:]
            return int(pids[-1]) if len(pids) > 1 and pids[-1].isdigit() else None
    return None


#: A container runtime's 64-hex-digit container ID in a cgroup path (Docker, containerd, CRI-O, Podman).
_CONTAINER_ID = re.compile(r"(?<![0-9a-f])([0-9a-f]{64})(?![0-9a-f])")


def process_cgroup(files: Files, pid: int) -> str | None:
    """``pid``'s cgroup path: the cgroup v2 line (``0::``) of ``/proc/<pid>/cgroup``, else the v1 ``memory``
    controller's; ``None`` where it cannot be read."""
    try:
        lines = files.read_text(f"/proc/{pid}/cgroup").splitlines()
    except OSError:
        return None
    paths: dict[str, str] = {}
    for line in lines:
        _, controllers, path = (line.split(":", 2) + ["", ""])[:3]
        for name in controllers.split(",") if controllers else [""]:
            paths.setdefault(name, path)
    return paths.get("") or paths.get("memory") or None


def container_id(cgroup: str | None) -> str | None:
    """The container ID (its first 12 digits, as ``docker ps`` shows it) that a runtime wrote into ``cgroup``
    (``.../docker-<id>.scope``, ``.../cri-containerd-<id>.scope``, ``/docker/<id>``), else ``None``."""
    found = _CONTAINER_ID.findall(cgroup or "")
    return found[-1][:12] if found else None


def who(pid: int) -> tuple[str | None, str | None]:
    """(user, command line) of ``pid`` as psutil sees it; ``None`` for what it cannot. What was read of a process
    is kept (for :data:`_KNOWN` processes at most): a PID with the same start time (``/proc/<pid>/stat``, one read)
    is the same process, asked nothing again."""
    from devmem.engine.reservations._owners import _start_time

    started = _start_time(pid)
    known = None if started is None else _known.get((pid, started))
    if known is not None:
        return known
    import psutil

    try:
        known = _identity(psutil.Process(pid))
    except psutil.Error:
        return None, None
    if known[0] is not None and started is not None:
        if len(_known) >= _KNOWN:
            _known.pop(next(iter(_known)), None)
        _known[(pid, started)] = known
    return known


#: How many processes' user and command :func:`who` keeps.
_KNOWN = 4096
_known: dict[tuple[int, int], tuple[str | None, str | None]] = {}


def _identity(proc) -> tuple[str | None, str | None]:
    import psutil

    try:
        with proc.oneshot():
            name = proc.name()
            try:
                user = proc.username()
            except (KeyError, psutil.Error):  # a UID with no passwd entry (common in containers)
                user = str(proc.uids().real)
            try:
                argv = proc.cmdline()
            except psutil.Error:
                argv = []
            return user, " ".join(argv) or name
    except psutil.Error:
        return None, None


def process_rows(
    others: dict[int, int], files: Files = REAL_FILES, roles: Mapping[int, str] | None = None
) -> list[ProcessRow]:
    """Rows for ``others`` (PID -> device bytes), largest first; ``roles`` is the platform's ``process_roles``."""
    roles = roles or {}
    rows = []
    for pid, used in sorted(others.items(), key=lambda kv: (-kv[1], kv[0])):
        user, command = who(pid)
        rows.append(ProcessRow(pid, used, user, command, _namespace_pid(files, pid), roles.get(pid)))
    return rows
