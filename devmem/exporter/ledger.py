"""The reservations of a device as an exporter reads them: from the ledger's files, never writing one.

``Ledger.view`` (what ``devmem info`` uses) takes the device's admission lock, which creates the lock file where
it is missing and makes engines that are being admitted wait; an exporter scraped every few seconds should do
neither. This reads the ledger file as it stands (it is replaced atomically, so a read sees a whole file), judges
each owner alive or dead with the ledger's own :meth:`~devmem.engine.reservations.Ledger.alive` (which opens owner
files read-only), and accounts for the device with :func:`~devmem.engine.reservations.account`, as admission does.
"""

from __future__ import annotations

import json
import os

from devmem.engine.reservations import (
    FORMAT,
    MAX_FILE_BYTES,
    DeviceReservations,
    Entry,
    Ledger,
    LedgerError,
    Owner,
    account,
    device_key,
)
from devmem.engine.state_files import read_regular
from devmem.platform import DeviceReport, Platform


def read_reservations(
    platform: Platform, report: DeviceReport, directory: str | os.PathLike[str], me: Owner
) -> DeviceReservations | None:
    """The reservations on the device of ``report`` (one reading of it) in the ledger ``directory``, as the
    process ``me`` sees them; ``None`` where the device has no ledger file. A file that is no ledger gives no
    entries and its problem; a file that cannot be read raises :class:`~devmem.LedgerError` naming it."""
    key, _ = device_key(platform, report.index)
    ledger = Ledger(directory)
    path = ledger.path(key)
    entries: list[Entry] = []
    problem = None
    try:
        entries = _entries(read_regular(path, MAX_FILE_BYTES, follow=False))
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise LedgerError(f"cannot read the reservation ledger file {path}: {exc.strerror or exc}") from None
    except (ValueError, KeyError, TypeError, RecursionError) as exc:
        problem = (
            f"{path} is not a version-{FORMAT} ledger ({type(exc).__name__}: {exc}); the next reservation rebuilds it"
        )
    others = report.other_processes
    alive = [ledger.alive(key, e, me, others) for e in entries]
    live = [e for e, up in zip(entries, alive, strict=True) if up]
    dead = tuple(e for e, up in zip(entries, alive, strict=True) if not up)
    accounting = account(report.total, report.free, live, others, report.process, report.integrated, me)
    return DeviceReservations(key, str(path), accounting, dead, problem)


def _entries(data: bytes) -> list[Entry]:
    """The entries of a ledger file's bytes; ``ValueError``, ``KeyError`` or ``TypeError`` for anything else."""
    ledger = json.loads(data)
    if not isinstance(ledger, dict) or ledger.get("format") != FORMAT:
        raise ValueError(f"format {ledger.get('format') if isinstance(ledger, dict) else None!r}")
    return [Entry.from_json(e) for e in ledger["entries"]]
