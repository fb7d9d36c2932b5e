"""The backend SDK: everything a devmem backend builds on, in one public module.

A backend (a built-in one or a vendor's wheel) imports from here, from ``devmem``'s public API and from
:mod:`devmem.testing`, and from nothing else of devmem. What is here is covered by devmem's stability promise
(docs/writing-a-backend.md, "The backend SDK"): a name is removed or changes meaning only after a release in
which it warns (``DeprecationWarning``) and a CHANGELOG line. The modules these names live in are devmem's
own layout, free to move.

- The contract: :class:`PlatformBase` (hooks over checked indices), :class:`Platform`, :class:`DeviceMemory`,
  :class:`ProcessMemory`, :class:`Reason`, :class:`ReasonKind`; :func:`as_platform` (a minimal backend adapted).
- Registration: :func:`hookimpl`, :class:`PlatformSpec`, :class:`Detection`, :class:`DriverGate`,
  :func:`deferred`, :func:`gated_detect`, :func:`lazy_exports` (a package's names loaded on first use).
- A vendor library: :class:`VendorSession` (load and init once, under a lock, fork-safe); :class:`ForkSafeLock`
  (every lock a backend keeps, renewed in a forked child), raising
  :class:`LibraryUnavailable` where it cannot be loaded; every error devmem raises is a :class:`DevmemError`.
- The host: :class:`Files` (the /proc and /sys boundary tests script), ``REAL_FILES``, ``read_int``,
  ``read_stripped``, /proc/meminfo and cgroup readers; :class:`CpuPlatform` (the built-in ``cpu`` backend,
  :mod:`devmem.cpu`: host RAM as a device, which unified-memory backends read).
- Figures: :func:`checked_memory` (the one checked entry of a vendor's free/total), :func:`whole_bytes`,
  :func:`process_bytes`, :func:`process_id`, :func:`process_list`, :func:`vendor_text` (per-process figures, process
  lists and a vendor program's output, checked),
  :class:`MemoryLimit` and :func:`apply_limits` (caps that bind this process), :class:`DmemLimits` (cgroup
  ``dmem.max``), :func:`client_memory` (the kernel's DRM fdinfo accounting).
- Visible devices: :func:`pick`, :func:`dropped`, :func:`device_index`, :class:`VisibleDevices`.
- Parsing: :func:`parse_int`, :func:`require_int`, :func:`shown`; environment variables in checked ranges:
  :func:`env_text`, :func:`env_choice`, :func:`env_seconds`; sizes: :func:`parse_size` (devmem's one size
  grammar), :func:`format_size`; ``KiB``/``MiB``/``GiB``.

Every name loads on first use, so a backend's registration module may import from here and stay cheap.
"""

from typing import TYPE_CHECKING

from devmem._lazy import lazy_exports

if TYPE_CHECKING:  # the lazy names below, for type checkers
    from devmem._adapter import MINIMAL_CONTRACT, as_platform
    from devmem._forksafe import ForkSafeLock
    from devmem._hookspecs import hookimpl
    from devmem._host import (
        REAL_FILES,
        Files,
        HostFiles,
        cgroup_memory,
        page_cache_bytes,
        parse_meminfo,
        read_int,
        read_meminfo,
        read_stripped,
    )
    from devmem._lazy import lazy_exports, load_object
    from devmem._readings import process_bytes, process_id, process_list, vendor_text, whole_bytes
    from devmem._text import env_choice, env_seconds, env_text, parse_int, require_int, shown
    from devmem.cpu import CpuPlatform
    from devmem.errors import DevmemError, InvalidTypeError, InvalidValueError, LibraryUnavailable, PluginError
    from devmem.platform import (
        DeviceMemory,
        DeviceReading,
        Platform,
        PlatformBase,
        ProcessMemory,
        Reason,
        ReasonKind,
        checked_memory,
    )
    from devmem.sdk.dmem import DmemLimits, dmem_limits
    from devmem.sdk.drm import client_memory
    from devmem.sdk.drm import fields as drm_fields
    from devmem.sdk.drm import size as drm_size
    from devmem.sdk.lazy import DriverGate, deferred, gated_detect
    from devmem.sdk.limits import MemoryLimit, apply_limits
    from devmem.sdk.sessions import VendorSession
    from devmem.sdk.visible import VisibleDevices, dropped, pick
    from devmem.sdk.visible import index as device_index
    from devmem.types import Detection, GiB, KiB, MemoryInfo, MiB, PlatformSpec, gib
    from devmem.units import format_size, parse_size

