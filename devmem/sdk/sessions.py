"""One vendor library per process, the same way for every vendor: :class:`VendorSession`.

The pattern is nvitop's NVML layer: the library is loaded and initialised lazily (``initialise()``, or the first
use), once, under a lock; a failed load or init is recorded (``failure``, with ``action`` where the fix is known)
and re-raised on every later use without trying again; every call goes through one ``call(name, *args)`` wrapper
that turns the library's errors into a :class:`~devmem.DevmemError` (and, inside ``one_reading()``, asks each
query once: one reading of a device makes one set of vendor calls); ``has(name)`` says whether the library offers
a function; ``shutdown()`` releases it (only where this session initialised it; a later call initialises it
again); ``shared()`` is the process-wide session on the real library. A backend subclasses :class:`VendorSession`
and supplies only its vendor's specifics: the init/shutdown function names, how to load the real library, and its
error mapping.

Every session registers here:

- at exit, :func:`shutdown_all` calls ``shutdown()`` on every live session (registered with :mod:`atexit` once);
- in a child made by ``os.fork()``, each session's locks are renewed first (each is a
  :class:`~devmem.sdk.ForkSafeLock`, and ``renew_locks()`` runs for a subclass's own), so a lock some other
  thread held at the moment of the fork cannot deadlock the child; so are the locks guarding the registry and the
  shared sessions.
"""

from __future__ import annotations

import atexit
import logging
import os
import weakref
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Any, ClassVar, TypeVar

from devmem._forksafe import ForkSafeLock
from devmem.errors import DevmemError, LibraryUnavailable

log = logging.getLogger("devmem")

S = TypeVar("S", bound="VendorSession")


