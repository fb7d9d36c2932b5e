"""The HIP runtime's device indices, mapped to amdsmi's GPUs.

Two layers, each as its runtime's source parses it:

1. ``ROCR_VISIBLE_DEVICES`` (ROCm runtime, ``rocr/core/runtime/amd_filter_device.cpp``) picks from every
   GPU, in HIP order, and surfaces them in the order given. Set but empty: no GPU. Entries are trimmed and
   upper-cased; an entry starting with ``G`` is a ``GPU-<serial>`` UUID or a unique prefix of one, any other
   is a C integer (``1``, ``0x1``). The first entry that is invalid, out of range, ambiguous or repeated
   ends the list; at most as many entries as GPUs are read.
2. then ``HIP_VISIBLE_DEVICES``, or ``CUDA_VISIBLE_DEVICES`` when that is unset or empty (HIP runtime,
   ``clr/rocclr/device/rocm/rocdevice.cpp``), picks from what ROCr left. Empty or unset: every GPU.
   An entry is a decimal index written plainly (``1``, not `` 1`` or ``01``) or contains ``GPU-<serial>``
   (the first GPU whose UUID contains it); the first invalid entry ends the list; repeats are skipped.

Disagreements are reported, not fatal: the runtime itself runs with them, so devmem follows the runtime
(the device it reports is the one torch will use) and says what it did in a warning and in the platform's
notes, with the fix. An engine that prefers to refuse can check ``VisibleDevices.conflicts``.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Protocol, TypeVar

from devmem.sdk import VisibleDevices, device_index, dropped, pick

ROCR = "ROCR_VISIBLE_DEVICES"
HIP = "HIP_VISIBLE_DEVICES"
CUDA = "CUDA_VISIBLE_DEVICES"


class HipDevice(Protocol):
    """What the selection needs of a GPU: the ``GPU-`` UUID keys a variable may name it by."""

    def uuid_keys(self) -> tuple[str, ...]: ...


G = TypeVar("G", bound=HipDevice)


def _uuids(gpu: HipDevice) -> list[str]:
    """The device's ``GPU-<serial>`` UUIDs, upper case (ROCr compares upper case)."""
    return [f"GPU-{key.zfill(16)}".upper() for key in gpu.uuid_keys()]


def _c_integer(token: str) -> int | None:
    """``strtol(token, &end, 0)`` when it consumes the whole token, else ``None``."""
    sign, digits = (-1, token[1:]) if token[:1] == "-" else (1, token.removeprefix("+"))
    if not re.fullmatch(r"(0[xX][0-9a-fA-F]{1,16}|[0-9]{1,20})", digits):  # ASCII only, bounded: as strtol reads
        return None
    try:
        if digits[:2] in ("0X", "0x"):
            return sign * int(digits[2:], 16)
        if digits.startswith("0") and len(digits) > 1:
            return sign * int(digits[1:], 8)
        return sign * int(digits)
    except ValueError:
        return None


def _rocr(raw: str, gpus: Sequence[G]) -> tuple[list[G], str | None]:
    if raw == "":
        return [], f"{ROCR} is set but empty, so no GPU is visible; unset it to see every GPU"

    def match(token: str) -> list[G] | None:
        if token.startswith("G"):
            hits = [g for g in gpus if 5 <= len(token) <= 20 and any(u.startswith(token) for u in _uuids(g))]
            return hits if len(hits) == 1 else None
        index = _c_integer(token)
        return [gpus[index]] if index is not None and 0 <= index < len(gpus) else None

    chosen, stop = pick([t.strip().upper() for t in raw.split(",")][: len(gpus)], match, repeats_end=True)
    if stop is None:
        return chosen, None
    why = "repeats a GPU" if stop.repeat else f"names none of the {len(gpus)} GPU(s) on this machine (or more than one)"
    return chosen, dropped(ROCR, raw, stop.token, why, len(chosen))


def _hip(var: str, raw: str, pool: Sequence[G], within: str) -> tuple[list[G], str | None]:
    def match(token: str) -> list[G] | None:
        if "GPU-" in token:
            gpu = next((g for g in pool if any(token.upper() in u for u in _uuids(g))), None)
        else:
            position = device_index(token)
            gpu = pool[position] if position is not None and str(position) == token and position < len(pool) else None
        return None if gpu is None else [gpu]

    chosen, stop = pick(raw.split(","), match, repeats_end=False)
    if stop is None:
        return chosen, None
    return chosen, dropped(var, raw, stop.token, f"names none of the {len(pool)} GPU(s) {within}", len(chosen))


def select_visible(gpus: Sequence[G], environ: Mapping[str, str]) -> VisibleDevices[G]:
    """Apply ``ROCR_VISIBLE_DEVICES`` then ``HIP_VISIBLE_DEVICES`` (or ``CUDA_VISIBLE_DEVICES``) to ``gpus``,
    which must be in HIP order (:func:`devmem_rocm.devices.hip_order`). Any object with ``uuid_keys()``
    (:class:`HipDevice`) can be selected."""
    pool, rule, conflicts = list(gpus), [], []
    rocr = environ.get(ROCR)
    if rocr is not None:
        pool, problem = _rocr(rocr, pool)
        rule.append(f"{ROCR}={rocr}")
        conflicts += [problem] if problem else []
    hip, cuda = environ.get(HIP) or "", environ.get(CUDA) or ""
    var, raw = (HIP, hip) if hip else (CUDA, cuda)
    if hip and cuda and hip != cuda:
        conflicts.append(
            f"{HIP}={hip!r} and {CUDA}={cuda!r} disagree; the HIP runtime follows {HIP} and "
            f"ignores {CUDA}, and so does devmem. Set only one of them, or both alike"
        )
    if raw:
        within = f"left by {ROCR}={rocr!r}" if rocr is not None else "on this machine"
        pool, problem = _hip(var, raw, pool, within)
        rule.append(f"{var}={raw}")
        conflicts += [problem] if problem else []
    return VisibleDevices(tuple(pool), " then ".join(rule) or "every GPU (no *_VISIBLE_DEVICES set)", tuple(conflicts))


__all__ = ["CUDA", "HIP", "ROCR", "HipDevice", "select_visible"]
