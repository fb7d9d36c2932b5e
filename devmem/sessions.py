"""What every vendor-library session shares: shutdown at interpreter exit, and fresh locks in a forked child.

A backend's session (NVML's, amdsmi's) is the module-level pattern of nvitop's NVML layer: the library is
initialised lazily under a lock, every call goes through one ``call(name, *args)`` wrapper that turns the
library's errors into a :class:`~devmem.DevmemError`, ``has(name)`` says whether the library offers a function,
and ``shutdown()`` releases it. Sessions register here with :func:`track`:

- at exit, :func:`shutdown_all` calls ``shutdown()`` on every live session (registered with :mod:`atexit` once);
- in a child made by ``os.fork()``, each session's ``renew_locks()`` runs first (``os.register_at_fork``), so a
  lock some other thread held at the moment of the fork cannot deadlock the child.
"""

from __future__ import annotations

import atexit
import logging
import os
import threading
import weakref
from typing import Protocol

log = logging.getLogger("devmem")


class Session(Protocol):
    def shutdown(self) -> None: ...

    def renew_locks(self) -> None: ...


_live: weakref.WeakSet[Session] = weakref.WeakSet()
_registry_lock = threading.Lock()
_atexit_registered = False


def track(session: Session) -> None:
    """Shut ``session`` down at exit and renew its locks in forked children, for as long as it lives."""
    global _atexit_registered
    with _registry_lock:
        _live.add(session)
        if not _atexit_registered:
            atexit.register(shutdown_all)
            _atexit_registered = True


def shutdown_all() -> None:
    """``shutdown()`` every live session (errors logged, never raised: this runs at exit)."""
    for session in list(_live):
        try:
            session.shutdown()
        except Exception as exc:  # at exit nothing may raise
            log.debug("devmem: shutting a vendor session down failed: %s", exc)


def _after_fork_in_child() -> None:
    global _registry_lock
    _registry_lock = threading.Lock()
    for session in list(_live):
        session.renew_locks()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)


__all__ = ["Session", "shutdown_all", "track"]
