"""The CUDA runtime's device indices, mapped to NVML handles.

CUDA numbers devices after ``CUDA_VISIBLE_DEVICES`` and ``CUDA_DEVICE_ORDER``; NVML numbers every GPU
in PCI bus order and ignores both. This module enumerates NVML's devices (with their UUIDs, PCI bus
ids and MIG instances), orders them as CUDA would, applies ``CUDA_VISIBLE_DEVICES`` and returns one
:class:`VisibleDevice` per CUDA index. Devices are matched by UUID and PCI bus id, never by assuming
that NVML's index equals CUDA's.

Rules, as the CUDA runtime applies them:

- unset: every device; set but empty: none.
- entries are separated by commas: an index (into the CUDA order), a ``GPU-`` UUID or a unique prefix
  of one, or a ``MIG-`` UUID (or prefix). The first entry that is invalid (unknown, ambiguous prefix,
  out of range, repeated, negative) ends the list; the entries before it stay visible.
- ``CUDA_DEVICE_ORDER=PCI_BUS_ID`` orders by PCI bus id. The default ``FASTEST_FIRST`` is the CUDA driver's
  own order where this process has already loaded the driver (asked through ``cuDeviceGetPCIBusId``, no
  context created). Elsewhere it is approximated as: higher compute capability first, PCI bus id among equals;
  CUDA's own heuristic also weighs SM count and clocks, so on a machine whose GPUs differ devmem warns and
  recommends ``CUDA_DEVICE_ORDER=PCI_BUS_ID``. On the usual machine (identical GPUs) both give PCI order.
- a GPU with MIG enabled is seen as its MIG instances (in NVML's MIG index order), both when the list is
  unset and when the GPU is named by index or ``GPU-`` UUID.

Public names: ``VisibleDevice``, ``NvmlGpu``, ``enumerate_gpus(session)``, ``cuda_order(gpus, environ)``,
``select_visible(gpus, environ, driver_bus_ids)`` and ``visible_devices(session, environ, driver_bus_ids)``
(a :class:`devmem.sdk.visible.VisibleDevices`), ``driver_bus_ids(files)``, ``DeviceTable(session, environ)``
(the selection, built once on first use, thread-safe).
"""

from __future__ import annotations

import ctypes
import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from devmem.sdk import REAL_FILES, Files, ForkSafeLock, VisibleDevices, device_index, dropped, env_choice, pick
from devmem_nvidia.nvml_access import (
    NvmlCallError,
    NvmlSession,
    device_pci_bus_id,
    device_uuid,
    normalise_bus_id,
)
from devmem_nvidia.pidns import cuda_in_use

log = logging.getLogger("devmem.nvidia")


@dataclass(frozen=True)
class VisibleDevice:
    """One CUDA device: its NVML handle, and for a MIG instance its parent GPU's handle."""

    handle: Any
    uuid: str
    pci_bus_id: str
    mig: bool = False
    parent_handle: Any = None
    parent_uuid: str | None = None


@dataclass(frozen=True)
class NvmlGpu:
    """A physical GPU as NVML enumerates it, with its MIG instances when MIG is enabled."""

    handle: Any
    uuid: str
    pci_bus_id: str
    compute_capability: tuple[int, int] = (0, 0)
    instances: tuple[VisibleDevice, ...] = field(default_factory=tuple)

    def as_cuda_devices(self) -> list[VisibleDevice]:
        if self.instances:
            return list(self.instances)
        return [VisibleDevice(self.handle, self.uuid, self.pci_bus_id)]


def mig_instances(session: NvmlSession, gpu: Any, uuid: str, bus_id: str) -> tuple[VisibleDevice, ...]:
    """The MIG instances of ``gpu`` (whose UUID and PCI bus id they carry), or ``()`` where MIG is off."""
    try:
        mode = session.call("nvmlDeviceGetMigMode", gpu)
    except NvmlCallError:
        return ()
    if not mode or int(mode[0]) != 1:
        return ()
    out = []
    for i in range(int(session.call("nvmlDeviceGetMaxMigDeviceCount", gpu))):
        try:
            handle = session.call("nvmlDeviceGetMigDeviceHandleByIndex", gpu, i)
        except NvmlCallError as exc:
            if exc.error == "NotFound":  # an empty slot
                continue
            raise
        out.append(VisibleDevice(handle, device_uuid(session, handle), bus_id, True, gpu, uuid))
    return tuple(out)


def enumerate_gpus(session: NvmlSession) -> list[NvmlGpu]:
    """Every GPU NVML sees, in NVML's order. Raises ``NvmlCallError``/``NvmlUnavailable``."""
    gpus = []
    for index in range(session.device_count()):
        handle = session.handle_by_index(index)
        uuid = device_uuid(session, handle)
        bus_id = device_pci_bus_id(session, handle)
        try:
            major, minor = session.call("nvmlDeviceGetCudaComputeCapability", handle)
            cc = (int(major), int(minor))
        except NvmlCallError:
            cc = (0, 0)
        gpus.append(NvmlGpu(handle, uuid, bus_id, cc, mig_instances(session, handle, uuid, bus_id)))
    return gpus


