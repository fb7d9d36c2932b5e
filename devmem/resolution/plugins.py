"""Choosing one platform among those the ``devmem`` entry-point group registers, once per process.

Rules:
- ``DEVMEM_LOAD_PLUGINS=a,b`` names what takes part in resolution: a plugin (its entry-point name) with
  all its platforms, or one platform (by its name) alone; the built-in ``cpu`` always takes
  part. A name that is neither is warned about, with the names it could be.
- ``DEVMEM_PLATFORM=name`` forces a platform; unknown, excluded or undetected -> :class:`PluginError`.
- Otherwise the detected candidate with the highest priority; a tie is an error naming both providers.
- Two distributions may provide the same platform name (a vendor's wheel overriding a built-in one, say): each
  is a candidate of its own, the higher priority is preferred, and equal priorities are an error naming both
  distributions.
- Only the chosen candidate's ``factory`` runs; one that raises, or is still running after
  ``DEVMEM_DETECT_TIMEOUT`` seconds, passes the choice to the next candidate.
- Detection runs once per process (``detect`` bounded by ``DEVMEM_DETECT_TIMEOUT`` seconds, see
  :mod:`devmem.resolution.discovery`); :func:`current_platform` and :func:`platform_candidates` share it, and
  :func:`clear_cache` forgets it. A forked child starts afresh (its parent's lock may be held mid-resolution).
"""

from __future__ import annotations

import os

from devmem._forksafe import ForkSafeLock
from devmem._text import described, env_text, shown
from devmem.errors import ArgumentError, DevmemError
from devmem.platform import CONTRACT, Platform
from devmem.records import Record
from devmem.resolution.discovery import (
    BUILTIN,
    AllowList,
    Registration,
    admitted,
    build,
    collect,
    debug,
    detect_timeout,
    load_plugins,
    probe,
    warn,
)
from devmem.resolution.entrypoints import entry_points
from devmem.types import PluginError

ENTRY_POINT_GROUP = "devmem"


class Candidate(Record):
    """A registered platform and what resolution found out about it.

    ``note`` explains what else bears on it: another distribution providing the same name.
    """

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
    note: str = ""
    #: What would make this platform usable where it is not detected and its backend knows (``Detection.action``).
    action: str = ""

    def as_dict(self) -> dict[str, object]:
        return dict(self.__dict__)


class _Resolution:
    """What this process found: every candidate (with the registration it came from), and what was excluded."""

    def __init__(self, probed: list[tuple[Candidate, Registration]], excluded: list[str], allow: AllowList | None):
        self.probed, self.excluded, self.allow = probed, excluded, allow


def _duplicate_notes(regs: list[Registration]) -> dict[int, str]:
    notes: dict[int, str] = {}
    for i, reg in enumerate(regs):
        others = [r for r in regs if r is not reg and r.spec.name == reg.spec.name]
        if not others:
            continue
        providers = ", ".join(f"{r.distribution} (plugin {r.plugin!r}, priority {r.spec.priority})" for r in others)
        if any(r.spec.priority == reg.spec.priority for r in others):
            notes[i] = (
                f"platform {reg.spec.name!r} is also provided by {providers} at the same priority: "
                "an error if chosen; uninstall one"
            )
        elif all(r.spec.priority < reg.spec.priority for r in others):
            notes[i] = (
                f"platform {reg.spec.name!r} is also provided by {providers}: this one wins where detected "
                "(higher priority)"
            )
        else:
            notes[i] = (
                f"platform {reg.spec.name!r} is also provided by {providers}: the higher priority wins where detected"
            )
    return notes


def _resolve_candidates() -> _Resolution:
    eps = entry_points(ENTRY_POINT_GROUP)
    allow = AllowList.from_environ()
    plugins = load_plugins(eps, allow)
    regs = admitted(collect(plugins), eps, allow)
    excluded = sorted(
        {ep.name for ep in eps if allow is not None and not allow.admits_plugin(ep.name)} - {r.plugin for r in regs}
    )
    timeout = detect_timeout()
    notes = _duplicate_notes(regs)
    probed = []
    for i, reg in enumerate(regs):
        det = probe(reg, timeout)
        cand = Candidate(
            reg.spec.name,
            reg.spec.priority,
            reg.plugin,
            reg.distribution,
            reg.version,
            det.detected,
            det.reason,
            description=reg.spec.description,
            runtime_markers=reg.spec.runtime_markers,
            note=notes.get(i, ""),
            action=det.action,
        )
        probed.append((cand, reg))
    probed.sort(key=lambda pair: (-pair[0].priority, pair[0].name, pair[0].distribution))
    return _Resolution(probed, excluded, allow)


def _listing(cands: list[Candidate]) -> str:
    """The registered names, short enough for an error of one line; `devmem plugins` says the rest."""
    return ", ".join(sorted({c.name for c in cands})) or "none"


def _same_name_tie(top: Candidate, cands: list[Candidate]) -> None:
    rivals = [c for c in cands if c.name == top.name and c.priority == top.priority]
    if len(rivals) > 1:
        raise PluginError(
            f"platform {top.name!r} is provided with priority {top.priority} by "
            f"{' and '.join(repr(c.distribution) for c in rivals)}: devmem cannot tell which to use; "
            "uninstall one of them"
        )


def _unknown_forced(forced: str, res: _Resolution) -> PluginError:
    cands = [c for c, _ in res.probed]
    message = f"DEVMEM_PLATFORM={forced!r} names no registered platform ({_listing(cands)})"
    if res.allow is not None and res.excluded:
        return PluginError(
            f"{message}: DEVMEM_LOAD_PLUGINS={res.allow.text()!r} excludes the installed plugins "
            f"{', '.join(res.excluded)}; add {forced!r} (or its plugin) to it, or unset it"
        )
    return PluginError(f"{message}; `devmem plugins` says what each needs")


