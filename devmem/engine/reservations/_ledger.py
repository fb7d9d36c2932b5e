"""The host-wide ledger: its files, admission under the device's lock, refusals, and the reservations it grants."""

from __future__ import annotations

import atexit
import errno
import fcntl
import json
import logging
import numbers
import os
import stat
import threading
import time
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager, suppress
from pathlib import Path
from typing import Any

from devmem import arguments
from devmem._bounded import BoundedPlatform
from devmem._deadline import MAX_TIMEOUT
from devmem._forksafe import ForkSafeLock
from devmem._text import described, env_text, shown
from devmem.engine._ledger_dir import LEDGER_DIR_ENV, LedgerDirectory, read_bounded
from devmem.engine.reservations._accounting import Accounting, Holding, account, named
from devmem.engine.reservations._owners import (
    _UNSAFE,
    DEFAULT_LOCK_TIMEOUT,
    FORMAT,
    MAX_ENTRIES,
    MAX_ENTRY_BYTES,
    MAX_FILE_BYTES,
    Entry,
    Owner,
    _start_time,
)
from devmem.errors import ArgumentError, DevmemError, LedgerError, ReservationRefused
from devmem.platform import DeviceReading, Platform, PlatformBase
from devmem.records import Record
from devmem.resolution.plugins import platform_argument
from devmem.units import format_size

log = logging.getLogger("devmem.engine.reservations")

# ---- the ledger ---------------------------------------------------------------------------------------


def default_directory() -> Path:
    """``DEVMEM_LEDGER_DIR``, else ``/dev/shm/devmem``, else ``<tempdir>/devmem`` where there is no /dev/shm. A
    relative ``DEVMEM_LEDGER_DIR`` is a :class:`LedgerError`: processes started in other folders would each see a
    ledger of their own, and admit more than the device between them."""
    chosen = env_text(LEDGER_DIR_ENV, error=LedgerError)
    if chosen:
        if not os.path.isabs(chosen):
            raise LedgerError(
                f"{LEDGER_DIR_ENV} must be an absolute path (every engine on the host must name the same folder), "
                f"got {shown(chosen)}"
            )
        return Path(chosen)
    return Path("/dev/shm/devmem") if os.path.isdir("/dev/shm") else Path(os.environ.get("TMPDIR") or "/tmp") / "devmem"


#: The longest device key: its files' names (``<key>.<id>.owner``) stay within a filesystem's 255 bytes.
MAX_KEY = 128


def _file_key(text: str) -> str:
    """``text`` as a name in the ledger directory: only letters, digits and ``._-``, at most :data:`MAX_KEY`
    characters (a longer one is cut, with a digest of the whole so that two long names stay apart)."""
    key = _UNSAFE.sub("_", text)
    if len(key) <= MAX_KEY:
        return key
    import hashlib  # only for a long key: hashlib loads OpenSSL, a few ms of every `devmem` command

    return f"{key[: MAX_KEY - 17]}-{hashlib.sha256(text.encode('utf-8', 'replace')).hexdigest()[:16]}"


def device_key(platform: Platform, device: int, name: str | None = None) -> tuple[str, str]:
    """The ledger's name for ``device`` and how it was made (for people); ``name``: the device's name where the
    caller has it already (from a reading, whose index is checked), so the platform is not asked for it. On a
    :class:`~devmem._bounded.BoundedPlatform` it is one call, given its deadline."""
    if isinstance(platform, BoundedPlatform):
        return platform.call(f"device_uuid({device!r})", device_key, platform.platform, device, name)
    try:
        if name is not None and isinstance(platform, PlatformBase):
            uid = platform._device_uuid(device)  # the index was checked when the reading was taken
        else:
            get_uuid = getattr(platform, "device_uuid", None)
            uid = get_uuid(device) if callable(get_uuid) else None
    except DevmemError:
        raise
    except Exception as exc:  # a backend's failure, named: keyed otherwise, the device would get a second ledger
        raise LedgerError(
            f"platform {platform.name!r}: device_uuid({device}) raised {described(exc)}, and the ledger keys a device "
            "by its UUID (keyed by another name, engines that read the UUID would not see this one's reservation); "
            "fix the backend, or check the device (`devmem doctor`)"
        ) from exc
    if uid is not None and not isinstance(uid, str):
        raise LedgerError(
            f"platform {platform.name!r}: device_uuid({device}) returned {shown(uid)} of type {type(uid).__name__}, "
            "not text or None; fix the backend"
        )
    if uid:
        return _file_key(str(uid)), "the device's UUID"
    key = _file_key(f"{platform.name}-{platform.device_name(device) if name is None else name}-{device}")
    return key, (
        f"platform {platform.name!r}, device name and index {device} (the platform gives no UUID: processes that "
        "number the devices differently see different ledgers)"
    )


def _create(d: LedgerDirectory, name: str, flags: int, mode: int) -> int:
    """Open the regular file ``name`` in ``d``, creating it with ``mode``, never through a symbolic link in its
    place and never blocking on a FIFO; ``LedgerError`` naming it on failure."""
    path = d.file(name)
    try:
        fd = d.open_file(name, flags | os.O_CREAT, mode)
    except OSError as exc:
        link = " (a symbolic link: the ledger does not follow links)" if exc.errno == errno.ELOOP else ""
        raise LedgerError(
            f"cannot open the reservation ledger file {path}: {exc.strerror}{link}; set {LEDGER_DIR_ENV} to a "
            "writable directory shared by the engines on this host"
        ) from None
    except ValueError as exc:
        raise LedgerError(f"the reservation ledger file {exc}; remove it") from None
    if os.fstat(fd).st_uid == os.geteuid():  # another user's file: its mode was set by its creator
        with suppress(OSError):
            os.fchmod(fd, mode)
    return fd


