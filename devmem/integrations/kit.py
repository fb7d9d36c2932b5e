"""What every engine adapter needs beside its engine-specific lines: one kit, so that no adapter copies plumbing.

An adapter (the vLLM plugin, the SGLang plugin) patches a stock engine's classes so that :class:`devmem.EngineMemory`
sizes its KV cache. Around its engine-specific steps it needs the same few things, each here once:

- :class:`Switch`: the environment variable that turns the adapter off (on once installed; ``0``, ``false``,
  ``no`` or ``off`` turn it off, with one log line; any other value is named in one warning and leaves it on);
- :func:`installed_version`: the engine's release, from its distribution's metadata or, for a copy on
  ``sys.path`` without metadata, its module's ``__version__``;
- :func:`parameters`, :func:`parameter`, :func:`source` and :func:`shape_mismatches`: the feature checks (what a
  class has, and whether each method accepts the arguments the adapter passes), so that a release is recognised by
  its shapes, not by a list of version numbers; inspecting a signature or a source never raises;
- :func:`when_imported`: patch a module right after the engine imports it (never before: a process that runs no
  worker pays nothing), or at once where it is already imported;
- :func:`wrap`: wrap a class's method with a step, idempotently, the share given back (the
  :class:`~devmem.EngineMemory` closed) when anything in it raises;
- :func:`patch_class` and :func:`patch_in`: a class's methods wrapped once, where their shapes are the ones the
  adapter knows, and never an exception into the engine's import of its module (one warning, the engine stock);
- :func:`current`: the EngineMemory of the adapter's step under way, for a function of the engine's module that
  the step calls;
- :func:`around`: an instance's method run inside a context for a block (a charge held while it runs, graphs
  captured after the cache);
- :class:`Starts`: the engine's :class:`~devmem.EngineMemory` tied to its owner: an owner dropped without a
  shutdown (an engine that failed outside the wrapped methods) or started again gives its share back, so a retry
  in this process is never refused by its own share; :func:`allocating` and :func:`closing`, the steps around an
  engine's own cache allocation and its shutdown;
- :func:`version_note`, :func:`names_used`, :func:`weights_per_rank`, :func:`graphs_after_cache`,
  :func:`grown_since_baseline` and :func:`log_sizing`: the release gate, the names a release's own method uses (what
  tells releases apart), a pinned start's weights read before they load, the declaration of graphs captured after
  the cache (stored for the next start), this process's growth since its baseline, and the one line saying how the
  cache was sized, with every charge in it;
- for an entry point that sizes a model's engine in one call (transformers' ``size_continuous_batching``):
  :func:`begin_sizing` checks the call's request (a share or pinned bytes, a baseline, the device and platform of
  the model, the store, the reservation) before anything runs and gives the :class:`Sizing` that closes the
  :class:`~devmem.EngineMemory` it created on any failure; :func:`unwrapped`, :func:`check_one_device`,
  :func:`storage_bytes`, :func:`model_bytes`, :func:`forward_tokens`, :func:`logged`, :func:`copied` and
  :func:`after_current_stream` read and steer the model and the engine.

Everything an adapter says goes to one logger, a child of the engine's (``vllm.devmem``, ``sglang.devmem``), so its
lines appear in the engine's own log.
"""

from __future__ import annotations

import contextlib
import contextvars
import copy
import functools
import importlib.abc
import importlib.machinery
import inspect
import logging
import os
import sys
import weakref
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from importlib import metadata
from types import ModuleType
from typing import Any

from devmem import arguments
from devmem._forksafe import ForkSafeLock
from devmem._text import shown
from devmem.engine import _heap
from devmem.engine.black_box_sizing import BlackBoxEngine, SizedRuns, size_by_runs
from devmem.engine.graphs import GraphsAfterCache
from devmem.engine.kvcache import ALLOCATOR_GRANULARITY
from devmem.engine.memory import EngineMemory, EngineMemoryError
from devmem.engine.profile_store import ProfileStore, ProfileStoreError, resolve_store
from devmem.engine.profiling import MemorySnapshot
from devmem.engine.reservations import Reservation
from devmem.planner.sizing import DEFAULT_UTILIZATION, SizingError, _bytes, requested_memory
from devmem.platform import Platform
from devmem.resolution.plugins import current_platform, platform_argument
from devmem.types import DevmemError
from devmem.units import format_size

