"""The phases of :class:`devmem.EngineMemory` and the one table of the steps each allows and where each leads.

An engine's memory object goes created -> profiled (-> graphs captured) (-> block cost measured) -> planned ->
allocated (-> graphs captured after the cache); a stored profile read at start takes it from created to the plan
at once. While a step runs the object is in that step's busy phase, which allows nothing: the steps run one at a
time, in order, in any thread. A window whose block raised leaves it in a failed phase, which allows opening the
window again. Every step the table does not allow is refused by one error, :class:`~devmem.errors.StepRefused`,
naming the step asked for and the phase.
"""

from __future__ import annotations

import os
from enum import Enum
from typing import TYPE_CHECKING

from devmem.errors import StepRefused

if TYPE_CHECKING:
    from devmem.engine.memory import EngineMemory


class Phase(str, Enum):
    """Where an :class:`~devmem.EngineMemory` is in its lifecycle (the value is what refusals say)."""

    CREATED = "created"
    PROFILE_FAILED = "profile window failed"
    PROFILED = "profiled"
    GRAPHS_FAILED = "graph window failed"
    GRAPHED = "graphs captured"
    COSTED = "block cost measured"
    STORED = "stored profile read"
    PLANNED = "planned"
    ALLOCATED = "allocated"
    CAPTURED = "graphs captured after the cache"
    CLOSED = "closed"
    FORKED = "in a forked child"
    # a step under way
    PROFILING = "profile window open"
    CAPTURING = "graph window open"
    MEASURING = "measuring a block's cost"
    READING = "reading a stored profile"
    KEEPING = "keeping the profile"
    PLANNING = "planning"
    ALLOCATING = "allocating"
    CAPTURING_AFTER = "graph window after the cache open"


_PROFILE = ("profile", "profile_forward", "profile_blocks")

#: phase -> the steps it allows -> the phase each leads to once it has run to its end.
TRANSITIONS: dict[Phase, dict[str, Phase]] = {
    Phase.CREATED: {**dict.fromkeys(_PROFILE, Phase.PROFILED), "load_profile": Phase.STORED, "plan": Phase.PLANNED},
    Phase.PROFILE_FAILED: dict.fromkeys(_PROFILE, Phase.PROFILED),
    Phase.PROFILED: {"graphs": Phase.GRAPHED, "measure_block_cost": Phase.COSTED, "plan": Phase.PLANNED},
    Phase.GRAPHS_FAILED: {"graphs": Phase.GRAPHED},
    Phase.GRAPHED: {"measure_block_cost": Phase.COSTED, "plan": Phase.PLANNED},
    Phase.COSTED: {"save_profile": Phase.COSTED, "plan": Phase.PLANNED},
    Phase.STORED: {"save_profile": Phase.STORED, "plan": Phase.PLANNED},
    Phase.PLANNED: {"allocate": Phase.ALLOCATED, "graphs_after_cache": Phase.CAPTURED},
    Phase.ALLOCATED: {"graphs_after_cache": Phase.CAPTURED},
}

#: The phase the object is in while each step runs.
BUSY = {
    **dict.fromkeys(_PROFILE, Phase.PROFILING),
    "graphs": Phase.CAPTURING,
    "measure_block_cost": Phase.MEASURING,
    "load_profile": Phase.READING,
    "save_profile": Phase.KEEPING,
    "plan": Phase.PLANNING,
    "allocate": Phase.ALLOCATING,
    "graphs_after_cache": Phase.CAPTURING_AFTER,
}

#: Where a step that raised leaves the object: a window that did not finish may be opened again (every other
#: step leaves it where it was).
FAILED = {**dict.fromkeys(_PROFILE, Phase.PROFILE_FAILED), "graphs": Phase.GRAPHS_FAILED}

#: What each phase means, for the refusal (the phases whose meaning depends on the object say it there).
MEANING = {
    Phase.CREATED: "nothing measured yet: the profile window (memory.profile, profile_forward, profile_blocks) or "
    "load_profile comes next",
    Phase.PROFILED: "the profile window ran; profile once, then plan",
    Phase.GRAPHED: "the profile and graph windows ran; capture every graph in one window, then plan",
    Phase.PLANNED: "the KV cache was planned; plan once, then allocate",
    Phase.ALLOCATED: "the KV cache was allocated",
    Phase.CAPTURED: "the graphs captured after the cache were measured; nothing is left to do",
}


#: Steps a phase allows only to an object whose cache is pinned (``pinned_bytes``): it may plan unprofiled.
PINNED_ONLY = {(Phase.CREATED, "plan")}


def next_phase(phase: Phase, step: str, *, pinned: bool) -> Phase | None:
    """The phase ``step`` leads to from ``phase``, or ``None`` where the table does not allow it there."""
    if (phase, step) in PINNED_ONLY and not pinned:
        return None
    return TRANSITIONS.get(phase, {}).get(step)


def meaning(phase: Phase, memory: EngineMemory) -> str:
    """What ``phase`` means for ``memory``, for a refusal."""
    failed = {
        Phase.PROFILE_FAILED: ("profile", memory.profile_result),
        Phase.GRAPHS_FAILED: ("graph", memory.graphs_result),
    }
    if phase in failed:
        name, window = failed[phase]
        return (
            f"the {name} window ended with an exception ({window and window.error}), so its figures describe work "
            f"that did not finish; fix the failure and open the {name} window again"
        )
    said = {
        Phase.CLOSED: "this EngineMemory was closed (its reservation released); create a new one",
        Phase.FORKED: f"this EngineMemory was created by process {memory._pid}, of which process {os.getpid()} is a "
        "forked child (its baseline and reservation are the parent's); create the EngineMemory in the process that "
        "runs the engine",
        Phase.COSTED: f"a block's cost was measured ({memory.block_cost_source}); measure once, then plan",
        Phase.STORED: f"the windows' figures were read from {memory.stored and memory.stored.path}, which replaces "
        "the windows: plan() next",
        **MEANING,
    }
    if phase in said:
        return said[phase]
    return f"the {phase.value} step is under way, in this thread or another: the steps run one at a time, in order"


def refusal(device: int, step: str, phase: Phase, meaning: str) -> StepRefused:
    """The one refusal of a step: the step asked for, the phase, what the phase means, and what it allows."""
    allowed = ", ".join(TRANSITIONS.get(phase, {})) or "none"
    return StepRefused(
        f"device {device}: cannot {step} in phase {phase.value!r} ({meaning}); the steps allowed now: {allowed}",
        step,
        phase,
    )


__all__ = ["BUSY", "FAILED", "MEANING", "PINNED_ONLY", "TRANSITIONS", "Phase", "meaning", "next_phase", "refusal"]
