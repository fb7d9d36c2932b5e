"""A plan's inputs, checked once: :class:`CheckedPlanInputs`, the one frozen set of them the planner sizes from.

:meth:`CheckedPlanInputs.checked` checks every keyword argument of :func:`devmem.planner.sizing.plan_kv_cache` (each
once, by the validator of its kind, :mod:`devmem.arguments`, a :class:`~devmem.errors.SizingError` naming it) and how
they go together (which path they choose, what that path needs), and gives them in their checked form (Python ints,
exact ``Fraction`` shares). The sizing arithmetic trusts what it is given. :class:`devmem.EngineMemory` builds one
directly, from the arguments its door checked and the figures its windows measured.
"""

from __future__ import annotations

from dataclasses import dataclass
from fractions import Fraction

from devmem import arguments
from devmem._text import shown
from devmem.errors import SizingError
from devmem.planner.rounding import ALLOCATORS, LARGE_BUFFER, ROUND_LARGE
from devmem.types import GiB

#: Share of the device an engine asks for when it names none.
DEFAULT_UTILIZATION = 0.9
#: The growable path keeps at least this much free beside the transient peak ...
MARGIN_FLOOR_BYTES = GiB
#: ... or this share of the transient peak, whichever is larger.
MARGIN_FRACTION = 0.75
#: A margin of more than this many transient peaks is a mistake, not a setting.
MAX_MARGIN_FRACTION = 100
#: What a plan counts as one of the allocator's own units when it models the allocator (the granularity a caller
#: of an earlier release passed beside it: nothing, 2 MiB or expandable segments' 20 MiB).
ALLOCATOR_UNITS = (1, ROUND_LARGE, LARGE_BUFFER)


def byte_count(name: str, value: object, *, positive: bool = False) -> int:
    return arguments.byte_count(name, value, positive=positive, error=SizingError)


def share(value: object) -> Fraction:
    return arguments.utilization(value, error=SizingError)


def layers(num_layers: object) -> int:
    return arguments.count("num_layers", num_layers, error=SizingError)


def margin_share(value: object) -> Fraction:
    fraction = arguments.real("margin_fraction", value, error=SizingError)
    if not 0 <= fraction <= MAX_MARGIN_FRACTION:
        raise SizingError(
            f"margin_fraction must be in [0, {MAX_MARGIN_FRACTION}] (a share of the transient peak), got {shown(value)}"
        )
    return fraction


def splits(block: int, tensors: int) -> None:
    """Refuse ``tensors`` (checked) that a block of ``block`` bytes does not split into equally."""
    if block % tensors:
        raise SizingError(
            f"allocations={tensors}: a block of {block} bytes (page_size_bytes x num_layers) does not split into "
            f"{tensors} equal tensors; give the number of tensors the cache is allocated in (1, the layers, or "
            "twice the layers for separate keys and values)"
        )


