"""What every engine adapter needs beside its engine-specific lines: one kit, so that no adapter copies plumbing.

An adapter (the vLLM plugin, the SGLang plugin) patches a stock engine's classes so that :class:`devmem.EngineMemory`
sizes its KV cache. Around its engine-specific steps it needs the same few things, each here once:

- :class:`Switch`: the environment variable that turns the adapter off (on once installed; ``0``, ``false``,
  ``no`` or ``off`` turn it off, with one log line; any other value is named in one warning and leaves it on);
- :func:`installed_version`: the engine's release, from its distribution's metadata or, for a copy on
  ``sys.path`` without metadata, its module's ``__version__``;
- :func:`parameters` and :func:`shape_mismatches`: the feature checks (what a class has, and whether each method
  accepts the arguments the adapter passes), so that a release is recognised by its shapes, not by a list of
  version numbers; inspecting a signature never raises;
- :func:`when_imported`: patch a module right after the engine imports it (never before: a process that runs no
  worker pays nothing), or at once where it is already imported;
- :func:`wrap`: wrap a class's method with a step, idempotently, the share given back (the
  :class:`~devmem.EngineMemory` closed) when anything in it raises;
- :class:`Starts`: the engine's :class:`~devmem.EngineMemory` tied to its owner: an owner dropped without a
  shutdown (an engine that failed outside the wrapped methods) or started again gives its share back, so a retry
  in this process is never refused by its own share.

Everything an adapter says goes to one logger, a child of the engine's (``vllm.devmem``, ``sglang.devmem``), so its
lines appear in the engine's own log.
"""

from __future__ import annotations

import contextlib
import functools
import gc
import importlib.abc
import importlib.machinery
import inspect
import logging
import os
import sys
import weakref
from collections.abc import Callable, Mapping, Sequence
from importlib import metadata
from types import ModuleType
from typing import Any

from devmem._forksafe import ForkSafeLock
from devmem.engine.memory import EngineMemory

#: The values that turn an adapter off, and those that leave it on without a warning.
OFF = ("0", "false", "no", "off")
ON = ("", "1", "true", "yes", "on")

#: The attribute under which :func:`wrap` marks a method it wrapped (so wrapping twice is a no-op).
WRAPPED = "__devmem_step__"


class Switch:
    """The environment variable ``env`` that turns the adapter for ``engine`` off."""

    def __init__(self, env: str, engine: str, log: logging.Logger):
        self.env, self.engine, self.log = env, engine, log

    def on(self, environ: Mapping[str, str] | None = None) -> bool:
        """Whether the adapter runs: logs one line where the variable turns it off, one warning where its value is
        none of the known ones (the adapter stays on)."""
        value = (os.environ if environ is None else environ).get(self.env, "1")
        normal = value.strip().lower()
        if normal in OFF:
            self.log.info("devmem: %s=%s, %s sizes its KV cache itself", self.env, value, self.engine)
            return False
        if normal not in ON:
            self.log.warning(
                "devmem: %s=%r is none of %s (on) or %s (off); the plugin stays on",
                self.env,
                value[:80],
                ", ".join(ON[1:]),
                ", ".join(OFF),
            )
        return True


def installed_version(distribution: str, module: str) -> str | None:
    """The installed release of ``distribution`` (``module.__version__`` for a copy without metadata); ``None``
    where neither is there."""
    try:
        return metadata.version(distribution)
    except metadata.PackageNotFoundError:
        pass
    try:
        found = __import__(module, fromlist=["__version__"])
    except Exception:  # a broken engine install is "not there" to the adapter, never an error in it
        return None
    version = getattr(found, "__version__", None)
    return str(version) if version is not None else None


def release(version: str) -> tuple[int, ...] | None:
    """The numeric release of ``version`` (``"0.26.0rc1"`` -> ``(0, 26, 0)``); ``None`` where it starts with none."""
    parts = []
    for piece in version.split("+")[0].split("."):
        digits = ""
        for char in piece:
            if not char.isdigit():
                break
            digits += char
        if not digits:
            break
        parts.append(int(digits))
        if len(digits) != len(piece):
            break
    return tuple(parts) or None


def parameters(function: Any) -> tuple[str, ...] | None:
    """The names of ``function``'s parameters (unwrapped); ``None`` where it is no callable or its signature
    cannot be read (a C function, a mock): never an exception."""
    if not callable(function):
        return None
    try:
        return tuple(inspect.signature(inspect.unwrap(function)).parameters)
    except (TypeError, ValueError):
        return None


def accepts(function: Any, names: Sequence[str]) -> bool:
    """Whether ``function`` takes ``names`` first, in order, and nothing more that is required."""
    try:
        signature = inspect.signature(inspect.unwrap(function))
    except (TypeError, ValueError):
        return False
    params = list(signature.parameters.values())
    if tuple(p.name for p in params[: len(names)]) != tuple(names):
        return False
    rest = params[len(names) :]
    return all(p.default is not p.empty or p.kind in (p.VAR_POSITIONAL, p.VAR_KEYWORD) for p in rest)


