"""The marker and the one hook a devmem backend implements.

A backend is a module (or object) registered under the entry-point group ``devmem``::

    [project.entry-points.devmem]
    acme = "devmem_acme.plugin"

whose module defines::

    @devmem.hookimpl
    def devmem_platforms():
        yield devmem.PlatformSpec(name="acme", priority=100, detect=..., factory=...)

devmem calls the hook itself, plugin by plugin, so that one plugin's failure is that plugin's alone, and so that
resolving a platform at engine start-up imports no plugin framework (see :mod:`devmem.resolution.discovery`).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import TypeVar

from devmem.types import PlatformSpec

F = TypeVar("F", bound=Callable[..., object])

#: The attributes the markers set, as pluggy's markers for the project name ``devmem`` do: a plugin may use
#: ``pluggy.HookimplMarker("devmem")`` instead of :func:`hookimpl`, and ``pluggy.PluginManager("devmem")`` accepts
#: this module's specs and devmem-marked plugins.
IMPL_ATTRIBUTE = "devmem_impl"
SPEC_ATTRIBUTE = "devmem_spec"
#: Every hook a plugin may implement, by name.
SPECS: dict[str, Callable[..., object]] = {}


def hookspec(function: F) -> F:
    """Declare ``function`` (its name, signature and docstring) as a devmem hook."""
    SPECS[function.__name__] = function
    setattr(
        function,
        SPEC_ATTRIBUTE,
        {"firstresult": False, "historic": False, "warn_on_impl": None, "warn_on_impl_args": None},
    )
    return function


def hookimpl(function: F | None = None, *, specname: str | None = None):
    """Mark ``function`` as the implementation of the hook of its name (or of ``specname``).

    Used bare (``@devmem.hookimpl``) or called (``@devmem.hookimpl(specname="devmem_platforms")``).
    """

    def mark(impl: F) -> F:
        setattr(
            impl,
            IMPL_ATTRIBUTE,
            {
                "wrapper": False,
                "hookwrapper": False,
                "optionalhook": False,
                "tryfirst": False,
                "trylast": False,
                "specname": specname,
            },
        )
        return impl

    return mark if function is None else mark(function)


@hookspec
def devmem_platforms() -> Iterable[PlatformSpec]:
    """Return (or yield) the :class:`~devmem.PlatformSpec` of each platform this plugin provides.

    Called once per process, when devmem first needs a platform or lists candidates. Keep it cheap: import
    vendor libraries inside ``detect``/``factory``, not here. Returning ``None`` or an empty iterable means the
    plugin provides no platform on this machine.
    """
    raise NotImplementedError("a hook specification: pluggy calls the plugins' implementations, never this")
