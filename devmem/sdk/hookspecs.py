"""The marker and the one hook a devmem backend implements, at the path backends know (their home is the core's
private :mod:`devmem._hookspecs`, which devmem's plugin discovery reads)."""

from devmem._hookspecs import IMPL_ATTRIBUTE as IMPL_ATTRIBUTE
from devmem._hookspecs import SPEC_ATTRIBUTE as SPEC_ATTRIBUTE
from devmem._hookspecs import SPECS as SPECS
from devmem._hookspecs import devmem_platforms as devmem_platforms
from devmem._hookspecs import hookimpl as hookimpl
from devmem._hookspecs import hookspec as hookspec

__all__ = ["IMPL_ATTRIBUTE", "SPECS", "SPEC_ATTRIBUTE", "devmem_platforms", "hookimpl", "hookspec"]
