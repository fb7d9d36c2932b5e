"""The ``rocm`` platform: discrete AMD GPUs (MI200, MI300X, Radeon) through amdsmi.

- ``free``/``total``: VRAM used and total from ``amdsmi_get_gpu_memory_usage``/``_total`` with
  ``AmdSmiMemoryType.VRAM``; ``free = total - used``. amdsmi's VRAM total is the KFD figure that
  ``hipMemGetInfo`` (``torch.cuda.mem_get_info``) reports as total.
- this process: ``memory_usage.vram_mem`` of its entry in ``amdsmi_get_gpu_process_list`` (the list of
  dicts of amdsmi >= 6.2), or through the older two-step API (process handles, then
  ``amdsmi_get_gpu_process_info``). amdsmi finds processes by scanning ``/proc/<pid>/fdinfo`` in this
  PID namespace, so this process is listed under ``os.getpid()`` and is absent only while it holds no
  memory on that GPU (0 bytes). Processes of other users are listed only to root.
- amdsmi documents that process figures are valid once 1 s has passed since it started; the first
  process query waits out what is left of that second (usually nothing: a model loads first).
- device indices are HIP's (:mod:`devmem_rocm.visible`), matched to amdsmi's GPUs by PCI address and
  serial, never by amdsmi's index.
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Callable, Mapping
from typing import Any

from devmem import Detection, DevmemError, PlatformBase
from devmem.sdk import (
    REAL_FILES,
    DeviceMemory,
    DmemLimits,
    Files,
    ProcessMemory,
    ReasonKind,
    VisibleDevices,
    apply_limits,
    checked_memory,
    format_size,
    process_bytes,
    process_id,
    process_list,
    shown,
    whole_bytes,
)
from devmem_rocm.devices import AmdGpu, hip_order, read_gpus
from devmem_rocm.driver import NO_DRIVER, driver_loaded
from devmem_rocm.smi import AmdsmiCallError, AmdsmiSession, AmdsmiUnavailable, load_amdsmi
from devmem_rocm.visible import select_visible

log = logging.getLogger("devmem.rocm")

#: amdsmi's documented delay before process figures are valid, seconds after it starts.
PROCESS_FIGURES_VALID_AFTER = 1.0
#: Memory in use that no listed process accounts for, above which the notes say so.
_UNATTRIBUTED_NOTE = 1 << 30


def _session(amdsmi: Any, clock: Callable[[], float], sleep: Callable[[float], None]) -> AmdsmiSession:
    """A session on ``amdsmi`` timed by ``clock``/``sleep``; without ``amdsmi``, the process's shared session on
    the real module, or, where a clock or sleep is given, a session of their own on that module. Raises
    :class:`AmdsmiUnavailable` at once where the real module cannot be imported."""
    if amdsmi is None:
        amdsmi = load_amdsmi()
        if clock is time.monotonic and sleep is time.sleep:
            return AmdsmiSession.shared()
    return AmdsmiSession(amdsmi, clock=clock, sleep=sleep)


def _inventory(session: AmdsmiSession, environ: Mapping[str, str]) -> tuple[list[AmdGpu], VisibleDevices[AmdGpu], str]:
    """Every HIP-numbered GPU in HIP order, the visible ones, and how the order was decided."""
    ordered, order_rule = hip_order(read_gpus(session))
    return ordered, select_visible(ordered, environ), order_rule


class RocmPlatform(PlatformBase):
    """AMD GPUs through amdsmi. ``amdsmi`` is the amdsmi module (default: the real one, imported silently),
    ``environ`` the environment holding the ``*_VISIBLE_DEVICES`` variables (default ``os.environ``); ``files`` the
    /proc and cgroup boundary (a cgroup ``dmem.max`` on the GPU's VRAM caps free and total);
    ``clock``/``sleep`` time the wait for valid process figures (with a scripted amdsmi, pass a
    ``devmem.testing.ScriptedClock``'s ``clock=clk, sleep=clk.sleep`` so tests never really wait).

    A bad device index raises :class:`~devmem.DevmemError`; so does amdsmi failing to list the GPUs (at
    construction) or to read VRAM. A failing process list gives ``None`` and a reason, never an error."""

    name = "rocm"
    torch_device = "cuda"  # torch's ROCm builds serve HIP devices under the cuda namespace
    dist_backend = "nccl"  # ... and RCCL under the nccl backend name

    def __init__(
        self,
        *,
        amdsmi: Any = None,
        environ: Mapping[str, str] | None = None,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], None] = time.sleep,
        files: Files = REAL_FILES,
    ):
        self._smi = _session(amdsmi, clock, sleep)
        self._environ = os.environ if environ is None else environ
        self._files = files
        self._dmem = DmemLimits(files)
        try:
            _, self._selection, self._order_rule = _inventory(self._smi, self._environ)
        except DevmemError as exc:
            raise DevmemError(f"rocm: cannot list AMD GPUs through amdsmi: {exc}") from exc
        for conflict in self._selection.conflicts:
            log.warning("devmem: %s", conflict)

    # ---- required members ------------------------------------------------------------------------
    def device_count(self) -> int:
        return len(self._selection.devices)

    def gpu(self, device: int = 0) -> AmdGpu:
        """Who HIP device ``device`` is: PCI address, ASIC serial, HIP id, market name, gfx target, APU or not."""
        return self._selection.devices[self.check_device(device)]

    def _vram(self, gpu: AmdGpu) -> tuple[int, int]:
        vram = self._smi.module.AmdSmiMemoryType.VRAM
        total = self._smi.call("amdsmi_get_gpu_memory_total", gpu.handle, vram)
        used = self._smi.call("amdsmi_get_gpu_memory_usage", gpu.handle, vram)
        return whole_bytes(total, "amdsmi VRAM total"), whole_bytes(used, "amdsmi VRAM used")

    def _memory(self, device: int) -> DeviceMemory:
        gpu = self._selection.devices[device]
        try:
            total, used = self._vram(gpu)
        except DevmemError as exc:
            raise DevmemError(
                f"rocm: cannot read the VRAM of device {device}, {gpu.label}: {exc}. "
                "Check that `amd-smi metric -m` can read it"
            ) from exc
        two_step = " + amdsmi_get_gpu_process_info" if self._smi.has("amdsmi_get_gpu_process_info") else ""
        memory = checked_memory(
            total - used,
            total,
            {
                "free": "amdsmi VRAM total minus VRAM used (amdsmi_get_gpu_memory_total/_usage, AmdSmiMemoryType.VRAM)",
                "total": "amdsmi VRAM total, the total hipMemGetInfo reports",
                "process": f"amdsmi_get_gpu_process_list{two_step}: memory_usage.vram_mem of this process",
            },
            "amdsmi VRAM total minus used",
        )
        limits = self._dmem(gpu.bdf, ("vram",))
        if not limits:
            return memory
        process = self._process_memory(device).used if any(lim.used is None for lim in limits) else None
        return apply_limits(memory, limits, process)

    def _process_memory(self, device: int) -> ProcessMemory:
        table = self._processes(device)
        if isinstance(table, ProcessMemory):
            return table
        used = table.get(os.getpid(), 0)
        if used is None:
            return ProcessMemory.unknown(
                ReasonKind.NOT_AVAILABLE, "amdsmi lists this process without a VRAM figure (N/A)"
            )
        return ProcessMemory(used)

    def _is_integrated(self, device: int) -> bool:
        return self._selection.devices[device].apu

    def _pages_instead_of_failing(self, device: int) -> bool:
        return self._selection.devices[device].apu

    # ---- processes -------------------------------------------------------------------------------
    def _processes(self, device: int) -> dict[int, int | None] | ProcessMemory:
        """PID -> VRAM bytes (``None`` where amdsmi has no figure); an unknown :class:`ProcessMemory` with the
        reason when amdsmi cannot list them."""
        gpu = self._selection.devices[device]
        try:
            self._smi.settle(PROCESS_FIGURES_VALID_AFTER)
            answer = self._smi.call("amdsmi_get_gpu_process_list", gpu.handle)
            entries = process_list(answer)
            if entries is None:
                raise AmdsmiCallError(
                    "amdsmi_get_gpu_process_list", "unexpected", f"answered {shown(answer)}, not a list of processes"
                )
            return self._entries(gpu, entries)
        except DevmemError as exc:
            hint = " (run as root, or as the user that owns the processes)" if "NO_PERM" in str(exc) else ""
            return ProcessMemory.unknown(
                ReasonKind.QUERY_FAILED, f"amdsmi cannot list the processes on {gpu.label}: {exc}{hint}"
            )

    def _entries(self, gpu: AmdGpu, raw: list[Any]) -> dict[int, int | None]:
        """PID -> VRAM bytes of the entries amdsmi listed; a VRAM figure that is no whole number of bytes from 0
        (``True``, ``-1``, text) makes that PID's figure unknown (:func:`devmem.sdk.process_bytes`)."""
        table: dict[int, int | None] = {}
        for item in raw:
            if isinstance(item, Mapping):
                info = item
            else:  # amdsmi 6.0/6.1: a process handle (its PID), then one call per process
                try:
                    info = self._smi.call("amdsmi_get_gpu_process_info", gpu.handle, item)
                except AmdsmiCallError as exc:
                    if process_id(getattr(item, "value", None)) == os.getpid():
                        raise
                    log.debug("devmem: skipping a process that amdsmi cannot describe (it may have exited): %s", exc)
                    continue
            try:
                pid = process_id(info["pid"])
                vram = process_bytes(info["memory_usage"]["vram_mem"])
            except (KeyError, TypeError, ValueError, IndexError) as exc:  # one odd entry never breaks the list
                log.debug("devmem: skipping an amdsmi process entry %s: %s", shown(info), exc)
                continue
            if pid is None:
                log.debug("devmem: skipping an amdsmi process entry %s: its pid is no process id", shown(info))
                continue
            known = vram is not None and table.get(pid, 0) is not None
            table[pid] = (table.get(pid) or 0) + vram if known and vram is not None else None
        return table

    # ---- optional members ------------------------------------------------------------------------
    def _device_name(self, device: int) -> str:
        return self._selection.devices[device].market_name

    def _device_uuid(self, device: int) -> str | None:
        gpu = self._selection.devices[device]
        return gpu.uuid or gpu.hip_uuid  # amdsmi_get_gpu_device_uuid, else HIP's GPU-<serial>

    def _other_processes_memory(self, device: int) -> dict[int, int] | None:
        table = self._processes(device)
        if isinstance(table, ProcessMemory):
            return None
        own = os.getpid()
        return {pid: used for pid, used in table.items() if pid != own and used is not None}

    def _notes(self, device: int) -> list[str]:
        gpu = self._selection.devices[device]
        notes = [
            f"gfx target {gpu.gfx_target}; HIP device {device} is {gpu.bdf} (amdsmi processor "
            f"{gpu.smi_index}), from {self._selection.rule}; HIP order by {self._order_rule}"
        ]
        notes += list(self._selection.conflicts)
        notes += self._memory(device).notes
        if gpu.apu:
            notes.append(
                f"integrated GPU (APU: {gpu.apu_reason}): its memory is host memory and these VRAM "
                "figures are only its carve-out; the uma platform reports it (DEVMEM_PLATFORM=uma)"
            )
        if "GPU_DEVICE_ORDINAL" in self._environ:
            notes.append("GPU_DEVICE_ORDINAL is set; devmem does not apply it: prefer ROCR_VISIBLE_DEVICES")
        unattributed = self._unattributed(device, gpu)
        if unattributed is not None and unattributed >= _UNATTRIBUTED_NOTE:
            notes.append(
                f"{format_size(unattributed)} in use is not attributed to any listed process: amdsmi lists "
                "only processes whose /proc/<pid>/fdinfo this user can read (all of them as root), "
                "and the driver holds some memory itself"
            )
        return notes

    def _unattributed(self, device: int, gpu: AmdGpu) -> int | None:
        table = self._processes(device)
        if isinstance(table, ProcessMemory):
            return None
        try:
            _, used = self._vram(gpu)
        except DevmemError:
            return None
        return used - sum(v for v in table.values() if v is not None)


def detect(*, amdsmi: Any = None, environ: Mapping[str, str] | None = None, files: Files = REAL_FILES) -> Detection:
    """Found when amdsmi loads and reports at least one visible AMD GPU that is not an APU.

    Without ``amdsmi``, amdsmi is imported only where the amdgpu driver is loaded (:mod:`devmem_rocm.driver`);
    where it is loaded but amdsmi cannot be imported, the detection's ``action`` says what to install.
    """
    if amdsmi is None and not driver_loaded(files):
        return Detection(False, NO_DRIVER)
    try:
        session = _session(amdsmi, time.monotonic, time.sleep)
        everything, selection, _ = _inventory(session, os.environ if environ is None else environ)
    except AmdsmiUnavailable as exc:
        if exc.action:  # amdsmi failed to import, which is tried only where the driver is loaded
            return Detection(False, f"the amdgpu driver is loaded, but {exc}", action=exc.action)
        return Detection(False, str(exc))
    except DevmemError as exc:
        return Detection(False, str(exc))
    if not everything:
        return Detection(False, "amdsmi reports no AMD GPU")
    if not selection.devices:
        return Detection(False, f"amdsmi reports {len(everything)} AMD GPU(s), none visible after {selection.rule}")
    discrete = [g for g in selection.devices if not g.apu]
    apus = [g for g in selection.devices if g.apu]
    if not discrete:
        return Detection(
            False,
            f"amdsmi reports only APUs ({', '.join(g.label for g in apus)}): unified "
            "memory is left to the uma platform",
        )
    version = getattr(session.module, "__version__", None)
    reason = f"amdsmi{' ' + version if version else ''}: {len(discrete)} discrete AMD GPU(s): "
    reason += ", ".join(g.market_name for g in discrete)
    if apus:
        reason += f"; the APU {', '.join(g.market_name for g in apus)} is left to the uma platform"
    return Detection(True, reason)


__all__ = ["PROCESS_FIGURES_VALID_AFTER", "RocmPlatform", "detect"]
