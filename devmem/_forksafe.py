"""Locks that a forked child gets anew: :class:`ForkSafeLock`, the one lock devmem and its backends use.

``os.fork()`` copies a lock in the state it had at that moment, but not the thread holding it: in the child, a
lock another thread of the parent held stays held for ever, and the first ``with lock:`` there hangs. Every
:class:`ForkSafeLock` alive in a process is replaced by a fresh, unheld one in the child before anything else runs
there (``os.register_at_fork``), so a child that keeps using what it inherited (a platform, a vendor session, a
cache) never waits on a thread that does not exist. What the lock guarded is left as the parent's thread had
it; the code guarded by these locks only fills caches, so a child at worst fills one again.

``tests/test_forks.py`` checks that no module of devmem or its backends creates a bare ``threading`` lock.
"""

from __future__ import annotations

import os
import threading
import weakref
from types import TracebackType


class ForkSafeLock:
    """A ``threading.Lock`` (``threading.RLock`` where ``reentrant``) renewed in every forked child.

    Used as ``with lock:``, or through :meth:`acquire`/:meth:`release`. A release gives back the lock the caller
    acquired, even where a fork renewed it in between (the forking thread may hold it across ``os.fork()``)."""

    __slots__ = ("__weakref__", "_held", "_lock", "_reentrant")

    def __init__(self, *, reentrant: bool = False):
        self._reentrant = reentrant
        self._lock = self._new()
        self._held: list[threading.Lock | threading.RLock] = []
        _live.add(self)

    def _new(self) -> threading.Lock | threading.RLock:
        return threading.RLock() if self._reentrant else threading.Lock()

    def acquire(self, blocking: bool = True, timeout: float = -1) -> bool:
        lock = self._lock
        if not lock.acquire(blocking, timeout):
            return False
        self._held.append(lock)
        return True

    def release(self) -> None:
        if self._held:  # empty only in a child, for the lock the forking thread held: renewed, nothing to give back
            self._held.pop().release()

    def __enter__(self) -> ForkSafeLock:
        self.acquire()
        return self

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None) -> None:
        self.release()

    def renew(self) -> None:
        """A fresh, unheld lock (what a forked child gets); the holders recorded before are forgotten, except
        the calling thread's own, which it releases on the lock it acquired."""
        self._lock = self._new()
        self._held = [lock for lock in self._held if _owned(lock)]


def _owned(lock: threading.Lock | threading.RLock) -> bool:
    """Whether the calling thread holds ``lock`` (known only for a reentrant lock: a plain one has no owner, and a
    plain lock held at a fork is taken as another thread's)."""
    is_owned = getattr(lock, "_is_owned", None)
    return bool(is_owned()) if is_owned is not None else False


_live: weakref.WeakSet[ForkSafeLock] = weakref.WeakSet()


def renew_all() -> None:
    """Renew every live :class:`ForkSafeLock` (run in each forked child before anything else)."""
    for lock in list(_live):
        lock.renew()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=renew_all)


__all__ = ["ForkSafeLock", "renew_all"]