def shape_mismatches(cls: Any, methods: Mapping[str, Sequence[str]]) -> list[str]:
    """What ``cls`` lacks of ``methods`` (name -> the parameters the adapter passes, ``self`` first); empty where
    every method is there and accepts them."""
    name = getattr(cls, "__name__", repr(cls))
    found = []
    for method, names in methods.items():
        function = getattr(cls, method, None)
        if not callable(function):
            found.append(f"{name}.{method} is missing")
        elif not accepts(function, names):
            found.append(f"{name}.{method}{parameters(function) or '(?)'} does not take {method}({', '.join(names)})")
    return found


def when_imported(module: str, patch: Callable[[ModuleType], None]) -> None:
    """Run ``patch(module)`` right after ``module`` is imported, or now where it already is. Once per pair."""
    loaded = sys.modules.get(module)
    if loaded is not None:
        patch(loaded)
        return
    for finder in sys.meta_path:
        if isinstance(finder, _ImportHook) and finder.module == module:
            if patch not in finder.patches:
                finder.patches.append(patch)
            return
    sys.meta_path.insert(0, _ImportHook(module, patch))


class _ImportHook(importlib.abc.MetaPathFinder):
    """Patches one module right after it is executed, the first time it is imported."""

    def __init__(self, module: str, patch: Callable[[ModuleType], None]):
        self.module, self.patches = module, [patch]

    def find_spec(self, name: str, path: Sequence[str] | None, target: ModuleType | None = None) -> Any:
        if name != self.module:
            return None
        spec = importlib.machinery.PathFinder.find_spec(name, path)
        if spec is None or spec.loader is None or not hasattr(spec.loader, "exec_module"):
            return spec
        loader, exec_module, patches = spec.loader, spec.loader.exec_module, self.patches

        def exec_and_patch(module: ModuleType) -> None:
            exec_module(module)
            for patch in patches:
                patch(module)

        loader.exec_module = exec_and_patch  # type: ignore[method-assign]
        return spec


def wrap(
    cls: Any,
    name: str,
    step: Callable[..., Any],
    memory_of: Callable[[Any], EngineMemory | None],
) -> None:
    """Replace ``cls.name`` by ``step(original, self, *args, **kwargs)``; where it raises (anything, Ctrl-C too),
    the EngineMemory ``memory_of(self)`` is closed, so a failed start gives its share back. Wrapping a method
    this kit wrapped already is a no-op."""
    original = getattr(cls, name)
    if getattr(original, WRAPPED, False):
        return

    @functools.wraps(original)
    def wrapped(self: Any, *args: Any, **kwargs: Any) -> Any:
        try:
            return step(original, self, *args, **kwargs)
        except BaseException:
            memory = memory_of(self)
            if memory is not None:
                memory.close()
            raise

    setattr(wrapped, WRAPPED, True)
    setattr(cls, name, wrapped)


class Starts:
    """The :class:`~devmem.EngineMemory` of each start of one engine in this process, tied to its owner (the
    engine's worker).

    A start is abandoned when its owner is gone (an engine that failed outside the wrapped methods, say where it
    refused the cache it was given, and was dropped) or when the same owner starts again (a device initialised
    twice): its share is given back, so a retry in this process is never refused by its own share. Where another
    start on the same device has not reached its cache, :meth:`begin` first collects garbage once, so that an
    owner dropped in a reference cycle gives its share back before the new start is admitted.
    """

    def __init__(self, log: logging.Logger):
        self.log = log
        self._lock = ForkSafeLock()
        self._starting: dict[int, weakref.WeakSet[EngineMemory]] = {}

    def begin(self, owner: Any, attribute: str, device: int, create: Callable[[], EngineMemory]) -> EngineMemory:
        """Give back the shares of abandoned starts, then create the memory (on ``device``), keep it as
        ``owner.<attribute>`` and return it."""
        previous = getattr(owner, attribute, None)
        if isinstance(previous, EngineMemory) and not previous.closed:
            self.log.info("devmem: device %d initialised again: the earlier start gave its share back", previous.device)
            previous.close()
        with self._lock:
            others = [m for m in self._starting.get(device, ()) if not m.closed]
        if others:
            gc.collect()  # an owner dropped in a reference cycle: its finalizer gives its share back
        memory = create()
        with self._lock:
            self._starting.setdefault(memory.device, weakref.WeakSet()).add(memory)
        setattr(owner, attribute, memory)
        with contextlib.suppress(TypeError):  # an owner without weak references: its shutdown or exit releases
            weakref.finalize(owner, _abandoned, memory, self.log)
        return memory

    def serving(self, memory: EngineMemory) -> None:
        """``memory``'s cache exists: its start is over."""
        with self._lock:
            self._starting.get(memory.device, weakref.WeakSet()).discard(memory)


def _abandoned(memory: EngineMemory, log: logging.Logger) -> None:
    if not memory.closed:
        log.info("devmem: an engine on device %d was dropped without a shutdown: its share given back", memory.device)
        memory.close()


__all__ = [
    "OFF",
    "ON",
    "Starts",
    "Switch",
    "accepts",
    "installed_version",
    "parameters",
    "release",
    "shape_mismatches",
    "when_imported",
    "wrap",
]