@dataclass(frozen=True)
class CheckedPlanInputs:
    """Every input of a KV-cache plan in its checked form (the keyword arguments of
    :func:`~devmem.planner.sizing.plan_kv_cache`, which say what each is). :meth:`checked` makes one from what a
    caller gave; :attr:`path` is the path they choose."""

    page_size_bytes: int
    num_layers: int
    total: int | None = None
    utilization: Fraction = Fraction(str(DEFAULT_UTILIZATION))
    pinned_bytes: int | None = None
    init_free_memory: int | None = None
    free_memory: int | None = None
    committed_bytes: int = 0
    consumed: int | None = None
    weights: int = 0
    transient_peak_bytes: int = 0
    non_torch: int = 0
    graph_capture: int = 0
    other_processes: int | None = None
    released_cache: int = 0
    margin_floor_bytes: int = MARGIN_FLOOR_BYTES
    margin_fraction: Fraction = Fraction(str(MARGIN_FRACTION))
    allocation_granularity: int = 1
    allocations: int | None = None
    allocator: str | None = None

    @property
    def path(self) -> str:
        """``"pinned"``, ``"growable"`` or ``"utilization"``: the path these inputs choose."""
        if self.pinned_bytes is not None:
            return "pinned"
        return "growable" if self.init_free_memory is not None else "utilization"

    @classmethod
    def checked(
        cls,
        *,
        page_size_bytes: object,
        num_layers: object,
        total: object = None,
        utilization: object = DEFAULT_UTILIZATION,
        pinned_bytes: object = None,
        init_free_memory: object = None,
        free_memory: object = None,
        committed_bytes: object = 0,
        consumed: object = None,
        weights: object = 0,
        transient_peak_bytes: object = 0,
        non_torch: object = 0,
        graph_capture: object = 0,
        other_processes: object = None,
        released_cache: object = 0,
        margin_floor_bytes: object = MARGIN_FLOOR_BYTES,
        margin_fraction: object = MARGIN_FRACTION,
        allocation_granularity: object = 1,
        allocations: object = None,
        allocator: object = None,
    ) -> CheckedPlanInputs:
        """The inputs given, each checked once (a bad one is refused even where the path it chooses does not use
        it: garbage is a caller's bug either way), and the rules of the path they choose; a
        :class:`~devmem.errors.SizingError` naming what is wrong otherwise."""
        growable = init_free_memory is not None or free_memory is not None
        checked_total = None if total is None else byte_count("total", total, positive=True)
        fraction = share(utilization)
        checked_consumed = None if consumed is None else byte_count("consumed", consumed)
        graphs = byte_count("graph_capture", graph_capture)
        margin_floor = byte_count("margin_floor_bytes", margin_floor_bytes)
        margin = margin_share(margin_fraction)
        committed = byte_count("committed_bytes", committed_bytes)
        if committed and not growable:
            raise SizingError(
                f"committed_bytes={committed_bytes} applies to the growable path (what the cache already "
                "holds between the two free-memory readings): give init_free_memory and free_memory with it"
            )
        if pinned_bytes is not None and growable:
            raise SizingError(
                "pinned_bytes selects the pinned path and init_free_memory/free_memory the growable "
                "path; give one of them"
            )
        if pinned_bytes is None and checked_total is None:
            raise SizingError(
                f"the {'growable' if growable else 'utilization'} path needs total (the device's total memory in bytes)"
            )
        if growable and (init_free_memory is None or free_memory is None):
            raise SizingError("the growable path needs both init_free_memory and free_memory")
        if growable and graphs:
            raise SizingError(
                "graph_capture applies to the utilization path; on the growable path the free-memory "
                "readings are taken after graph capture and already count it"
            )
        count = layers(num_layers)
        block = byte_count("page_size_bytes", page_size_bytes, positive=True) * count
        granularity = byte_count("allocation_granularity", allocation_granularity, positive=True)
        if allocator is not None and allocator not in ALLOCATORS:
            raise SizingError(
                f"allocator must be one of {', '.join(map(repr, ALLOCATORS))} (torch's caching allocator, or with "
                f"expandable segments) or None (each allocation rounded up to allocation_granularity), got "
                f"{shown(allocator)}"
            )
        if allocator is not None and granularity not in ALLOCATOR_UNITS:
            raise SizingError(
                f"allocation_granularity={granularity} with allocator={allocator!r}: the allocator's own rounding "
                "is charged; give allocator=None to round each allocation up to a granularity of your own"
            )
        tensors = None if allocations is None else arguments.count("allocations", allocations, error=SizingError)
        if tensors is not None:
            splits(block, tensors)
        weights_ = byte_count("weights", weights)
        transient = byte_count("transient_peak_bytes", transient_peak_bytes)
        outside_torch = byte_count("non_torch", non_torch)
        others = None if other_processes is None else byte_count("other_processes", other_processes)
        released = byte_count("released_cache", released_cache)
        pinned = None if pinned_bytes is None else byte_count("pinned_bytes", pinned_bytes, positive=True)
        init_free = None if init_free_memory is None else byte_count("init_free_memory", init_free_memory)
        free = None if free_memory is None else byte_count("free_memory", free_memory)
        return cls(
            page_size_bytes=block // count,
            num_layers=count,
            total=checked_total,
            utilization=fraction,
            pinned_bytes=pinned,
            init_free_memory=init_free,
            free_memory=free,
            committed_bytes=committed,
            consumed=checked_consumed,
            weights=weights_,
            transient_peak_bytes=transient,
            non_torch=outside_torch,
            graph_capture=graphs,
            other_processes=others,
            released_cache=released,
            margin_floor_bytes=margin_floor,
            margin_fraction=margin,
            allocation_granularity=granularity,
            allocations=tensors,
            allocator=allocator,
        )


__all__ = [
    "ALLOCATOR_UNITS",
    "DEFAULT_UTILIZATION",
    "MARGIN_FLOOR_BYTES",
    "MARGIN_FRACTION",
    "MAX_MARGIN_FRACTION",
    "CheckedPlanInputs",
    "byte_count",
    "layers",
    "margin_share",
    "share",
    "splits",
]
