"""amdsmi access for the rocm platform: a silent import, one initialisation per process, serialised calls.

The amdsmi wheel misbehaves where ROCm is absent: ``import amdsmi`` prints the loader's OSError and
"Unable to find libamd_smi.so library try installing amd-smi-lib from your package manager" (Python
``print`` calls in ``amdsmi_wrapper.py``), then raises ``KeyError('libamd_smi.so')``. :func:`load_amdsmi`
imports it once per process with ``sys.stdout``/``sys.stderr`` captured and turns every failure into
:class:`AmdsmiUnavailable` with a one-line reason (``devmem plugins`` shows it). The message is printed
by Python, so capturing ``sys.stdout`` is enough; redirecting file descriptor 1 would also swallow what
other threads of an engine write meanwhile.

:class:`AmdsmiSession`, devmem's :class:`~devmem.sdk.sessions.VendorSession` for amdsmi, wraps one amdsmi module
(the real one or ``devmem_rocm.testing.ScriptedAmdsmi``): ``amdsmi_init`` runs once, under a lock, on first use;
every call is serialised; amdsmi's exceptions become :class:`AmdsmiCallError`; live sessions are shut down at
interpreter exit. The real module has one shared session (``AmdsmiSession.shared()``).
"""

from __future__ import annotations

import contextlib
import importlib
import io
import logging
import time
from collections.abc import Callable
from types import ModuleType
from typing import Any

from devmem import DevmemError
from devmem.sdk import ForkSafeLock, LibraryUnavailable, VendorSession

log = logging.getLogger("devmem.rocm")

NOT_INSTALLED = "the Python package amdsmi is not installed"
LIBRARY_MISSING = "amdsmi cannot find libamd_smi.so (ROCm's amd-smi-lib is not installed)"
#: ROCm's own amdsmi package, which always matches its libamd_smi.so.
ROCM_OWN_AMDSMI = "/opt/rocm/share/amd_smi"
#: What to do about an import failure, by its reason (amdsmi is the extra ``rocm``, not a dependency).
ACTIONS = {
    NOT_INSTALLED: f"pip install {ROCM_OWN_AMDSMI} (your ROCm's own amdsmi, which matches its library), or pip "
    "install amdsmi (PyPI's: pick the release of your ROCm version)",
    LIBRARY_MISSING: f"install ROCm's amd-smi-lib with your package manager (then `amd-smi list` works), or use "
    f"your ROCm's own amdsmi: pip install {ROCM_OWN_AMDSMI}",
}


class AmdsmiUnavailable(LibraryUnavailable):
    """amdsmi cannot be imported or initialised; the message is the reason, for people, and ``action`` what to
    do about it where that is known (see :data:`ACTIONS`)."""


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
_import_lock = ForkSafeLock()
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
class AmdsmiSession(VendorSession):
    """The amdsmi library (a :class:`~devmem.sdk.sessions.VendorSession`): ``module`` is amdsmi or a scripted one
    (``None``: the real one, imported silently on first use); calls are serialised (amdsmi is not thread-safe).

    ``clock`` and ``sleep`` time :meth:`settle`; tests pass a scripted clock.
    """

    init_function = "amdsmi_init"
    shutdown_function = "amdsmi_shut_down"
    unavailable = AmdsmiUnavailable
    serialise_calls = True

    def __init__(
        self,
        module: Any = None,
        *,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], None] = time.sleep,
    ):
        super().__init__(module)
        self._clock, self._sleep = clock, sleep
        self._initialised_at: float | None = None

    def load_library(self) -> Any:
        return load_amdsmi()

    def init_args(self, module: Any) -> tuple[Any, ...]:
        """GPUs only (``AmdSmiInitFlags.INIT_AMD_GPUS``) where this amdsmi has the flags."""
        flags = getattr(module, "AmdSmiInitFlags", None)
        return () if flags is None else (flags.INIT_AMD_GPUS,)

    def start(self, module: Any) -> None:
        super().start(module)
        self._initialised_at = self._clock()

    def stop(self, module: Any) -> None:
        self._initialised_at = None
        super().stop(module)

    def describe_error(self, exc: BaseException) -> str:
        return describe(exc)[1]

    def call_error(self, name: str, exc: BaseException) -> AmdsmiCallError:
        status, detail, code = describe(exc)
        return AmdsmiCallError(name, status, detail, code)

    def missing_function(self, name: str) -> AmdsmiCallError:
        return AmdsmiCallError(name, "missing", "this amdsmi has no such function")

    def settle(self, seconds: float) -> None:
        """Wait until ``seconds`` have passed since ``amdsmi_init`` (at once if they already have)."""
        with self._lock:
            self.initialise()
            since = self._initialised_at
        assert since is not None
        wait = since + seconds - self._clock()
        if wait > 0:
            log.debug("devmem: waiting %.2f s for amdsmi's process figures to become valid", wait)
            self._sleep(wait)


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
]
