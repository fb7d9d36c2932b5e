"""Per-device reservations: engines claim their budget on a host-wide ledger before they load anything.

An engine reserves its budget (bytes, or a fraction of the device's total, which is the platform's capped
total where a cap applies) with :func:`reserve`. Admission is atomic across processes: each device has a
ledger file ``<key>.json`` under the ledger directory, and the read-check-write runs under ``flock`` on
``<key>.lock`` and ends with an atomic replace (no fsync: a crash of the host ends every owner, and a ledger
whose owners are dead is reclaimed at the next admission, so durability would buy nothing). Admission counts
every live reservation (at its owner's current use where that is larger) and the memory of processes that
reserved nothing, from the platform's per-process figures, against the device's total; a request that does
not fit is refused with a :class:`ReservationRefused` (a :class:`~devmem.NotEnoughMemoryError`) naming the
holders and what would fit.

Identity: a device is keyed by ``platform.device_uuid(d)`` where the platform has one (stable across
``*_VISIBLE_DEVICES`` renumbering), else by platform name, device name and index. An owner is its PID, its
start time (``/proc/<pid>/stat`` field 22, so a reused PID is not mistaken for it) and its PID namespace
(the inode of ``/proc/<pid>/ns/pid``). Each owner also holds ``flock`` on a file of its own,
``<key>.<id>.owner``, holding a copy of its entry, for as long as it lives; the kernel drops that lock when
the process dies, SIGKILL included. Liveness: an owner is alive while its owner lock is held, in any PID
namespace (in this one, by the owner's PID where ``/proc/locks`` lists the holders); a missing owner file, or
one that is no regular file this user can open, is a dead owner's. Only where ``flock`` fails on the owner file
do the PID and start time (this namespace) or the platform's process list (another) decide. Each live entry
counts as its owner file records it (only its owner writes that), each id once, and the owner files the ledger
file does not list count too (a ledger file emptied or removed while its owners live loses none of them). A
dead owner's entry is reclaimed at the next admission. A corrupt ledger file is rebuilt from the owner files of
the live owners, with a warning.

The directory is opened without following a link and checked (:mod:`devmem.engine._ledger_dir`); every file in
it is opened relative to it, never through a link.

The directory is ``DEVMEM_LEDGER_DIR``, by default ``/dev/shm/devmem`` (``<tempdir>/devmem`` where there is
no ``/dev/shm``): a host-local tmpfs, emptied at boot as reservations should be, writable by every user, and
what containers share when they mount the host's ``/dev/shm`` (``--ipc=host`` or ``-v /dev/shm:/dev/shm``);
a per-user runtime directory would hide users' engines from each other.
"""

from devmem.engine._ledger_dir import LEDGER_DIR_ENV
from devmem.engine.reservations._accounting import Accounting, Holding, account
from devmem.engine.reservations._ledger import (
    DeviceReservations,
    Ledger,
    Reservation,
    default_directory,
    device_key,
    device_reservations,
    reserve,
    resolve_request,
)
from devmem.engine.reservations._owners import DEFAULT_LOCK_TIMEOUT, Entry, Owner
from devmem.errors import LedgerError, ReservationRefused

# isort: split
# not API, named here for devmem's own modules and tests: the bounds, the ledger's file format, the refusal's lines
from devmem.engine.reservations._accounting import short_command  # noqa: F401
from devmem.engine.reservations._ledger import (  # noqa: F401
    HOLDERS_NAMED,
    MAX_KEY,
    Locks,
    _holder_lines,
    _reading_of,
    ledger_bytes,
    parse_ledger,
    read_reservations,
)
from devmem.engine.reservations._owners import (  # noqa: F401
    FORMAT,
    MAX_COMMAND,
    MAX_ENTRIES,
    MAX_ENTRY_BYTES,
    MAX_FIGURE,
    MAX_FILE_BYTES,
    MAX_ID,
    MAX_NESTING,
    MAX_PID,
    _start_time,
)

__all__ = [
    "DEFAULT_LOCK_TIMEOUT",
    "LEDGER_DIR_ENV",
    "Accounting",
    "DeviceReservations",
    "Entry",
    "Holding",
    "Ledger",
    "LedgerError",
    "Owner",
    "Reservation",
    "ReservationRefused",
    "account",
    "default_directory",
    "device_key",
    "device_reservations",
    "reserve",
    "resolve_request",
]
