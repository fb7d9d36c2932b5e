"""Import paths of modules that moved into subpackages after 0.1.0.

Each old name (``devmem.profiling``) imports the very module object of its new home (``devmem.engine.profiling``),
so code written against the earlier layout keeps working; it warns with a :class:`DeprecationWarning` naming the
new path. The table is the whole list.
"""

from __future__ import annotations

import importlib
import sys
import warnings
from importlib.machinery import ModuleSpec
from types import ModuleType
from typing import TYPE_CHECKING, cast

if TYPE_CHECKING:
    from importlib.abc import Loader

#: Old module path -> the module it is now.
MOVED: dict[str, str] = {
    "devmem.block_cost": "devmem.engine.block_cost",
    "devmem.capacity": "devmem.planner.capacity",
    "devmem.cli": "devmem.command.main",
    "devmem.cli_format": "devmem.command.format",
    "devmem.cli_output": "devmem.command.output",
    "devmem.cli_reservations": "devmem.command.reservations",
    "devmem.discovery": "devmem.resolution.discovery",
    "devmem.distributed": "devmem.engine.distributed",
    "devmem.dmem": "devmem.sdk.dmem",
    "devmem.doctor": "devmem.command.doctor",
    "devmem.drm": "devmem.sdk.drm",
    "devmem.engine_layout": "devmem.planner.engine_layout",
    "devmem.engine_memory": "devmem.engine.memory",
    "devmem.entrypoints": "devmem.resolution.entrypoints",
    "devmem.forksafe": "devmem.sdk.forksafe",
    "devmem.hookspecs": "devmem.sdk.hookspecs",
    "devmem.host": "devmem.sdk.host",
    "devmem.kvcache": "devmem.engine.kvcache",
    "devmem.lazy": "devmem.sdk.lazy",
    "devmem.limits": "devmem.sdk.limits",
    "devmem.model_defaults": "devmem.planner.model_defaults",
    "devmem.models": "devmem.planner.models",
    "devmem.parsing": "devmem._text",
    "devmem.plugins": "devmem.resolution.plugins",
    "devmem.processes": "devmem.command.processes",
    "devmem.profile_store": "devmem.engine.profile_store",
    "devmem.profiling": "devmem.engine.profiling",
    "devmem.readings": "devmem.sdk.readings",
    "devmem.reservations": "devmem.engine.reservations",
    "devmem.segment_history": "devmem.engine.segment_history",
    "devmem.sessions": "devmem.sdk.sessions",
    "devmem.sizing": "devmem.planner.sizing",
    "devmem.torch_device": "devmem.engine.torch_device",
    "devmem.visible": "devmem.sdk.visible",
}


class _Alias:
    """A loader whose module is the already-imported new home of an old path."""

    def __init__(self, old: str, new: str) -> None:
        self.old, self.new = old, new

    def create_module(self, spec: ModuleSpec) -> ModuleType:
        warnings.warn(
            f"{self.old} moved to {self.new}; import the public name from devmem (or {self.new})",
            DeprecationWarning,
            stacklevel=4,
        )
        return importlib.import_module(self.new)

    def exec_module(self, module: ModuleType) -> None:
        """Nothing to run: the module is the new home, already executed."""


class MovedModules:
    """A ``sys.meta_path`` finder answering only the old paths in :data:`MOVED`."""

    @staticmethod
    def find_spec(name: str, path: object = None, target: object = None) -> ModuleSpec | None:
        new = MOVED.get(name)
        return None if new is None else ModuleSpec(name, cast("Loader", _Alias(name, new)))


def install() -> None:
    """Put the finder on ``sys.meta_path`` once per interpreter."""
    if not any(isinstance(finder, MovedModules) for finder in sys.meta_path):
        sys.meta_path.append(MovedModules())
