""":class:`ForkSafeLock`, the one lock devmem and its backends use, at the path backends know (its home is the
core's private :mod:`devmem._forksafe`)."""

from devmem._forksafe import ForkSafeLock as ForkSafeLock
from devmem._forksafe import renew_all as renew_all

__all__ = ["ForkSafeLock", "renew_all"]
