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
- ``CUDA_DEVICE_ORDER=PCI_BUS_ID`` orders by PCI bus id. The default ``FASTEST_FIRST`` is approximated
  as: higher compute capability first, PCI bus id among equals. CUDA's own heuristic also weighs SM count
  and clocks, which NVML does not expose cheaply; on the usual machine (identical GPUs) both give PCI order.
- a GPU with MIG enabled is seen as its MIG instances (in NVML's MIG index order), both when the list is
  unset and when the GPU is named by index or ``GPU-`` UUID.

Public names: ``VisibleDevice``, ``NvmlGpu``, ``enumerate_gpus(session)``, ``cuda_order(gpus, environ)``,
``select_visible(gpus, environ)``, ``visible_devices(session, environ)``, ``DeviceTable(session, environ)``
(the list, built once on first use, thread-safe).
"""

from __future__ import annotations

import logging
import threading
from dataclasses import dataclass, field
from typing import Any, Mapping

from devmem_nvidia.nvml_access import NvmlCallError, NvmlSession, device_pci_bus_id, device_uuid

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


def _mig_instances(session: NvmlSession, gpu: Any, uuid: str, bus_id: str) -> tuple[VisibleDevice, ...]:
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
            cc = tuple(int(x) for x in session.call("nvmlDeviceGetCudaComputeCapability", handle))
        except NvmlCallError:
            cc = (0, 0)
        gpus.append(NvmlGpu(handle, uuid, bus_id, cc, _mig_instances(session, handle, uuid, bus_id)))
    return gpus


def cuda_order(gpus: list[NvmlGpu], environ: Mapping[str, str]) -> list[NvmlGpu]:
    """``gpus`` in the order the CUDA runtime numbers them (see the module docstring)."""
    order = environ.get("CUDA_DEVICE_ORDER", "FASTEST_FIRST").strip().upper()
    by_bus = sorted(gpus, key=lambda g: g.pci_bus_id)
    if order == "PCI_BUS_ID":
        return by_bus
    return sorted(by_bus, key=lambda g: g.compute_capability, reverse=True)


def _match_uuid(token: str, devices: list[VisibleDevice]) -> list[VisibleDevice] | None:
    token = token.upper()
    hits = [d for d in devices if d.uuid.upper().startswith(token)]
    return hits if len(hits) == 1 else None


def select_visible(gpus: list[NvmlGpu], environ: Mapping[str, str]) -> list[VisibleDevice]:
    """Apply ``CUDA_DEVICE_ORDER`` and ``CUDA_VISIBLE_DEVICES`` to NVML's ``gpus``."""
    ordered = cuda_order(gpus, environ)
    raw = environ.get("CUDA_VISIBLE_DEVICES")
    if raw is None:
        return [d for g in ordered for d in g.as_cuda_devices()]
    whole = [VisibleDevice(g.handle, g.uuid, g.pci_bus_id) for g in ordered]
    instances = [d for g in ordered for d in g.instances]
    chosen: list[VisibleDevice] = []
    for token in (t.strip() for t in raw.split(",")):
        picked: list[VisibleDevice] | None = None
        if token.isdigit() and int(token) < len(ordered):
            picked = ordered[int(token)].as_cuda_devices()
        elif token.upper().startswith("GPU-") and len(token) > 4:
            hit = _match_uuid(token, whole)
            picked = next(g.as_cuda_devices() for g in ordered if g.uuid == hit[0].uuid) if hit else None
        elif token.upper().startswith("MIG-") and len(token) > 4:
            picked = _match_uuid(token, instances)
        if picked is None or any(p.uuid == c.uuid for p in picked for c in chosen):
            if token:
                log.debug("devmem: CUDA_VISIBLE_DEVICES entry %r is invalid; the list ends before it", token)
            break
        chosen.extend(picked)
    return chosen


def visible_devices(session: NvmlSession, environ: Mapping[str, str]) -> list[VisibleDevice]:
    """The CUDA runtime's devices for ``environ``, each with its NVML handle."""
    return select_visible(enumerate_gpus(session), environ)


class DeviceTable:
    """The CUDA devices of ``environ``, enumerated once on first use (as CUDA reads its variables once)."""

    def __init__(self, session: NvmlSession, environ: Mapping[str, str]):
        self._session = session
        self._environ = environ
        self._devices: list[VisibleDevice] | None = None
        self._lock = threading.Lock()

    def devices(self) -> list[VisibleDevice]:
        """Raises ``NvmlUnavailable``/``NvmlCallError`` (both ``DevmemError``) when NVML cannot enumerate."""
        devices = self._devices
        if devices is None:
            with self._lock:
                if self._devices is None:
                    self._devices = visible_devices(self._session, self._environ)
                devices = self._devices
        return devices
