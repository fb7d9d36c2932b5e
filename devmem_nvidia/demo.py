"""``DEVMEM_PLATFORM=demo``: devmem's command and exporter on a scripted node, for trying them without a GPU.

Eight NVIDIA H200s (as recorded, driver 580.159.04) through the scripted NVML of :mod:`devmem_nvidia.testing`,
each with three serving engines holding memory, as a tensor-parallel deployment spreads them: device ``d`` has
engine PIDs ``4100 + 10 * d`` (a 70B model's shard, 40 GiB), ``+ 1`` (an 8B model, 30 GiB) and ``+ 2`` (a 24B
model, 25 GiB). Their PIDs are scripted: no process of this machine has them, so their user and command are ``-``,
as for a process of another PID namespace. The demo is never chosen by detection (its priority is below the
built-in ``cpu``); only ``DEVMEM_PLATFORM=demo`` picks it.
"""

from __future__ import annotations

from typing import Any

from devmem import GiB
from devmem_nvidia.nvml_platform import NvmlPlatform

#: The engines on every device of the demo node: (PID offset, GiB it holds).
ENGINES = ((0, 40), (1, 30), (2, 25))
#: GPUs of the demo node.
GPUS = 8


def demo_pid(device: int, engine: int) -> int:
    """The scripted PID of ``engine`` (0, 1 or 2) on ``device``."""
    return 4100 + 10 * device + engine


def demo_scenario() -> Any:
    """The demo node: :data:`GPUS` H200s with :data:`ENGINES` on each."""
    from devmem.testing import Scenario
    from devmem_nvidia.testing import ScriptedNvidiaGpu

    sc = Scenario(
        devices=[
            ScriptedNvidiaGpu(uuid=f"GPU-de000000-0000-4000-8000-{i:012d}", pci_bus_id=f"00000000:{0x19 + i:02x}:00.0")
            for i in range(GPUS)
        ]
    )
    for device in range(GPUS):
        for engine, gib in ENGINES:
            sc.allocate(gib * GiB, device, pid=demo_pid(device, engine))
    return sc


class DemoPlatform(NvmlPlatform):
    """The ``nvml`` platform on the demo node's scripted NVML, files and environment (named ``demo``, so its
    reservation ledger is its own)."""

    name = "demo"

    def __init__(self) -> None:
        from devmem_nvidia.testing import ScriptedAllocator, ScriptedLibcuda, ScriptedNvml

        sc = demo_scenario()
        super().__init__(
            nvml=ScriptedNvml(sc),
            files=sc.fs,
            environ=sc.environ,
            allocator=ScriptedAllocator(sc),
            cuda=ScriptedLibcuda(sc),
        )
        self.scenario = sc
