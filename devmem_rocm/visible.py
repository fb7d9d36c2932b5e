"""The HIP runtime's device indices, mapped to amdsmi's GPUs.

The rule, from ROCm's "GPU isolation techniques" page and the HIP runtime:

1. ``ROCR_VISIBLE_DEVICES`` (ROCm runtime level, every ROCm application) picks from all GPUs, in HIP order;
2. then ``HIP_VISIBLE_DEVICES`` picks from what remains; ``CUDA_VISIBLE_DEVICES`` "has the same effect"
   and is read only when ``HIP_VISIBLE_DEVICES`` is unset.

Each is a comma-separated list of indices or ``GPU-<serial>`` UUIDs (a unique prefix is enough); unset
means every device and set-but-empty means none. The first entry that is invalid (not a number or
``GPU-`` UUID, out of range, ambiguous, repeated) ends the list, as the CUDA and HIP runtimes treat them.

Disagreements are reported, not fatal: the runtime itself runs with them, so devmem follows the runtime
(the device it reports is the one torch will use) and says what it did in a warning and in the platform's
notes, with the fix. An engine that prefers to refuse can check :attr:`Selection.conflicts`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping

from devmem_rocm.devices import AmdGpu

ROCR = "ROCR_VISIBLE_DEVICES"
HIP = "HIP_VISIBLE_DEVICES"
CUDA = "CUDA_VISIBLE_DEVICES"


@dataclass(frozen=True)
class Selection:
    """The HIP devices, in index order; ``rule`` says which variables made them; ``conflicts`` are
    sentences for people about variables that disagree or entries that were dropped."""

    devices: tuple[AmdGpu, ...]
    rule: str
    conflicts: tuple[str, ...] = ()


def _match(token: str, pool: list[AmdGpu]) -> AmdGpu | None:
    if token.isdigit():
        index = int(token)
        return pool[index] if index < len(pool) else None
    if token.lower().startswith("gpu-") and len(token) > 4:
        key = token[4:].lower()
        hits = [g for g in pool if any(k.startswith(key) for k in g.uuid_keys())]
        return hits[0] if len(hits) == 1 else None
    return None


def _pick(var: str, raw: str, pool: list[AmdGpu], within: str) -> tuple[list[AmdGpu], str | None]:
    """Apply one variable to ``pool``: the chosen GPUs and, when an entry was dropped, why."""
    if not raw.strip():
        return [], f"{var} is set but empty, so no GPU is visible; unset it to see every GPU"
    chosen: list[AmdGpu] = []
    for position, token in enumerate(t.strip() for t in raw.split(",")):
        gpu = _match(token, pool)
        if gpu is None or gpu in chosen:
            what = "repeats a GPU" if gpu is not None else f"names none of the {len(pool)} GPU(s) {within}"
            dropped = ", ".join(t.strip() for t in raw.split(",")[position:])
            return chosen, (f"{var}={raw!r}: entry {token!r} {what}; the runtime ignores it and what follows "
                            f"({dropped}), leaving {len(chosen)} GPU(s). Fix {var}")
        chosen.append(gpu)
    return chosen, None


def select_visible(gpus: list[AmdGpu], environ: Mapping[str, str]) -> Selection:
    """Apply ``ROCR_VISIBLE_DEVICES`` then ``HIP_VISIBLE_DEVICES`` (or ``CUDA_VISIBLE_DEVICES``) to ``gpus``,
    which must be in HIP order (:func:`devmem_rocm.devices.hip_order`)."""
    pool, rule, conflicts = list(gpus), [], []
    rocr = environ.get(ROCR)
    if rocr is not None:
        pool, problem = _pick(ROCR, rocr, pool, "on this machine")
        rule.append(f"{ROCR}={rocr}")
        conflicts += [problem] if problem else []
    hip, cuda = environ.get(HIP), environ.get(CUDA)
    var, raw = (HIP, hip) if hip is not None else (CUDA, cuda)
    if hip is not None and cuda is not None and hip.strip() != cuda.strip():
        conflicts.append(f"{HIP}={hip!r} and {CUDA}={cuda!r} disagree; the HIP runtime follows {HIP} and "
                         f"ignores {CUDA}, and so does devmem. Set only one of them, or both alike")
    if raw is not None:
        within = f"left by {ROCR}={rocr!r}" if rocr is not None else "on this machine"
        pool, problem = _pick(var, raw, pool, within)
        rule.append(f"{var}={raw}")
        conflicts += [problem] if problem else []
    return Selection(tuple(pool), " then ".join(rule) or "every GPU (no *_VISIBLE_DEVICES set)", tuple(conflicts))


__all__ = ["CUDA", "HIP", "ROCR", "Selection", "select_visible"]
