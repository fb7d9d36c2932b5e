"""Limits a CUDA process is given through its environment, read where NVML cannot see them.

- MPS: ``CUDA_MPS_PINNED_DEVICE_MEM_LIMIT`` holds ``<ordinal>=<size>`` pairs separated by commas
  (``"0=8G,1=4G"``), the ordinal being the client's CUDA device index; a bare ``<size>`` (``"8G"``) is taken
  for every device. The MPS control daemon's ``set_default_device_pinned_mem_limit`` sets a default that
  the client's environment does not show; export the variable to the client as well so devmem reads it.
- HAMi-style vGPU limits (HAMi-core's ``libvgpu.so``): ``CUDA_DEVICE_MEMORY_LIMIT_<i>`` for CUDA device ``i``,
  else ``CUDA_DEVICE_MEMORY_LIMIT`` for every device.

These variables define their own size grammar, which is not devmem's (:func:`devmem.parse_size`, where ``8GB`` is
8e9 bytes): a whole number with an optional unit that is always binary, ``8G`` = ``8GB`` = ``8GiB`` = 8 GiB,
``8192m``, ``512K``, or bytes. :func:`parse_cuda_limit_size` reads it, for these variables and for the MPS control
daemon's answers only; every other size in devmem and its backends is :func:`devmem.parse_size`'s.
"""

from __future__ import annotations

import re
from collections.abc import Mapping

from devmem import DevmemError
from devmem.sdk import MemoryLimit, env_text, shown

MPS_LIMIT = "CUDA_MPS_PINNED_DEVICE_MEM_LIMIT"
VGPU_LIMIT = "CUDA_DEVICE_MEMORY_LIMIT"

_SIZE = re.compile(r"^\s*([0-9]{1,20})\s*([kmgt]?)(i?b)?\s*$", re.IGNORECASE | re.ASCII)
_SCALE = {"": 1, "k": 1 << 10, "m": 1 << 20, "g": 1 << 30, "t": 1 << 40}
#: Sizes must be below this: 2**64 bytes (16 EiB) is more than any device has.
TOO_LARGE = 1 << 64


def parse_cuda_limit_size(text: str, variable: str) -> int:
    """A size in the grammar of CUDA's MPS and HAMi limit variables (units always binary: ``"8G"`` and ``"8GB"``
    are 8589934592); raises :class:`DevmemError` naming ``variable`` and the allowed forms."""
    m = _SIZE.match(text)
    if m is None or (m.group(3) and not m.group(2) and m.group(3).lower() != "b"):
        raise DevmemError(
            f"{variable}: {shown(text)} is not a size; use a whole number of bytes or one with a unit "
            "K, M, G or T (binary: 8G = 8 GiB; 8192M, 8GB and 8GiB also work), below 2**64 bytes"
        )
    size = int(m.group(1)) * _SCALE[m.group(2).lower()]
    if size >= TOO_LARGE:
        raise DevmemError(f"{variable}: {shown(text)} is larger than any device: a size must be below 2**64 bytes")
    return size


def mps_limits(environ: Mapping[str, str]) -> dict[int | None, int]:
    """``CUDA_MPS_PINNED_DEVICE_MEM_LIMIT`` as ``{ordinal: bytes}``; the key ``None`` holds a bare size (every
    device)."""
    raw = env_text(MPS_LIMIT, environ)
    out: dict[int | None, int] = {}
    for entry in (e.strip() for e in raw.split(",") if e.strip()):
        ordinal, sep, size = entry.partition("=")
        if not sep:
            out[None] = parse_cuda_limit_size(entry, MPS_LIMIT)
            continue
        if not re.fullmatch(r"[0-9]{1,6}", ordinal.strip()):
            raise DevmemError(
                f"{MPS_LIMIT}={shown(raw)}: {shown(ordinal.strip())} is not a device ordinal; "
                "use <ordinal>=<size> pairs separated by commas, e.g. 0=8G,1=4G"
            )
        out[int(ordinal)] = parse_cuda_limit_size(size, MPS_LIMIT)
    return out


def env_limits(environ: Mapping[str, str], device: int) -> list[MemoryLimit]:
    """The environment's limits on CUDA device ``device`` (MPS first, then a vGPU limit)."""
    out = []
    mps = mps_limits(environ)
    key = device if device in mps else None if None in mps else -1
    if key != -1:
        out.append(
            MemoryLimit(mps[key], "MPS pinned device memory limit", f"{MPS_LIMIT}={env_text(MPS_LIMIT, environ)}")
        )
    for name in (f"{VGPU_LIMIT}_{device}", VGPU_LIMIT):
        raw = env_text(name, environ)
        if raw:
            out.append(MemoryLimit(parse_cuda_limit_size(raw, name), "vGPU memory limit (HAMi-style)", f"{name}={raw}"))
            break
    return out


__all__ = ["MPS_LIMIT", "VGPU_LIMIT", "env_limits", "mps_limits", "parse_cuda_limit_size"]