#: The values that turn an adapter off, and those that leave it on without a warning.
OFF = ("0", "false", "no", "off")
ON = ("", "1", "true", "yes", "on")

#: The attribute under which :func:`wrap` marks a method it wrapped (so wrapping twice is a no-op).
WRAPPED = "__devmem_step__"
#: The attribute under which :func:`patch_class` marks a class it patched (so patching twice is a no-op).
PATCHED = "_devmem_patched"

_current: contextvars.ContextVar[EngineMemory | None] = contextvars.ContextVar("devmem_adapter_step", default=None)


class Switch:
    """The environment variable ``env`` that turns the adapter for ``engine`` off, the gate on the engine's release
    (:meth:`admits`), and the warning that the engine runs as it came (:meth:`declined`)."""

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

    def admits(
        self, distribution: str, module: str, oldest: tuple[int, int], verified: Sequence[tuple[int, int]]
    ) -> tuple[bool, str | None]:
        """Whether the adapter runs: the switch on (:meth:`on`), and the installed release (:func:`installed_version`
        of ``distribution``, else ``module.__version__``) admitted by :func:`version_note` (one warning where it is
        declined); and the note to log once the engine is patched."""
        if not self.on():
            return False, None
        go, note = version_note(self.engine, installed_version(distribution, module), oldest, verified)
        if not go:
            self.declined(str(note))
        return go, note

    def declined(self, why: str) -> None:
        """One warning: ``why`` the adapter leaves the engine as it came, which then sizes its KV cache itself."""
        self.log.warning("devmem: %s; %s sizes its KV cache itself", why, self.engine)


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


def version_note(
    engine: str, version: str | None, oldest: tuple[int, int], verified: Sequence[tuple[int, int]]
) -> tuple[bool, str | None]:
    """Whether to patch ``engine``'s release ``version``, and the one line to log: a warning where it is declined
    (none installed, no release, older than ``oldest``), an info line where it is newer than the newest of
    ``verified`` (tried, since its shapes are checked next); ``None`` for a release up to the newest verified."""
    if version is None:
        return False, f"{engine} is not installed"
    found = release(version)
    if found is None or len(found) < 2:
        return False, f"{engine} {version!r} is not a release this plugin knows"
    if found[:2] < oldest:
        return False, f"{engine} {version} is older than {oldest[0]}.{oldest[1]}, the first release this plugin knows"
    newest = max(verified)
    if found[:2] > newest:
        return True, (
            f"{engine} {version} is newer than {newest[0]}.{newest[1]}, the newest release this plugin was verified "
            "on: tried, since the methods it patches have the shapes the plugin knows"
        )
    return True, None


def names_used(method: Callable[..., Any]) -> tuple[tuple[str, ...], dict[str, Any]]:
    """The global and attribute names ``method`` (a release's own, unwrapped) uses, and its module's globals: what
    tells an engine's releases apart without a list of versions."""
    code = inspect.unwrap(method)
    return tuple(getattr(getattr(code, "__code__", None), "co_names", ())), getattr(code, "__globals__", {})


def parameters(function: Any) -> tuple[str, ...] | None:
    """The names of ``function``'s parameters (unwrapped); ``None`` where it is no callable or its signature
    cannot be read (a C function, a mock): never an exception."""
    if not callable(function):
        return None
    try:
        return tuple(inspect.signature(inspect.unwrap(function)).parameters)
    except (TypeError, ValueError):
        return None


def parameter(function: Any, name: str) -> inspect.Parameter | None:
    """``function``'s parameter ``name`` (unwrapped); ``None`` where it has none or its signature cannot be read."""
    try:
        return inspect.signature(inspect.unwrap(function)).parameters.get(name)
    except (TypeError, ValueError):
        return None


def source(function: Any) -> str:
    """The source of ``function``; empty where it cannot be read (a C function, code without its file)."""
    try:
        return inspect.getsource(function)
    except (OSError, TypeError):
        return ""


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


