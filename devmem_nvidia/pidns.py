"""Finding this process in NVML's process lists, which carry the PIDs the driver sees.

Some drivers list host PIDs, which a process in its own PID namespace does not know; others translate
them into the caller's namespace (580.159.04 on an H200 listed a process under ``unshare --pid --fork
--mount-proc`` as PID 1). Where this process's own PID is not listed, three sources, cheapest first:

1. ``/proc/self/status`` ``NSpid``: when this namespace's ``/proc`` was mounted from an outer namespace,
   the line lists the outer PID first (``NSpid: 81234 17``); that outer PID is the one to look for.
2. ``/proc/self/maps`` and the driver: whether this process maps ``/dev/nvidiaN`` at all, and whether the
   device's primary context is active. A process that maps no NVIDIA device, or has initialised the
   driver (``cuInit``, as ``torch.cuda.is_available()`` does) without creating a context, holds no device
   memory there, so "not listed" then means 0 bytes, not "unknown".
3. Learning: allocate a distinctive number of bytes through the CUDA driver and see whose usage moved
   by exactly that much; repeat with a second size; the one PID that matched both times is this process's
   driver-side PID. This makes per-process accounting work in a container without ``--pid=host``.

Public names: ``namespace_pids(files)``, ``maps_nvidia_device(files, minor)``, ``AddressSpaceFiles``,
``DeviceAllocator``,
``CudaDriverAllocator``, ``LEARN_SIZES``, ``learn_driver_pid(read_usage, allocator, device)``.
"""

from __future__ import annotations

import ctypes
import logging
import os
import re
import weakref
from collections.abc import Callable, Mapping
from typing import Any, Protocol

from devmem import MiB
from devmem.sdk import REAL_FILES, Files

log = logging.getLogger("devmem.nvidia")

#: Two sizes no allocator produces by chance together: multiples of the driver's 2 MiB page.
LEARN_SIZES = (42 * MiB, 26 * MiB)

_NVIDIA_DEV = re.compile(r"/dev/nvidia([0-9]{1,6})\s*$")


def namespace_pids(files: Files = REAL_FILES) -> list[int]:
    """This process's PIDs from ``/proc/self/status`` ``NSpid``, outermost visible first (``[]`` if unknown)."""
    try:
        text = files.read_text("/proc/self/status")
    except OSError:
        return []
    for line in text.splitlines():
        if line.startswith("NSpid:"):
            fields = line.split()[1:]
            if not all(re.fullmatch(r"[0-9]{1,10}", x) for x in fields):
                return []
            return [int(x) for x in fields]
    return []


def mapped_minors(maps: str) -> list[int]:
    """The minors of the ``/dev/nvidia<minor>`` devices a ``/proc/self/maps`` text maps."""
    return [int(m.group(1)) for m in map(_NVIDIA_DEV.search, maps.splitlines()) if m]


def maps_nvidia_device(files: Files = REAL_FILES, minor: int | None = None) -> bool | None:
    """Whether this process maps ``/dev/nvidia<minor>`` (any NVIDIA GPU when ``minor`` is None).

    ``None`` when ``/proc/self/maps`` cannot be read.
    """
    if isinstance(files, AddressSpaceFiles):
        return files.maps_nvidia_device(minor)
    try:
        text = files.read_text("/proc/self/maps")
    except OSError:
        return None
    minors = mapped_minors(text)
    return bool(minors) if minor is None else minor in minors


def cuda_in_use(files: Files = REAL_FILES) -> bool | None:
    """Whether this process holds a CUDA context on some device, so that ``cuInit`` has already run here.

    A context maps ``/dev/nvidia<minor>``; a loaded ``libcuda`` proves nothing (NVML loads it). Calling ``cuInit``
    in a process that has not would initialise CUDA in it, and under MPS connect it to the MPS server as a
    client (measured on the H200). ``None`` when ``/proc/self/maps`` cannot be read."""
    return maps_nvidia_device(files)


