"""The reservation ledger's directory, opened once without following a link and checked before anything in it is
trusted; every file in it is then opened relative to that descriptor, never through a link in its place.

Trust: the directory, and every directory on the way to it, must be owned by this user or root (a directory's
owner may remove or rename any name in it, the sticky bit notwithstanding, and so make a live engine's reservation
vanish: the next engine would be admitted beside it), and either sticky (as ``/dev/shm`` and a shared
``/dev/shm/devmem`` of mode 1777 are: only a file's owner may replace or remove it) or writable by nobody else. A
symbolic link on the way counts as its owner's. The directory itself must be a directory (a symbolic link in its
place is refused, not followed). Creating it never changes the mode of a directory this process did not just
create: it is made private (``mkdir`` mode 0700), opened without following a link, and only a descriptor that
shows an empty directory of this user's is made shared (``fchmod`` 1777).
"""

from __future__ import annotations

import errno
import os
import stat
from contextlib import suppress
from pathlib import Path

from devmem._text import shown
from devmem.engine._state_files import SAFE_FLAGS, regular_fd
from devmem.errors import LedgerError

#: The environment variable naming the ledger directory.
LEDGER_DIR_ENV = "DEVMEM_LEDGER_DIR"

_DIRECTORY_FLAGS = os.O_RDONLY | getattr(os, "O_DIRECTORY", 0) | SAFE_FLAGS

_FIX = f"set {LEDGER_DIR_ENV} to a writable directory shared by the engines on this host"


def _named(path: Path) -> str:
    """``path`` for a message: whole, or cut short where it is too long to read."""
    text = str(path)
    return text if len(text) <= 200 else shown(text)


def _uid_name(uid: int) -> str:
    try:
        import pwd

        return f"uid {uid} ({pwd.getpwuid(uid).pw_name})"
    except (ImportError, KeyError):
        return f"uid {uid}"


def read_bounded(fd: int, limit: int) -> bytes:
    """What ``fd`` holds, up to ``limit + 1`` bytes, read in blocks: a read of ``limit + 1`` bytes at once would
    allocate them all first (megabytes, for a ledger file of a few hundred)."""
    chunks: list[bytes] = []
    size = 0
    while size <= limit:
        chunk = os.read(fd, min(1 << 16, limit + 1 - size))
        if not chunk:
            break
        chunks.append(chunk)
        size += len(chunk)
    return b"".join(chunks)


def _trusted_owner(uid: int) -> bool:
    return uid in (os.geteuid(), 0)


def problem(st: os.stat_result, named: str) -> str | None:
    """What is wrong with the ledger directory ``named`` of status ``st`` (``None``: nothing), and how to fix it:
    owned by another user than this one or root, or not sticky and writable by its group or by others."""
    mode = stat.filemode(st.st_mode)
    if not _trusted_owner(st.st_uid):
        return (
            f"it is owned by {_uid_name(st.st_uid)}, not by this user ({_uid_name(os.geteuid())}) or root (mode "
            f"{mode}): its owner may remove or rename any file in it, sticky or not, and so make a live engine's "
            f"reservation vanish and engines be admitted beyond the device; have root create it shared ({_ROOT_MADE}"
            f" {named}), or its owner remove it, or {_FIX}"
        )
    if not st.st_mode & stat.S_ISVTX and st.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
        return (
            f"it is writable by other users and not sticky (mode {mode}): any of them could replace the files that "
            f"say who holds the device; remove it (devmem creates it afresh, mode 1777), make it sticky (chmod +t, "
            f"as /dev/shm), or {_FIX}"
        )
    return None


#: How root makes a ledger directory every user may share and none may take over.
_ROOT_MADE = "install -d -m 1777 -o root -g root"

#: The most symbolic links followed on the way to the directory (the kernel's own limit).
_MAX_LINKS = 40


def ancestor_problem(path: Path) -> str | None:
    """What is wrong with a directory on the way to ``path`` (``None``: nothing): one owned by another user than
    this one or root, or writable by others without the sticky bit, could have the ledger directory renamed away
    and another put in its place; a symbolic link on the way counts as its owner's (its owner may point it
    elsewhere). Each link is followed by hand, so every directory the kernel walks through is checked."""
    parts = list(Path(os.path.abspath(path)).parts[1:-1])
    current, links = "/", 0
    checked = _directory_problem(current)
    while checked is None and parts:
        step = os.path.join(current, parts.pop(0))
        try:
            st = os.lstat(step)
        except OSError:
            return None  # missing (created, or refused, as the ledger directory is) or unreadable: open() says
        if stat.S_ISLNK(st.st_mode):
            links += 1
            if not _trusted_owner(st.st_uid):
                return (
                    f"the symbolic link {_named(Path(step))} on the way to it is owned by {_uid_name(st.st_uid)}, not "
                    "by this user or root: its owner may point it at another directory"
                )
            if links > _MAX_LINKS:
                return None  # a loop: open() fails on it and says so
            target = os.readlink(step)
            parts = [*Path(target).parts[1 if os.path.isabs(target) else 0 :], *parts]
            current = "/" if os.path.isabs(target) else current
            continue
        current = os.path.normpath(step)
        checked = _directory_problem(current)
    return checked


def _directory_problem(directory: str) -> str | None:
    try:
        st = os.stat(directory)
    except OSError:
        return None
    if not _trusted_owner(st.st_uid):
        return (
            f"the directory {_named(Path(directory))} on the way to it is owned by {_uid_name(st.st_uid)}, not by "
            "this user or root: its owner may rename the ledger directory away and put another in its place"
        )
    if not st.st_mode & stat.S_ISVTX and st.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
        return (
            f"the directory {_named(Path(directory))} on the way to it is writable by other users and not sticky "
            f"(mode {stat.filemode(st.st_mode)}): any of them may rename the ledger directory away and put another "
            "in its place"
        )
    return None