def _os_error(what: str, path: Path, exc: OSError) -> LedgerError:
    return LedgerError(
        f"cannot {what} the reservation ledger file {path}: {exc.strerror or exc}; set {LEDGER_DIR_ENV} to a "
        "writable directory shared by the engines on this host, on a local filesystem"
    )


#: Paths of broken ledger files (a link, a FIFO, an unreadable owner file), and ledger directories that cannot be
#: used, this process has warned about.
_WARNED: set[str] = set()


def _warn_once(path: Path, what: str) -> None:
    if str(path) not in _WARNED:
        _WARNED.add(str(path))
        log.warning("devmem: reservation ledger file %s %s", path, what)


def _flock_within(fd: int, seconds: float) -> bool | OSError:
    """Take ``flock(LOCK_EX)`` on ``fd``'s open file, waiting at most ``seconds``: whether it was taken (or the
    ``OSError`` that ``flock`` raised). The wait is a blocking ``flock`` in a daemon thread, on a duplicate of
    ``fd`` (a lock belongs to the open file, so ``fd`` holds it once taken): the kernel queues its waiters and
    wakes the next when the lock is released, where polling gave no waiter its turn. Given up at the deadline, the
    thread drops the lock as soon as it gets it (closing the last descriptor of the open file)."""
    waiter = os.dup(fd)
    turn = ForkSafeLock()
    taken = threading.Event()
    outcome: list[bool | OSError] = []

    def wait() -> None:
        try:
            fcntl.flock(waiter, fcntl.LOCK_EX)
            result: bool | OSError = True
        except OSError as exc:
            result = exc
        with turn:
            if not outcome:  # still waited for
                outcome.append(result)
                os.close(waiter)  # fd keeps the lock
                taken.set()
                return
        os.close(waiter)  # given up: its lock (the last descriptor of that open file) goes with it

    threading.Thread(target=wait, name="devmem-ledger-lock", daemon=True).start()
    taken.wait(seconds)
    with turn:
        if not outcome:
            outcome.append(False)
            return False
    return outcome[0]


class Locks:
    """The ``flock`` holders the kernel lists (``/proc/locks``), read once per look at a ledger (or at every ledger
    of a scrape), at its first question."""

    def __init__(self, path: str = "/proc/locks"):
        self._path = path
        self._holders: dict[str, set[int]] | None = None
        self._devices: dict[int, str] = {}  # a device number as /proc/locks writes it (``08:01:``)

    def holders(self, dev: int, ino: int) -> set[int] | None:
        """The PIDs (as this PID namespace names them) holding a ``flock`` on the file ``(dev, ino)``; ``None``
        where ``/proc/locks`` cannot be read or lists none (holders in another PID namespace are left out)."""
        if self._holders is None:  # read whole before it is shared: threads may ask at once
            holders: dict[str, set[int]] = {}
            try:
                fd = os.open(self._path, os.O_RDONLY)
                try:
                    text = read_bounded(fd, 1 << 24).decode("ascii", "replace")
                finally:
                    os.close(fd)
            except OSError:
                text = ""
            for line in text.splitlines():
                fields = line.split()
                if len(fields) >= 6 and fields[1] == "FLOCK" and fields[4].isdigit():
                    holders.setdefault(fields[5], set()).add(int(fields[4]))
            self._holders = holders
        device = self._devices.get(dev)
        if device is None:
            device = self._devices[dev] = f"{os.major(dev):02x}:{os.minor(dev):02x}:"
        return self._holders.get(f"{device}{ino}") or None


class DeviceReservations(Record):
    """A device's ledger as an operator sees it: the live holdings and the entries of dead owners."""

    key: str
    path: str
    accounting: Accounting
    stale: tuple[Entry, ...] = ()
    problem: str | None = None

    def as_dict(self) -> dict[str, object]:
        a = self.accounting
        return {
            "ledger": self.path,
            "total": a.total,
            "reserved": a.reserved,
            "unreserved": a.unreserved,
            "committed": a.committed,
            "holders": [h.as_dict() for h in a.holdings],
            "stale": [e.as_json() for e in self.stale],
            "notes": list(a.notes) + ([self.problem] if self.problem else []),
        }


def ledger_bytes(key: str, entries: Sequence[Entry]) -> bytes:
    """The ledger file of ``key`` listing ``entries``, on one line: json's C encoder writes it (an indented dump
    runs the pure-Python one, milliseconds for a few hundred entries at every admission)."""
    return (json.dumps({"format": FORMAT, "key": key, "entries": [e.as_json() for e in entries]}) + "\n").encode()


def parse_ledger(data: bytes, known: Mapping[str, Entry] | None = None) -> list[Entry]:
    """The entries of a ledger file's bytes; ``ValueError``, ``KeyError``, ``TypeError`` or ``RecursionError``
    for anything else (more than :data:`MAX_ENTRIES` entries included).

    ``known``: entries checked in an earlier read of the same file, by id; an entry written as the one known is
    taken as it is (a release, the next admission or the next scrape checks only what changed since)."""
    ledger = json.loads(data)
    if not isinstance(ledger, dict) or ledger.get("format") != FORMAT:
        raise ValueError(f"not a version-{FORMAT} ledger")
    entries = ledger["entries"]
    if not isinstance(entries, list) or len(entries) > MAX_ENTRIES:
        raise ValueError(f"'entries' must be a list of at most {MAX_ENTRIES} entries, got {shown(entries)}")
    if not known:
        return [Entry.from_json(e) for e in entries]
    parsed = []
    for e in entries:
        entry_id = e.get("id") if isinstance(e, dict) else None
        same = known.get(entry_id) if isinstance(entry_id, str) else None
        parsed.append(same if same is not None and e == same.as_json() else Entry.from_json(e))
    return parsed


