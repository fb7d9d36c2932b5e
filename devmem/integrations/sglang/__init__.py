"""devmem inside stock SGLang: a ``sglang.srt.plugins`` entry point that sizes SGLang's KV pool with
:class:`devmem.EngineMemory`, from this process's own memory (docs/sglang.md).

SGLang (0.5.11 on) calls :func:`register` in every process that calls its ``load_plugins()``, its schedulers
included, then applies the hooks registered with its ``HookRegistry`` (:mod:`devmem.integrations.sglang.runner`).
Nothing where ``DEVMEM_SGLANG=0``; the hooked methods are found by the installed SGLang's features, and where they
are not there, one warning and SGLang as it came.
"""

from __future__ import annotations

import importlib
import logging
from collections.abc import Callable
from typing import Any

from devmem.integrations import kit

#: The environment variable that turns the plugin off (``0``, ``false``, ``no`` or ``off``).
ENABLE_ENV = "DEVMEM_SGLANG"

log = logging.getLogger("sglang.devmem")  # a child of SGLang's logger: its lines appear in SGLang's log
switch = kit.Switch(ENABLE_ENV, "SGLang", log)

RUNNER = "sglang.srt.model_executor.model_runner.ModelRunner"
#: Where SGLang computes its KV pool's bytes: the configurator (0.5.16 on), the model runner's mixin (0.5.11-0.5.15).
BUDGETS = (
    "sglang.srt.mem_cache.kv_cache_configurator.KVCacheConfigurator",
    "sglang.srt.model_executor.model_runner_kv_cache_mixin.ModelRunnerKVCacheMixin",
)
#: The model runner's graph capture, after the pool exists: 0.5.14 on, and before.
CAPTURES = ("init_cuda_graphs", "init_device_graphs")
#: SGLang's own cell size (bytes per token over every layer) comes from this factory's configurator.
POOLS = "sglang.srt.model_executor.pool_configurator"


def _class(path: str) -> Any:
    """The class at ``path`` (``module.Class``), or ``None`` where this SGLang has none (never an exception)."""
    module, _, name = path.rpartition(".")
    try:
        found = getattr(importlib.import_module(module), name, None)
    except Exception:  # a module this release lacks, or one that fails to import: a shape the plugin does not know
        return None
    return found if isinstance(found, type) else None


def targets() -> list[tuple[str, Callable[..., Any]]] | str:
    """The methods to hook in this SGLang and devmem's step for each, or why not (one sentence)."""
    from devmem.integrations.sglang import runner

    model_runner = _class(RUNNER)
    if model_runner is None:
        return f"SGLang has no {RUNNER}"
    budget = next((c for c in map(_class, BUDGETS) if c is not None and hasattr(c, "_profile_available_bytes")), None)
    capture = next((name for name in CAPTURES if callable(getattr(model_runner, name, None))), None)
    problems = kit.shape_mismatches(model_runner, {"init_torch_distributed": ("self",)})
    if budget is None:
        problems.append(f"neither of {', '.join(BUDGETS)} has _profile_available_bytes")
    else:
        problems += kit.shape_mismatches(budget, {"_profile_available_bytes": ("self", "pre_model_load_memory")})
    if capture is None:
        problems.append(f"ModelRunner has none of {', '.join(CAPTURES)}")
    else:
        problems += kit.shape_mismatches(model_runner, {capture: ("self",)})
    pools = importlib.import_module(POOLS) if _class(f"{POOLS}.DefaultPoolConfigurator") else None
    if pools is None or not callable(getattr(pools, "create_memory_pool_configurator", None)):
        problems.append(f"{POOLS} has no create_memory_pool_configurator and DefaultPoolConfigurator")
    if problems:
        return f"SGLang is not the shape this plugin knows ({'; '.join(problems)})"
    assert budget is not None and capture is not None
    return [
        (f"{RUNNER}.init_torch_distributed", runner.start),
        (f"{budget.__module__}.{budget.__qualname__}._profile_available_bytes", runner.budget),
        (f"{RUNNER}.{capture}", runner.capture),
    ]


def register() -> None:
    """SGLang's ``sglang.srt.plugins`` entry point: devmem's hooks, registered with SGLang's ``HookRegistry``."""
    if not switch.on():
        return
    found = targets()
    if isinstance(found, str):
        log.warning("devmem: %s; SGLang sizes its KV pool itself", found)
        return
    from sglang.srt.plugins.hook_registry import HookRegistry, HookType

    for target, step in found:
        HookRegistry.register(target, step, HookType.AROUND)


__all__ = ["ENABLE_ENV", "register", "switch", "targets"]