def cuda_order(
    gpus: list[NvmlGpu], environ: Mapping[str, str], driver_bus_ids: list[str] | None = None
) -> list[NvmlGpu]:
    """``gpus`` in the order the CUDA runtime numbers them (see the module docstring).

    ``driver_bus_ids``: the CUDA driver's own ordinal order (PCI bus ids), where this process has the driver
    loaded; it settles ``FASTEST_FIRST`` when it names every GPU. Otherwise ``FASTEST_FIRST`` is guessed from
    compute capability, with a warning on a machine whose GPUs differ.
    """
    order = env_choice("CUDA_DEVICE_ORDER", ("FASTEST_FIRST", "PCI_BUS_ID"), "FASTEST_FIRST", environ)
    by_bus = sorted(gpus, key=lambda g: g.pci_bus_id)
    if order == "PCI_BUS_ID":
        return by_bus
    rank = {normalise_bus_id(b): i for i, b in enumerate(driver_bus_ids or ())}
    if gpus and all(g.pci_bus_id in rank for g in gpus):
        return sorted(gpus, key=lambda g: rank[g.pci_bus_id])
    if len({g.compute_capability for g in gpus}) > 1:
        log.warning(
            "devmem: CUDA_DEVICE_ORDER=FASTEST_FIRST on a machine with different GPUs and no CUDA driver in "
            "this process to ask: devmem guesses CUDA's order from compute capability, which may map an index "
            "to the wrong GPU; set CUDA_DEVICE_ORDER=PCI_BUS_ID so indices are certain"
        )
    return sorted(by_bus, key=lambda g: g.compute_capability, reverse=True)


def _match_uuid(token: str, devices: list[VisibleDevice]) -> list[VisibleDevice] | None:
    token = token.upper()
    hits = [d for d in devices if d.uuid.upper().startswith(token)]
    return hits if len(hits) == 1 else None


def select_visible(
    gpus: list[NvmlGpu], environ: Mapping[str, str], driver_bus_ids: list[str] | None = None
) -> VisibleDevices[VisibleDevice]:
    """Apply ``CUDA_DEVICE_ORDER`` and ``CUDA_VISIBLE_DEVICES`` to NVML's ``gpus``."""
    ordered = cuda_order(gpus, environ, driver_bus_ids)
    order = f"CUDA_DEVICE_ORDER={environ.get('CUDA_DEVICE_ORDER', 'FASTEST_FIRST')}"
    raw = environ.get("CUDA_VISIBLE_DEVICES")
    if raw is None:
        return VisibleDevices(tuple(d for g in ordered for d in g.as_cuda_devices()), order)
    whole = [VisibleDevice(g.handle, g.uuid, g.pci_bus_id) for g in ordered]
    instances = [d for g in ordered for d in g.instances]

    def match(token: str) -> list[VisibleDevice] | None:
        position = device_index(token)
        if position is not None and position < len(ordered):
            return ordered[position].as_cuda_devices()
        if token.upper().startswith("GPU-") and len(token) > 4:
            hit = _match_uuid(token, whole)
            return next(g.as_cuda_devices() for g in ordered if g.uuid == hit[0].uuid) if hit else None
        if token.upper().startswith("MIG-") and len(token) > 4:
            return _match_uuid(token, instances)
        return None

    chosen, stop = pick([t.strip() for t in raw.split(",")], match, repeats_end=True)
    conflicts: tuple[str, ...] = ()
    if stop is not None and stop.token:
        log.debug("devmem: CUDA_VISIBLE_DEVICES entry %r is invalid; the list ends before it", stop.token)
        why = "repeats a device" if stop.repeat else f"names none of the {len(ordered)} GPU(s) here (or more than one)"
        conflicts = (dropped("CUDA_VISIBLE_DEVICES", raw, stop.token, why, len(chosen)),)
    return VisibleDevices(tuple(chosen), f"{order} then CUDA_VISIBLE_DEVICES={raw}", conflicts)


def visible_devices(
    session: NvmlSession, environ: Mapping[str, str], driver_bus_ids: list[str] | None = None
) -> VisibleDevices[VisibleDevice]:
    """The CUDA runtime's devices for ``environ``, each with its NVML handle."""
    return select_visible(enumerate_gpus(session), environ, driver_bus_ids)


def driver_bus_ids(files: Files = REAL_FILES, library: str = "libcuda.so.1") -> list[str] | None:
    """The CUDA driver's devices in its ordinal order (PCI bus ids), only where this process already uses CUDA
    (:func:`~devmem_nvidia.pidns.cuda_in_use`) and no ``CUDA_VISIBLE_DEVICES`` hides any (``None`` otherwise);
    never initialises CUDA in a process that has not."""
    try:
        if not cuda_in_use(files):
            return None
        cuda = ctypes.CDLL(library)
        count = ctypes.c_int()
        if cuda.cuInit(0) != 0 or cuda.cuDeviceGetCount(ctypes.byref(count)) != 0:
            return None
        out = []
        for ordinal in range(count.value):
            dev, buf = ctypes.c_int(), ctypes.create_string_buffer(32)
            if cuda.cuDeviceGet(ctypes.byref(dev), ordinal) != 0 or cuda.cuDeviceGetPCIBusId(buf, 32, dev) != 0:
                return None
            out.append(buf.value.decode())
        return out
    except (OSError, AttributeError) as exc:
        log.debug("devmem: cannot ask the CUDA driver for its device order: %s", exc)
        return None


class DeviceTable:
    """The CUDA devices of ``environ``, enumerated once on first use (as CUDA reads its variables once)."""

    def __init__(
        self, session: NvmlSession, environ: Mapping[str, str], bus_order: Callable[[], list[str] | None] | None = None
    ):
        self._session = session
        self._environ = environ
        self._bus_order = bus_order if bus_order is not None else driver_bus_ids
        self._selection: VisibleDevices[VisibleDevice] | None = None
        self._lock = ForkSafeLock()

    def selection(self) -> VisibleDevices[VisibleDevice]:
        """Raises ``NvmlUnavailable``/``NvmlCallError`` (both ``DevmemError``) when NVML cannot enumerate."""
        selection = self._selection
        if selection is None:
            with self._lock:
                if self._selection is None:
                    self._selection = visible_devices(self._session, self._environ, self._bus_order())
                selection = self._selection
        return selection

    def devices(self) -> tuple[VisibleDevice, ...]:
        return self.selection().devices
