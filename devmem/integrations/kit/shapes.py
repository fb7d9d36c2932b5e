"""The feature checks that recognise an engine's release by its shapes, not by a list of version numbers: what a
class has, whether each method accepts the arguments the adapter passes, the names a release's own method uses.
Inspecting a signature or a source never raises."""

from __future__ import annotations

import inspect
from collections.abc import Callable, Mapping, Sequence
from typing import Any


def names_used(method: Callable[..., Any]) -> tuple[tuple[str, ...], dict[str, Any]]:
    """The global and attribute names ``method`` (a release's own, unwrapped) uses, and its module's globals: what
    tells an engine's releases apart without a list of versions."""
    code = inspect.unwrap(method)
    return tuple(getattr(getattr(code, "__code__", None), "co_names", ())), getattr(code, "__globals__", {})


def parameters(function: Any) -> tuple[str, ...] | None:
    """The names of ``function``'s parameters (unwrapped); ``None`` where it is no callable or its signature
    cannot be read (a C function, a mock): never an exception."""
    if not callable(function):
        return None
    try:
        return tuple(inspect.signature(inspect.unwrap(function)).parameters)
    except (TypeError, ValueError):
        return None


def parameter(function: Any, name: str) -> inspect.Parameter | None:
    """``function``'s parameter ``name`` (unwrapped); ``None`` where it has none or its signature cannot be read."""
    try:
        return inspect.signature(inspect.unwrap(function)).parameters.get(name)
    except (TypeError, ValueError):
        return None


def source(function: Any) -> str:
    """The source of ``function``; empty where it cannot be read (a C function, code without its file)."""
    try:
        return inspect.getsource(function)
    except (OSError, TypeError):
        return ""


def accepts(function: Any, names: Sequence[str]) -> bool:
    """Whether ``function`` takes ``names`` first, in order, and nothing more that is required."""
    try:
        signature = inspect.signature(inspect.unwrap(function))
    except (TypeError, ValueError):
        return False
    params = list(signature.parameters.values())
    if tuple(p.name for p in params[: len(names)]) != tuple(names):
        return False
    rest = params[len(names) :]
    return all(p.default is not p.empty or p.kind in (p.VAR_POSITIONAL, p.VAR_KEYWORD) for p in rest)


def shape_mismatches(cls: Any, methods: Mapping[str, Sequence[str]]) -> list[str]:
    """What ``cls`` lacks of ``methods`` (name -> the parameters the adapter passes, ``self`` first); empty where
    every method is there and accepts them."""
    name = getattr(cls, "__name__", repr(cls))
    found = []
    for method, names in methods.items():
        function = getattr(cls, method, None)
        if not callable(function):
            found.append(f"{name}.{method} is missing")
        elif not accepts(function, names):
            found.append(f"{name}.{method}{parameters(function) or '(?)'} does not take {method}({', '.join(names)})")
    return found
