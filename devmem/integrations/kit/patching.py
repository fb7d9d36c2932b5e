"""Patching an engine: :func:`when_imported` (a module patched right after the engine imports it, never before),
:func:`wrap` and :func:`guarded` (a step whose failure gives the share back, :func:`current` while it runs),
:func:`around` (an instance's method inside a context for a block), :func:`patch_class` and :func:`patch_in` (a
class wrapped once where its shapes are known, never an exception into the engine's import)."""

from __future__ import annotations

import contextlib
import contextvars
import functools
import importlib.abc
import importlib.machinery
import sys
from collections.abc import Callable, Mapping, Sequence
from types import ModuleType
from typing import Any

from devmem.engine.memory import EngineMemory
from devmem.integrations.kit.shapes import shape_mismatches
from devmem.integrations.kit.switch import Switch

#: The attribute under which :func:`wrap` marks a method it wrapped (so wrapping twice is a no-op).
WRAPPED = "__devmem_step__"
#: The attribute under which :func:`patch_class` marks a class it patched (so patching twice is a no-op).
PATCHED = "_devmem_patched"

_current: contextvars.ContextVar[EngineMemory | None] = contextvars.ContextVar("devmem_adapter_step", default=None)


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
    run = guarded(step, memory_of)

    @functools.wraps(original)
    def wrapped(self: Any, *args: Any, **kwargs: Any) -> Any:
        return run(original, self, *args, **kwargs)

    setattr(wrapped, WRAPPED, True)
    setattr(cls, name, wrapped)


@contextlib.contextmanager
def around(
    owner: Any, name: str, context: Callable[[dict[str, Any]], contextlib.AbstractContextManager[Any] | None]
) -> Any:
    """For the block, each call of ``owner.name`` (an instance's method; nothing where it has none) runs inside
    ``context(kwargs)``, or as it is where that is ``None``: a charge held while one step of the engine's profile
    pass runs (``EngineMemory.hold``), the engine's graph capture in ``EngineMemory.graphs_after_cache()``."""
    method = getattr(owner, name, None)
    if not callable(method):
        yield
        return

    @functools.wraps(method)
    def run(*args: Any, **kwargs: Any) -> Any:
        with context(kwargs) or contextlib.nullcontext():
            return method(*args, **kwargs)

    setattr(owner, name, run)
    try:
        yield
    finally:
        owner.__dict__.pop(name, None)


def guarded(step: Callable[..., Any], memory_of: Callable[[Any], EngineMemory | None]) -> Callable[..., Any]:
    """``step(original, owner, *args, **kwargs)``, closing the EngineMemory ``memory_of(owner)`` where it raises
    (anything, Ctrl-C too), and :func:`current` while it runs: the step :func:`wrap` installs, and the one an
    engine's own hook registry calls."""

    @functools.wraps(step)
    def run(original: Callable[..., Any], owner: Any, *args: Any, **kwargs: Any) -> Any:
        token = _current.set(memory_of(owner))
        try:
            return step(original, owner, *args, **kwargs)
        except BaseException:
            memory = memory_of(owner)
            if memory is not None:
                memory.close()
            raise
        finally:
            _current.reset(token)

    return run


def current() -> EngineMemory | None:
    """The EngineMemory of the adapter's step running in this context (a :func:`guarded` step, as it began), for a
    function of the engine's module that the step calls; ``None`` outside one."""
    return _current.get()


def patch_class(
    cls: Any,
    steps: Mapping[str, Callable[..., Any]],
    methods: Mapping[str, Sequence[str]],
    memory_of: Callable[[Any], EngineMemory | None],
    switch: Switch,
    what: str,
) -> bool:
    """Wrap each of ``cls``'s methods named in ``steps`` with its step (:func:`wrap`) and mark the class, where every
    one of ``methods`` has its shape (:func:`shape_mismatches`); ``False``, with one warning naming ``what`` (the
    engine's class, for people) and the mismatches, where not. A class patched already is left as it is."""
    if cls.__dict__.get(PATCHED, False):
        return True
    mismatches = shape_mismatches(cls, methods)
    if mismatches:
        switch.declined(f"{what} is not the shape this plugin knows ({'; '.join(mismatches)})")
        return False
    for name, step in steps.items():
        wrap(cls, name, step, memory_of)
    setattr(cls, PATCHED, True)
    return True


def patch_in(
    module: ModuleType, name: str, patch: Callable[[Any, ModuleType], bool], switch: Switch, note: str | None
) -> None:
    """``patch(cls, module)`` for ``module``'s class ``name`` (from :func:`when_imported`), then ``note`` logged where
    it patched; never raises into the engine's import of ``module`` (one warning: the engine runs as it came)."""
    try:
        cls = getattr(module, name, None)
        if not isinstance(cls, type):
            switch.declined(f"{module.__name__} has no class {name}")
            return
        if patch(cls, module) and note is not None:
            switch.log.info("devmem: %s", note)
    except Exception as exc:  # never a crash in the engine's import: the engine as it came, said once
        switch.declined(f"patching {module.__name__} failed ({type(exc).__name__}: {exc})")
