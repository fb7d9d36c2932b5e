"""The entry point that sizes a model's engine in one call (transformers' ``size_continuous_batching``):
:func:`begin_sizing` checks the call's request before anything runs and gives the :class:`Sizing` that closes the
:class:`~devmem.EngineMemory` it created on any failure; :func:`share_request` checks the share asked for."""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

from devmem import arguments
from devmem._text import shown
from devmem.engine.black_box_sizing import BlackBoxEngine, SizedRuns, size_by_runs
from devmem.engine.kvcache import ALLOCATOR_GRANULARITY
from devmem.engine.memory import EngineMemory, EngineMemoryError
from devmem.engine.profile_key import environment_key
from devmem.engine.profile_store import ProfileStore, ProfileStoreError, resolve_store
from devmem.engine.profiling import MemorySnapshot
from devmem.engine.reservations import Reservation
from devmem.integrations.kit.model import model_bytes
from devmem.planner.sizing import DEFAULT_UTILIZATION, SizingError, _bytes, requested_memory
from devmem.platform import Platform
from devmem.resolution.plugins import current_platform, platform_argument
from devmem.types import DevmemError
from devmem.units import format_size


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

    def key(self, where: Any, **versions: str | None) -> dict[str, Any]:
        """The part of a stored profile's key this request decides: where the figures are measured
        (:func:`~devmem.engine.profile_key.environment_key`, ``where`` the model's ``torch.device``, ``versions`` the
        engine's libraries'), the weights charged and whether the engine gave a baseline."""
        total, given = self.memory.baseline.total, not self.memory.late
        return {
            **environment_key(self.platform, self.device, total, where, **versions),
            "weights": self.weights,
            "baseline_given": given,
        }

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
