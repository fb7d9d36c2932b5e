"""The starts of one engine in a process: :class:`Starts` ties each :class:`~devmem.EngineMemory` to its owner, so an
abandoned start gives its share back; :func:`memory_of` finds it on the owner; :func:`allocating` and
:func:`closing` are the steps around the engine's own cache allocation and its shutdown."""

from __future__ import annotations

import contextlib
import logging
import weakref
from collections.abc import Callable
from typing import Any

from devmem._forksafe import ForkSafeLock
from devmem.engine import _heap
from devmem.engine.memory import EngineMemory


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


def _abandoned(memory: EngineMemory, log: logging.Logger) -> None:
    if not memory.closed:
        log.info("devmem: an engine on device %d was dropped without a shutdown: its share given back", memory.device)
        memory.close()
