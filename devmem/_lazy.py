"""Module attributes that load on first use (:func:`lazy_exports`, PEP 562) and objects named ``"module:attr"``
(:func:`load_object`): how devmem's packages, and backends through :mod:`devmem.sdk`, stay cheap to import."""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping
from typing import Any


def lazy_exports(
    namespace: dict[str, Any], names: Mapping[str, str]
) -> tuple[Callable[[str], Any], Callable[[], list[str]]]:
    """``__getattr__`` and ``__dir__`` for the module owning ``namespace``, whose ``names`` map each lazily
    exported attribute to the module that defines it (``"module"``), or to ``"module:attr"`` where it has another
    name there. A loaded attribute is cached in ``namespace``."""

    def __getattr__(name: str) -> Any:
        target = names.get(name)
        if target is None:
            raise AttributeError(f"module {namespace['__name__']!r} has no attribute {name!r}")
        module, _, attr = target.partition(":")
        value = getattr(importlib.import_module(module), attr or name)
        namespace[name] = value
        return value

    def __dir__() -> list[str]:
        return sorted(set(namespace) | set(names))

    return __getattr__, __dir__


def load_object(target: str) -> Any:
    """The object ``"package.module:attr.sub"`` names (the module itself without ``:attr``), imported now."""
    module, _, attr = target.partition(":")
    obj = importlib.import_module(module.strip())
    for part in filter(None, attr.strip().split(".")):
        obj = getattr(obj, part)
    return obj
