"""The CUDA driver API through ctypes, for machines where NVML cannot serve: device-wide figures only.

:class:`CudaDriver` is the session: ``libcuda.so.1`` loaded and ``cuInit`` called once under a lock on first
use (never at import or detection), one :meth:`CudaDriver.call` every call goes through, and a failing call
raised as :class:`CudaCallError` (a :class:`~devmem.DevmemError`) with the driver's error name.

It never creates a CUDA context: free memory is asked (``cuMemGetInfo_v2``) only where this process's primary
context on the device is already active (``cuDevicePrimaryCtxGetState``), by retaining that context, making
it current for the one call and releasing it. ``cuInit`` does initialise the driver in this process, as any
CUDA program's first call does (under MPS it also connects the process to the MPS server as a client): a
process that forks workers afterwards should start them with ``spawn``.
"""

from __future__ import annotations

import ctypes
import logging
from typing import Any

from devmem import DevmemError
from devmem.sdk import ForkSafeLock

log = logging.getLogger("devmem.nvidia")

LIBRARY = "libcuda.so.1"
CUDA_SUCCESS = 0
CU_DEVICE_ATTRIBUTE_INTEGRATED = 18


class CudaCallError(DevmemError):
    """A CUDA driver call failed; ``error`` is the driver's name for the code (``"CUDA_ERROR_NO_DEVICE"``)."""

    def __init__(self, call: str, error: str):
        self.call = call
        self.error = error
        super().__init__(f"{call} failed: {error}")


