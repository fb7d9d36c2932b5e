"""Frozen value classes for the types resolution touches, without importing :mod:`dataclasses`.

``import dataclasses`` imports :mod:`inspect` (and with it ast, dis and tokenize): about 20 ms of a 2-core
machine's interpreter start, half of devmem's whole import budget. :class:`Record` gives what those few classes
use of a frozen dataclass: fields from the class annotations (in order, inherited ones first), defaults from
class attributes (a ``dict``/``list``/``set`` default is copied per instance), keyword or positional
construction, ``__post_init__``, equality, hashing, ``repr`` and :meth:`Record.replace`. Modules off the start-up
path keep using :mod:`dataclasses`.
"""

from __future__ import annotations

import sys
from typing import Any, ClassVar

from devmem.errors import InvalidTypeError

if sys.version_info >= (3, 11):
    from typing import dataclass_transform
else:  # pragma: no cover - type checkers read the 3.11 branch

    def dataclass_transform(**_: Any):
        return lambda cls: cls


_MUTABLE_DEFAULTS = (dict, list, set)


@dataclass_transform(frozen_default=True)
class Record:
    """Base of a frozen value class: ``class Reason(Record): kind: ReasonKind; text: str``."""

    _fields: ClassVar[tuple[str, ...]] = ()
    _defaults: ClassVar[dict[str, Any]] = {}

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        fields, defaults = list(cls._fields), dict(cls._defaults)
        own = vars(cls)
        # Python 3.14 keeps a class's annotations behind __annotate__ (PEP 649) until they are asked for.
        annotations = own.get("__annotations__") or (cls.__annotations__ if "__annotate__" in own else {})
        for name, annotation in annotations.items():
            if name.startswith("_") or str(annotation).startswith(("ClassVar", "typing.ClassVar")):
                continue
            if name not in fields:
                fields.append(name)
            if name in own:
                defaults[name] = own[name]
            elif defaults and name not in defaults:
                raise InvalidTypeError(f"{cls.__name__}: field {name!r} without a default follows one with a default")
        cls._fields, cls._defaults = tuple(fields), defaults

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        if not kwargs and len(args) == len(self._fields):  # every field by position: the common case, kept cheap
            self.__dict__.update(zip(self._fields, args, strict=True))
        else:
            self._assign(args, kwargs)
        post_init = getattr(self, "__post_init__", None)
        if post_init is not None:
            post_init()

    def _assign(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
        """Set the fields from ``args`` and ``kwargs``, with the defaults for those neither gives."""
        cls = type(self).__name__
        if len(args) > len(self._fields):
            raise InvalidTypeError(f"{cls}() takes {len(self._fields)} arguments, got {len(args)}")
        values = dict(zip(self._fields, args, strict=False))
        for name, value in kwargs.items():
            if name not in self._fields:
                raise InvalidTypeError(f"{cls}() got an unexpected keyword argument {name!r}")
            if name in values:
                raise InvalidTypeError(f"{cls}() got multiple values for argument {name!r}")
            values[name] = value
        for name in self._fields:
            if name not in values:
                if name not in self._defaults:
                    raise InvalidTypeError(f"{cls}() missing required argument {name!r}")
                default = self._defaults[name]
                values[name] = type(default)(default) if isinstance(default, _MUTABLE_DEFAULTS) else default
            object.__setattr__(self, name, values[name])

    def _values(self) -> tuple[Any, ...]:
        return tuple(self.__dict__[name] for name in self._fields)

    def __setattr__(self, name: str, value: Any) -> None:
        raise AttributeError(f"{type(self).__name__} is frozen: cannot set {name!r}; use .replace({name}=...)")

    def __delattr__(self, name: str) -> None:
        raise AttributeError(f"{type(self).__name__} is frozen: cannot delete {name!r}")

    def __eq__(self, other: object) -> bool:
        if type(other) is not type(self):
            return NotImplemented
        return self._values() == other._values()

    def __hash__(self) -> int:
        return hash(self._values())

    def __repr__(self) -> str:
        inner = ", ".join(f"{name}={self.__dict__[name]!r}" for name in self._fields)
        return f"{type(self).__name__}({inner})"

    def replace(self, **changes: Any) -> Any:
        """A copy with ``changes`` applied (validated again)."""
        return type(self)(**{**{name: self.__dict__[name] for name in self._fields}, **changes})
