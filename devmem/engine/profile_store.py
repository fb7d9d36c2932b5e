"""Measure once, start fast: figures an engine measured, kept on disk under a key of everything that changes them.

An engine that sizes its cache by running itself (:mod:`devmem.engine.block_cost`) takes seconds; the figures depend
only on what the engine runs and where (model and engine configuration, device, driver, library versions,
allocator settings). :class:`ProfileStore` keeps them in one JSON file per key: a restart with the same key reads
them back, any changed field measures again. A file that cannot be read, is not valid JSON, or holds another
key or another format is ignored with one warning (and measured over). The folder is ``directory`` if given,
else ``$DEVMEM_PROFILE_DIR``, else ``$XDG_CACHE_HOME/devmem/profiles`` (``~/.cache/devmem/profiles``).
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import logging
import os
import tempfile
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from devmem._text import shown
from devmem.engine.state_files import SAFE_FLAGS, read_regular, regular_fd
from devmem.errors import ProfileStoreError

log = logging.getLogger("devmem.engine.profile_store")

#: The variable naming the folder the profiles are kept in.
ENV = "DEVMEM_PROFILE_DIR"
#: What every stored file says it is; a file without it is not one of these.
FORMAT = "devmem-profile"
#: The layout of a stored file; a file of another version is measured over.
VERSION = 1
#: A stored file larger than this is not one of these (and is not read).
MAX_FILE_BYTES = 1 << 22


def default_directory() -> Path:
    """``$DEVMEM_PROFILE_DIR``, else ``$XDG_CACHE_HOME/devmem/profiles``, else ``~/.cache/devmem/profiles``."""
    named = os.environ.get(ENV, "").strip()
    if named:
        return Path(named).expanduser()
    xdg = os.environ.get("XDG_CACHE_HOME", "").strip()
    base = Path(xdg).expanduser() if xdg and Path(xdg).is_absolute() else Path.home() / ".cache"
    return base / "devmem" / "profiles"


def canonical(key: Mapping[str, Any]) -> str:
    """The key as canonical JSON (sorted keys, no spaces); values that JSON cannot hold are written as ``repr``."""
    if not isinstance(key, Mapping) or not key:
        raise ProfileStoreError(f"a profile key must be a non-empty mapping of names to values, got {shown(key)}")
    try:
        return json.dumps(key, sort_keys=True, separators=(",", ":"), default=repr)
    except (ValueError, TypeError, RecursionError) as exc:  # a circular or too deeply nested key, mixed key types
        raise ProfileStoreError(
            f"a profile key must be plain data that JSON can write ({type(exc).__name__}: {exc})"
        ) from None


@dataclass(frozen=True)
class StoredProfile:
    """Figures read back from ``path``, stored under ``key`` (``created``: seconds since the epoch)."""

    kind: str
    key: dict[str, Any]
    figures: dict[str, Any]
    path: Path
    created: float


class ProfileStore:
    """One JSON file per ``kind`` and key under ``directory`` (see :func:`default_directory`)."""

    def __init__(self, directory: str | os.PathLike[str] | None = None) -> None:
        if directory is not None and not isinstance(directory, (str, os.PathLike)):
            raise ProfileStoreError(f"directory must be a path (str or os.PathLike) or None, got {directory!r}")
        if directory is not None and not str(os.fspath(directory)).strip():
            raise ProfileStoreError("directory must name a folder, got an empty path")
        self.directory = Path(directory).expanduser() if directory is not None else default_directory()

    def __repr__(self) -> str:
        return f"ProfileStore({str(self.directory)!r})"

    def path(self, kind: str, key: Mapping[str, Any]) -> Path:
        """The file the figures of ``kind`` under ``key`` live in."""
        if not isinstance(kind, str) or not kind.replace("_", "").replace("-", "").isalnum():
            raise ProfileStoreError(f"kind must be a name of letters, digits, '-' and '_', got {kind!r}")
        digest = hashlib.sha256(canonical(key).encode()).hexdigest()[:32]
        return self.directory / f"{kind}-{digest}.json"

    def load(self, kind: str, key: Mapping[str, Any]) -> StoredProfile | None:
        """The figures stored for ``kind`` under ``key``, or ``None``: none stored, or a file that is not
        readable, not JSON, of another format or version, or stored under another key (a warning says which)."""
        path = self.path(kind, key)
        wanted = json.loads(canonical(key))
        try:  # a FIFO, a device or a link to one in its place is refused, not read (it would block or never end)
            data = json.loads(read_regular(path, MAX_FILE_BYTES).decode("utf-8"))
        except FileNotFoundError:
            return None
        except (OSError, ValueError, RecursionError) as exc:
            log.warning("devmem: ignoring the stored profile %s (%s); measuring again", path, exc)
            return None
        why = _foreign(data, kind, wanted)
        if why:
            log.warning("devmem: ignoring the stored profile %s: %s; measuring again", path, why)
            return None
        return StoredProfile(kind, wanted, data["figures"], path, float(data["created"]))

    def save(self, kind: str, key: Mapping[str, Any], figures: Mapping[str, Any], created: float) -> Path | None:
        """Write ``figures`` for ``kind`` under ``key`` (atomically: a reader sees the old file or the new one);
        returns the path, or ``None`` with a warning where the folder cannot be written."""
        return self._write(kind, key, figures, created, replace=True)[0]

    def save_first(
        self, kind: str, key: Mapping[str, Any], figures: Mapping[str, Any], created: float
    ) -> tuple[StoredProfile | None, bool]:
        """Store ``figures`` unless valid figures of ``kind`` are already stored under ``key`` (engines with the
        same key that measured at the same time: the first to store wins). Returns what the key holds now and
        whether it is these figures: ``(theirs, False)`` where another process stored first, so that every
        engine of one key can use one set of figures; ``(None, False)`` with a warning where the folder cannot
        be written. A file that :meth:`load` ignores is replaced."""
        path, ours = self._write(kind, key, figures, created, replace=False)
        if path is None:
            return None, False
        if ours:
            return StoredProfile(kind, json.loads(canonical(key)), dict(figures), path, created), True
        theirs = self.load(kind, key)
        if theirs is not None:
            return theirs, False
        path, ours = self._write(kind, key, figures, created, replace=True)
        if path is None:
            return None, False
        return StoredProfile(kind, json.loads(canonical(key)), dict(figures), path, created), True

    def _write(
        self, kind: str, key: Mapping[str, Any], figures: Mapping[str, Any], created: float, replace: bool
    ) -> tuple[Path | None, bool]:
        """(path, whether these figures are in it): written through a temporary file renamed into place, or,
        with ``replace=False``, linked into place only where no file is there yet (``False`` where one was)."""
        path = self.path(kind, key)
        body = {
            "format": FORMAT,
            "version": VERSION,
            "kind": kind,
            "created": created,
            "key": json.loads(canonical(key)),
            "figures": figures,
        }
        try:
            text = json.dumps(body, indent=1, sort_keys=True)
            if len(text.encode()) > MAX_FILE_BYTES:  # load would ignore it
                raise ValueError(f"the key and figures take more than {MAX_FILE_BYTES} bytes")
            path.parent.mkdir(parents=True, exist_ok=True)
            fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
            try:
                with os.fdopen(fd, "w", encoding="utf-8") as f:
                    f.write(text)
                if replace:
                    os.replace(tmp, path)
                else:
                    try:
                        os.link(tmp, path)  # atomic, and refuses where the file exists
                    except FileExistsError:
                        return path, False
                    except OSError:  # a filesystem without hard links: the rename, where nothing is there yet
                        with _locked(path):  # checked and renamed under a lock, so that one process wins
                            if path.exists():
                                return path, False
                            os.replace(tmp, path)
                    finally:
                        Path(tmp).unlink(missing_ok=True)
            except BaseException:
                Path(tmp).unlink(missing_ok=True)
                raise
        except (OSError, TypeError, ValueError) as exc:
            log.warning("devmem: could not store the profile in %s (%s); the next start measures again", path, exc)
            return None, False
        return path, True


@contextmanager
def _locked(path: Path) -> Iterator[None]:
    """``flock`` on ``.<name>.lock`` beside ``path``, for the check-and-rename of filesystems without hard links."""
    lock = path.parent / f".{path.name}.lock"
    fd = regular_fd(os.open(lock, os.O_RDONLY | os.O_CREAT | SAFE_FLAGS, 0o644), lock)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)


def _foreign(data: object, kind: str, key: object) -> str | None:
    """Why ``data`` is not the stored figures of ``kind`` under ``key`` (``None``: it is)."""
    if not isinstance(data, dict) or data.get("format") != FORMAT:
        return f"not a {FORMAT} file"
    if data.get("version") != VERSION:
        return f"layout version {data.get('version')!r}, this devmem reads {VERSION}"
    if data.get("kind") != kind:
        return f"figures of {data.get('kind')!r}, not {kind!r}"
    if data.get("key") != key:
        return "stored under another key"
    if not isinstance(data.get("figures"), dict) or not isinstance(data.get("created"), (int, float)):
        return "no figures"
    return None


def resolve_store(store: ProfileStore | str | os.PathLike[str] | bool | None) -> ProfileStore | None:
    """The store an entry point's ``store`` argument names: ``None`` or ``True`` the default folder, a path that
    folder, ``False`` none (measure every time), a :class:`ProfileStore` itself."""
    if isinstance(store, ProfileStore):
        return store
    if store is False:
        return None
    if store is None or store is True:
        return ProfileStore()
    if isinstance(store, (str, os.PathLike)):
        return ProfileStore(store)
    raise ProfileStoreError(
        f"store must be a ProfileStore, a folder (str or os.PathLike), True/None (the default folder) or False "
        f"(measure every time), got {store!r}"
    )


__all__ = [
    "ENV",
    "ProfileStore",
    "ProfileStoreError",
    "StoredProfile",
    "default_directory",
    "resolve_store",
]
