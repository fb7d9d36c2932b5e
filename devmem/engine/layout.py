"""How the KV cache will be allocated (:class:`KvLayout`), so that the plan charges the allocator's rounding it will
really pay."""

from __future__ import annotations

from dataclasses import dataclass

from devmem._text import shown
from devmem.engine import _door


@dataclass(frozen=True)
class KvLayout:
    """How the KV cache will be allocated, so that the plan charges the allocator's rounding it will really pay.

    - ``KvLayout.one_allocation()`` (the default): :meth:`EngineMemory.allocate`'s one allocation with a view per
      layer, rounded up once;
    - ``KvLayout.per_layer(tensors_per_layer=1)``: the engine allocates its own tensors, ``tensors_per_layer`` per
      layer (2 for keys and values apart), each rounded up to the allocator's granularity;
    - ``KvLayout.tensors(count)``: the engine allocates ``count`` equal tensors (one per group of layers, say),
      each rounded up.

    Where the engine allocates, every tensor is charged the most the allocator can add to it, so the plan is
    never over whatever the allocator does; ``EngineMemory.explain()`` says which layout was assumed. Its fields
    are checked when it is made (an :class:`~devmem.errors.EngineArgumentError` naming the field).
    """

    by_engine: bool
    count: int | None = None
    per_layer_count: int = 1

    def __post_init__(self) -> None:
        _door.flag("KvLayout.by_engine", self.by_engine)
        if self.count is not None:
            if not self.by_engine:
                raise _door.refused(
                    "KvLayout.count",
                    self.count,
                    f"KvLayout.count is the number of tensors the engine allocates, got {shown(self.count)} for "
                    "devmem's one allocation: use KvLayout.tensors(count)",
                )
            object.__setattr__(self, "count", _door.count("KvLayout.count", self.count))
        object.__setattr__(self, "per_layer_count", _door.count("KvLayout.per_layer_count", self.per_layer_count))

    @classmethod
    def one_allocation(cls) -> KvLayout:
        return cls(False)

    @classmethod
    def per_layer(cls, tensors_per_layer: int = 1) -> KvLayout:
        return cls(True, None, tensors_per_layer)

    @classmethod
    def tensors(cls, count: int) -> KvLayout:
        return cls(True, count)

    def allocations(self, num_layers: int) -> int:
        """How many separately rounded allocations the cache is made of, for ``num_layers`` layers."""
        if not self.by_engine:
            return 1
        return self.count if self.count is not None else self.per_layer_count * num_layers


__all__ = ["KvLayout"]
