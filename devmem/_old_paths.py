"""Import paths of 0.1.0's modules that moved into subpackages since.

The table holds exactly the modules 0.1.0 shipped (the tree of its release, 2026-11-30) that are no longer at
their path; a module added after it had no old path to keep. Each old name (``devmem.profiling``) imports the very
module object of its new home (``devmem.engine.profiling``), so code written against 0.1.0 keeps working; it warns
with a :class:`DeprecationWarning` naming the new path.
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
    "devmem.cli": "devmem.command.main",
    "devmem.distributed": "devmem.engine.distributed",
    "devmem.doctor": "devmem.command.doctor",
    "devmem.entrypoints": "devmem.resolution.entrypoints",
    "devmem.hookspecs": "devmem.sdk.hookspecs",
    "devmem.host": "devmem.cpu",
    "devmem.lazy": "devmem.sdk.lazy",
    "devmem.plugins": "devmem.resolution.plugins",
    "devmem.profiling": "devmem.engine.profiling",
    "devmem.sizing": "devmem.planner.sizing",
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