#: Each public name, and the module that defines it (``module:attr`` where it has another name there).
_SDK = {
    # the contract a platform implements
    "Platform": "devmem.platform",
    "PlatformBase": "devmem.platform",
    "DeviceMemory": "devmem.platform",
    "DeviceReading": "devmem.platform",
    "ProcessMemory": "devmem.platform",
    "Reason": "devmem.platform",
    "ReasonKind": "devmem.platform",
    "MINIMAL_CONTRACT": "devmem._adapter",
    "as_platform": "devmem._adapter",
    # registration
    "Detection": "devmem.types",
    "PlatformSpec": "devmem.types",
    "MemoryInfo": "devmem.types",
    "KiB": "devmem.types",
    "MiB": "devmem.types",
    "GiB": "devmem.types",
    "gib": "devmem.types",
    "hookimpl": "devmem._hookspecs",
    "DriverGate": "devmem.sdk.lazy",
    "deferred": "devmem.sdk.lazy",
    "gated_detect": "devmem.sdk.lazy",
    "lazy_exports": "devmem._lazy",
    "load_object": "devmem._lazy",
    # errors
    "DevmemError": "devmem.errors",
    "InvalidTypeError": "devmem.errors",
    "InvalidValueError": "devmem.errors",
    "LibraryUnavailable": "devmem.errors",
    "PluginError": "devmem.errors",
    "VendorSession": "devmem.sdk.sessions",
    "ForkSafeLock": "devmem._forksafe",
    # host files and the host's memory
    "Files": "devmem._host",
    "REAL_FILES": "devmem._host",
    "HostFiles": "devmem._host",
    "CpuPlatform": "devmem.cpu",
    "read_stripped": "devmem._host",
    "read_int": "devmem._host",
    "read_meminfo": "devmem._host",
    "parse_meminfo": "devmem._host",
    "page_cache_bytes": "devmem._host",
    "cgroup_memory": "devmem._host",
    # checked figures and limits
    "checked_memory": "devmem.platform",
    "whole_bytes": "devmem._readings",
    "process_bytes": "devmem._readings",
    "process_id": "devmem._readings",
    "process_list": "devmem._readings",
    "vendor_text": "devmem._readings",
    "MemoryLimit": "devmem.sdk.limits",
    "apply_limits": "devmem.sdk.limits",
    "DmemLimits": "devmem.sdk.dmem",
    "dmem_limits": "devmem.sdk.dmem",
    "client_memory": "devmem.sdk.drm",
    # visible devices
    "VisibleDevices": "devmem.sdk.visible",
    "pick": "devmem.sdk.visible",
    "dropped": "devmem.sdk.visible",
    # parsing and sizes
    "parse_int": "devmem._text",
    "env_text": "devmem._text",
    "env_choice": "devmem._text",
    "env_seconds": "devmem._text",
    "require_int": "devmem._text",
    "shown": "devmem._text",
    "format_size": "devmem.units",
    "parse_size": "devmem.units",
    # under another name than in their module
    "device_index": "devmem.sdk.visible:index",
    "drm_size": "devmem.sdk.drm:size",
    "drm_fields": "devmem.sdk.drm:fields",
}

__all__ = [
    "CpuPlatform",
    "Detection",
    "DeviceMemory",
    "DeviceReading",
    "DevmemError",
    "DmemLimits",
    "DriverGate",
    "Files",
    "GiB",
    "InvalidTypeError",
    "InvalidValueError",
    "HostFiles",
    "KiB",
    "LibraryUnavailable",
    "MINIMAL_CONTRACT",
    "MemoryInfo",
    "MemoryLimit",
    "MiB",
    "Platform",
    "PlatformBase",
    "PlatformSpec",
    "PluginError",
    "ProcessMemory",
    "REAL_FILES",
    "Reason",
    "ReasonKind",
    "VendorSession",
    "VisibleDevices",
    "apply_limits",
    "as_platform",
    "cgroup_memory",
    "checked_memory",
    "client_memory",
    "deferred",
    "device_index",
    "dmem_limits",
    "drm_fields",
    "drm_size",
    "dropped",
    "format_size",
    "gated_detect",
    "gib",
    "hookimpl",
    "lazy_exports",
    "load_object",
    "page_cache_bytes",
    "parse_int",
    "parse_meminfo",
    "parse_size",
    "pick",
    "read_int",
    "read_meminfo",
    "read_stripped",
    "require_int",
    "shown",
    "whole_bytes",
    "ForkSafeLock",
    "env_choice",
    "env_seconds",
    "env_text",
    "process_bytes",
    "process_id",
    "process_list",
    "vendor_text",
]

__getattr__, __dir__ = lazy_exports(globals(), _SDK)
