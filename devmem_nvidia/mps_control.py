"""The MPS control daemon's default pinned-memory limit, asked of the daemon itself.

A limit set with ``set_default_device_pinned_mem_limit`` on the control daemon binds every client it serves, but
a client's environment does not show it. Where this process would be an MPS client (the daemon's ``control``
pipe exists in ``CUDA_MPS_PIPE_DIRECTORY``, default ``/tmp/nvidia-mps``) and ``nvidia-cuda-mps-control`` is
installed, devmem asks it ``get_default_device_pinned_mem_limit <ordinal>`` for each device, once per platform:
one run per ordinal (the daemon prints the size, ``8G``, or nothing where none is set, so an answer to several
queries at once could not be placed), the runs at once (at most :data:`PARALLEL_RUNS`), each bounded by
:data:`TIMEOUT_S` and all together by :data:`TOTAL_TIMEOUT_S` (a slow daemon on 8 GPUs costs one run's time, not
eight). Its output is read as UTF-8 with anything else replaced, so bytes that are no text are just no size. Its
ordinals are the daemon's: the answers apply to every device when all ordinals agree, else ordinal by ordinal
only where this process's ``CUDA_VISIBLE_DEVICES`` is unset (the same numbering). Where the daemon cannot answer
in time, or at all, no default limit is applied (logged).
A client inside a container usually has the pipe but not the program: there, a process that holds a CUDA
context still gets the limit from what the runtime reports (:mod:`devmem_nvidia.runtime_caps`).
"""

from __future__ import annotations

import logging
import os
import shutil
import subprocess
import threading
import time
from collections.abc import Callable, Mapping

from devmem import DevmemError
from devmem.sdk import Files, ForkSafeLock, MemoryLimit, env_text, vendor_text
from devmem_nvidia.limits import mps_limits
from devmem_nvidia.limits import parse_cuda_limit_size as parse_size

log = logging.getLogger("devmem.nvidia")

CONTROL = "nvidia-cuda-mps-control"
DEFAULT_PIPE_DIRECTORY = "/tmp/nvidia-mps"
TIMEOUT_S = 2.0
#: The longest all the runs together may take: they run at once, so this is one run's time and some slack.
TOTAL_TIMEOUT_S = 2 * TIMEOUT_S
#: The most runs at once (a machine with many MIG instances has many ordinals).
PARALLEL_RUNS = 16
QUERY = "get_default_device_pinned_mem_limit"

#: ``run(commands) -> stdout``: the control program fed ``commands`` on stdin (raises OSError or
#: subprocess.SubprocessError where it cannot answer).
Runner = Callable[[str], str]


def pipe_directory(environ: Mapping[str, str]) -> str:
    """``CUDA_MPS_PIPE_DIRECTORY`` (through :func:`devmem.sdk.env_text`), else :data:`DEFAULT_PIPE_DIRECTORY`;
    raises :class:`DevmemError` naming a value that is no path (longer than 4096 characters, a NUL)."""
    return env_text("CUDA_MPS_PIPE_DIRECTORY", environ) or DEFAULT_PIPE_DIRECTORY


def run_control(commands: str) -> str:
    """``nvidia-cuda-mps-control`` with ``commands`` on stdin, under :data:`TIMEOUT_S`; its output as UTF-8, bytes
    that are not replaced (:func:`devmem.sdk.vendor_text`)."""
    program = shutil.which(CONTROL)
    if program is None:
        raise OSError(f"{CONTROL} is not installed")
    done = subprocess.run(
        [program], input=commands.encode(), capture_output=True, timeout=TIMEOUT_S, env=dict(os.environ)
    )
    if done.returncode != 0:
        said = (vendor_text(done.stderr) or "").strip()[:200]
        raise subprocess.SubprocessError(f"{CONTROL} exited {done.returncode}: {said}")
    return vendor_text(done.stdout) or ""


def ask_each(count: int, run: Runner, timeout: float = TOTAL_TIMEOUT_S) -> list[str | None] | None:
    """``run(QUERY <ordinal>)`` for every ordinal below ``count``, at most :data:`PARALLEL_RUNS` at once: each
    answer as text (``None`` where it was none), or ``None`` for all where a run failed or they did not all end
    within ``timeout`` seconds (logged)."""
    answers: list[str | None] = [None] * count
    failed: list[BaseException] = []
    pending = list(range(count - 1, -1, -1))
    taken = ForkSafeLock()

    def worker() -> None:
        while True:
            with taken:
                if not pending or failed:
                    return
                ordinal = pending.pop()
            try:
                answers[ordinal] = vendor_text(run(f"{QUERY} {ordinal}\n"))
            except Exception as exc:  # the program's boundary: a missing program, a timeout, a broken runner
                failed.append(exc)

    workers = [
        threading.Thread(target=worker, name="devmem-mps-control", daemon=True)
        for _ in range(min(count, PARALLEL_RUNS))
    ]
    deadline = time.monotonic() + timeout
    for thread in workers:
        thread.start()
    for thread in workers:
        thread.join(max(0.0, deadline - time.monotonic()))
    if failed:
        log.debug("devmem: the MPS control daemon's default limit is not readable: %s", failed[0])
        return None
    if any(thread.is_alive() for thread in workers):
        log.debug("devmem: the MPS control daemon did not answer within %g s: no default limit applied", timeout)
        return None
    return answers


def daemon_limits(
    count: int, environ: Mapping[str, str], files: Files, run: Runner | None = None, timeout: float = TOTAL_TIMEOUT_S
) -> dict[int, MemoryLimit]:
    """``{device: limit}`` from the control daemon's default pinned limits for ``count`` devices; empty where
    there is no daemon, no program, no limit, no answer within ``timeout`` seconds, or an answer devmem cannot
    place on this process's devices."""
    try:
        pipe = pipe_directory(environ)
    except DevmemError as exc:
        log.warning("devmem: %s; the MPS control daemon is not asked", exc)
        return {}
    if count <= 0 or not files.exists(f"{pipe}/control"):
        return {}
    answers = ask_each(count, run_control if run is None else run, timeout)
    if answers is None:
        return {}
    sizes: list[int | None] = []
    for answer in (a.strip() if a else "" for a in answers):
        try:
            sizes.append(parse_size(answer, QUERY) or None if answer else None)
        except DevmemError:  # an error text, or bytes that are no text: nothing to apply for this ordinal
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
        self._lock = ForkSafeLock()

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
    "PARALLEL_RUNS",
    "TOTAL_TIMEOUT_S",
    "MpsDefaults",
    "Runner",
    "ask_each",
    "daemon_limits",
    "pipe_directory",
    "run_control",
]