#: The entries of each ledger file (by path) as this process last read them, shared by every
#: :class:`Ledger` of the process (each admission makes its own): entries are immutable, and one is taken from here
#: only where the file writes it exactly as it was checked. Each read replaces its file's whole map.
_KNOWN: dict[Path, dict[str, Entry]] = {}

#: The owner files of each ledger file as this process last read them, by id: their bytes and the record they gave
#: (see :meth:`Ledger.judged`); each look replaces its file's whole map, so only the entries it saw are kept.
_OWNER_COPIES: dict[Path, dict[str, tuple[bytes, Entry | None]]] = {}


class Ledger:
    """The reservation ledger in ``directory`` (default: :func:`default_directory`)."""

    def __init__(self, directory: str | os.PathLike[str] | None = None, *, lock_timeout: float = DEFAULT_LOCK_TIMEOUT):
        if directory is not None and (
            not isinstance(directory, (str, os.PathLike))
            or not str(os.fspath(directory)).strip()
            or "\0" in str(os.fspath(directory))
        ):
            raise LedgerError(
                f"the ledger directory must be a path (str or os.PathLike, not empty, no NUL byte) or None, "
                f"got {shown(directory)}"
            )
        if directory is not None and not os.path.isabs(directory):  # as for DEVMEM_LEDGER_DIR
            raise LedgerError(
                f"the ledger directory must be an absolute path (every engine on the host must name the same folder), "
                f"got {shown(os.fspath(directory))}"
            )
        self.directory = Path(directory) if directory is not None else default_directory()
        seconds = None if isinstance(lock_timeout, bool) or not isinstance(lock_timeout, numbers.Real) else lock_timeout
        if seconds is None or not 0 < seconds <= MAX_TIMEOUT:  # compared as given: a huge int is no float
            raise DevmemError(
                f"lock_timeout must be a finite number of seconds > 0 and at most {MAX_TIMEOUT:g} (a wait that "
                f"ends), got {shown(lock_timeout)}"
            )
        self.lock_timeout: float = float(seconds)

    # ---- files ----------------------------------------------------------------------------------------
    def opened(self, *, create: bool) -> LedgerDirectory | None:
        """The ledger directory, opened without following a link and checked (:mod:`devmem.engine._ledger_dir`);
        where it is missing, created (``create``) or ``None``."""
        return LedgerDirectory.open(self.directory, create=create)

    def _opened(self) -> LedgerDirectory:
        d = self.opened(create=True)
        assert d is not None  # created where missing
        return d

    def path(self, key: str) -> Path:
        return self.directory / f"{key}.json"

    @contextmanager
    def _locked(self, d: LedgerDirectory, key: str) -> Iterator[None]:
        """The device's admission lock, held while the block runs. Where another process holds it, this one waits
        in the kernel's queue of the lock's waiters (a blocking ``flock``), so engines arriving together are
        answered in turn, each soon after the one before; ``LedgerError`` once :attr:`lock_timeout` has passed."""
        # flock needs no write access: another user's lock file serves as well
        fd = _create(d, f"{key}.lock", os.O_RDONLY, 0o666)
        try:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError as exc:
                if exc.errno not in (errno.EAGAIN, errno.EACCES):
                    raise _os_error("lock (flock)", d.file(f"{key}.lock"), exc) from None
                waited = _flock_within(fd, self.lock_timeout)
                if isinstance(waited, OSError):
                    raise _os_error("lock (flock)", d.file(f"{key}.lock"), waited) from None
                if not waited:
                    raise LedgerError(
                        f"waited {self.lock_timeout:g} s for the reservation ledger lock {d.file(key)}.lock "
                        "without getting it: another process holds it (a hung engine?); `devmem info` lists the "
                        "holders"
                    ) from None
            yield
        finally:
            os.close(fd)  # closing drops the lock

    def _read(self, d: LedgerDirectory, key: str) -> tuple[list[Entry], str | None]:
        """The entries of ``key``'s ledger file, and ``None``; for a file that is not a ledger (a symbolic link
        included: never followed), none and the problem."""
        name = f"{key}.json"
        path = d.file(name)
        try:
            data = d.read(name, MAX_FILE_BYTES)
        except FileNotFoundError:
            return [], None
        except OSError as exc:
            if exc.errno == errno.ELOOP:
                return [], f"{path} is a symbolic link (never followed): not a ledger"
            return [], f"cannot read {path}: {exc.strerror}"
        except ValueError as exc:
            return [], f"{exc}: not a ledger"
        try:
            entries = parse_ledger(data, _KNOWN.get(path))
        except (ValueError, KeyError, TypeError, RecursionError) as exc:
            _KNOWN.pop(path, None)
            return [], f"{path} is corrupt ({type(exc).__name__}: {exc})"
        _KNOWN[path] = {e.id: e for e in entries}
        return entries, None

    @staticmethod
    def _owner_name(key: str, entry_id: str) -> str:
        return f"{key}.{entry_id}.owner"

    def _write(self, d: LedgerDirectory, key: str, entries: Sequence[Entry]) -> None:
        """Replace ``key``'s ledger file with ``entries`` (the lock is held): through a temporary file renamed
        into place (which replaces a link in its place, never its target), or, where the file is another user's
        in a sticky directory (``/dev/shm``, mode 1777: only its owner may replace it), rewritten in place;
        ``LedgerError`` naming the file where neither can be."""
        data = ledger_bytes(key, entries)
        name = f"{key}.json"
        # a name nobody can foresee, made here (O_EXCL): a file another user planted under a name they could
        # foresee (this PID's) would be theirs to keep, and in a sticky directory neither renamed nor removed by us
        tmp = f".{key}.{os.urandom(8).hex()}.tmp"
        try:
            fd = d.open_file(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666)
        except OSError as exc:
            raise _os_error("write", d.file(tmp), exc) from None
        except ValueError as exc:
            raise LedgerError(f"the reservation ledger file {exc}; remove it") from None
        try:
            os.write(fd, data)
            os.fchmod(fd, 0o666)
            os.close(fd)
            fd = -1
            d.replace(tmp, name)
        except PermissionError:
            with suppress(OSError):
                d.unlink(tmp)
            self._write_in_place(d, name, data)
        except OSError as exc:
            if fd >= 0:
                os.close(fd)
            with suppress(OSError):
                d.unlink(tmp)
            raise _os_error("write", d.file(name), exc) from None
        except BaseException:
            if fd >= 0:
                os.close(fd)
            with suppress(OSError):
                d.unlink(tmp)
            raise

    @staticmethod
    def _write_in_place(d: LedgerDirectory, name: str, data: bytes) -> None:
        path = d.file(name)
        try:
            fd = d.open_file(name, os.O_WRONLY)
        except OSError as exc:
            try:
                st = d.lstat(name)
                whose = f" (owned by uid {st.st_uid}, mode {stat.filemode(st.st_mode)})"
            except OSError:
                whose = ""
            link = ", a symbolic link the ledger does not follow" if exc.errno == errno.ELOOP else ""
            raise LedgerError(
                f"cannot write the reservation ledger file {path}{whose}: {exc.strerror}{link}; its owner or root can "
                f"remove it (no reservation is lost: the owners' files rebuild it), or set {LEDGER_DIR_ENV} to "
                "another directory shared by the engines on this host"
            ) from None
        except ValueError as exc:
            raise LedgerError(f"the reservation ledger file {exc}; remove it") from None
        try:
            os.ftruncate(fd, 0)
            os.write(fd, data)
        except OSError as exc:
            raise _os_error("write", path, exc) from None
        finally:
            os.close(fd)

    # ---- liveness -------------------------------------------------------------------------------------
    def _owner(
        self,
        d: LedgerDirectory,
        key: str,
        entry: Entry,
        me: Owner,
        others: Mapping[int, int] | None,
        locks: Locks,
        copies_before: Mapping[str, tuple[bytes, Entry | None]],
        copies: dict[str, tuple[bytes, Entry | None]],
    ) -> Entry | None:
        """``entry`` as its owner recorded it (its owner file's copy, which only the owner writes), where the owner
        is alive, as the kernel tells: its owner lock decides, in any PID namespace (a PID and start time anyone
        can copy into an entry prove nothing). In this namespace the lock must be held by the owner's PID where
        ``/proc/locks`` lists the lock's holders. A missing owner file means a dead owner (a live one keeps it from
        before its entry is written until after its entry is removed); so does one that is no regular file this
        user can open (a link, a FIFO, a directory, a file made unreadable: no owner made it so). Only where
        ``flock`` itself fails on the owner file: the PID and start time (this namespace) or the platform's
        process list (another). ``copies_before``: the owner files' bytes this process read last time and what
        they gave, by id (the same bytes give the same record); ``copies``: this read's, filled in."""
        name = self._owner_name(key, entry.id)
        try:
            fd = d.open_file(name, os.O_RDONLY)
        except FileNotFoundError:
            return None
        except (OSError, ValueError) as exc:
            what = "is a symbolic link (never followed)" if getattr(exc, "errno", None) == errno.ELOOP else str(exc)
            _warn_once(d.file(name), f"is no owner file ({what}): its entry counts as dead")
            return None
        try:
            st = os.fstat(fd)
            try:  # shared: readers probing at once never take each other for the owner
                fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
                return None  # nobody holds it: the owner is gone
            except OSError as exc:
                held = exc.errno in (errno.EWOULDBLOCK, errno.EAGAIN, errno.EACCES)
            record = entry
            with suppress(OSError, ValueError, RecursionError):
                data = os.read(fd, min(st.st_size, MAX_ENTRY_BYTES) + 1)  # its size: no 16 KiB buffer each
                before = copies_before.get(entry.id)
                if before is not None and before[0] == data:  # the bytes this process checked last time
                    own = before[1]
                else:
                    copy = json.loads(data) if len(data) <= MAX_ENTRY_BYTES else None
                    # the owner's copy as the ledger lists it (checked when it was read) needs no second check
                    own = entry if copy == entry.as_json() else None if copy is None else Entry.from_json(copy)
                copies[entry.id] = (data, own)
                if own is not None and own.id == entry.id:
                    record = own
        finally:
            os.close(fd)
        o = record.owner
        same_namespace = bool(o.pidns) and o.pidns == me.pidns
        if held:
            holders = locks.holders(st.st_dev, st.st_ino) if same_namespace else None
            # no list: the lock alone says (its holder is in another PID namespace)
            return record if not holders or o.pid in holders else None
        if same_namespace:
            return record if _start_time(o.pid) == o.start_time else None
        outer = o.nspid[0] if len(o.nspid) > 1 else None
        return record if others is not None and outer is not None and outer in others else None

    def judged(
        self,
        d: LedgerDirectory,
        key: str,
        entries: Sequence[Entry],
        me: Owner,
        others: Mapping[int, int] | None,
        locks: Locks | None = None,
    ) -> tuple[list[Entry], list[Entry]]:
        """``entries`` split into the live owners' (as each owner recorded it, each id once) and the dead's;
        ``locks``: the kernel's lock holders as a caller reading several ledgers at once read them."""
        locks = locks or Locks()
        live: list[Entry] = []
        dead: list[Entry] = []
        seen: set[str] = set()
        ledger_file = d.file(f"{key}.json")
        copies_before = _OWNER_COPIES.get(ledger_file, {})
        copies: dict[str, tuple[bytes, Entry | None]] = {}
        for e in entries:
            if e.id in seen:  # a copy of an entry counts once
                continue
            seen.add(e.id)
            record = self._owner(d, key, e, me, others, locks, copies_before, copies)
            if record is None:
                dead.append(e)
            else:
                live.append(record)
        _OWNER_COPIES[ledger_file] = copies
        return live, dead

    def _owner_files(self, d: LedgerDirectory, key: str, listed: frozenset[str] = frozenset()) -> list[Entry]:
        """The entries ``key``'s owner files record, each from the file its id names (live or not), but for the
        ids in ``listed`` (the ledger file's, whose owner files :meth:`judged` reads)."""
        entries = []
        prefix = f"{key}."
        for name in d.names():
            if not (name.startswith(prefix) and name.endswith(".owner")) or name[len(prefix) : -6] in listed:
                continue
            try:
                entry = Entry.from_json(json.loads(d.read(name, MAX_ENTRY_BYTES)))
            except (OSError, ValueError, RecursionError):
                continue
            if name == self._owner_name(key, entry.id):
                entries.append(entry)
        return entries

    def _load(
        self,
        d: LedgerDirectory,
        key: str,
        me: Owner,
        others: Mapping[int, int] | None,
        locks: Locks | None = None,
    ) -> tuple[list[Entry], list[Entry], str | None]:
        """(live entries, dead entries, the problem of a corrupt file) of ``key``'s ledger: the ledger file's
        entries and those of the owner files it does not list, so that a ledger file emptied, edited or removed
        while its owners live loses none of their reservations; ``locks`` as for :meth:`judged`."""
        entries, problem = self._read(d, key)
        listed = frozenset(e.id for e in entries)
        entries += [e for e in self._owner_files(d, key, listed) if e.id not in listed]
        live, dead = self.judged(d, key, entries, me, others, locks)
        if problem is not None:
            return live, [], f"{problem}: rebuilt from the {len(live)} live owner(s)' owner files"
        return live, dead, None

    # ---- reserving ------------------------------------------------------------------------------------
    def reserve(
        self,
        platform: Platform,
        device: int,
        nbytes: int | None = None,
        utilization: float | None = None,
        *,
        reading: DeviceReading | None = None,
        held_outside: int | None = None,
    ) -> Reservation:
        """Admit a reservation of ``nbytes`` (or ``utilization`` of the total) on ``device``, or raise
        :class:`ReservationRefused`. ``reading``: a :class:`~devmem.platform.DeviceReading` of ``device`` the caller
        took already; admission counts its figures and asks the platform no memory question; ``held_outside``:
        of what this process holds, the bytes the new share does not cover (see :func:`reserve`). ``platform`` is
        a checked one (:func:`reserve` checks it)."""
        reading = _reading_of(platform, device, reading)
        total = reading.info.total
        if total <= 0:
            raise DevmemError(
                f"device {device} ({reading.name}) reports a total of {shown(total)} bytes: nothing can be reserved on "
                "it; check the device (`devmem doctor`) or reserve on another"
            )
        request = resolve_request(nbytes, utilization, total)
        key, _ = device_key(platform, reading.index, reading.name)
        others = reading.other_processes
        me = Owner.current()
        with self._opened() as d, self._locked(d, key):
            live, dead, problem = self._load(d, key, me, others)
            if problem:
                log.warning("devmem: reservation ledger %s", problem)
            if dead:
                log.info("devmem: reclaimed %d reservation(s) of dead owners on %s", len(dead), key)
            before = _beside_a_share(reading, live, me, held_outside)
            # this process's own use beyond what it reserved, and outside the new share, is on top of the request:
            # an engine's budget is its growth from its baseline
            if before.committed + request > total or len(live) >= MAX_ENTRIES:
                raise _refusal(reading.name, device, request, before, self.path(key), full=len(live) >= MAX_ENTRIES)
            entry = Entry(os.urandom(8).hex(), me, request, time.time())
            name = self._owner_name(key, entry.id)
            # the owner file appears under its name already locked and written (renamed into place): a reader
            # probing its lock (the exporter, `devmem info`, which take no ledger lock) never finds it unlocked or
            # empty, and never holds its lock as the owner takes it; private (0600) until then, so nobody else
            # can open it first
            made = f".{name}.{os.urandom(4).hex()}.new"
            fd = _create(d, made, os.O_RDWR | os.O_EXCL, 0o600)
            try:
                try:
                    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                    os.write(fd, json.dumps(entry.as_json()).encode())
                    os.fchmod(fd, 0o644)  # readable by every user, written by its owner only
                    d.replace(made, name)
                except OSError as exc:
                    raise _os_error("lock (flock), write and name", d.file(name), exc) from None
                for stale in dead:
                    with suppress(OSError):  # another user's, in a sticky directory: left, and ignored
                        d.unlink(self._owner_name(key, stale.id))
                self._write(d, key, [*live, entry])
            except BaseException:
                os.close(fd)
                for left in (made, name):
                    with suppress(OSError):
                        d.unlink(left)
                raise
        reservation = Reservation(self, key, device, entry, total, fd)
        _LIVE.add(reservation)
        return reservation

    def _grow(
        self,
        reservation: Reservation,
        nbytes: int,
        platform: Platform,
        reading: DeviceReading | None,
        outside: int | None,
    ) -> Entry:
        """The entry of ``reservation`` raised to ``nbytes``, admitted as a new share of that size would be with its
        own entry left out (``outside``: as ``held_outside`` of :meth:`reserve`), written to the ledger and to its
        owner file; :class:`ReservationRefused` where it does not fit (the ledger unchanged)."""
        reading = _reading_of(platform, reservation.device, reading)
        key, entry, me, others = reservation.key, reservation.entry, Owner.current(), reading.other_processes
        with self._opened() as d, self._locked(d, key):
            live, _, problem = self._load(d, key, me, others)
            if problem:
                log.warning("devmem: reservation ledger %s", problem)
            rest = [e for e in live if e.id != entry.id]
            before = _beside_a_share(reading, rest, me, outside)
            if before.committed + nbytes > reading.info.total:
                raise _refusal(reading.name, reservation.device, nbytes, before, self.path(key))
            grown = Entry(entry.id, entry.owner, nbytes, entry.created)
            data = json.dumps(grown.as_json()).encode()
            try:  # as long as the old text at least (more bytes, as many digits or more): no old text is left
                os.pwrite(reservation._fd, data, 0)
                os.ftruncate(reservation._fd, len(data))
            except OSError as exc:
                raise _os_error("write", d.file(self._owner_name(key, entry.id)), exc) from None
            self._write(d, key, [*rest, grown])
        return grown

    def _release(self, key: str, entry: Entry) -> None:
        d = self.opened(create=False)
        if d is None:  # the directory is gone, and the entry with it
            return
        with d, self._locked(d, key):
            entries, problem = self._read(d, key)
            if problem is None:
                self._write(d, key, [e for e in entries if e.id != entry.id])
            with suppress(OSError):  # gone already, or the directory no longer writable: the lock dies with us
                d.unlink(self._owner_name(key, entry.id))

    # ---- reading, for operators -----------------------------------------------------------------------
    def keys(self) -> list[str]:
        try:
            d = self.opened(create=False)
        except LedgerError:
            return []
        if d is None:
            return []
        with d:
            names = d.names()
        return sorted(n[: -len(".json")] for n in names if n.endswith(".json") and not n.startswith("."))

    def view(
        self,
        key: str,
        total: int,
        free: int,
        others: Mapping[int, int] | None,
        integrated: bool,
        own_used: int | None = None,
        me: Owner | None = None,
        *,
        locks: Locks | None = None,
        commands: bool = True,
    ) -> DeviceReservations | None:
        """``key``'s ledger as admission reads it (the ledger file's entries and the owner files it does not list,
        each owner judged alive or dead as admission judges it), with the holdings as admission counts them;
        ``None`` where the device has neither a ledger file nor an owner file. ``devmem info``, ``top``, ``doctor``
        and the exporter all read it here. It writes, creates and locks nothing: nothing is reclaimed, engines
        being admitted never wait for it, and it sees a whole ledger file (replaced atomically) and owner files
        that appear locked and written. ``me``: the reading process (:meth:`Owner.current` where ``None``); ``locks``
        as for :meth:`judged`; ``commands`` as for :func:`account` (without, a holder that reserved nothing is not
        looked up). Entries read before in this process are checked again only where changed (:func:`parse_ledger`)."""
        d = self.opened(create=False)
        if d is None:
            return None
        me = me or Owner.current()
        with d:
            try:
                if not d.exists(f"{key}.json") and not self._owner_files(d, key):  # owners outlive a removed file
                    return None
            except OSError as exc:  # a directory this user cannot search
                raise LedgerError(
                    f"cannot read the reservation ledger file {shown(str(self.path(key)))}: {exc.strerror}; set "
                    f"{LEDGER_DIR_ENV} to a directory shared by the engines on this host"
                ) from None
            live, dead, problem = self._load(d, key, me, others, locks)
        accounting = account(total, free, live, others, own_used, integrated, me, commands=commands)
        return DeviceReservations(key, str(self.path(key)), accounting, tuple(dead), problem)