class LedgerDirectory:
    """An open, checked ledger directory (a context manager closing it); file names are relative to it."""

    def __init__(self, path: Path, fd: int):
        self.path, self.fd = path, fd

    def __enter__(self) -> LedgerDirectory:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1

    @classmethod
    def open(cls, path: Path, *, create: bool) -> LedgerDirectory | None:
        """``path`` opened and checked; where it is missing, created (``create``) or ``None``. ``LedgerError``
        naming it and what is wrong where it cannot be used."""
        created = False
        if create:
            try:
                os.makedirs(path.parent, exist_ok=True)
            except OSError as exc:
                raise LedgerError(f"cannot create the ledger directory {_named(path)}: {exc}; {_FIX}") from None
            except RecursionError:  # os.makedirs recurses once per missing folder: a path past what one may hold
                raise LedgerError(
                    f"cannot create the ledger directory {_named(path)}: it nests more folders than a path may hold; "
                    f"{_FIX}"
                ) from None
        untrusted = ancestor_problem(path)
        if untrusted is not None:
            raise LedgerError(
                f"the reservation ledger directory {_named(path)} cannot be used: {untrusted}; set {LEDGER_DIR_ENV} "
                "to a directory on a path of root's or this user's only (/dev/shm/devmem, say)"
            )
        if create:
            try:
                os.mkdir(path, 0o700)  # private until this process has checked what it made
                created = True
            except FileExistsError:
                pass
            except OSError as exc:
                raise cls._error(path, "create", exc) from None
        try:
            fd = os.open(path, _DIRECTORY_FLAGS)
        except FileNotFoundError:
            if create:  # removed again since it was made: say so rather than loop
                raise LedgerError(f"the ledger directory {_named(path)} vanished as it was opened; {_FIX}") from None
            return None
        except OSError as exc:
            raise cls._error(path, "open", exc) from None
        try:
            st = os.fstat(fd)
            if created and st.st_uid == os.geteuid() and not os.listdir(fd):
                # what this process just made (a directory swapped in since would be another's, or not empty):
                # shared by every user, as /tmp is, with the sticky bit so each removes only its own files
                os.fchmod(fd, 0o1777)
                st = os.fstat(fd)
            wrong = problem(st, _named(path))
            writable = os.access(".", os.W_OK | os.X_OK, dir_fd=fd)
        except OSError as exc:
            os.close(fd)
            raise cls._error(path, "check", exc) from None
        if wrong is None and create and not writable:
            os.close(fd)
            raise LedgerError(f"the reservation ledger directory {_named(path)} is not writable by this user; {_FIX}")
        if wrong is not None:
            os.close(fd)
            raise LedgerError(f"the reservation ledger directory {_named(path)} cannot be used: {wrong}")
        return cls(path, fd)

    @staticmethod
    def _error(path: Path, what: str, exc: OSError) -> LedgerError:
        why, fix = exc.strerror or str(exc), _FIX
        if exc.errno in (errno.ELOOP, errno.ENOTDIR, errno.EEXIST):
            try:
                why = f"it is a symbolic link (to {os.readlink(path)!r}), and the ledger does not follow links"
                fix = f"remove the link, or set {LEDGER_DIR_ENV} to the directory itself"
            except OSError:
                why = "a file that is no directory is in its place"
        return LedgerError(f"cannot {what} the reservation ledger directory {_named(path)}: {why}; {fix}")

    # ---- files in it ----------------------------------------------------------------------------------
    def file(self, name: str) -> Path:
        """``name``'s path, for people (opening goes through the descriptor)."""
        return self.path / name

    def open_file(self, name: str, flags: int, mode: int = 0o644) -> int:
        """The regular file ``name`` opened with ``flags``, never through a link (``OSError``, ELOOP) and never
        blocking on a FIFO (``ValueError`` naming what is in its place)."""
        fd = os.open(name, flags | SAFE_FLAGS, mode, dir_fd=self.fd)
        if stat.S_ISREG(os.fstat(fd).st_mode):
            return fd
        return regular_fd(fd, self.file(name))  # closes it and names what is there

    def read(self, name: str, limit: int) -> bytes:
        """At most ``limit`` bytes of the regular file ``name`` (``ValueError`` where it is larger, or no regular
        file; ``OSError`` where it cannot be opened, ELOOP for a link)."""
        fd = self.open_file(name, os.O_RDONLY)
        try:
            data = read_bounded(fd, limit)
        finally:
            os.close(fd)
        if len(data) > limit:
            raise ValueError(f"{self.file(name)} is larger than {limit} bytes")
        return data

    def names(self) -> list[str]:
        try:
            return os.listdir(self.fd)
        except OSError:
            return []

    def replace(self, source: str, target: str) -> None:
        os.replace(source, target, src_dir_fd=self.fd, dst_dir_fd=self.fd)

    def unlink(self, name: str) -> None:
        """Remove ``name`` (a link in its place is removed itself, never its target); gone already: nothing."""
        with suppress(FileNotFoundError):
            os.unlink(name, dir_fd=self.fd)

    def lstat(self, name: str) -> os.stat_result:
        return os.stat(name, dir_fd=self.fd, follow_symlinks=False)

    def exists(self, name: str) -> bool:
        try:
            self.lstat(name)
        except FileNotFoundError:
            return False
        return True
