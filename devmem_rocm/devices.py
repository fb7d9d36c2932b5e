"""The AMD GPUs amdsmi sees: identity (PCI address, ASIC serial, HIP id), name, gfx target, APU or not,
and the order in which the HIP runtime numbers them.

Which GPU is an APU (its memory is host memory; the uma platform serves it), first rule that applies:

1. amdsmi calls its processor type an APU (``AMDSMI_PROCESSOR_TYPE_AMD_APU``, in newer libraries);
2. its gfx target is an APU-only target in LLVM's AMDGPU processor table (``gfx1151`` Strix Halo,
   ``gfx1150`` Strix Point, ``gfx1103`` Phoenix, ``gfx90c`` Renoir/Cezanne, ...);
3. its market name says MI300A (gfx942 is shared by the MI300A APU and the MI300X);
4. its VRAM is at most a BIOS carve-out (1 GiB) beside a larger GTT pool, the rule the uma platform uses.

HIP order: amdsmi >= 6.4 reports each GPU's HIP id (``amdsmi_get_gpu_enumeration_info``); GPUs without one
are not HIP devices. Older amdsmi has no HIP ids, and the order falls back to PCI bus order, the order in
which the kernel driver enumerates GPUs for the ROCm runtime. Never amdsmi's own handle order.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any

from devmem import GiB
from devmem_rocm.smi import AmdsmiCallError, AmdsmiSession

log = logging.getLogger("devmem.rocm")

#: gfx targets marked APU (and never dGPU) in LLVM's AMDGPUUsage processor table.
APU_TARGETS = frozenset(
    {
        "gfx801",
        "gfx902",
        "gfx909",
        "gfx90c",
        "gfx1013",
        "gfx1033",
        "gfx1035",
        "gfx1036",
        "gfx1037",
        "gfx1103",
        "gfx1150",
        "gfx1151",
        "gfx1152",
        "gfx1153",
    }
)
#: The largest VRAM that is still a carve-out beside a larger GTT pool (rule 4).
CARVE_OUT_MAX = GiB
_NA = ("", "N/A", "NA", None)


@dataclass(frozen=True)
class AmdGpu:
    """One AMD GPU as amdsmi reports it. ``serial`` is the ASIC serial in lower-case hex without ``0x``:
    HIP names the device ``GPU-<serial>`` in ``*_VISIBLE_DEVICES``."""

    handle: Any
    smi_index: int
    bdf: str
    market_name: str
    gfx_target: str
    serial: str | None = None
    hip_uuid: str | None = None
    uuid: str | None = None
    hip_id: int | None = None
    apu_reason: str = ""

    @property
    def apu(self) -> bool:
        return bool(self.apu_reason)

    @property
    def label(self) -> str:
        return f"{self.market_name} ({self.gfx_target}, {self.bdf})"

    def uuid_keys(self) -> tuple[str, ...]:
        """What a ``GPU-`` entry of a ``*_VISIBLE_DEVICES`` variable may name, lower case, without ``GPU-``."""
        keys = [k for k in (self.serial, (self.hip_uuid or "").lower().removeprefix("gpu-")) if k]
        return tuple(dict.fromkeys(keys))


def _optional(session: AmdsmiSession, name: str, *args: Any) -> Any:
    """A call whose absence or failure leaves a field unknown (``None``)."""
    if not session.has(name):
        return None
    try:
        return session.call(name, *args)
    except AmdsmiCallError as exc:
        log.debug("devmem: %s", exc)
        return None


def _text(value: Any) -> str | None:
    value = value.decode() if isinstance(value, bytes) else value
    return None if value in _NA else str(value).strip()


def _processor_type(session: AmdsmiSession, handle: Any) -> str:
    """amdsmi's processor type name (``"AMDSMI_PROCESSOR_TYPE_AMD_GPU"``), or ``""`` where it cannot say."""
    raw = _optional(session, "amdsmi_get_processor_type", handle)
    if isinstance(raw, dict):
        raw = raw.get("processor_type")
    return str(getattr(raw, "name", raw or ""))


def _memory_total(session: AmdsmiSession, handle: Any, kind: str) -> int | None:
    types = getattr(session.module, "AmdSmiMemoryType", None)
    value = _optional(session, "amdsmi_get_gpu_memory_total", handle, getattr(types, kind)) if types else None
    return value if isinstance(value, int) else None


def apu_reason(session: AmdsmiSession, handle: Any, kind: str, market: str, gfx: str) -> str:
    """Why this GPU is an APU (the rules of the module docstring), or ``""`` for a discrete GPU."""
    if "APU" in kind:
        return f"amdsmi reports processor type {kind}"
    if gfx in APU_TARGETS:
        return f"{gfx} is an APU target"
    if "MI300A" in market.upper():
        return "an MI300A is an APU"
    vram, gtt = _memory_total(session, handle, "VRAM"), _memory_total(session, handle, "GTT")
    if vram is not None and gtt is not None and vram <= CARVE_OUT_MAX < gtt:
        return f"its VRAM ({vram} bytes) is a carve-out beside {gtt} bytes of GTT"
    return ""


def read_gpus(session: AmdsmiSession) -> list[AmdGpu]:
    """Every AMD GPU amdsmi lists, in amdsmi's order. Raises ``AmdsmiCallError``/``AmdsmiUnavailable``
    when amdsmi cannot list its processors or name their PCI addresses."""
    gpus = []
    for index, handle in enumerate(session.call("amdsmi_get_processor_handles")):
        kind = _processor_type(session, handle)
        if kind and "GPU" not in kind and "APU" not in kind:
            continue
        bdf = str(session.call("amdsmi_get_gpu_device_bdf", handle)).strip().lower()
        asic = _optional(session, "amdsmi_get_gpu_asic_info", handle) or {}
        market = _text(asic.get("market_name")) or "AMD GPU"
        gfx = _text(asic.get("target_graphics_version")) or "gfx?"
        serial = _text(asic.get("asic_serial"))
        enum = _optional(session, "amdsmi_get_gpu_enumeration_info", handle) or {}
        hip_id = enum.get("hip_id")
        gpus.append(
            AmdGpu(
                handle=handle,
                smi_index=index,
                bdf=bdf,
                market_name=market,
                gfx_target=gfx,
                serial=serial.lower().removeprefix("0x") if serial else None,
                hip_uuid=_text(enum.get("hip_uuid")),
                uuid=_text(_optional(session, "amdsmi_get_gpu_device_uuid", handle)),
                hip_id=hip_id if isinstance(hip_id, int) else None,
                apu_reason=apu_reason(session, handle, kind, market, gfx),
            )
        )
    return gpus


def hip_order(gpus: list[AmdGpu]) -> tuple[list[AmdGpu], str]:
    """``gpus`` as the HIP runtime numbers them (before any ``*_VISIBLE_DEVICES``), and how that was decided."""
    by_id = [(g.hip_id, g) for g in gpus if g.hip_id is not None]
    if by_id and len({hip_id for hip_id, _ in by_id}) == len(by_id):
        hidden = [g for g in gpus if g.hip_id is None]
        if hidden:
            log.debug(
                "devmem: amdsmi reports no HIP id for %s; HIP does not number them", ", ".join(g.label for g in hidden)
            )
        return [g for _, g in sorted(by_id, key=lambda pair: pair[0])], "HIP ids reported by amdsmi"
    return sorted(gpus, key=lambda g: g.bdf), "PCI bus order (this amdsmi reports no HIP ids; ROCm >= 6.4 does)"


__all__ = ["APU_TARGETS", "CARVE_OUT_MAX", "AmdGpu", "apu_reason", "hip_order", "read_gpus"]
