"""What an engine charges in its profile window beyond what its own profile pass reaches (vLLM's heaviest sampling
beside its dummy sampler run, say): a named figure held on the device while the step it stands for runs, so that it
lands in the window's transient peak, and said with where it came from by ``explain()``, ``as_dict()`` and the
engine's log. ``EngineMemory.hold`` is :func:`hold`.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import TYPE_CHECKING

from devmem.engine import _door
from devmem.engine.phases import Phase
from devmem.units import format_size

if TYPE_CHECKING:
    from devmem.engine.memory import EngineMemory


@dataclass(frozen=True)
class HeldCharge:
    """``bytes`` held on the device inside the profile window for ``name`` (what serving does that the engine's
    profile pass does not); ``detail`` says how the figure was reached, from what."""

    name: str
    bytes: int
    detail: str

    def explain(self) -> str:
        """``"<bytes> held for <name> (<detail>)"``."""
        return f"{format_size(self.bytes)} held for {self.name} ({self.detail})"

    def as_dict(self) -> dict[str, object]:
        return {"name": self.name, "bytes": self.bytes, "detail": self.detail}


@contextmanager
def hold(memory: EngineMemory, name: str, nbytes: int, detail: str) -> Iterator[HeldCharge]:
    """Hold ``nbytes`` on ``memory``'s device for the block, inside the profile window, around the step of the
    engine's profile pass that serving makes heavier; recorded as ``memory.held_charges[name]`` (a window opened
    again replaces it). Outside the profile window it is refused (:class:`~devmem.errors.StepRefused`)."""
    for argument, value in (("name", name), ("detail", detail)):
        if not isinstance(value, str) or not value.strip():
            raise _door.refused(argument, value, f"{argument} must be a non-empty str, got {value!r}")
    nbytes = _door.byte_count("nbytes", nbytes)
    if memory.phase is not Phase.PROFILING:
        why = "a charge is held inside the profile window: memory.profile(), profile_forward or profile_blocks"
        raise memory._refusal("hold", why=why)
    import torch

    charge = HeldCharge(name, nbytes, detail)
    memory.held_charges[name] = charge
    held = torch.zeros(nbytes, dtype=torch.uint8, device=memory.torch_device)
    try:
        yield charge
    finally:
        del held


__all__ = ["HeldCharge", "hold"]
