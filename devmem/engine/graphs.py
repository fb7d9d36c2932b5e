"""Graphs an engine captures after its KV cache exists (vLLM's V2 model runner, SGLang): what the plan charges for
them before the cache is sized, and the check of what capture kept once it ran (docs/sizing.md, "Graphs captured
after the cache").

The plan charges the largest of what is known: the figure a previous start measured and kept under the engine's
key (:class:`~devmem.engine.profile_store.ProfileStore`), what a throwaway capture in the graph window before the
plan reached, and the engine's own estimate. Where none of them measured anything (a first start without an
estimate) it charges the first-start bound: the profile window's transient peak. A graph pool holds the
activations of the forward passes it captured, and an engine captures no pass larger than the one it profiled,
so the pool holds no more than that pass's transient.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from devmem._text import shown
from devmem.engine import _door
from devmem.engine.profile_store import ProfileStore, StoredProfile, canonical, whole_figure
from devmem.engine.profiling import ProfileResult
from devmem.errors import ProfileStoreError
from devmem.units import format_size

log = logging.getLogger("devmem.engine")

#: The kind under which the bytes a capture after the cache kept are stored (:class:`ProfileStore`).
GRAPHS_KIND = "graphs-after-cache"

#: Where a charge for graphs captured after the cache came from, the most trusted first: a tie goes to the first.
STORED, WINDOW, ESTIMATE, FIRST_START_BOUND, PINNED = (
    "stored",
    "capture window",
    "estimate",
    "first-start bound",
    "pinned",
)


@dataclass(frozen=True)
class GraphsAfterCache:
    """The engine captures its device graphs after the KV cache exists: what :meth:`EngineMemory.plan
    <devmem.EngineMemory.plan>` is told (``plan(..., graphs=GraphsAfterCache(...))``).

    - ``estimate``: the engine's own estimate of what its graphs keep, in bytes (0: none);
    - ``store`` and ``key`` (together or not at all): where the bytes a capture kept are stored
      (:meth:`EngineMemory.graphs_after_cache <devmem.EngineMemory.graphs_after_cache>`), so that the next start
      with the same key plans for them; ``key`` names everything that changes them (model, engine config and
      graph sizes, device, versions).
    """

    estimate: int = 0
    store: ProfileStore | None = None
    key: Mapping[str, Any] | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "estimate", _door.byte_count("GraphsAfterCache.estimate", self.estimate))
        if (self.store is None) != (self.key is None):
            raise _door.refused(
                "GraphsAfterCache.store",
                self.store,
                f"GraphsAfterCache.store and .key go together (a ProfileStore and a mapping) or not at all, got "
                f"store={shown(self.store)} and key={shown(self.key)}",
            )
        _door.instance("GraphsAfterCache.store", self.store, ProfileStore, "a ProfileStore", optional=True)
        if self.key is not None:
            try:
                key = json.loads(canonical(self.key))  # the key as the store compares it, kept from changes
            except ProfileStoreError as exc:
                raise _door.refused("GraphsAfterCache.key", self.key, f"GraphsAfterCache.key: {exc}") from None
            object.__setattr__(self, "key", key)

    def stored(self, total: int) -> StoredProfile | None:
        """The bytes a previous start's capture kept under the key (checked to be bytes a device of ``total``
        holds; a broken figure is set aside with one warning), or ``None``."""
        if self.store is None or self.key is None:
            return None
        return self.store.load(GRAPHS_KIND, self.key, lambda figures: _kept_problem(figures, total))

    def keep(self, kept: int, created: float) -> None:
        """Store ``kept``, the bytes this start's capture kept, under the key (where there is a store)."""
        if self.store is not None and self.key is not None:
            self.store.save(GRAPHS_KIND, self.key, {"kept_bytes": kept}, created)


def _kept_problem(figures: dict[str, Any], total: int) -> str | None:
    if set(figures) != {"kept_bytes"}:
        return f"its figures are {sorted(figures)}, not ['kept_bytes']"
    problem = whole_figure("kept_bytes", figures["kept_bytes"], high=total)
    return None if problem is None else f"{problem} (bytes of a device of {total} bytes)"


