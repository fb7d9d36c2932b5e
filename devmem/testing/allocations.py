"""Real allocations for the conformance kit: host memory and torch device memory, here or in another process.

Each allocator returns an :class:`Allocation`; call ``free()`` (or leave its ``with`` block) to give the
memory back. Memory is touched page by page, so the kernel and the driver really commit it. Device memory
is allocated through the torch device namespace a platform declares (``platform.torch_device``).
"""

from __future__ import annotations

import mmap
import os
import select
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass, field

#: Seconds to wait for a child process to report that it holds its memory (torch imports are slow).
CHILD_READY_TIMEOUT = 180.0


@dataclass
class Allocation:
    """``nbytes`` held on ``device`` by process ``pid`` until :meth:`free` is called."""

    nbytes: int
    device: int
    pid: int
    release: Callable[[], None] = field(repr=False)
    freed: bool = False

    def free(self) -> None:
        """Give the memory back (idempotent)."""
        if not self.freed:
            self.freed = True
            self.release()

    def __enter__(self) -> Allocation:
        return self

    def __exit__(self, *exc: object) -> None:
        self.free()


def _touched(nbytes: int) -> bytearray:
    buf = bytearray(nbytes)
    buf[:: mmap.PAGESIZE] = b"\x01" * len(range(0, nbytes, mmap.PAGESIZE))
    return buf


def allocate_host(nbytes: int, device: int = 0) -> Allocation:
    """Hold ``nbytes`` of touched host memory in this process."""
    holder = [_touched(nbytes)]
    return Allocation(nbytes, device, os.getpid(), holder.clear)


_HOST_CHILD = """
import mmap, sys
n = int(sys.argv[1])
buf = bytearray(n)
buf[::mmap.PAGESIZE] = b"\\x01" * len(range(0, n, mmap.PAGESIZE))
print("ready", flush=True)
sys.stdin.read()
"""

_TORCH_CHILD = """
import sys
import torch
n, d, ns = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
t = torch.ones(n, dtype=torch.uint8, device=f"{ns}:{d}")
getattr(torch, ns).synchronize(d)
print("ready", flush=True)
sys.stdin.read()
"""


def _hold_in_child(code: str, nbytes: int, device: int, *args: str) -> Allocation:
    """Start a Python child that allocates, says ``ready`` and holds the memory until its stdin closes."""
    proc = subprocess.Popen(
        [sys.executable, "-c", code, str(nbytes), str(device), *args],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert proc.stdin and proc.stdout and proc.stderr  # pipes, as asked for
    stdin, stdout, stderr = proc.stdin, proc.stdout, proc.stderr
    ready, _, _ = select.select([stdout], [], [], CHILD_READY_TIMEOUT)
    line = stdout.readline() if ready else ""
    if line.strip() != "ready":
        proc.kill()
        _, err = proc.communicate()
        raise RuntimeError(
            f"the child process meant to hold {nbytes} bytes on device {device} did not get ready: "
            f"{err.strip()[-2000:] or 'no output'}"
        )

    def release() -> None:
        stdin.close()
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        stdout.close()
        stderr.close()

    return Allocation(nbytes, device, proc.pid, release)


def allocate_host_in_subprocess(nbytes: int, device: int = 0) -> Allocation:
    """Hold ``nbytes`` of touched host memory in another process."""
    return _hold_in_child(_HOST_CHILD, nbytes, device)


def allocate_torch(nbytes: int, device: int = 0, *, namespace: str) -> Allocation:
    """Hold ``nbytes`` on torch device ``namespace:device`` in this process.

    Freeing also empties torch's allocator cache, so the driver really gets the memory back.
    """
    import torch

    module = getattr(torch, namespace)
    holder = [torch.ones(nbytes, dtype=torch.uint8, device=f"{namespace}:{device}")]
    module.synchronize(device)

    def release() -> None:
        holder.clear()
        module.synchronize(device)
        module.empty_cache()

    return Allocation(nbytes, device, os.getpid(), release)


def allocate_torch_in_subprocess(nbytes: int, device: int = 0, *, namespace: str) -> Allocation:
    """Hold ``nbytes`` on ``namespace:device`` in another process (which pays for its own device context)."""
    return _hold_in_child(_TORCH_CHILD, nbytes, device, namespace)
