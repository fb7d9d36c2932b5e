"""AMD APUs through amdgpu's sysfs and fdinfo files: which cards are APUs, their memory pools, this process's share.

Everything reads through the :class:`devmem.sdk.Files` boundary, so no ROCm library is needed.

Which card is an APU (the rule, see docs/unified-memory.md): an amdgpu card (``vendor`` 0x1002 with
``mem_info_gtt_total``) is an APU when

1. its hwmon has the northbridge voltage (``in1_label`` reads ``vddnb``): amdgpu creates that sensor only
   for parts flagged ``AMD_IS_APU``, the flag ROCm itself reads (as ``AMDGPU_IDS_FLAGS_FUSION``) to call a
   GPU integrated; or
2. its VRAM is at most a BIOS carve-out (1 GiB, ``devmem_rocm.devices.CARVE_OUT_MAX``, the threshold the
   rocm platform applies too) beside a larger GTT pool. This catches MI300A, which reports no VRAM of its
   own and no northbridge sensor. No ROCm-capable discrete card has so little VRAM.

Which pool an allocation draws from: since the kernel lets VRAM allocations go to the GTT domain on APUs whose
GTT is larger than their VRAM ("the MI300A approach"), compute allocations come from GTT there, limited both
by the GTT size and by the RAM the OS can give. Where the carve-out is the larger pool (a BIOS setting of
tens of GiB), allocations come from it, and it behaves like a discrete card's memory.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Mapping
from dataclasses import dataclass

from devmem.sdk import Files, format_size, read_int, read_stripped
from devmem_rocm import CARVE_OUT_MAX, select_visible

log = logging.getLogger("devmem.uma")

AMD_VENDOR = "0x1002"
DRM = "/sys/class/drm"
#: The DRM driver name in fdinfo, and the regions a compute allocation comes from (devmem.sdk.drm).
DRM_DRIVER = "amdgpu"
DRM_REGIONS = ("vram", "gtt")

_CARD = re.compile(r"^card([0-9]{1,6})$")


@dataclass(frozen=True)
class AmdCard:
    """An amdgpu card in sysfs: its number, directory, PCI slot, whether it is an APU (and why), its serial."""

    card: int
    path: str
    pci_slot: str | None
    apu: bool
    reason: str
    #: The ASIC serial from ``unique_id`` (HIP names the device ``GPU-<serial>``), where amdgpu exposes it.
    unique_id: str | None = None

    def uuid_keys(self) -> tuple[str, ...]:
        """What a ``GPU-`` entry of a ``*_VISIBLE_DEVICES`` variable may name (devmem_rocm's HipDevice)."""
        return (self.unique_id,) if self.unique_id else ()


@dataclass(frozen=True)
class ApuMemory:
    """One reading of an APU's memory pools, in bytes, from ``mem_info_*``."""

    vram_total: int
    vram_used: int
    gtt_total: int
    gtt_used: int

    @property
    def pool(self) -> str:
        """``"gtt"`` when the kernel serves device allocations from GTT (GTT larger than VRAM), else ``"vram"``."""
        return "gtt" if self.gtt_total > self.vram_total else "vram"


def _has_vddnb(files: Files, device_dir: str) -> bool:
    try:
        monitors = files.listdir(f"{device_dir}/hwmon")
    except OSError:
        return False
    return any(read_stripped(files, f"{device_dir}/hwmon/{m}/in1_label") == "vddnb" for m in monitors)


def _pci_slot(files: Files, device_dir: str) -> str | None:
    for line in (read_stripped(files, f"{device_dir}/uevent") or "").splitlines():
        key, _, value = line.partition("=")
        if key == "PCI_SLOT_NAME" and value:
            return value.strip().lower()
    return None


def classify(files: Files, device_dir: str) -> tuple[bool, str]:
    """``(is_apu, why)`` for the amdgpu card whose sysfs device directory is ``device_dir``."""
    vram = read_int(files, f"{device_dir}/mem_info_vram_total") or 0
    gtt = read_int(files, f"{device_dir}/mem_info_gtt_total") or 0
    if _has_vddnb(files, device_dir):
        return True, f"APU (amdgpu reports a northbridge voltage); VRAM {format_size(vram)}, GTT {format_size(gtt)}"
    if vram <= CARVE_OUT_MAX and gtt > vram:
        own = f"VRAM is a {format_size(vram)} carve-out" if vram else "no VRAM of its own"
        return True, f"APU ({own} beside a {format_size(gtt)} GTT pool)"
    return False, f"discrete (its own {format_size(vram)} of VRAM)"


def amd_cards(files: Files) -> list[AmdCard]:
    """Every amdgpu card with GPU memory accounting, by card number. An empty list without amdgpu."""
    try:
        names = files.listdir(DRM)
    except OSError:
        return []
    cards = []
    for name in names:
        match = _CARD.match(name)
        if not match:
            continue
        device_dir = f"{DRM}/{name}/device"
        if read_stripped(files, f"{device_dir}/vendor") != AMD_VENDOR:
            continue
        if read_int(files, f"{device_dir}/mem_info_gtt_total") is None:
            continue
        apu, reason = classify(files, device_dir)
        serial = (read_stripped(files, f"{device_dir}/unique_id") or "").lower().removeprefix("0x") or None
        cards.append(AmdCard(int(match.group(1)), device_dir, _pci_slot(files, device_dir), apu, reason, serial))
    return sorted(cards, key=lambda c: c.card)


def read_memory(files: Files, card: AmdCard) -> ApuMemory:
    """The card's ``mem_info_{vram,gtt}_{total,used}``; raises ``OSError`` when GTT cannot be read."""
    gtt_total = read_int(files, f"{card.path}/mem_info_gtt_total")
    gtt_used = read_int(files, f"{card.path}/mem_info_gtt_used")
    if gtt_total is None or gtt_used is None:
        raise OSError(f"{card.path}: mem_info_gtt_total/mem_info_gtt_used are missing or unreadable")
    return ApuMemory(
        vram_total=read_int(files, f"{card.path}/mem_info_vram_total") or 0,
        vram_used=read_int(files, f"{card.path}/mem_info_vram_used") or 0,
        gtt_total=gtt_total,
        gtt_used=gtt_used,
    )


def visible_apus(cards: list[AmdCard], environ: Mapping[str, str]) -> tuple[list[AmdCard], tuple[str, ...]]:
    """The APUs the HIP runtime shows, in its order (PCI bus order), after ``ROCR_VISIBLE_DEVICES`` then
    ``HIP_VISIBLE_DEVICES`` (or ``CUDA_VISIBLE_DEVICES``), by the rocm platform's rules; and sentences about
    variables that disagree or entries the runtime drops."""
    selection = select_visible(sorted(cards, key=lambda c: (c.pci_slot or "", c.card)), environ)
    return list(selection.devices), selection.conflicts
