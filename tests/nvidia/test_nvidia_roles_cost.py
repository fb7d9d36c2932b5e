"""The nvml platform names the MPS server among a device's processes by ``/proc/<pid>/comm``: each PID's comm is
read when it joins the device's process list, not at every reading while it stays (a reading of a busy node lists
hundreds of processes, every scrape of the exporter reads every device).

The machine is scripted (devmem.testing's Scenario, devmem_nvidia.testing's NVML); its files are watched, not
replaced, to count what is read."""

from __future__ import annotations

from collections import Counter
from typing import Any

from devmem.types import MiB
from devmem_nvidia.testing import h200_scenario, scripted_platform


class Watched:
    """The scenario's files, counting the ``/proc/<pid>/comm`` reads."""

    def __init__(self, files: Any):
        self.files = files
        self.comm: Counter[str] = Counter()

    def read_text(self, path: str) -> str:
        if path.endswith("/comm"):
            self.comm[path] += 1
        return self.files.read_text(path)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.files, name)


def test_each_process_comm_is_read_once_while_it_stays_listed():
    sc = h200_scenario()
    for pid in (4001, 4002, 4003):
        sc.allocate(32 * MiB, pid=pid)
    files = Watched(sc.fs)
    platform = scripted_platform(sc, files=files)
    for _ in range(3):
        platform.read(0)
    assert {path: n for path, n in files.comm.items()} == {f"/proc/{pid}/comm": 1 for pid in (4001, 4002, 4003)}


def test_a_process_that_joins_the_list_is_read_and_one_that_left_and_came_back_is_read_again():
    sc = h200_scenario()
    sc.allocate(32 * MiB, pid=4001)
    files = Watched(sc.fs)
    platform = scripted_platform(sc, files=files)
    platform.read(0)
    sc.release(32 * MiB, pid=4001)
    sc.allocate(32 * MiB, pid=4002)
    platform.read(0)
    sc.allocate(32 * MiB, pid=4001)  # a PID back in the list: perhaps another process by now
    sc.files["/proc/4001/comm"] = "nvidia-cuda-mps\n"
    assert platform.read(0).roles == {4001: "MPS server"}
    assert files.comm == Counter({"/proc/4001/comm": 2, "/proc/4002/comm": 1})
