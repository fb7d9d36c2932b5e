"""The files devmem keeps state in (the reservation ledger, the profile store), opened so that a name planted or
left in their shared folder cannot hang or redirect a process: a FIFO, device or directory in a file's place is
refused at once (opening never blocks), and so is a file larger than its reader's bound. Creating never follows a
symbolic link, so a link to another file (``/etc/passwd``) is refused instead of written through."""

from __future__ import annotations

import os
import stat
from pathlib import Path

#: Flags that keep an open from following a link in the file's place or blocking on a FIFO.
SAFE_FLAGS = getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0)


def regular_fd(fd: int, path: Path) -> int:
    """``fd``, checked to be a regular file (closed, and ``ValueError`` naming what ``path`` is, otherwise)."""
    mode = os.fstat(fd).st_mode
    if stat.S_ISREG(mode):
        return fd
    os.close(fd)
    kind = "a directory" if stat.S_ISDIR(mode) else "not a regular file (a FIFO, device or socket)"
    raise ValueError(f"{path} is {kind}")


def read_regular(path: Path, limit: int, follow: bool = True) -> bytes:
    """The bytes of the regular file ``path``, at most ``limit`` of them; ``FileNotFoundError`` where it is
    missing, another ``OSError`` where it cannot be read, ``ValueError`` where it is no regular file or larger
    than ``limit`` bytes. ``follow=False`` refuses a symbolic link in its place (``OSError``, ELOOP)."""
    flags = os.O_RDONLY | SAFE_FLAGS
    fd = regular_fd(os.open(path, flags if not follow else flags & ~getattr(os, "O_NOFOLLOW", 0)), path)
    with os.fdopen(fd, "rb") as f:
        data = f.read(limit + 1)
    if len(data) > limit:
        raise ValueError(f"{path} is larger than {limit} bytes")
    return data