def memory_of(attribute: str) -> Callable[[Any], EngineMemory | None]:
    """The EngineMemory an owner keeps as ``owner.<attribute>`` (:meth:`Starts.begin`), or ``None``: the
    ``memory_of`` of :func:`wrap`, :func:`guarded`, :func:`allocating` and :func:`closing`."""

    def memory(owner: Any) -> EngineMemory | None:
        found = getattr(owner, attribute, None)
        return found if isinstance(found, EngineMemory) else None

    return memory


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
            _heap.collect_all()  # an owner dropped in a reference cycle: its finalizer gives its share back
        memory = create()
        with self._lock:
            self._starting.setdefault(memory.device, weakref.WeakSet()).add(memory)
        setattr(owner, attribute, memory)
        with contextlib.suppress(TypeError):  # an owner without weak references: its shutdown or exit releases
            weakref.finalize(owner, _abandoned, memory, self.log)
        return memory

    def drop(self, owner: Any, attribute: str) -> None:
        """The start kept as ``owner.<attribute>`` abandoned by the adapter (the engine sizes itself): its share given
        back."""
        memory = getattr(owner, attribute, None)
        if isinstance(memory, EngineMemory):
            memory.close()
        setattr(owner, attribute, None)

    def serving(self, memory: EngineMemory) -> None:
        """``memory``'s cache exists: its start is over."""
        with self._lock:
            self._starting.get(memory.device, weakref.WeakSet()).discard(memory)


def allocating(starts: Starts, memory_of: Callable[[Any], EngineMemory | None]) -> Callable[..., Any]:
    """The step around an engine's own KV cache allocation: torch's allocator cache released right before it, and
    the start over (:meth:`Starts.serving`) once the cache exists."""

    def allocate(original: Callable[..., Any], owner: Any, *args: Any, **kwargs: Any) -> Any:
        memory = memory_of(owner)
        if memory is None:
            return original(owner, *args, **kwargs)
        memory.release_allocator_cache()
        result = original(owner, *args, **kwargs)
        starts.serving(memory)
        return result

    return allocate


def closing(memory_of: Callable[[Any], EngineMemory | None]) -> Callable[..., Any]:
    """The step around an engine's shutdown: the engine's own, then its share given back."""

    def stop(original: Callable[..., Any], owner: Any, *args: Any, **kwargs: Any) -> Any:
        try:
            return original(owner, *args, **kwargs)
        finally:
            memory = memory_of(owner)
            if memory is not None:
                memory.close()

    return stop