def resolve_request(nbytes: int | None, utilization: float | None, total: int) -> int:
    """The bytes a request asks for: ``nbytes``, or :func:`devmem.planner.sizing.requested_memory` of
    ``utilization`` (what an engine at that utilization requests); exactly one is given."""
    if (nbytes is None) == (utilization is None):
        raise ArgumentError(
            f"give exactly one of bytes and utilization to reserve, got bytes={shown(nbytes)} and "
            f"utilization={shown(utilization)}"
        )
    if utilization is not None:
        from devmem.planner.sizing import requested_memory  # the planner only where a share is asked for

        return requested_memory(total, utilization)
    whole = arguments.byte_count("bytes", nbytes, positive=True)
    if whole > total:
        raise ArgumentError(f"bytes {shown(whole)} is more than the device's total, {total} ({format_size(total)})")
    return whole


def _beside_a_share(reading: DeviceReading, live: Sequence[Entry], me: Owner, held_outside: int | None) -> Accounting:
    """What admission counts beside a new share on the device of ``reading``: the owners of ``live``, the processes
    it lists, and this process's own memory outside the share (``held_outside`` of it, where given). Who the
    processes without a reservation are is asked only where a refusal names them."""
    own = reading.process.used
    outside = own if held_outside is None or own is None else min(own, held_outside)
    info, others = reading.info, reading.other_processes
    return account(
        info.total, info.free, live, others, own, reading.integrated, me, own_counted=outside, commands=False
    )


