"""The reservations of a device as an exporter reads them: from the ledger's files, never writing one.

``Ledger.view`` (what ``devmem info`` uses) takes the device's admission lock, which creates the lock file where
it is missing and makes engines that are being admitted wait; an exporter scraped every few seconds should do
neither. This reads the ledger file as it stands (it is replaced atomically, so a read sees a whole file), judges
each owner alive or dead with the ledger's own :meth:`~devmem.engine.reservations.Ledger.judged` (which opens
owner files read-only), and accounts for the device with :func:`~devmem.engine.reservations.account`, as admission does.
"""

from __future__ import annotations

import os

from devmem.engine.reservations import (
    FORMAT,
    MAX_FILE_BYTES,
    DeviceReservations,
    Entry,
    Ledger,
    LedgerError,
    Locks,
    Owner,
    account,
    device_key,
    parse_ledger,
)
from devmem.platform import DeviceReport, Platform


def read_reservations(
    platform: Platform,
    report: DeviceReport,
    directory: str | os.PathLike[str],
    me: Owner,
    known: dict[str, Entry] | None = None,
    locks: Locks | None = None,
) -> DeviceReservations | None:
    """The reservations on the device of ``report`` (one reading of it) in the ledger ``directory``, as the
    process ``me`` sees them; ``None`` where the device has no ledger file. A file that is no ledger gives no
    entries and its problem; a file that cannot be read (a symbolic link included: never followed), or a ledger
    directory that cannot be used, raises :class:`~devmem.LedgerError` naming it. ``known``: the entries an
    earlier scrape checked (see :func:`~devmem.engine.reservations.parse_ledger`), ``locks``: the kernel's lock
    holders as this scrape read them."""
    key, _ = device_key(platform, report.index)
    ledger = Ledger(directory)
    path = ledger.path(key)
    d = ledger.opened(create=False)
    if d is None:
        return None
    with d:
        entries: list[Entry] = []
        problem = None
        try:
            entries = parse_ledger(d.read(path.name, MAX_FILE_BYTES), known)
        except FileNotFoundError:
            return None
        except OSError as exc:
            raise LedgerError(f"cannot read the reservation ledger file {path}: {exc.strerror or exc}") from None
        except (ValueError, KeyError, TypeError, RecursionError) as exc:
            problem = (
                f"{path} is not a version-{FORMAT} ledger ({type(exc).__name__}: {exc}); the next reservation "
                "rebuilds it"
            )
        others = report.other_processes
        live, dead = ledger.judged(d, key, entries, me, others, locks)
    # the metrics name reservation holders only (from their entries): no process without one is looked up
    accounting = account(report.total, report.free, live, others, report.process, report.integrated, me, commands=False)
    return DeviceReservations(key, str(path), accounting, tuple(dead), problem)