def weights_per_rank(model: str, config: Callable[[], Any], dtype: str, ranks: int, log: logging.Logger) -> int:
    """What a pinned start's weights take on each of ``ranks`` ranks, read before they load: the checkpoint's tensor
    bytes where ``model`` is a local folder, else counted from the model's config (``config()``: a mapping, or an
    object with ``to_dict()`` such as Hugging Face's; weights in ``dtype``); 0, with one warning, where neither can be
    read (the reservation then covers the cache alone)."""
    from devmem.planner.models.memory import ModelMemory
    from devmem.planner.models.reading import checkpoint_weights

    try:
        found = checkpoint_weights(model) if os.path.isdir(model) else None
        if found is not None:
            return -(-found[0] // ranks)
        found_config = config()
        mapping = found_config.to_dict() if callable(getattr(found_config, "to_dict", None)) else dict(found_config)
        counted = ModelMemory.from_config(mapping, tp=ranks, dtype=dtype.removeprefix("torch."))
        return counted.weights_bytes_per_rank
    except Exception as exc:  # an architecture devmem cannot count: the reservation covers the cache only
        log.warning("devmem: the weights beside the pinned cache cannot be counted (%s): reserved for the cache", exc)
        return 0


def graphs_after_cache(
    memory: EngineMemory, key: Mapping[str, Any], estimate: Callable[[], int] | None = None
) -> GraphsAfterCache:
    """The declaration of graphs the engine captures after its cache (``memory.plan(..., graphs=...)``): the
    engine's estimate where it makes one (``estimate()``, a throwaway capture run inside ``memory.graphs()``), and
    what capture keeps stored under ``key`` beside the device's total, for the next start."""
    figure = 0
    if estimate is not None:
        with memory.graphs():
            figure = int(estimate())
    return GraphsAfterCache(figure, ProfileStore(), {**key, "device_total": memory.baseline.total})


def grown_since_baseline(memory: EngineMemory) -> int | None:
    """This process's device memory now less at ``memory``'s baseline; ``None`` where the platform attributes no
    memory to processes."""
    if memory.baseline.process is None:
        return None
    own = memory.platform.get_process_memory_usage(memory.device)
    return None if own is None else own - memory.baseline.process


def log_sizing(
    log: logging.Logger, memory: EngineMemory, budget: int, block: int, set_aside: tuple[int, str] = (0, "")
) -> None:
    """devmem's one line on a cache the engine allocates itself: ``budget`` bytes in blocks of ``block``, from what
    (this process's memory or the device-wide fallback), of what request, each charge in it (graphs, what was held
    in the profile window) and what the engine set aside of it (``set_aside``: bytes, and for what);
    :meth:`~devmem.EngineMemory.explain` at debug level; one warning where a pinned start holds more with its cache
    than its reservation."""
    profile, plan, pinned, size = memory.profile_result, memory.kv_plan, memory.pinned_bytes, format_size
    assert profile is not None and plan is not None  # the plan's phase
    charge = plan.breakdown.get("graph_capture", 0)
    source = "process-scoped (this process's own memory)" if profile.process_scoped else "the device-wide fallback"
    asked = f"utilization {memory.utilization}" if pinned is None else "kv_cache_memory_bytes, for the cache"
    graphs = "" if memory.graph_charge is None else f" ({memory.graph_charge.source})"
    log.info(
        f"devmem sized the KV cache from {source}: {size(budget)} = {budget // block} blocks of {size(block)}; "
        f"requested {size(memory.requested if pinned is None else pinned)} of {size(memory.baseline.total)} "
        f"({asked}), consumed {size(profile.total_consumed)}, transient {size(profile.transient_peak_bytes)}, CUDA "
        f"graphs charged {size(charge)}{graphs}"
        + (f"; {size(set_aside[0])} set aside for {set_aside[1]}" if set_aside[0] else "")
        + "".join(f"; the profile window: {held.explain()}" for held in memory.held_charges.values())
    )
    held, reserved = (pinned or 0) + profile.total_consumed + profile.transient_peak_bytes, memory.reservation
    if pinned is not None and reserved is not None and held > reserved.bytes:
        log.warning(
            f"devmem: this pinned start holds {size(held)} with its cache, {size(held - reserved.bytes)} more than "
            f"its reservation of {size(reserved.bytes)} (the cache and its weights): engines beside it may not fit"
        )
    log.debug("devmem: %s", memory.explain())


def _abandoned(memory: EngineMemory, log: logging.Logger) -> None:
    if not memory.closed:
        log.info("devmem: an engine on device %d was dropped without a shutdown: its share given back", memory.device)
        memory.close()


@dataclass
class Sizing:
    """A sizing call's request, checked before the engine runs (:func:`begin_sizing`): the
    :class:`~devmem.EngineMemory` it sizes through (``owned``: created by the call, so closed when it fails), its
    platform and device, the store, the weights charged, whether to cap the allocator at the share, the notes for its
    result and when it began (``time.perf_counter()``)."""

    memory: EngineMemory
    owned: bool
    platform: Platform
    device: int
    store: ProfileStore | None
    weights: int
    limit_allocator_to_share: bool
    began: float
    notes: list[str] = field(default_factory=list)

    @contextlib.contextmanager
    def closed_on_failure(self) -> Iterator[Sizing]:
        """A sizing that fails gives back the share it reserved, so a retry in this process is admitted."""
        try:
            yield self
        except BaseException:
            if self.owned:
                self.memory.close()
            raise

    def size(self, engine: BlackBoxEngine, result: type[SizedRuns], key: Mapping[str, Any], kind: str) -> SizedRuns:
        """:func:`~devmem.engine.black_box_sizing.size_by_runs` of ``engine`` through this request's memory."""
        return size_by_runs(
            self.memory,
            engine,
            result,
            weights=self.weights,
            store=self.store,
            key=key,
            kind=kind,
            limit_to_share=self.limit_allocator_to_share,
            notes=self.notes,
            began=self.began,
        )


def begin_sizing(
    model: Any,
    *,
    utilization: float | None,
    pinned_bytes: int | None,
    device: int | None,
    baseline: MemorySnapshot | None,
    weights_memory: int | None,
    platform: Platform | None,
    store: object,
    reservation: Reservation | bool,
    memory: EngineMemory | None,
    limit_allocator_to_share: bool,
    began: float,
    log: logging.Logger,
) -> Sizing:
    """Check a sizing call's request and give its :class:`Sizing`: ``memory``, the engine's own
    :class:`~devmem.EngineMemory` (it holds the request, the baseline and the reservation: none of them beside it),
    or one created here on the device of ``model`` (a torch module with its ``device``, as transformers' models have)
    at ``utilization`` (default 0.9) or
    ``pinned_bytes``, from ``baseline`` where given, else from a reading now (``log`` warns, and a note says, that
    this process's whole device memory then counts as consumed), reserving ``reservation`` (``True``: the share now;
    on the pinned path the cache beside the weights). ``weights_memory`` defaults to the model's parameters and
    buffers. Raises :class:`~devmem.planner.sizing.SizingError` naming a bad value."""
    if memory is not None:
        utilization, pinned_bytes, device, platform = _request_of(
            memory, utilization, pinned_bytes, device, platform, baseline, reservation
        )
    u = share_request(utilization, pinned_bytes)
    if baseline is not None and not isinstance(baseline, MemorySnapshot):
        raise SizingError(
            f"baseline must be a devmem MemorySnapshot (MemorySnapshot.measure() before the model exists) or None, "
            f"got {shown(baseline)} of type {type(baseline).__name__}"
        )
    if weights_memory is not None:
        if isinstance(weights_memory, str):
            raise SizingError(
                f"weights_memory must be a whole number of bytes (int), got the text {weights_memory!r}: "
                f"write devmem.parse_size({weights_memory!r}) for a size written as text"
            )
        _bytes("weights_memory", weights_memory)
    if device is not None:
        arguments.device_index(device, error=SizingError)
    try:
        resolved_store = resolve_store(store)  # type: ignore[arg-type]
    except ProfileStoreError as exc:
        raise SizingError(str(exc)) from None
    arguments.flag("limit_allocator_to_share", limit_allocator_to_share, error=SizingError)
    if not isinstance(reservation, (bool, Reservation)):
        raise SizingError(f"reservation must be a devmem.Reservation, True or False, got {reservation!r}")
    if platform is not None:
        platform_argument(platform, error=SizingError)
    given = device if device is not None else (baseline.device if baseline is not None else None)
    platform, device = _platform_and_device(model.device, given, platform)
    weights = model_bytes(model) if weights_memory is None else int(weights_memory)
    if memory is not None:
        return Sizing(memory, False, platform, device, resolved_store, weights, limit_allocator_to_share, began)
    try:  # EngineMemory checks the baseline and the reservation against the device
        memory = EngineMemory(
            device,
            utilization=u if u is not None else DEFAULT_UTILIZATION,
            pinned_bytes=pinned_bytes,
            platform=platform,
            check_startup=False,
            allocation_granularity=ALLOCATOR_GRANULARITY if platform.name != "cpu" else 1,
            reserve=reservation,
            reserve_bytes=None if pinned_bytes is None else pinned_bytes + weights,
            baseline=baseline,
            late=baseline is None,
        )
    except EngineMemoryError as exc:
        raise SizingError(str(exc)) from None
    owned = not isinstance(reservation, Reservation)
    sizing = Sizing(memory, owned, platform, device, resolved_store, weights, limit_allocator_to_share, began)
    if baseline is None:
        message = (
            "no baseline taken before the model was given: one was taken now, and "
            + (
                f"this process's device memory now, {format_size(memory.baseline.process)}, counts as consumed"
                if memory.baseline.process is not None
                else "only the weights count as consumed; the CUDA context does not"
            )
            + "; take MemorySnapshot.measure() before creating the model (or create the EngineMemory then)"
        )
        log.warning("devmem: %s", message)
        sizing.notes.append(message)
    return sizing


def share_request(utilization: float | None, pinned_bytes: int | None) -> float | None:
    """The utilization to plan at (default 0.9; ``None`` on the pinned path); raises :class:`SizingError` naming a
    bad value."""
    if utilization is not None and pinned_bytes is not None:
        raise SizingError(
            f"give utilization or pinned_bytes, not both (got utilization={utilization!r}, "
            f"pinned_bytes={pinned_bytes!r})"
        )
    if pinned_bytes is not None:
        _bytes("pinned_bytes", pinned_bytes, positive=True)
        return None
    utilization = 0.9 if utilization is None else utilization
    requested_memory(1, utilization)  # raises SizingError naming a utilization outside (0, 1]
    return utilization


def _request_of(
    memory: object,
    utilization: float | None,
    pinned_bytes: int | None,
    device: int | None,
    platform: Platform | None,
    baseline: object,
    reservation: object,
) -> tuple[float | None, int | None, int, Platform]:
    """The request, device and platform of the engine's own :class:`EngineMemory`, which holds them alone."""
    if not isinstance(memory, EngineMemory):
        raise SizingError(f"memory must be a devmem.EngineMemory or None, got {shown(memory)}")
    doubled = [
        name
        for name, value in (
            ("utilization", utilization),
            ("pinned_bytes", pinned_bytes),
            ("baseline", baseline),
            ("platform", platform),
        )
        if value is not None
    ]
    if reservation is not True:
        doubled.append("reservation")
    if device is not None and device != memory.device:
        doubled.append("device")
    if doubled:
        raise SizingError(
            f"memory holds the request, the baseline and the reservation: give {', '.join(doubled)} to the "
            "EngineMemory, not beside it"
        )
    if memory.pinned_bytes is not None:
        return None, memory.pinned_bytes, memory.device, memory.platform
    return memory.utilization, None, memory.device, memory.platform


def _platform_and_device(where: Any, device: int | None, platform: Platform | None) -> tuple[Platform, int]:
    """The platform and device index of ``where`` (a ``torch.device``), checked against ``platform``."""
    if platform is None:
        platform = current_platform()
        if where.type == "cpu" and platform.name != "cpu":
            from devmem.cpu import CpuPlatform

            platform = CpuPlatform()
    if (where.type == "cpu") != (platform.name == "cpu"):
        raise ValueError(
            f"the model is on {where} but devmem's platform is {platform.name!r}: the KV cache goes "
            "where the model is; move the model or give the platform of its device"
        )
    if device is None:
        device = where.index if where.index is not None else 0
    check = getattr(platform, "check_device", None)
    if check is not None:
        try:
            check(device)
        except DevmemError as exc:
            raise SizingError(f"device={device!r}: {exc}") from None
    return platform, device


def unwrapped(model: Any) -> Any:
    """The model itself where ``model`` is wrapped by ``torch.compile`` (whose engine methods it reaches through)."""
    inner = getattr(model, "_orig_mod", None)
    return inner if inner is not None and type(model).__name__ == "OptimizedModule" else model


def check_one_device(model: Any, engine: str) -> None:
    """Refuse, naming why, a model whose weights are not loaded (the meta device) or are on several devices
    (``engine`` puts the KV cache on ``model.device``)."""
    devices = sorted({str(p.device) for p in model.parameters()} | {str(b.device) for b in model.buffers()})
    if "meta" in devices:
        raise SizingError(
            f"the model's weights are on the meta device (devices {devices}): they are not loaded, so nothing "
            "can run or be measured; load the weights (from_pretrained, or build the model outside "
            "torch.device('meta')) before sizing"
        )
    if len(devices) > 1:
        raise SizingError(
            f"the model's parameters and buffers are on several devices ({', '.join(devices)}): devmem sizes the "
            f"KV cache of one device, where {engine} puts it (model.device); put the whole model on one device"
        )


def storage_bytes(roots: list[Any], device: Any, seen: set[int], enter: str = "") -> tuple[int, int]:
    """Bytes and count of the distinct ``device`` storages reachable from ``roots`` through lists, tuples, sets,
    dicts and the objects of the package ``enter`` (``"transformers."``; modules are not entered); ``seen`` holds
    storages already counted."""
    import torch

    total = count = 0
    visited: set[int] = set()
    stack = list(roots)
    while stack:
        obj = stack.pop()
        if id(obj) in visited:
            continue
        visited.add(id(obj))
        if isinstance(obj, torch.Tensor):
            if obj.device != device:
                continue
            storage = obj.untyped_storage()
            if storage.data_ptr() in seen:
                continue
            seen.add(storage.data_ptr())
            total += storage.nbytes()
            count += 1
        elif isinstance(obj, dict):
            stack.extend(obj.values())
        elif isinstance(obj, (list, tuple, set, frozenset)):
            stack.extend(obj)
        elif (
            enter
            and not isinstance(obj, torch.nn.Module)
            and type(obj).__module__.startswith(enter)
            and hasattr(obj, "__dict__")
        ):
            stack.extend(vars(obj).values())
    return total, count


def model_bytes(model: Any) -> int:
    """Bytes of the model's parameters and buffers on its device (each storage once)."""
    return storage_bytes([list(model.parameters()), list(model.buffers())], model.device, set())[0]


def copied(config: Any, **values: Any) -> Any:
    """A deep copy of ``config`` with ``values`` set (the caller's object is never changed)."""
    out = copy.deepcopy(config)
    for name, value in values.items():
        setattr(out, name, value)
    return out


@contextlib.contextmanager
def forward_tokens(model: Any) -> Iterator[list[int]]:
    """The query tokens of each forward of ``model`` (a torch module) meanwhile: its ``input_ids``' last dimension."""
    tokens: list[int] = []

    def count(module: Any, args: Any, kwargs: dict[str, Any], output: Any) -> None:
        ids = kwargs.get("input_ids", args[0] if args else None)
        if ids is not None:
            tokens.append(int(ids.shape[-1]))

    hook = model.register_forward_hook(count, with_kwargs=True)
    try:
        yield tokens
    finally:
        hook.remove()


def after_current_stream(owner: Any, method: str, stream: Any) -> None:
    """Make ``owner.method`` run with ``stream`` ordered after the current stream, and the current stream after it:
    for an engine that writes a step's inputs on the current stream and computes on ``stream`` without a wait (on a
    busy device the step could read inputs not yet written)."""
    import torch

    step = getattr(owner, method)

    def ordered(*args: Any, **kwargs: Any) -> Any:
        current = torch.get_device_module(stream.device).current_stream(stream.device)
        stream.wait_stream(current)
        result = step(*args, **kwargs)
        current.wait_stream(stream)
        return result

    setattr(owner, method, ordered)


@contextlib.contextmanager
def logged(logger: str, phrase: str) -> Iterator[list[str]]:
    """The first lines of the warnings ``logger`` writes with ``phrase`` in them meanwhile (an engine that catches
    its own errors, out of memory included, and logs them)."""
    found: list[str] = []

    class Collect(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            message = record.getMessage()
            if phrase in message:
                found.append(message.splitlines()[0])

    handler, target = Collect(logging.WARNING), logging.getLogger(logger)
    target.addHandler(handler)
    try:
        yield found
    finally:
        target.removeHandler(handler)


__all__ = [
    "OFF",
    "ON",
    "PATCHED",
    "Sizing",
    "Starts",
    "Switch",
    "accepts",
    "after_current_stream",
    "allocating",
    "around",
    "begin_sizing",
    "check_one_device",
    "closing",
    "copied",
    "current",
    "forward_tokens",
    "graphs_after_cache",
    "grown_since_baseline",
    "guarded",
    "installed_version",
    "log_sizing",
    "logged",
    "memory_of",
    "model_bytes",
    "names_used",
    "parameter",
    "parameters",
    "patch_class",
    "patch_in",
    "release",
    "shape_mismatches",
    "share_request",
    "source",
    "storage_bytes",
    "unwrapped",
    "version_note",
    "weights_per_rank",
    "when_imported",
    "wrap",
]
