"""Finding the registered platforms and probing each one, every plugin's failure isolated to that plugin.

- :func:`load_plugins` imports each allowed entry point of the ``devmem`` group (``DEVMEM_LOAD_PLUGINS``).
- :func:`collect` calls each plugin's ``devmem_platforms`` hook on its own and keeps the specs of allowed platforms.
- :func:`probe` runs one platform's ``detect`` in a daemon thread, bounded by ``DEVMEM_DETECT_TIMEOUT`` seconds;
  :func:`build` its ``factory`` the same way (:mod:`devmem._deadline`).

Whatever a plugin raises there, ``SystemExit`` included, is logged with the plugin's name and distribution and
the plugin or platform is skipped; only ``KeyboardInterrupt`` propagates, because the user asked to stop.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from functools import partial
from typing import Any, NamedTuple, TypeVar

from devmem import _hookspecs as hookspecs
from devmem._deadline import MAX_TIMEOUT, Job
from devmem._text import described, env_seconds, env_text, shown
from devmem.resolution.entrypoints import EntryPoint
from devmem.types import Detection, PlatformSpec, PluginError

LOGGER = "devmem.resolution.plugins"
BUILTIN = "cpu"
DEFAULT_DETECT_TIMEOUT = 10.0
#: The longest ``DEVMEM_DETECT_TIMEOUT`` (an hour): a detection is a cheap probe, and a thread can wait no longer
#: than ``threading.TIMEOUT_MAX`` (``1e11`` overflowed it).
MAX_DETECT_TIMEOUT = MAX_TIMEOUT

T = TypeVar("T")


def warn(message: str, *args: object) -> None:
    import logging  # only when something went wrong: resolution itself stays clear of logging's import

    logging.getLogger(LOGGER).warning(message, *args)


def debug(message: str, *args: object) -> None:
    logging = sys.modules.get("logging")
    if logging is not None:  # never imported: no handler is configured that could show a debug line
        logging.getLogger(LOGGER).debug(message, *args)


def isolated(call: Callable[[], T]) -> tuple[T | None, BaseException | None]:
    """``(call(), None)``, or ``(None, exc)`` for anything it raised except ``KeyboardInterrupt``."""
    try:
        return call(), None
    except KeyboardInterrupt:
        raise
    except BaseException as exc:
        return None, exc


class AllowList(NamedTuple):
    """``DEVMEM_LOAD_PLUGINS``: names of plugins (entry points) or platforms that take part in resolution."""

    names: frozenset[str]

    @classmethod
    def from_environ(cls) -> AllowList | None:
        raw = env_text("DEVMEM_LOAD_PLUGINS", error=PluginError)
        if not raw:
            return None
        return cls(frozenset(n.strip() for n in raw.split(",") if n.strip()) | {BUILTIN})

    def admits_plugin(self, plugin: str) -> bool:
        return plugin in self.names

    def admits(self, plugin: str, platform: str) -> bool:
        return plugin in self.names or platform in self.names

    def text(self) -> str:
        return env_text("DEVMEM_LOAD_PLUGINS", error=PluginError)


class Plugin(NamedTuple):
    """An imported entry point."""

    entry: EntryPoint
    module: object


class Registration(NamedTuple):
    """A platform a plugin provides, with the plugin and distribution it comes from."""

    spec: PlatformSpec
    plugin: str
    distribution: str
    version: str


def load_plugins(eps: list[EntryPoint], allow: AllowList | None) -> list[Plugin]:
    """Import the entry points that may take part: all of them without an allow-list, else those it names, or
    all of them when it names something that is no entry point (it may be a platform name, known only once the
    plugin providing it is imported). A plugin that fails to import is logged and skipped."""
    entry_names = {ep.name for ep in eps}
    load_all = allow is None or not allow.names <= entry_names
    plugins: list[Plugin] = []
    seen: set[str] = set()
    for ep in eps:
        if ep.name in seen or not (load_all or (allow is not None and allow.admits_plugin(ep.name))):
            continue
        seen.add(ep.name)
        module, exc = isolated(ep.load)
        if exc is not None:
            warn(
                "devmem: skipping plugin %r from distribution %r: importing it raised %s",
                ep.name,
                ep.distribution,
                described(exc),
            )
            continue
        plugins.append(Plugin(ep, module))
    return plugins


def _hook_impls(plugin: Plugin) -> list[Callable[[], object]]:
    impls = []
    for attr in dir(plugin.module):
        function = getattr(plugin.module, attr, None)
        marker = getattr(function, hookspecs.IMPL_ATTRIBUTE, None)
        if not isinstance(marker, dict) or not callable(function):
            continue
        hook = marker.get("specname") or attr
        if hook not in hookspecs.SPECS:
            warn(
                "devmem: plugin %r from distribution %r marks %r as a hook implementation, but devmem has no hook "
                "%r (its hooks: %s)",
                plugin.entry.name,
                plugin.entry.distribution,
                attr,
                hook,
                ", ".join(sorted(hookspecs.SPECS)),
            )
            continue
        impls.append(function)
    return impls


def _specs_of(impl: Callable[[], object]) -> list[Any]:
    returned: Any = impl()
    return list(returned or ())


def collect(plugins: list[Plugin]) -> list[Registration]:
    """Every platform the plugins provide, each plugin's hook called on its own so a failure is its alone."""
    found: list[Registration] = []
    for plugin in plugins:
        ep = plugin.entry
        for impl in _hook_impls(plugin):
            specs, exc = isolated(partial(_specs_of, impl))
            if exc is not None:
                warn(
                    "devmem: skipping plugin %r from distribution %r: devmem_platforms raised %s",
                    ep.name,
                    ep.distribution,
                    described(exc),
                )
                continue
            specs = specs or []
            bad = [s for s in specs if not isinstance(s, PlatformSpec)]
            if bad:
                warn(
                    "devmem: skipping plugin %r from distribution %r: devmem_platforms yielded %r, "
                    "not a devmem.PlatformSpec",
                    ep.name,
                    ep.distribution,
                    bad[0],
                )
                continue
            found.extend(Registration(s, ep.name, ep.distribution, ep.version) for s in specs)
    return found


