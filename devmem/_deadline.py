"""Calls into a plugin that may never return, given a deadline: one mechanism for every such call.

A backend's ``detect`` and ``factory`` (resolution) and a device reading in the CLI (``devmem info``, ``top``,
``doctor``, ``plan``, ``fit``) each run in a daemon thread of their own (:class:`Job`); a scrape's readings (the
exporter) run on daemon threads that live with the exporter, one per kind of reading (:class:`Worker`), so a scrape
starts none; the calls :class:`devmem.EngineMemory` makes into its platform, and a minimal backend's calls, run on
the backend's one reused thread (:class:`Backend`, through :class:`devmem._bounded.BoundedPlatform`), so a reading
starts none either. The caller waits until its deadline and then gives up on a call still running, which is left to
finish on its own (a vendor call blocked in C cannot be stopped, and a daemon thread does not keep the process from
exiting).

- :func:`bounded`: ``call()``'s value, what it raised raised again, or a :class:`~devmem.DevmemError` naming
  what did not answer in time and the variable that sets the deadline;
- :func:`read_timeout`: ``DEVMEM_READ_TIMEOUT``, the seconds a CLI command waits for one device's reading, and
  an engine for one call into its platform (default :data:`DEFAULT_READ_TIMEOUT`).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Generic, TypeVar

from devmem._forksafe import ForkSafeLock
from devmem._text import env_seconds
from devmem.errors import DevmemError

if TYPE_CHECKING:
    import queue

    from devmem.platform import Platform

T = TypeVar("T")

#: The variable naming how long a CLI command waits for one reading of a device.
READ_TIMEOUT_ENV = "DEVMEM_READ_TIMEOUT"
#: Seconds a CLI command waits for one device's reading where the variable is unset: a reading takes milliseconds,
#: a vendor library's first initialisation on a large machine a few seconds.
DEFAULT_READ_TIMEOUT = 30.0
#: The longest deadline any variable may set (an hour): a thread can wait no longer than ``threading.TIMEOUT_MAX``.
MAX_TIMEOUT = 3600.0


class Job(Generic[T]):
    """``call()`` running in a daemon thread named ``name``; :meth:`done_by` waits for it until a deadline, then
    ``value`` holds what it returned or ``error`` what it raised (``SystemExit`` from a plugin included)."""

    def __init__(self, call: Callable[[], T], name: str = "devmem-call"):
        self.value: T | None = None
        self.error: BaseException | None = None
        self.thread = threading.Thread(target=self._run, args=(call,), name=name, daemon=True)
        self.thread.start()

    def _run(self, call: Callable[[], T]) -> None:
        try:
            self.value = call()
        except BaseException as exc:
            self.error = exc

    def done_by(self, deadline: float) -> bool:
        """Whether the call has finished by ``deadline`` (a :func:`time.monotonic` time), waiting for it until then."""
        self.thread.join(max(0.0, deadline - time.monotonic()))
        return not self.thread.is_alive()


class Call(Generic[T]):
    """A call handed to a :class:`Worker`: :meth:`done_by` waits for it until a deadline, then ``value`` holds what
    it returned or ``error`` what it raised."""

    def __init__(self) -> None:
        self.value: T | None = None
        self.error: BaseException | None = None
        self._done = threading.Event()

    @property
    def done(self) -> bool:
        return self._done.is_set()

    def done_by(self, deadline: float) -> bool:
        """Whether the call has finished by ``deadline`` (a :func:`time.monotonic` time), waiting for it until then."""
        return self._done.wait(max(0.0, deadline - time.monotonic()))


class Worker:
    """A daemon thread named ``name``, started at the first call (and again in a forked child), that runs the calls
    given to :meth:`submit` one after another. :attr:`busy` while one runs: a caller that finds it busy starts
    nothing (a hung vendor call holds this one thread, never one more per try). ``idle``: seconds without a call
    after which the thread ends (the next call starts it again); ``None``: it lives with the process."""

    def __init__(self, name: str, idle: float | None = None):
        self.name = name
        self.idle = idle
        self._calls: queue.SimpleQueue[tuple[Callable[[], Any], Call[Any]]] | None = None
        self._thread: threading.Thread | None = None
        self._last: Call[Any] | None = None
        self._lock = ForkSafeLock()  # a call is never put beside a thread ending for want of calls

    @property
    def busy(self) -> bool:
        return self._last is not None and not self._last.done

    @property
    def last(self) -> Call[Any] | None:
        """The call submitted last, while the thread that runs it lives (``None`` before the first, and in a forked
        child, where a call the parent's thread was running never finishes)."""
        thread = self._thread
        return self._last if thread is not None and thread.is_alive() else None

    def submit(self, call: Callable[[], T]) -> Call[T]:
        pending: Call[T] = Call()
        with self._lock:
            if self._calls is None or self._thread is None or not self._thread.is_alive():
                import queue  # not on import devmem's path

                self._calls = queue.SimpleQueue()  # a forked child's copy may hold its parent's calls
                self._thread = threading.Thread(target=self._run, args=(self._calls,), name=self.name, daemon=True)
                self._thread.start()
            self._last = pending
            self._calls.put((call, pending))
        return pending

    def _run(self, calls: queue.SimpleQueue[tuple[Callable[[], Any], Call[Any]]]) -> None:
        import queue

        while True:
            try:
                call, pending = calls.get(timeout=self.idle)
            except queue.Empty:  # idle: end, unless a call came in meanwhile
                with self._lock:
                    if calls.empty():
                        if self._calls is calls:
                            self._thread = None
                        return
                continue
            try:
                pending.value = call()
            except BaseException as exc:
                pending.error = exc
            finally:
                pending._done.set()
                del call, pending  # what the call returned is the caller's to keep, not this thread's


#: Seconds a :class:`Backend`'s thread waits for its next call before it ends (the next call starts it again).
IDLE_SECONDS = 5.0


class Backend:
    """The calls made into one backend, each given :func:`read_timeout` seconds, run one after another on one
    :class:`Worker` (named ``name``) that is reused from call to call and ends after :data:`IDLE_SECONDS` without
    one: a call that completes costs a hand-over to that thread, never a thread of its own. A call still running
    at its deadline is a :class:`~devmem.DevmemError` naming it and the variable; it keeps its thread, and the next
    call waits for it until its own deadline (then is an error naming the call that still has not answered),
    so a hung vendor call holds one thread, never one more per try. Calls from several threads take turns."""

    def __init__(self, name: str):
        self._worker = Worker(name, idle=IDLE_SECONDS)
        self._turn = ForkSafeLock()
        self._asked = ""  # what the last call was, for the error of the next one where it hangs

    def __call__(self, call: Callable[[], T], what: str) -> T:
        """``call()``, the call into the backend described by ``what``, bounded as the class says."""
        seconds = read_timeout()
        deadline = time.monotonic() + seconds
        if not self._turn.acquire(timeout=seconds):
            raise _late(f"{what} was not asked: another thread's call into the backend", seconds)
        try:
            earlier = self._worker.last
            if earlier is not None and not earlier.done_by(deadline):
                raise _late(f"{what} was not asked: the earlier call, {self._asked},", seconds, "still ")
            self._asked = what
            pending = self._worker.submit(call)
            if not pending.done_by(deadline):
                raise _late(what, seconds)
        finally:
            self._turn.release()
        if pending.error is not None:
            raise pending.error
        return pending.value  # type: ignore[return-value]  # set by a call that returned


def _late(what: str, seconds: float, still: str = "", variable: str = READ_TIMEOUT_ENV) -> DevmemError:
    """The error of a call, ``what``, that did not answer within ``seconds`` (set by ``variable``)."""
    return DevmemError(
        f"{what} {still}did not answer within {seconds:g} s ({variable}): the backend or its vendor library hangs; "
        f"check the device with the vendor's tool, or raise {variable}"
    )


def bounded(call: Callable[[], T], seconds: float, what: str, variable: str = READ_TIMEOUT_ENV) -> T:
    """``call()``, given ``seconds`` to return: its value, or what it raised raised again here, or, where it is still
    running then, a :class:`~devmem.DevmemError` saying that ``what`` did not answer within ``seconds`` (set by
    ``variable``)."""
    job = Job(call, name=f"devmem-{what}"[:60])
    if not job.done_by(time.monotonic() + seconds):
        raise _late(what, seconds, variable=variable)
    if job.error is not None:
        raise job.error
    return job.value  # type: ignore[return-value]  # set by a call that returned


def read_timeout() -> float:
    """``DEVMEM_READ_TIMEOUT`` in seconds (default :data:`DEFAULT_READ_TIMEOUT`), above 0 and at most
    :data:`MAX_TIMEOUT`; a :class:`~devmem.DevmemError` naming the value otherwise."""
    return env_seconds(READ_TIMEOUT_ENV, default=DEFAULT_READ_TIMEOUT, high=MAX_TIMEOUT, error=DevmemError)


def bounded_reading(call: Callable[[], T], what: str) -> T:
    """``call()``, a reading of a device (or of the device count), bounded by :func:`read_timeout`."""
    return bounded(call, read_timeout(), what)


def device_count(platform: Platform) -> int:
    """``platform.device_count()``, bounded by :func:`read_timeout`."""
    return bounded_reading(platform.device_count, f"platform {platform.name!r}: counting its devices")


__all__ = [
    "DEFAULT_READ_TIMEOUT",
    "IDLE_SECONDS",
    "MAX_TIMEOUT",
    "READ_TIMEOUT_ENV",
    "Backend",
    "Call",
    "Job",
    "Worker",
    "bounded",
    "bounded_reading",
    "device_count",
    "read_timeout",
]