def _reading_of(platform: Platform, device: int, reading: DeviceReading | None) -> DeviceReading:
    """``reading``, checked to be a reading of ``device``; without one, one reading of ``device`` from
    ``platform`` (:func:`devmem.platform.read_device`)."""
    if reading is None:
        from devmem.platform import read_device

        return read_device(platform, device)
    if not isinstance(reading, DeviceReading):
        raise DevmemError(
            f"reading must be a devmem.platform.DeviceReading (platform.read(device)) or None, got {shown(reading)} "
            f"of type {type(reading).__name__}"
        )
    if type(device) is int and device == reading.index:  # the reading's index was checked when it was read
        return reading
    index = platform.check_device(device) if hasattr(platform, "check_device") else device
    if reading.index != index:
        raise DevmemError(
            f"the reading given to reserve is of device {reading.index} ({reading.name}), not of device {shown(device)}"
            f": pass a reading of the device reserved (platform.read({shown(device)}))"
        )
    return reading


def _refusal(
    name: str, device: int, request: int, before: Accounting, path: Path, full: bool = False
) -> ReservationRefused:
    """The refusal of ``request``: what would fit (the total less all that ``before`` counts, this process's own
    use included) and who holds the device; ``full``: the ledger holds :data:`MAX_ENTRIES` reservations already."""
    total = before.total
    available = max(0, total - before.committed)
    holders = named(sorted(before.holdings, key=lambda h: -h.committed))
    fits = available * 1000 // total / 1000  # the share that fits, rounded down to 0.001 (exactly: integers)
    asked = f"device {device} ({name}): cannot reserve {format_size(request)} ({request / total:.3f} of "
    asked += f"{format_size(total)})."
    if full:
        first = (
            f"{asked} The device's ledger holds {MAX_ENTRIES} reservations, the most one device may have; stop a "
            "holder first."
        )
    else:
        first = (
            f"{asked} What would fit: {format_size(available)} ({available} bytes, utilization {fits:.3f}); stop a "
            "holder or ask for at most that."
        )
    lines = [
        first,
        *_holder_lines(holders),
        *(f"  note: {n}" for n in (*_own_reservations_note(before), *before.notes)),
        f"  ledger: {path}",
    ]
    return ReservationRefused(
        "\n".join(lines),
        {
            "total": total,
            "requested": request,
            "reserved": before.reserved,
            "unreserved": before.unreserved,
            "available": available,
        },
        [h for h in holders if not (h.mine and not h.reserved)],  # the refused process is no holder to stop
    )


