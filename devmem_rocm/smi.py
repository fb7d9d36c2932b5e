"""amdsmi access for the rocm platform: a silent import, one initialisation per process, serialised calls.

The amdsmi wheel misbehaves where ROCm is absent: ``import amdsmi`` prints the loader's OSError and
"Unable to find libamd_smi.so library try installing amd-smi-lib from your package manager" (Python
``print`` calls in ``amdsmi_wrapper.py``), then raises ``KeyError('libamd_smi.so')``. :func:`load_amdsmi`
imports it once per process with ``sys.stdout``/``sys.stderr`` captured and turns every failure into
:class:`AmdsmiUnavailable` with a one-line reason (``devmem plugins`` shows it). The message is printed
by Python, so capturing ``sys.stdout`` is enough; redirecting file descriptor 1 would also swallow what
other threads of an engine write meanwhile.

:class:`AmdsmiSession` wraps one amdsmi module (the real one or ``devmem_rocm.testing.ScriptedAmdsmi``):
``amdsmi_init`` runs once, under a lock, on first use; every call is serialised; amdsmi's exceptions
become :class:`AmdsmiCallError`; live sessions are shut down at interpreter exit. The real module has
one shared session (:func:`real_session`).
"""

from __future__ import annotations

import contextlib
import importlib
import io
import logging
import os
import threading
import time
from collections.abc import Callable
from types import ModuleType
from typing import Any

from devmem.sessions import track
from devmem.types import DevmemError

log = logging.getLogger("devmem.rocm")

NOT_INSTALLED = "the Python package amdsmi is not installed"
LIBRARY_MISSING = "amdsmi cannot find libamd_smi.so (ROCm's amd-smi-lib is not installed)"
#: ROCm's own amdsmi package, which always matches its libamd_smi.so.
ROCM_OWN_AMDSMI = "/opt/rocm/share/amd_smi"
#: What to do about an import failure, by its reason (amdsmi is the extra ``devmem-kv[rocm]``, not a dependency).
ACTIONS = {
    NOT_INSTALLED: f"pip install 'devmem-kv[rocm]' (amdsmi from PyPI: pick the release of your ROCm version), "
    f"or use your ROCm's own amdsmi: pip install {ROCM_OWN_AMDSMI}",
    LIBRARY_MISSING: f"install ROCm's amd-smi-lib with your package manager (then `amd-smi list` works), or use "
    f"your ROCm's own amdsmi: pip install {ROCM_OWN_AMDSMI}",
}


class AmdsmiUnavailable(DevmemError):
    """amdsmi cannot be imported or initialised; the message is the reason, for people, and ``action`` what to
    do about it where that is known (see :data:`ACTIONS`)."""

    def __init__(self, reason: str, action: str = ""):
        super().__init__(reason)
        self.action = action


class AmdsmiCallError(DevmemError):
    """An amdsmi call failed. ``status`` is amdsmi's status name (``"AMDSMI_STATUS_NO_PERM"``) or the
    exception's type name; ``code`` is amdsmi's numeric status where it has one."""

    def __init__(self, call: str, status: str, detail: str, code: int | None = None):
        self.call, self.status, self.code = call, status, code
        super().__init__(f"{call} failed: {detail}")


def describe(exc: BaseException) -> tuple[str, str, int | None]:
    """``(status, detail, code)`` of an exception raised by amdsmi."""
    info = getattr(exc, "err_info", None)
    code = getattr(exc, "err_code", None)
    if isinstance(info, str) and info:
        status = info.split(" - ")[0].strip()
        return status, f"{info} (code {code})" if code is not None else info, code
    return type(exc).__name__, f"{type(exc).__name__}: {exc}", code


# ---- the silent import ----------------------------------------------------------------------------
_import_lock = threading.Lock()
_imported: tuple[ModuleType | None, str] | None = None


def _why(exc: BaseException, said: str, name: str) -> str:
    if isinstance(exc, ModuleNotFoundError) and exc.name == name:
        return NOT_INSTALLED
    if "libamd_smi.so" in said or (isinstance(exc, KeyError) and "libamd_smi.so" in str(exc)):
        return LIBRARY_MISSING
    if "undefined symbol" in str(exc):
        return f"amdsmi does not match ROCm's libamd_smi.so ({exc}); install the amdsmi version of the installed ROCm"
    return f"import amdsmi failed: {type(exc).__name__}: {exc}"