def _choose(res: _Resolution, cands: list[Candidate]) -> Candidate:
    """The candidate resolution builds (``cands`` is highest priority first)."""
    forced = env_text("DEVMEM_PLATFORM", error=PluginError)
    if forced:
        matches = [c for c in cands if c.name == forced]
        if not matches:
            raise _unknown_forced(forced, res)
        detected = [c for c in matches if c.detected]
        if not detected:
            fix = f" To use it: {matches[0].action}." if matches[0].action else ""
            raise PluginError(
                f"DEVMEM_PLATFORM={forced!r} is registered but not detected: {matches[0].reason}.{fix} "
                "`devmem plugins` lists the others"
            )
        _same_name_tie(detected[0], matches)
        return detected[0]
    detected = [c for c in cands if c.detected]
    if not detected:
        raise PluginError(f"no platform was detected ({_listing(cands)}); `devmem plugins` says why")
    top = detected[0]
    _same_name_tie(top, cands)
    tied = [c for c in detected if c.priority == top.priority]
    if len(tied) > 1:
        who = " and ".join(f"{c.name!r} (from {c.distribution})" for c in tied)
        raise PluginError(
            f"platforms {who} are both detected with priority {top.priority}; "
            "set DEVMEM_PLATFORM to the one you want, or uninstall the other"
        )
    return top


_lock = ForkSafeLock()
_resolution: _Resolution | None = None
_current: Platform | None = None


def _resolved() -> _Resolution:
    """This process's detection, run on first need (call with ``_lock`` held)."""
    global _resolution
    if _resolution is None:
        _resolution = _resolve_candidates()
    return _resolution


def platform_candidates() -> list[Candidate]:
    """Every registered platform that takes part, highest priority first, with detection results and the choice.

    Shares this process's one detection with :func:`current_platform` (a factory that failed there shows here as
    not detected, with its error).
    """
    with _lock:
        res = _resolved()
        cands = [c for c, _ in res.probed]
        try:
            chosen = _choose(res, cands)
        except PluginError:
            return cands
        return [c.replace(chosen=c is chosen) for c in cands]


def _build(res: _Resolution) -> Platform:
    """Build the chosen candidate from its own registration; a factory that raises marks it undetected in ``res``
    and passes the choice on (unless the platform was forced or is the built-in)."""
    forced = bool(env_text("DEVMEM_PLATFORM", error=PluginError))
    while True:
        choice = _choose(res, [c for c, _ in res.probed])
        index = next(i for i, (c, _) in enumerate(res.probed) if c is choice)
        reg = res.probed[index][1]
        platform, exc = build(reg, detect_timeout())
        if exc is not None:
            message = (
                f"platform {choice.name!r} from distribution {choice.distribution!r} was detected "
                f"but could not be built: {described(exc)}"
            )
            if forced or choice.name == BUILTIN:
                raise PluginError(message + ". Name another platform with DEVMEM_PLATFORM.") from exc
            warn("devmem: %s; trying the next candidate", message)
            res.probed[index] = (choice.replace(detected=False, reason=f"factory raised {described(exc)}"), reg)
            continue
        if not isinstance(platform, Platform):
            from devmem._adapter import as_platform  # only for a minimal backend: off the usual start-up path

            try:
                platform = as_platform(platform)
            except PluginError as exc:
                raise PluginError(
                    f"platform {choice.name!r} from distribution {choice.distribution!r}: factory returned {exc}"
                ) from None
        debug("devmem: chose platform %r from %r (%s)", choice.name, choice.distribution, choice.reason)
        return platform


def current_platform() -> Platform:
    """The platform of this machine: resolved on first call, then cached. Thread-safe and fork-safe."""
    global _current
    platform = _current
    if platform is not None:
        return platform
    with _lock:
        if _current is None:
            _current = _build(_resolved())
        return _current


def platform_argument(value: object, *, error: type[DevmemError] = ArgumentError) -> Platform:
    """An entry point's ``platform`` argument: the current platform where it is ``None``, else ``value`` checked to
    be a devmem :class:`~devmem.Platform` (an object with every member of :data:`devmem.platform.CONTRACT`); a
    platform's name, a platform class or an object lacking members is refused with ``error``
    (:func:`devmem.as_platform` wraps a minimal backend)."""
    if value is None:
        return current_platform()
    if isinstance(value, type):  # a class has every member too, none of them bound
        raise error(
            f"platform must be a devmem Platform, got the class {shown(value)}: pass an instance of it "
            f"({value.__name__}()), devmem.current_platform(), or devmem.as_platform(backend)"
        )
    if not isinstance(value, Platform):
        missing = [m for m in CONTRACT if not hasattr(value, m)]
        raise error(
            f"platform must be a devmem Platform (devmem.current_platform(), or devmem.as_platform(backend)), got "
            f"{shown(value)} of type {type(value).__name__}, which lacks {', '.join(missing)}"
        )
    return value


def clear_cache() -> None:
    """Forget this process's detection and platform, so the next call resolves again."""
    global _current, _resolution
    with _lock:
        _current = None
        _resolution = None


def _start_afresh_in_child() -> None:
    """After ``fork()``: the parent's lock may have been held by a thread that does not exist here, and its
    platform's vendor sessions belong to the parent, so the child resolves again (``_lock`` is a ForkSafeLock:
    renewed already)."""
    global _current, _resolution
    _current = None
    _resolution = None


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_start_afresh_in_child)