class CudaDriver:
    """One CUDA driver library for the process. ``library``: a loaded ``libcuda`` (or a scripted one from
    ``devmem_nvidia.testing``); ``None`` loads :data:`LIBRARY` on first use."""

    def __init__(self, library: Any = None):
        self._library = library
        self._ready = False
        self._failure: str | None = None
        self._lock = ForkSafeLock()
        self._devices: dict[int, int] = {}

    @classmethod
    def shared(cls) -> CudaDriver:
        """The process's driver on the real ``libcuda`` (loaded and initialised once, for every platform)."""
        global _shared
        with _shared_lock:
            if _shared is None:
                _shared = cls()
            return _shared

    @property
    def library(self) -> Any:
        """The initialised library; raises :class:`DevmemError` with the reason where it cannot be."""
        if not self._ready:
            with self._lock:
                if not self._ready and self._failure is None:
                    self._initialise()
        if self._failure is not None:
            raise DevmemError(f"the CUDA driver is unavailable: {self._failure}")
        return self._library

    def _initialise(self) -> None:
        if self._library is None:
            try:
                self._library = ctypes.CDLL(LIBRARY)
            except OSError as exc:
                self._failure = f"{LIBRARY} cannot be loaded: {exc}"
                return
        try:
            code = self._library.cuInit(0)
        except (AttributeError, OSError) as exc:
            self._failure = f"cuInit cannot be called: {exc}"
            return
        if code != CUDA_SUCCESS:
            self._failure = f"cuInit failed: {self._name(code)}"
            return
        self._ready = True

    def _name(self, code: int) -> str:
        text = ctypes.c_char_p()
        try:
            if self._library.cuGetErrorName(code, ctypes.byref(text)) == CUDA_SUCCESS and text.value:
                return text.value.decode()
        except (AttributeError, OSError):
            pass
        return f"CUresult {code}"

    def call(self, name: str, *args: Any) -> None:
        """``libcuda.<name>(*args)``; a non-zero result raises :class:`CudaCallError`."""
        library = self.library
        try:
            code = getattr(library, name)(*args)
        except (AttributeError, OSError, ctypes.ArgumentError) as exc:
            raise CudaCallError(name, f"cannot be called ({exc})") from exc
        if code != CUDA_SUCCESS:
            raise CudaCallError(name, self._name(code))

    # ---- devices -------------------------------------------------------------------------------
    def device_count(self) -> int:
        """Devices the driver shows this process (it applies ``CUDA_VISIBLE_DEVICES`` itself)."""
        count = ctypes.c_int()
        self.call("cuDeviceGetCount", ctypes.byref(count))
        return count.value

    def device(self, ordinal: int) -> int:
        """The driver's handle of device ``ordinal`` (fixed for the process, so asked once)."""
        if ordinal not in self._devices:
            dev = ctypes.c_int()
            self.call("cuDeviceGet", ctypes.byref(dev), ordinal)
            self._devices[ordinal] = dev.value
        return self._devices[ordinal]

    def total_memory(self, ordinal: int) -> int:
        size = ctypes.c_size_t()
        self.call("cuDeviceTotalMem_v2", ctypes.byref(size), self.device(ordinal))
        return size.value

    def name(self, ordinal: int) -> str:
        buf = ctypes.create_string_buffer(256)
        self.call("cuDeviceGetName", buf, 256, self.device(ordinal))
        return buf.value.decode(errors="replace")

    def pci_bus_id(self, ordinal: int) -> str:
        """The kernel-form PCI address (``0000:19:00.0``)."""
        buf = ctypes.create_string_buffer(32)
        self.call("cuDeviceGetPCIBusId", buf, 32, self.device(ordinal))
        return buf.value.decode().lower()

    def uuid(self, ordinal: int) -> str:
        """The device's UUID as NVML writes it: ``GPU-`` and the 16 bytes of ``cuDeviceGetUuid`` in 8-4-4-4-12 hex,
        or, for a MIG instance (where ``cuDeviceGetUuid_v2`` answers the instance's UUID, the plain call the
        parent GPU's), ``MIG-`` and the instance's."""
        gpu = self._uuid_bytes("cuDeviceGetUuid", ordinal)
        try:
            instance = self._uuid_bytes("cuDeviceGetUuid_v2", ordinal)
        except CudaCallError:  # a driver older than CUDA 11.4: no MIG identity to tell apart
            instance = gpu
        if instance != gpu:
            return "MIG-" + _uuid_text(instance)
        return "GPU-" + _uuid_text(gpu)

    def _uuid_bytes(self, call: str, ordinal: int) -> bytes:
        raw = (ctypes.c_char * 16)()
        self.call(call, raw, self.device(ordinal))
        return bytes(raw)

    def integrated(self, ordinal: int) -> bool:
        value = ctypes.c_int()
        self.call("cuDeviceGetAttribute", ctypes.byref(value), CU_DEVICE_ATTRIBUTE_INTEGRATED, self.device(ordinal))
        return bool(value.value)

    def context_active(self, ordinal: int) -> bool:
        """Whether this process's primary context on the device exists (asking creates nothing)."""
        flags, active = ctypes.c_uint(), ctypes.c_int()
        self.call("cuDevicePrimaryCtxGetState", self.device(ordinal), ctypes.byref(flags), ctypes.byref(active))
        return bool(active.value)

    def _free_total(self) -> tuple[int, int]:
        free, total = ctypes.c_size_t(), ctypes.c_size_t()
        self.call("cuMemGetInfo_v2", ctypes.byref(free), ctypes.byref(total))
        return free.value, total.value

    def _current_device(self) -> int | None:
        """The device of this thread's current context, ``None`` without one."""
        ctx = ctypes.c_void_p()
        self.call("cuCtxGetCurrent", ctypes.byref(ctx))
        if not ctx.value:
            return None
        dev = ctypes.c_int()
        self.call("cuCtxGetDevice", ctypes.byref(dev))
        return dev.value

    def mem_get_info(self, ordinal: int) -> tuple[int, int] | None:
        """``(free, total)`` as the runtime reports them, or ``None`` where this process has no context on the
        device (asking would create one). Where this thread's current context is on the device (as torch leaves
        it) that context answers; otherwise the device's primary context, retained for the one call."""
        dev = self.device(ordinal)
        if self._current_device() == dev:
            return self._free_total()
        if not self.context_active(ordinal):
            return None
        ctx = ctypes.c_void_p()
        self.call("cuDevicePrimaryCtxRetain", ctypes.byref(ctx), dev)
        try:
            self.call("cuCtxPushCurrent_v2", ctx)
            try:
                return self._free_total()
            finally:
                self.call("cuCtxPopCurrent_v2", ctypes.byref(ctypes.c_void_p()))
        finally:
            self.call("cuDevicePrimaryCtxRelease_v2", dev)


_shared: CudaDriver | None = None
_shared_lock = ForkSafeLock()


def _uuid_text(raw: bytes) -> str:
    """16 bytes as 8-4-4-4-12 lowercase hex."""
    h = raw.hex()
    return f"{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:32]}"


__all__ = ["CU_DEVICE_ATTRIBUTE_INTEGRATED", "CUDA_SUCCESS", "CudaCallError", "CudaDriver", "LIBRARY"]