@dataclass(frozen=True)
class GraphCharge:
    """What the plan charged for graphs captured after the cache (``bytes``, the plan's ``graph_capture``) and
    where it came from: ``source`` one of ``"stored"``, ``"capture window"``, ``"estimate"``,
    ``"first-start bound"``, ``"pinned"`` (a pinned cache's share is the cache alone: nothing charged);
    ``detail`` says it for people."""

    bytes: int
    source: str
    detail: str

    def as_dict(self) -> dict[str, object]:
        return {"charged_bytes": self.bytes, "source": self.source, "detail": self.detail}


def graph_charge(
    graphs: GraphsAfterCache, total: int, window: int | None, transient: int, *, pinned: bool = False
) -> GraphCharge:
    """The charge for ``graphs`` on a device of ``total`` bytes: the largest of the stored figure (0 too: a capture
    after the cache measured it), what the throwaway capture window reached (``window``; ``None`` where none ran,
    and 0, where it captured nothing, measured nothing) and the engine's estimate (0: none); the profile window's
    ``transient`` where none of them measured anything (module docstring)."""
    if pinned:
        return GraphCharge(0, PINNED, "not charged: a pinned cache's share is the cache alone")
    known: list[tuple[int, str, str]] = []
    stored = graphs.stored(total)
    if stored is not None:
        known.append((stored.figures["kept_bytes"], STORED, f"what a previous start's capture kept ({stored.path})"))
    if window:  # a throwaway window that reached nothing captured nothing (vLLM V2's graph profiling returns 0)
        known.append((window, WINDOW, "all the throwaway capture in the graph window reached"))
    if graphs.estimate:
        known.append((graphs.estimate, ESTIMATE, "the engine's own estimate"))
    if not known:
        detail = "the profile window's transient peak: no capture measured yet and no estimate (a first start)"
        return GraphCharge(transient, FIRST_START_BOUND, detail)
    figure, source, detail = max(known, key=lambda k: k[0])  # a tie goes to the first: the measured figure
    others = [f"{s} {format_size(b)}" for b, s, _ in known if s != source]
    return GraphCharge(figure, source, detail + (f"; the largest of it and {', '.join(others)}" if others else ""))


@dataclass(frozen=True)
class GraphCheck:
    """What capture after the cache kept (``kept_bytes``: this process's growth over the window where the
    platform attributes memory to processes, else the growth of torch's reserved memory; ``measured_by`` says
    which), against what the plan charged (``charged_bytes``, from ``source``): ``fits`` where it is no more."""

    kept_bytes: int
    charged_bytes: int
    source: str
    measured_by: str
    fits: bool

    @classmethod
    def of(cls, window: ProfileResult, charge: GraphCharge) -> GraphCheck:
        before, after = window.before_profile, window.after_profile
        assert before is not None and after is not None  # a window that ran to its end
        if before.process is not None and after.process is not None:
            kept, by = after.process - before.process, "this process's memory"
        else:
            kept, by = after.torch_reserved - before.torch_reserved, "torch's reserved memory"
        kept = max(0, kept)
        return cls(kept, charge.bytes, charge.source, by, charge.source == PINNED or kept <= charge.bytes)

    def explain(self) -> str:
        said = (
            f"graph capture after the cache kept {format_size(self.kept_bytes)} ({self.measured_by}) against the "
            f"{format_size(self.charged_bytes)} charged ({self.source})"
        )
        if self.source == PINNED:
            return f"{said}: beside the pinned cache"
        if self.fits:
            return f"{said}: fits"
        return f"{said}: over by {format_size(self.kept_bytes - self.charged_bytes)}"

    def as_dict(self) -> dict[str, object]:
        return dict(vars(self))


__all__ = ["GRAPHS_KIND", "GraphCharge", "GraphCheck", "GraphsAfterCache", "graph_charge"]
