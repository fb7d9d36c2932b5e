"""What accelerators this machine has, and whether their memory is the host's: the unified-memory probe.

Cheap by design (no CUDA context, no torch import): sysfs and Jetson files, and NVML where it loads.
A machine is claimed only when every accelerator the runtimes would use has unified memory; a discrete
GPU anywhere (an RTX card beside a Ryzen APU, say) leaves the machine to the nvml or rocm platform, so
this backend never reports host memory for a card that has its own.

NVIDIA parts are recognised, most authoritative first, by the CUDA "integrated" attribute (only where
torch has already initialised CUDA in this process), by NVML answering NotSupported to the device-level
memory query (GB10: ``nvidia-smi`` shows ``[N/A]`` for total), or by the Jetson files (Orin has no NVML).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

import devmem_nvidia
from devmem import Detection, DevmemError
from devmem.sdk import Files
from devmem_nvidia import NvmlCallError, NvmlSession, VisibleDevice, device_name, read_memory, visible_devices
from devmem_uma.amd import AmdCard, amd_cards
from devmem_uma.runtime import runtime_integrated
from devmem_uma.tegra import jetson_reason

log = logging.getLogger("devmem.uma")


@dataclass(frozen=True)
class NvidiaGpu:
    """A CUDA-visible NVIDIA device (``index`` in CUDA's order, NVML's ``device``), its name, and whether its
    memory is the host's (``integrated``) with how we know (``evidence``, for people)."""

    index: int
    device: VisibleDevice
    name: str
    integrated: bool
    evidence: str


@dataclass
class Survey:
    """The accelerators found, split into unified-memory ones and discrete ones."""

    nvidia: list[NvidiaGpu] = field(default_factory=list)
    #: What NVML said: why it is unusable, or how many devices it sees.
    nvml_reason: str = ""
    jetson: str | None = None
    amd: list[AmdCard] = field(default_factory=list)

    @property
    def nvidia_integrated(self) -> list[NvidiaGpu]:
        return [g for g in self.nvidia if g.integrated]

    @property
    def amd_apus(self) -> list[AmdCard]:
        return [c for c in self.amd if c.apu]

    @property
    def discrete(self) -> list[str]:
        """Human names of the discrete GPUs present (any of them keeps this backend out)."""
        names = [f"{g.name} (CUDA device {g.index}, {g.evidence})" for g in self.nvidia if not g.integrated]
        return names + [f"AMD card{c.card} ({c.reason})" for c in self.amd if not c.apu]

    @property
    def vendor(self) -> str | None:
        """``"nvidia"`` or ``"amd"``: whose unified-memory devices this machine has (NVIDIA first)."""
        if self.nvidia_integrated or self.jetson:
            return "nvidia"
        if self.amd_apus:
            return "amd"
        return None

    def detection(self) -> Detection:
        if self.discrete:
            return Detection(False, "discrete GPU(s) present, left to their own platform: " + "; ".join(self.discrete))
        if self.nvidia_integrated:
            g = self.nvidia_integrated[0]
            return Detection(True, f"{g.name}: unified memory ({g.evidence})")
        if self.jetson:
            return Detection(True, f"NVIDIA Jetson: {self.jetson}")
        if self.amd_apus:
            c = self.amd_apus[0]
            return Detection(True, f"AMD card{c.card}: {c.reason}")
        return Detection(
            False, "no unified-memory GPU: no amdgpu APU in sysfs, no Jetson files, and NVML: " + self.nvml_reason
        )


def _nvidia_gpus(
    session: NvmlSession, environ: Mapping[str, str], integrated_attr: Callable[[int], bool | None]
) -> tuple[list[NvidiaGpu], str]:
    try:
        devices = visible_devices(session, environ).devices
    except DevmemError as exc:
        return [], str(exc)
    gpus = []
    for index, dev in enumerate(devices):
        try:
            name = device_name(session, dev.handle)
        except DevmemError:
            name = f"NVIDIA GPU {index}"
        attribute = integrated_attr(index)
        if attribute is not None:
            evidence = f"the CUDA runtime's integrated attribute is {int(attribute)}"
            gpus.append(NvidiaGpu(index, dev, name, attribute, evidence))
            continue
        try:
            read_memory(session, dev.handle)
        except NvmlCallError as exc:
            if exc.error == "NotSupported":
                gpus.append(NvidiaGpu(index, dev, name, True, "NVML's device memory query is NotSupported"))
                continue
            log.debug("devmem: NVML memory query of %s failed: %s", name, exc)
            gpus.append(NvidiaGpu(index, dev, name, False, f"NVML memory query failed: {exc.error}"))
            continue
        gpus.append(NvidiaGpu(index, dev, name, False, "NVML reports its own device memory"))
    return gpus, f"NVML sees {len(devices)} CUDA-visible device(s), none integrated"


def survey(
    files: Files,
    session: NvmlSession | None,
    environ: Mapping[str, str],
    integrated_attr: Callable[[int], bool | None] = runtime_integrated,
) -> Survey:
    """Probe sysfs, the Jetson files and NVML (and the CUDA runtime where already initialised).

    ``session`` is ``None`` where no NVIDIA driver is loaded: NVML is not asked.
    """
    found = Survey(amd=amd_cards(files), jetson=jetson_reason(files))
    if session is None:
        found.nvml_reason = devmem_nvidia.NO_DRIVER
        return found
    found.nvidia, found.nvml_reason = _nvidia_gpus(session, environ, integrated_attr)
    return found