class VendorSession:
    """One vendor library: loaded and initialised once, on first use, under a lock; errors as DevmemError.

    ``module`` is the library's module (or an object with the same names, such as a scripted library);
    ``None`` loads the real one on first use (:meth:`load_library`). A subclass sets :attr:`init_function`,
    :attr:`shutdown_function` and :attr:`unavailable`, and implements :meth:`load_library`, :meth:`call_error`
    and :meth:`missing_function`; it may override :meth:`init_args` and :meth:`describe_error`, and set
    :attr:`serialise_calls` where the library is not thread-safe.
    """

    #: The library's init and shutdown functions (``"nvmlInit"``, ``"nvmlShutdown"``).
    init_function: ClassVar[str]
    shutdown_function: ClassVar[str]
    #: What a use raises where the library cannot be loaded or initialised.
    unavailable: ClassVar[type[LibraryUnavailable]] = LibraryUnavailable
    #: Whether every call holds the session's lock (a library that is not thread-safe).
    serialise_calls: ClassVar[bool] = False

    def __init__(self, module: Any = None):
        self._module = module
        self._ready = False
        #: Why the library cannot be used (recorded at the first failed load or init), else ``None``.
        self.failure: str | None = None
        #: What would make the library usable where that is known (a package to install), else ``""``.
        self.action = ""
        self._lock = ForkSafeLock(reentrant=True)
        track(self)

    # ---- what a vendor supplies ----------------------------------------------------------------------
    def load_library(self) -> Any:
        """The real library's module; raises :class:`LibraryUnavailable` (with ``action`` where known)."""
        raise NotImplementedError(f"{type(self).__name__} must say how its library is loaded")

    def init_args(self, module: Any) -> tuple[Any, ...]:
        """The arguments of :attr:`init_function` (none by default)."""
        return ()

    def describe_error(self, exc: BaseException) -> str:
        """One line for people about an error the library raised."""
        return f"{type(exc).__name__}: {exc}"

    def call_error(self, name: str, exc: BaseException) -> DevmemError:
        """The error that ``call(name)`` raises where the library raised ``exc``."""
        raise NotImplementedError(f"{type(self).__name__} must map its library's errors")

    def missing_function(self, name: str) -> DevmemError:
        """The error that ``call(name)`` raises where the library has no function ``name``."""
        raise NotImplementedError(f"{type(self).__name__} must say what a missing function raises")

    # ---- the session -----------------------------------------------------------------------------------
    @classmethod
    def shared(cls: type[S]) -> S:
        """The process-wide session of this class on the real library (created on first use; the library
        itself is loaded and initialised on first call), so that every backend and probe initialises it once."""
        with _shared_lock:
            session = _shared.get(cls)
            if session is None:
                session = _shared[cls] = cls()
            assert isinstance(session, cls)
            return session

    @classmethod
    def for_module(cls: type[S], module: Any = None) -> S:
        """A new session around an injected ``module``; the :meth:`shared` one where ``module`` is ``None``."""
        return cls.shared() if module is None else cls(module)

    @property
    def initialised(self) -> bool:
        """Whether this session has initialised the library (and not shut it down since)."""
        return self._ready

    @property
    def module(self) -> Any:
        """The initialised library (:meth:`initialise`)."""
        return self.initialise()

    def initialise(self) -> Any:
        """Load and initialise the library where this session has not yet, and return it; raises
        :attr:`unavailable` with the recorded reason where it cannot be (tried once: a failure is kept)."""
        if self._ready:
            return self._module
        with self._lock:
            if not self._ready and self.failure is None:
                self._initialise()
            if self.failure is not None:
                raise self.unavailable(self.failure, self.action)
            return self._module

    def _initialise(self) -> None:
        if self._module is None:
            try:
                self._module = self.load_library()
            except LibraryUnavailable as exc:
                self.failure, self.action = str(exc), exc.action
                return
        try:
            self.start(self._module)
        except Exception as exc:  # the library's error, or OSError from a broken shared library: never raw
            self.failure = f"{self.init_function} failed: {self.describe_error(exc)}"
            return
        self._ready = True

    def start(self, module: Any) -> None:
        """Initialise the library (called once, under the lock); a subclass may extend it."""
        getattr(module, self.init_function)(*self.init_args(module))

    def stop(self, module: Any) -> None:
        """Shut the library down (called under the lock, only after :meth:`start` succeeded)."""
        getattr(module, self.shutdown_function)()

    def has(self, name: str) -> bool:
        """Whether the library offers the function ``name`` (initialises it)."""
        return callable(getattr(self.module, name, None))

    def call(self, name: str, *args: Any) -> Any:
        """``library.<name>(*args)`` once initialised; whatever the library raises becomes :meth:`call_error`,
        a missing function :meth:`missing_function`. Within :meth:`one_reading`, a repeated call (same function,
        same arguments) gets the first call's answer, or raises its error again, without asking the library."""
        memo = _reading.get()
        if memo is not None:
            try:
                key = (id(self), name, args)
                answer = memo.get(key, _MISSING)
            except TypeError:  # an unhashable argument: asked every time
                return self._dispatch(name, args)
            if answer is _MISSING:
                try:
                    answer = memo[key] = self._dispatch(name, args)
                except DevmemError as exc:
                    memo[key] = _Raised(exc)
                    raise
            if isinstance(answer, _Raised):
                raise answer.error
            return answer
        return self._dispatch(name, args)

    @staticmethod
    @contextmanager
    def one_reading() -> Iterator[None]:
        """Within the block, every session asks its library each query at most once (see :meth:`call`): one
        reading of a device makes one set of vendor calls, and its figures come from the same answers. Nested
        blocks share the outermost one's answers."""
        if _reading.get() is not None:
            yield
            return
        token = _reading.set({})
        try:
            yield
        finally:
            _reading.reset(token)

    @staticmethod
    @contextmanager
    def fresh() -> Iterator[None]:
        """Within the block, calls reach the library even inside :meth:`one_reading` (a figure read again on
        purpose, to see whether it moved)."""
        token = _reading.set(None)
        try:
            yield
        finally:
            _reading.reset(token)

    def _dispatch(self, name: str, args: tuple[Any, ...]) -> Any:
        if self.serialise_calls:
            with self._lock:
                return self._call(name, args)
        return self._call(name, args)

    def _call(self, name: str, args: tuple[Any, ...]) -> Any:
        fn = getattr(self.module, name, None)
        if not callable(fn):
            raise self.missing_function(name)
        try:
            return fn(*args)
        except Exception as exc:  # the vendor boundary: the library's errors, a ctypes TypeError, an OSError
            raise self.call_error(name, exc) from exc

    def shutdown(self) -> None:
        """Shut the library down if this session initialised it (harmless otherwise); the next use initialises
        it again. Errors are logged, never raised."""
        with self._lock:
            if not self._ready:
                return
            self._ready = False
            try:
                self.stop(self._module)
            except Exception as exc:
                log.debug("devmem: %s failed: %s", self.shutdown_function, self.describe_error(exc))

    def renew_locks(self) -> None:
        """Fresh locks (in a forked child, where another thread may have held one at the fork); the session's
        own lock is renewed already, a subclass extends this for locks it keeps that are not ForkSafeLocks."""
        self._lock.renew()


class _Raised:
    """A call's error, kept by :meth:`VendorSession.one_reading` to raise again for a repeated call."""

    def __init__(self, error: DevmemError):
        self.error = error


_MISSING = object()
#: The answers of the reading in progress in this context (``None`` outside :meth:`VendorSession.one_reading`).
_reading: ContextVar[dict[tuple[Any, ...], Any] | None] = ContextVar("devmem_one_reading", default=None)
_live: weakref.WeakSet[VendorSession] = weakref.WeakSet()
_registry_lock = ForkSafeLock()
_atexit_registered = False
_shared: dict[type[VendorSession], VendorSession] = {}
_shared_lock = ForkSafeLock()


def track(session: VendorSession) -> None:
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
    for session in list(_live):
        session.renew_locks()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)


__all__ = ["LibraryUnavailable", "VendorSession", "shutdown_all", "track"]