def _own_reservations_note(before: Accounting) -> list[str]:
    """Where this process already holds reservations on the device: that they count, and what to do instead."""
    own = [h.reserved for h in before.holdings if h.mine and h.reserved]
    if not own:
        return []
    return [
        f"this process already holds {len(own)} reservation(s) on this device, {format_size(sum(own))} in all, "
        "and they count: to size an engine again, pass the Reservation it holds (reservation=) or release() it "
        "first"
    ]


#: A refusal names at most this many holders, the largest first, and sums up the rest.
HOLDERS_NAMED = 8


def _holder_lines(holders: list[Holding]) -> list[str]:
    """One line per holder, largest first; past :data:`HOLDERS_NAMED`, one line for the rest."""
    if not holders:
        return ["  holders: nothing else is counted"]
    lines = [f"  holder: {h.describe()}" for h in holders[:HOLDERS_NAMED]]
    rest = holders[HOLDERS_NAMED:]
    if rest:
        lines.append(f"  and {len(rest)} more holder(s) with {format_size(sum(h.committed for h in rest))} in all")
    return lines


class Reservation:
    """A reservation this process holds on a device, until :meth:`release` or the process's exit (at exit it is
    released by ``atexit``; after a SIGKILL it is reclaimed at the next admission). A context manager."""

    def __init__(self, ledger: Ledger, key: str, device: int, entry: Entry, total: int, fd: int):
        self.ledger, self.key, self.device, self.entry, self.total = ledger, key, device, entry, total
        self._fd = fd
        self.released = False
        self._lock = ForkSafeLock()

    def __repr__(self) -> str:
        state = "released" if self.released else "held"
        return f"Reservation(device={self.device}, key={self.key!r}, bytes={self.bytes}, {state})"

    @property
    def bytes(self) -> int:
        return self.entry.bytes

    @property
    def path(self) -> Path:
        return self.ledger.path(self.key)

    def release(self) -> None:
        """Remove the reservation from the ledger (again: nothing; in a forked child: nothing). Its owner lock is
        dropped whatever happens, so where the ledger cannot be written (the directory gone or no longer to be
        trusted, its lock not obtained, a full disk) the entry is a dead owner's, which the next admission reclaims:
        that is logged, never raised, since a release runs where an engine stops, often on its own exception, which
        it would replace."""
        with self._lock:
            if self.released or self.entry.owner.pid != os.getpid():
                return
            self.released = True
        try:
            self.ledger._release(self.key, self.entry)
        except (LedgerError, OSError) as exc:
            log.warning(
                "devmem: reservation of %s on %s released, but its entry could not be removed from the ledger (%s); "
                "its owner lock is dropped, so the next admission reclaims it",
                format_size(self.bytes),
                self.key,
                exc,
            )
        finally:
            os.close(self._fd)
            _LIVE.discard(self)

    def grow(
        self,
        nbytes: int,
        platform: Platform | None = None,
        *,
        reading: DeviceReading | None = None,
        held_outside: int | None = None,
    ) -> None:
        """Raise the reservation to ``nbytes`` (nothing where it holds that much): what an engine found it needs
        beyond what it reserved before loading, admitted as a new share of that size would be (its own entry left
        out; ``reading`` and ``held_outside`` as for :func:`reserve`), else :class:`ReservationRefused` naming the
        holders and what would fit, the reservation unchanged. ``platform`` defaults to the current one."""
        nbytes = arguments.byte_count("nbytes", nbytes)
        if held_outside is not None:
            held_outside = arguments.byte_count("held_outside", held_outside)
        if self.entry.owner.pid != os.getpid():
            raise DevmemError(
                f"the reservation of {format_size(self.bytes)} on {self.key} is PID {self.entry.owner.pid}'s, not this "
                "process's (a forked child owns none of its parent's reservations): reserve in this process instead"
            )
        if self.released:
            raise DevmemError(f"the reservation of {format_size(self.bytes)} on {self.key} was released: nothing grows")
        if nbytes > self.bytes:
            self.entry = self.ledger._grow(self, nbytes, platform_argument(platform), reading, held_outside)

    def __enter__(self) -> Reservation:
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()

    def as_dict(self) -> dict[str, object]:
        return {
            "device": self.device,
            "key": self.key,
            "bytes": self.bytes,
            "total": self.total,
            "ledger": str(self.path),
        }


