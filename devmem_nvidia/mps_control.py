"""The MPS control daemon's default pinned-memory limit, asked of the daemon itself.

A limit set with ``set_default_device_pinned_mem_limit`` on the control daemon binds every client it serves, but
a client's environment does not show it. Where this process would be an MPS client (the daemon's ``control``
pipe exists in ``CUDA_MPS_PIPE_DIRECTORY``, default ``/tmp/nvidia-mps``) and ``nvidia-cuda-mps-control`` is
installed, devmem asks it ``get_default_device_pinned_mem_limit <ordinal>`` for each device, once per platform,
one run per ordinal with a timeout (the daemon prints the size, ``8G``, or nothing where none is set). Its
ordinals are the daemon's: the answers apply to every device when all ordinals agree, else ordinal by ordinal
only where this process's ``CUDA_VISIBLE_DEVICES`` is unset (the same numbering).
A client inside a container usually has the pipe but not the program: there, a process that holds a CUDA
context still gets the limit from what the runtime reports (:mod:`devmem_nvidia.runtime_caps`).
"""

from __future__ import annotations

import logging
import os
import shutil
import subprocess
import threading
from collections.abc import Callable, Mapping

from devmem import DevmemError
from devmem.sdk import Files, MemoryLimit
from devmem_nvidia.limits import mps_limits
from devmem_nvidia.limits import parse_cuda_limit_size as parse_size

log = logging.getLogger("devmem.nvidia")

CONTROL = "nvidia-cuda-mps-control"
DEFAULT_PIPE_DIRECTORY = "/tmp/nvidia-mps"
TIMEOUT_S = 2.0
QUERY = "get_default_device_pinned_mem_limit"

#: ``run(commands) -> stdout``: the control program fed ``commands`` on stdin (raises OSError or
#: subprocess.SubprocessError where it cannot answer).
Runner = Callable[[str], str]


def pipe_directory(environ: Mapping[str, str]) -> str:
    return environ.get("CUDA_MPS_PIPE_DIRECTORY") or DEFAULT_PIPE_DIRECTORY


def run_control(commands: str) -> str:
    """``nvidia-cuda-mps-control`` with ``commands`` on stdin, under :data:`TIMEOUT_S`."""
    program = shutil.which(CONTROL)
    if program is None:
        raise OSError(f"{CONTROL} is not installed")
    done = subprocess.run(
        [program], input=commands, capture_output=True, text=True, timeout=TIMEOUT_S, env=dict(os.environ)
    )
    if done.returncode != 0:
        raise subprocess.SubprocessError(f"{CONTROL} exited {done.returncode}: {done.stderr.strip()[:200]}")
    return done.stdout


def daemon_limits(
    count: int, environ: Mapping[str, str], files: Files, run: Runner | None = None
) -> dict[int, MemoryLimit]:
    """``{device: limit}`` from the control daemon's default pinned limits for ``count`` devices; empty where
    there is no daemon, no program, no limit, or an answer devmem cannot place on this process's devices."""
    pipe = pipe_directory(environ)
    if count <= 0 or not files.exists(f"{pipe}/control"):
        return {}
    run = run_control if run is None else run
    sizes: list[int | None] = []
    for ordinal in range(count):  # one run each: the daemon prints nothing for an ordinal without a limit
        try:
            answer = run(f"{QUERY} {ordinal}\n").strip()
        except (OSError, subprocess.SubprocessError) as exc:
            log.debug("devmem: the MPS control daemon's default limit is not readable: %s", exc)
            return {}
        try:
            sizes.append(parse_size(answer, QUERY) or None if answer else None)
        except DevmemError:  # an error text: nothing to apply for this ordinal
            sizes.append(None)
    if all(size is None for size in sizes):
        return {}
    if len(set(sizes)) != 1 and "CUDA_VISIBLE_DEVICES" in environ:
        log.debug("devmem: MPS default limits differ by device and CUDA_VISIBLE_DEVICES renumbers them: not applied")
        return {}
    return {
        device: MemoryLimit(size, "MPS pinned device memory limit", f"the MPS control daemon's default ({pipe})")
        for device, size in enumerate(sizes)
        if size is not None
    }


class MpsDefaults:
    """The daemon's default limits for a platform: asked once (on the first reading), then per device.

    ``run``: how to ask the daemon (``None``: never ask, for a platform on scripted libraries without one)."""

    def __init__(self, run: Runner | None, environ: Mapping[str, str], files: Files):
        self._run = run
        self._environ = environ
        self._files = files
        self._limits: dict[int, MemoryLimit] | None = None
        self._lock = threading.Lock()

    def limit(self, device: int, count: int) -> list[MemoryLimit]:
        """The default limit on ``device`` (of ``count`` devices), unless this process's environment sets its own
        (a client's ``CUDA_MPS_PINNED_DEVICE_MEM_LIMIT`` overrides the daemon's default)."""
        if self._run is None:
            return []
        with self._lock:
            if self._limits is None:
                self._limits = daemon_limits(count, self._environ, self._files, self._run)
        found = self._limits.get(device)
        if found is None:
            return []
        own = mps_limits(self._environ)
        return [] if device in own or None in own else [found]


__all__ = [
    "CONTROL",
    "DEFAULT_PIPE_DIRECTORY",
    "MpsDefaults",
    "Runner",
    "daemon_limits",
    "pipe_directory",
    "run_control",
]
