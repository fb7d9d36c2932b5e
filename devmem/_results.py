"""The one shape of a result: ``explain()`` gives a ``str`` for people and ``as_dict()`` a JSON-able ``dict``, on
every result type (:class:`~devmem.KvCachePlan`, :class:`~devmem.ModelMemory`, the capacity answers,
:class:`~devmem.DeviceReport`, ...). What changed spelling keeps working for a release with a ``DeprecationWarning``.
"""

from __future__ import annotations

import warnings
from collections.abc import Iterator


class Explanation(str):
    """The text ``explain()`` returns. ``ModelMemory.explain()`` returned a list of lines before: iterating the text
    still gives its lines, with a :class:`DeprecationWarning` (use ``explain().splitlines()``)."""

    def __iter__(self) -> Iterator[str]:
        warnings.warn(
            "explain() returns a str now: iterating it for its lines is deprecated; use explain().splitlines()",
            DeprecationWarning,
            stacklevel=2,
        )
        return iter(self.splitlines())


def deprecated_lines(old: str, text: str) -> list[str]:
    """The lines of ``text`` for a method ``old`` that ``explain()`` replaces, with a :class:`DeprecationWarning`."""
    warnings.warn(f"{old}() is deprecated: use explain() (a str) instead", DeprecationWarning, stacklevel=3)
    return text.splitlines()


__all__ = ["Explanation", "deprecated_lines"]