#: Reservations this process holds, released at exit.
_LIVE: set[Reservation] = set()


def _release_all() -> None:
    for r in list(_LIVE):
        try:
            r.release()
        except Exception as exc:  # at exit: say it and go on; the next admission reclaims it anyway
            log.warning("devmem: could not release reservation on %s at exit: %s", r.key, exc)


def _forget_in_child() -> None:
    """A forked child owns none of its parent's reservations: close its copies of the owner locks' files (the
    parent's locks stay) and release nothing at its exit."""
    for r in list(_LIVE):
        with suppress(OSError):
            os.close(r._fd)
        r.released = True
    _LIVE.clear()


atexit.register(_release_all)
os.register_at_fork(after_in_child=_forget_in_child)


def reserve(
    device: int = 0,
    bytes: int | None = None,  # noqa: A002 - the unit is the name callers read
    utilization: float | None = None,
    *,
    platform: Platform | None = None,
    ledger_dir: str | os.PathLike[str] | None = None,
    lock_timeout: float = DEFAULT_LOCK_TIMEOUT,
    reading: DeviceReading | None = None,
    held_outside: int | None = None,
) -> Reservation:
    """Reserve ``bytes`` (or ``utilization`` of the total) of ``device`` on this host's ledger, before loading
    anything; raise :class:`ReservationRefused` (a :class:`~devmem.NotEnoughMemoryError`) naming the holders and
    what would fit when it does not fit, :class:`LedgerError` when the ledger directory is not writable or its
    lock is not obtained within ``lock_timeout`` seconds.

    ``platform`` defaults to :func:`devmem.current_platform`, ``ledger_dir`` to ``DEVMEM_LEDGER_DIR`` or
    ``/dev/shm/devmem``. Use it as a context manager or call ``release()``; it is released at exit otherwise.

    ``reading``: a :class:`~devmem.platform.DeviceReading` of ``device`` already taken (``platform.read(device)``);
    admission then counts its figures (total, free, this process's and the other processes' memory, integrated)
    and asks the platform only for the device's identity (its index range and UUID), no reading, so one reading
    serves a caller's baseline and its reservation alike. A reading of another device is a
    :class:`~devmem.DevmemError`. Without it, admission takes one reading of its own.

    What this process holds already counts on top of the new share (a share is the growth from now), except
    ``held_outside``: where given, only that much of it does (an engine whose baseline was taken earlier, or one
    created after its model, whose share covers what it loaded since: ``0`` for the latter).
    """
    if held_outside is not None:
        held_outside = arguments.byte_count("held_outside", held_outside)
    platform = platform_argument(platform)  # the current one where None
    return Ledger(ledger_dir, lock_timeout=lock_timeout).reserve(
        platform, device, bytes, utilization, reading=reading, held_outside=held_outside
    )


