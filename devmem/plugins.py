"""Finding backends through the ``devmem`` entry-point group and choosing one platform.

Rules (docs/design.md, "Resolution"):
- ``DEVMEM_LOAD_PLUGINS=a,b`` loads only those entry points (the built-in ``cpu`` is always loaded).
- ``DEVMEM_PLATFORM=name`` forces a platform; unknown or undetected -> :class:`PluginError`.
- Otherwise the detected candidate with the highest priority; a tie is an error naming both providers.
- A plugin that fails to import, raises in ``detect``, or yields something that is not a
  :class:`PlatformSpec` is skipped with one log line naming it and its distribution.
"""

from __future__ import annotations

import os
import sys
import threading
from dataclasses import dataclass, replace
from typing import Any, NamedTuple

import pluggy

from devmem import hookspecs
from devmem.entrypoints import EntryPoint, entry_points
from devmem.platform import CONTRACT, Platform
from devmem.types import Detection, PlatformSpec, PluginError

LOGGER = "devmem.plugins"


def _warn(message: str, *args: object) -> None:
    import logging  # only when something went wrong: resolution itself stays clear of logging's import

    logging.getLogger(LOGGER).warning(message, *args)


def _debug(message: str, *args: object) -> None:
    logging = sys.modules.get("logging")
    if logging is not None:  # never imported: no handler is configured that could show a debug line
        logging.getLogger(LOGGER).debug(message, *args)


ENTRY_POINT_GROUP = "devmem"
BUILTIN = "cpu"


@dataclass(frozen=True)
class Candidate:
    """A registered platform and what resolution found out about it."""

    name: str
    priority: int
    plugin: str
    distribution: str
    version: str
    detected: bool
    reason: str
    chosen: bool = False
    description: str = ""
    runtime_markers: tuple[str, ...] = ()
    #: What would make this platform usable where it is not detected and its backend knows (``Detection.action``).
    action: str = ""

    def as_dict(self) -> dict[str, object]:
        return dict(self.__dict__)


class _Registered(NamedTuple):
    spec: PlatformSpec
    plugin: str
    distribution: str
    version: str


def _allow_list() -> set[str] | None:
    raw = os.environ.get("DEVMEM_LOAD_PLUGINS", "").strip()
    if not raw:
        return None
    return {name.strip() for name in raw.split(",") if name.strip()} | {BUILTIN}


def _load_plugins(eps: list[EntryPoint]) -> pluggy.PluginManager:
    """Register every allowed entry point's module; log and skip those that fail to import."""
    pm = pluggy.PluginManager(hookspecs.PROJECT)
    pm.add_hookspecs(hookspecs)
    allowed = _allow_list()
    for ep in eps:
        if allowed is not None and ep.name not in allowed:
            continue
        if pm.has_plugin(ep.name):
            continue
        try:
            plugin = ep.load()
            pm.register(plugin, name=ep.name)
        except Exception as exc:  # a broken vendor wheel must never break devmem
            _warn("devmem: skipping plugin %r from distribution %r: %s: %s", ep.name, ep.distribution,
                  type(exc).__name__, exc)
    return pm


def _collect(pm: pluggy.PluginManager, eps: list[EntryPoint]) -> list[_Registered]:
    """Call each plugin's hook on its own, so a failure is attributed to that plugin alone."""
    dists = {ep.name: (ep.distribution, ep.version) for ep in eps}
    found: list[_Registered] = []
    for impl in pm.hook.devmem_platforms.get_hookimpls():
        name = impl.plugin_name
        dist, version = dists.get(name, ("unknown", "unknown"))
        try:
            returned: Any = impl.function()
            specs = list(returned or ())
        except Exception as exc:
            _warn("devmem: skipping plugin %r from distribution %r: devmem_platforms raised %s: %s",
                  name, dist, type(exc).__name__, exc)
            continue
        bad = [s for s in specs if not isinstance(s, PlatformSpec)]
        if bad:
            _warn("devmem: skipping plugin %r from distribution %r: devmem_platforms yielded %r, "
                  "not a devmem.PlatformSpec", name, dist, bad[0])
            continue
        found.extend(_Registered(s, name, dist, version) for s in specs)
    return found


def _probe(reg: _Registered) -> Detection:
    try:
        detection = reg.spec.detect()
    except Exception as exc:
        _warn("devmem: skipping platform %r of plugin %r from distribution %r: detect raised %s: %s",
              reg.spec.name, reg.plugin, reg.distribution, type(exc).__name__, exc)
        return Detection(False, f"detect raised {type(exc).__name__}: {exc}")
    if not isinstance(detection, Detection):
        _warn("devmem: skipping platform %r of plugin %r from distribution %r: detect returned %r, "
              "not a devmem.Detection", reg.spec.name, reg.plugin, reg.distribution, detection)
        return Detection(False, f"detect returned {detection!r}, not a devmem.Detection")
    return detection