def admitted(regs: list[Registration], eps: list[EntryPoint], allow: AllowList | None) -> list[Registration]:
    """The registrations the allow-list admits; names it holds that are neither an installed plugin nor a
    platform are warned about with the names it could hold."""
    if allow is None:
        return regs
    plugin_names = {ep.name for ep in eps}
    platform_names = {r.spec.name for r in regs}
    unknown = sorted(allow.names - plugin_names - platform_names)
    if unknown:
        more = f" and {len(unknown) - 4} more" if len(unknown) > 4 else ""
        warn(
            "devmem: DEVMEM_LOAD_PLUGINS=%s names %s, which is neither a plugin nor a platform here; plugins: %s; "
            "platforms: %s",
            shown(allow.text()),
            ", ".join(map(shown, unknown[:4])) + more,
            ", ".join(sorted(plugin_names)),
            ", ".join(sorted(platform_names)),
        )
    return [r for r in regs if allow.admits(r.plugin, r.spec.name)]


def detect_timeout() -> float:
    """``DEVMEM_DETECT_TIMEOUT`` in seconds (default :data:`DEFAULT_DETECT_TIMEOUT`), above 0 and at most
    :data:`MAX_DETECT_TIMEOUT`; a :class:`PluginError` naming the value otherwise."""
    return env_seconds(
        "DEVMEM_DETECT_TIMEOUT", default=DEFAULT_DETECT_TIMEOUT, high=MAX_DETECT_TIMEOUT, error=PluginError
    )


def probe(reg: Registration, timeout: float) -> Detection:
    """``reg``'s detection, run in a daemon thread: a detect still running after ``timeout`` seconds counts as
    not detected (the thread is left to finish on its own); anything it raises is logged and counts as not
    detected."""
    where = f"platform {reg.spec.name!r} of plugin {reg.plugin!r} from distribution {reg.distribution!r}"
    job = Job(reg.spec.detect, name=f"devmem-detect-{reg.spec.name}")
    if not job.done_by(time.monotonic() + timeout):
        warn("devmem: skipping %s: detect took longer than %g s (DEVMEM_DETECT_TIMEOUT)", where, timeout)
        return Detection(False, f"detection took longer than {timeout:g} s (DEVMEM_DETECT_TIMEOUT)")
    detection, exc = job.value, job.error
    if isinstance(exc, KeyboardInterrupt):
        raise exc
    if exc is not None:
        warn("devmem: skipping %s: detect raised %s", where, described(exc))
        return Detection(False, f"detect raised {described(exc)}")
    if not isinstance(detection, Detection):
        warn("devmem: skipping %s: detect returned %r, not a devmem.Detection", where, detection)
        return Detection(False, f"detect returned {detection!r}, not a devmem.Detection")
    return detection


def build(reg: Registration, timeout: float) -> tuple[object | None, BaseException | None]:
    """``(reg.spec.factory(), None)``, or ``(None, exc)`` for what it raised (``KeyboardInterrupt`` aside), run in a
    daemon thread as :func:`probe` runs ``detect``: a factory still running after ``timeout`` seconds
    (``DEVMEM_DETECT_TIMEOUT``) gives a ``TimeoutError`` (the thread is left to finish on its own)."""
    job = Job(reg.spec.factory, name=f"devmem-build-{reg.spec.name}")
    if not job.done_by(time.monotonic() + timeout):
        return None, TimeoutError(f"factory took longer than {timeout:g} s (DEVMEM_DETECT_TIMEOUT)")
    if isinstance(job.error, KeyboardInterrupt):
        raise job.error
    return job.value, job.error