def read_reservations(
    platform: Platform,
    device: int,
    report: Any,
    ledger_dir: str | os.PathLike[str] | None = None,
    me: Owner | None = None,
    *,
    count_self: bool = True,
    locks: Locks | None = None,
    commands: bool = True,
) -> DeviceReservations | None:
    """The reservations on ``device`` from its ``report`` (a :class:`~devmem.DeviceReport`), read as admission reads
    them (:meth:`Ledger.view`); ``None`` where the device has no ledger. A ledger directory that cannot be used is a
    :class:`LedgerError`. ``count_self=False`` leaves this process's own memory out (the ``devmem`` command reading
    host memory is no holder of it). ``locks`` and ``commands`` as for :meth:`Ledger.view`."""
    key, _ = device_key(platform, device)
    own = report.process if count_self else None
    ledger = Ledger(ledger_dir)
    others = report.other_processes
    return ledger.view(
        key, report.total, report.free, others, report.integrated, own, me, locks=locks, commands=commands
    )


def device_reservations(
    platform: Platform,
    device: int,
    report: Any,
    ledger_dir: str | os.PathLike[str] | None = None,
    *,
    count_self: bool = True,
) -> DeviceReservations | None:
    """:func:`read_reservations` for ``devmem info`` and ``devmem doctor``: a ledger directory that cannot be used
    is a warning (the rest of the report stands), given once; ``count_self`` as there."""
    try:
        return read_reservations(platform, device, report, ledger_dir, count_self=count_self)
    except LedgerError as exc:  # said once: every device, and every sample of `devmem top`, would repeat it
        if str(exc) not in _WARNED:
            _WARNED.add(str(exc))
            log.warning("devmem: %s", exc)
        return None