def _candidates() -> tuple[list[Candidate], dict[str, _Registered]]:
    eps = entry_points(ENTRY_POINT_GROUP)
    regs = _collect(_load_plugins(eps), eps)
    cands: list[Candidate] = []
    by_name: dict[str, _Registered] = {}
    for reg in regs:
        det = _probe(reg)
        cands.append(Candidate(reg.spec.name, reg.spec.priority, reg.plugin, reg.distribution, reg.version,
                               det.found, det.reason, description=reg.spec.description,
                               runtime_markers=reg.spec.runtime_markers, action=det.action))
        by_name.setdefault(reg.spec.name, reg)
    cands.sort(key=lambda c: (-c.priority, c.name))
    return cands, by_name


def _listing(cands: list[Candidate]) -> str:
    return "; ".join(
        f"{c.name} (from {c.distribution}): {'detected' if c.detected else 'not detected'}, {c.reason}" for c in cands
    ) or "none"


def _choose(cands: list[Candidate]) -> Candidate:
    duplicates = {c.name for c in cands if sum(d.name == c.name for d in cands) > 1}
    forced = os.environ.get("DEVMEM_PLATFORM", "").strip()
    if forced:
        matches = [c for c in cands if c.name == forced]
        if not matches:
            raise PluginError(
                f"DEVMEM_PLATFORM={forced!r} names no registered platform. Registered: {_listing(cands)}. "
                "Install the backend that provides it, or unset DEVMEM_PLATFORM."
            )
        if forced in duplicates:
            raise PluginError(f"platform {forced!r} is provided by several distributions: "
                              f"{', '.join(c.distribution for c in matches)}; uninstall all but one")
        if not matches[0].detected:
            fix = f" To use it: {matches[0].action}." if matches[0].action else ""
            raise PluginError(
                f"DEVMEM_PLATFORM={forced!r} is registered but not detected: {matches[0].reason}.{fix} "
                f"Registered: {_listing(cands)}. Name another platform or unset DEVMEM_PLATFORM."
            )
        return matches[0]
    detected = [c for c in cands if c.detected]
    if not detected:
        raise PluginError(f"no platform was detected. Registered: {_listing(cands)}")
    top = [c for c in detected if c.priority == detected[0].priority]
    if len(top) > 1:
        who = " and ".join(f"{c.name!r} (from {c.distribution})" for c in top)
        raise PluginError(f"platforms {who} are both detected with priority {top[0].priority}; "
                          "set DEVMEM_PLATFORM to the one you want, or uninstall the other")
    return top[0]


def platform_candidates() -> list[Candidate]:
    """Every registered platform, highest priority first, with detection results and the choice.

    Probes afresh on each call (the cached platform of :func:`current_platform` is not changed).
    """
    cands, _ = _candidates()
    try:
        chosen = _choose(cands)
    except PluginError:
        return cands
    return [replace(c, chosen=c is chosen) for c in cands]


_lock = threading.Lock()
_current: Platform | None = None


def _build(cands: list[Candidate], by_name: dict[str, _Registered]) -> Platform:
    forced = bool(os.environ.get("DEVMEM_PLATFORM", "").strip())
    while True:
        choice = _choose(cands)
        reg = by_name[choice.name]
        try:
            platform = reg.spec.factory()
        except Exception as exc:
            message = (f"platform {choice.name!r} from distribution {choice.distribution!r} was detected "
                       f"but could not be built: {type(exc).__name__}: {exc}")
            if forced or choice.name == BUILTIN:
                raise PluginError(message + ". Name another platform with DEVMEM_PLATFORM.") from exc
            _warn("devmem: %s; trying the next candidate", message)
            cands = [replace(c, detected=False, reason=f"factory raised {type(exc).__name__}: {exc}")
                     if c is choice else c for c in cands]
            continue
        if not isinstance(platform, Platform):
            missing = [m for m in CONTRACT if not hasattr(platform, m)]
            raise PluginError(f"platform {choice.name!r} from distribution {choice.distribution!r}: "
                              f"factory returned {platform!r}, which lacks {', '.join(missing)} of devmem.Platform; "
                              "subclass devmem.PlatformBase, which has every member")
        _debug("devmem: chose platform %r (%s)", choice.name, choice.reason)
        return platform


def current_platform() -> Platform:
    """The platform of this machine: resolved on first call, then cached. Thread-safe."""
    global _current
    platform = _current
    if platform is not None:
        return platform
    with _lock:
        if _current is None:
            cands, by_name = _candidates()
            _current = _build(cands, by_name)
        return _current


def clear_cache() -> None:
    """Forget the cached platform, so the next :func:`current_platform` resolves again."""
    global _current
    with _lock:
        _current = None
