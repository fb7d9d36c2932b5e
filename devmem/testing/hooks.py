"""A backend's hook implementations checked against devmem's hook specifications, with pluggy.

devmem calls a plugin's ``devmem_platforms`` itself at start-up, without pluggy (its import alone costs more than
devmem's start-up budget). Here, in the kit, pluggy does what it is for: :func:`hook_problems` registers the plugin
with a ``pluggy.PluginManager("devmem")`` holding :mod:`devmem._hookspecs`, which refuses an implementation whose
arguments the specification does not have and, at ``check_pending``, one whose name is no devmem hook (a
misspelling), and says why.
"""

from __future__ import annotations

from devmem._hookspecs import IMPL_ATTRIBUTE


def hook_problems(plugin: object) -> list[str]:
    """What is wrong with ``plugin``'s (a module or an object) hook implementations, for people; ``[]`` where
    each implements a devmem hook with arguments its specification has, and there is at least one."""
    import pluggy

    from devmem import _hookspecs as hookspecs

    implemented = [name for name in dir(plugin) if hasattr(getattr(plugin, name, None), IMPL_ATTRIBUTE)]
    if not implemented:
        return [f"{plugin!r} marks no function with @devmem.hookimpl: it implements no devmem hook"]
    manager = pluggy.PluginManager("devmem")
    manager.add_hookspecs(hookspecs)
    try:
        manager.register(plugin)
        manager.check_pending()
    except pluggy.PluginValidationError as exc:
        return [str(exc)]
    return []


__all__ = ["hook_problems"]