class AddressSpaceFiles:
    """``files``, with ``/proc/self/maps`` read again only where the address space changed since the last read.

    A CUDA context maps the device (and its memory) into the process, which changes the size of its address space
    (``/proc/self/statm``'s first field); reading that size costs a few microseconds where reading the maps of a
    process with torch loaded costs a hundred or more. Where statm is unreadable the maps are read every time.
    On the real filesystem statm is kept open and read again in place (``pread``, about a microsecond, where
    opening it costs several); a forked child opens its own.
    """

    def __init__(self, files: Files):
        self._files = files
        #: (statm's size field, the maps read with it, the NVIDIA device minors they map)
        self._maps: tuple[str, str, frozenset[int]] | None = None
        self._direct = files is REAL_FILES
        self._statm: tuple[int, int] | None = None  # (the PID that opened it, its descriptor), real files only

    def _size(self) -> str:
        """The size field of ``/proc/self/statm`` (raises OSError where it cannot be read)."""
        if not self._direct:
            return self._files.read_text("/proc/self/statm").split(" ", 1)[0]
        pid, kept = os.getpid(), self._statm
        if kept is None or kept[0] != pid:  # first use, or a forked child: the descriptor names its parent's file
            fd = os.open("/proc/self/statm", os.O_RDONLY | os.O_CLOEXEC)
            weakref.finalize(self, os.close, fd)
            kept = self._statm = (pid, fd)
        return os.pread(kept[1], 128, 0).split(b" ", 1)[0].decode()

    def _current(self) -> tuple[str, str, frozenset[int]] | None:
        try:
            size = self._size()
        except OSError:
            return None
        cached = self._maps
        if cached is None or cached[0] != size:
            text = self._files.read_text("/proc/self/maps")
            cached = self._maps = (size, text, frozenset(mapped_minors(text)))
        return cached

    def read_text(self, path: str) -> str:
        current = self._current() if path == "/proc/self/maps" else None
        return current[1] if current is not None else self._files.read_text(path)

    def maps_nvidia_device(self, minor: int | None) -> bool | None:
        """:func:`maps_nvidia_device` from the maps read with the current address-space size."""
        try:
            current = self._current()
        except OSError:
            return None
        if current is None:
            return maps_nvidia_device(self._files, minor)
        return bool(current[2]) if minor is None else minor in current[2]

    def exists(self, path: str) -> bool:
        return self._files.exists(path)

    def listdir(self, path: str) -> list[str]:
        return self._files.listdir(path)


class DeviceAllocator(Protocol):
    """The runtime boundary PID learning allocates through (scripted in tests by ``ScriptedAllocator``)."""

    def available(self, device: int) -> tuple[bool, str]: ...

    def has_context(self, device: int) -> bool | None: ...

    def allocate(self, device: int, nbytes: int) -> Any: ...

    def free(self, token: Any) -> None: ...


