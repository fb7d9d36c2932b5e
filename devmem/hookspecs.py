"""The markers and the one hook a devmem backend implements.

A backend is a module (or object) registered under the entry-point group ``devmem``::

    [project.entry-points.devmem]
    acme = "devmem_acme"

whose module defines::

    @devmem.hookimpl
    def devmem_platforms():
        yield devmem.PlatformSpec(name="acme", priority=100, detect=..., factory=...)
"""

from __future__ import annotations

from collections.abc import Iterable

import pluggy

from devmem.types import PlatformSpec

PROJECT = "devmem"

hookspec = pluggy.HookspecMarker(PROJECT)
hookimpl = pluggy.HookimplMarker(PROJECT)


@hookspec
def devmem_platforms() -> Iterable[PlatformSpec]:
    """Return (or yield) the :class:`~devmem.PlatformSpec` of each platform this plugin provides.

    Called once per resolution, when devmem first needs a platform or lists candidates. Keep it
    cheap: import vendor libraries inside ``detect``/``factory``, not here. Returning ``None`` or an
    empty iterable means the plugin provides no platform on this machine.
    """
    raise NotImplementedError("a hook specification: pluggy calls the plugins' implementations, never this")