def import_silently(name: str = "amdsmi") -> tuple[ModuleType | None, str]:
    """Import ``name`` with Python-level stdout/stderr captured: ``(module, "")`` or ``(None, reason)``."""
    out, err = io.StringIO(), io.StringIO()
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            module = importlib.import_module(name)
    except Exception as exc:  # KeyError('libamd_smi.so'), OSError, AttributeError: never escape
        said = out.getvalue() + err.getvalue()
        if said.strip():
            log.debug("devmem: import %s printed: %s", name, said.strip().replace("\n", " | "))
        return None, _why(exc, said, name)
    said = out.getvalue() + err.getvalue()
    if said.strip():
        log.debug("devmem: import %s printed: %s", name, said.strip().replace("\n", " | "))
    return module, ""


def load_amdsmi() -> ModuleType:
    """The real amdsmi module, imported once per process; raises :class:`AmdsmiUnavailable` with the reason."""
    global _imported
    with _import_lock:
        if _imported is None:
            _imported = import_silently("amdsmi")
        module, reason = _imported
    if module is None:
        raise AmdsmiUnavailable(reason, ACTIONS.get(reason, ""))
    return module


# ---- sessions ------------------------------------------------------------------------------------
class AmdsmiSession:
    """One amdsmi module: initialised once (thread-safe) on first use, calls serialised, shut down at exit.

    ``clock`` and ``sleep`` time :meth:`settle`; tests pass a scripted clock.
    """

    def __init__(
        self, module: Any, *, clock: Callable[[], float] = time.monotonic, sleep: Callable[[float], None] = time.sleep
    ):
        self.module = module
        self._clock, self._sleep = clock, sleep
        self._lock = threading.RLock()
        self._initialised_at: float | None = None
        track(self)

    @property
    def initialised(self) -> bool:
        return self._initialised_at is not None

    def _ensure(self) -> float:
        if self._initialised_at is None:
            flags = getattr(self.module, "AmdSmiInitFlags", None)
            try:
                if flags is not None:
                    self.module.amdsmi_init(flags.INIT_AMD_GPUS)
                else:
                    self.module.amdsmi_init()
            except Exception as exc:  # AmdSmiLibraryException, or OSError from a broken library
                raise AmdsmiUnavailable(f"amdsmi_init failed: {describe(exc)[1]}") from exc
            self._initialised_at = self._clock()
        return self._initialised_at

    def has(self, name: str) -> bool:
        """Whether this amdsmi has the function ``name`` (older packages lack some)."""
        return callable(getattr(self.module, name, None))

    def call(self, name: str, *args: Any) -> Any:
        """``amdsmi.<name>(*args)`` after init; any exception amdsmi raises becomes :class:`AmdsmiCallError`."""
        fn = getattr(self.module, name, None)
        if not callable(fn):
            raise AmdsmiCallError(name, "missing", "this amdsmi has no such function")
        with self._lock:
            self._ensure()
            try:
                return fn(*args)
            except Exception as exc:  # the vendor boundary: nothing raw escapes
                status, detail, code = describe(exc)
                raise AmdsmiCallError(name, status, detail, code) from exc

    def settle(self, seconds: float) -> None:
        """Wait until ``seconds`` have passed since ``amdsmi_init`` (at once if they already have)."""
        with self._lock:
            since = self._ensure()
        wait = since + seconds - self._clock()
        if wait > 0:
            log.debug("devmem: waiting %.2f s for amdsmi's process figures to become valid", wait)
            self._sleep(wait)

    def renew_locks(self) -> None:
        """A fresh lock (in a forked child, where another thread may have held this one at the fork)."""
        self._lock = threading.RLock()

    def shutdown(self) -> None:
        """``amdsmi_shut_down`` if this session initialised amdsmi; the next call initialises it again."""
        with self._lock:
            if self._initialised_at is None:
                return
            self._initialised_at = None
            try:
                self.module.amdsmi_shut_down()
            except Exception as exc:
                log.debug("devmem: amdsmi_shut_down failed: %s", describe(exc)[1])


_real_lock = threading.Lock()


def _renew_real_lock() -> None:
    global _real_lock
    _real_lock = threading.Lock()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_renew_real_lock)
_real: AmdsmiSession | None = None


def real_session() -> AmdsmiSession:
    """The process's session on the real amdsmi; raises :class:`AmdsmiUnavailable` where it cannot load."""
    global _real
    module = load_amdsmi()
    with _real_lock:
        if _real is None:
            _real = AmdsmiSession(module)
        return _real


__all__ = [
    "ACTIONS",
    "LIBRARY_MISSING",
    "NOT_INSTALLED",
    "ROCM_OWN_AMDSMI",
    "AmdsmiCallError",
    "AmdsmiSession",
    "AmdsmiUnavailable",
    "describe",
    "import_silently",
    "load_amdsmi",
    "real_session",
]