class CudaDriverAllocator:
    """``cuMemAlloc``/``cuMemFree`` on the device's primary context, through ``libcuda`` (ctypes).

    Used only when this process already uses CUDA (:func:`cuda_in_use`) and the device's primary context is
    active (what torch, vLLM, llama.cpp... use), so it never creates a context or imports torch; with
    ``create_context=True`` the caller allows creating one. Raw driver allocations bypass any caching
    allocator, so usage moves by exactly the bytes asked for, and is given back at once.
    """

    def __init__(self, files: Files = REAL_FILES, *, create_context: bool = False, library: str = "libcuda.so.1"):
        self._files = files
        self._create_context = create_context
        self._library = library
        self._cuda: Any = None

    def _lib(self) -> Any:
        if self._cuda is None:
            self._cuda = ctypes.CDLL(self._library)
        return self._cuda

    def _check(self, what: str, rc: int) -> None:
        if rc != 0:
            raise OSError(f"{what} returned CUDA error {rc}")

    def _device(self, device: int) -> ctypes.c_int:
        cuda = self._lib()
        self._check("cuInit", cuda.cuInit(0))
        dev = ctypes.c_int()
        self._check("cuDeviceGet", cuda.cuDeviceGet(ctypes.byref(dev), device))
        return dev

    def _cuda_in_use(self) -> bool:
        """Whether this process holds a CUDA context somewhere (raises OSError when /proc/self/maps cannot be read).

        See :func:`cuda_in_use`: only then is ``cuInit`` asked, which would otherwise initialise CUDA here."""
        found = cuda_in_use(self._files)
        if found is None:
            raise OSError("/proc/self/maps cannot be read")
        return found

    def _primary_context_active(self, device: int) -> bool:
        """``cuDevicePrimaryCtxGetState``: whether the device's primary context is active (OSError on failure)."""
        dev = self._device(device)
        flags, active = ctypes.c_uint(), ctypes.c_int()
        self._check(
            "cuDevicePrimaryCtxGetState",
            self._lib().cuDevicePrimaryCtxGetState(dev, ctypes.byref(flags), ctypes.byref(active)),
        )
        return bool(active.value)

    def has_context(self, device: int) -> bool | None:
        """Whether the device's primary context is active (``None`` when the driver cannot say).

        A process that maps no NVIDIA device has no context; one that does is asked without creating one.
        """
        try:
            if not self._cuda_in_use():
                return False
            return self._primary_context_active(device)
        except OSError:
            return None

    def available(self, device: int) -> tuple[bool, str]:
        if not self._create_context:
            try:
                in_use = self._cuda_in_use()
            except OSError as exc:
                return False, f"cannot read /proc/self/maps: {exc}"
            if not in_use:
                return False, "this process has no CUDA context (it maps no NVIDIA device)"
        try:
            active = self._primary_context_active(device)
        except OSError as exc:
            return False, f"CUDA driver unusable: {exc}"
        if not active and not self._create_context:
            return False, f"no active CUDA context on device {device}"
        return True, "CUDA driver primary context"

    def allocate(self, device: int, nbytes: int) -> Any:
        cuda = self._lib()
        dev = self._device(device)
        ctx, ptr, old = ctypes.c_void_p(), ctypes.c_uint64(), ctypes.c_void_p()
        self._check("cuDevicePrimaryCtxRetain", cuda.cuDevicePrimaryCtxRetain(ctypes.byref(ctx), dev))
        try:
            self._check("cuCtxPushCurrent", cuda.cuCtxPushCurrent_v2(ctx))
            try:
                self._check("cuMemAlloc", cuda.cuMemAlloc_v2(ctypes.byref(ptr), ctypes.c_size_t(nbytes)))
            finally:
                cuda.cuCtxPopCurrent_v2(ctypes.byref(old))
        except OSError:
            cuda.cuDevicePrimaryCtxRelease_v2(dev)
            raise
        return dev, ctx, ptr

    def free(self, token: Any) -> None:
        dev, ctx, ptr = token
        cuda, old = self._lib(), ctypes.c_void_p()
        cuda.cuCtxPushCurrent_v2(ctx)
        try:
            self._check("cuMemFree", cuda.cuMemFree_v2(ptr))
        finally:
            cuda.cuCtxPopCurrent_v2(ctypes.byref(old))
            cuda.cuDevicePrimaryCtxRelease_v2(dev)


def learn_driver_pid(
    read_usage: Callable[[], Mapping[int, int | None]],
    allocator: DeviceAllocator,
    device: int,
    sizes: tuple[int, ...] = LEARN_SIZES,
) -> tuple[int | None, str]:
    """Find this process's driver-side PID: the one entry whose usage moved by exactly each of ``sizes``.

    ``read_usage()`` returns the device's process list as PID -> bytes. Returns ``(pid, how)`` or
    ``(None, why not)``; never raises for a failed allocation or an ambiguous answer.
    """
    ok, why = allocator.available(device)
    if not ok:
        return None, f"cannot learn the driver-side PID: {why}"
    matched: set[int] | None = None
    for size in sizes:
        before = read_usage()
        try:
            token = allocator.allocate(device, size)
        except (OSError, RuntimeError, MemoryError) as exc:
            return None, f"cannot learn the driver-side PID: allocating {size} bytes failed: {exc}"
        try:
            after = read_usage()
        finally:
            allocator.free(token)
        moves = {pid: used - (before.get(pid) or 0) for pid, used in after.items() if used is not None}
        exact = {pid for pid, moved in moves.items() if moved == size}
        matched = exact if matched is None else matched & exact
        if not matched:
            seen = ", ".join(f"PID {pid}: {moved:+d}" for pid, moved in sorted(moves.items()) if moved) or "none"
            return None, (
                f"cannot learn the driver-side PID: no process's usage moved by exactly {size} bytes "
                f"(moves seen: {seen})"
            )
    assert matched is not None
    if len(matched) > 1:
        return None, f"cannot learn the driver-side PID: PIDs {sorted(matched)} all moved by exactly {list(sizes)}"
    pid = matched.pop()
    how = f"learned from allocations of {' and '.join(str(s) for s in sizes)} bytes"
    log.debug("devmem: this process is PID %d to the NVIDIA driver (%s)", pid, how)
    return pid, how
