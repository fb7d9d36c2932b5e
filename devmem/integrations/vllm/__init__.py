"""devmem inside stock vLLM: a ``vllm.general_plugins`` entry point that sizes vLLM's KV cache with
:class:`devmem.EngineMemory`, from this process's own memory (``pip install -e ".[vllm]"`` from the checkout,
docs/vllm.md).

vLLM calls :func:`register` in every process it starts, workers included. It does nothing where
``DEVMEM_VLLM=0``; where the installed vLLM is not one this plugin was verified on, or a method it wraps has
another shape, it logs one warning and vLLM runs as it came. Otherwise it patches vLLM's GPU worker when vLLM
imports it (:mod:`devmem.integrations.vllm.worker`), never before, so a process that runs no worker pays nothing.
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import logging
import os
import sys
from collections.abc import Sequence
from types import ModuleType
from typing import Any

from devmem.integrations.vllm.versions import WORKER_MODULE, supported_version

#: The environment variable that turns the plugin off (``0``, ``false``, ``no`` or ``off``).
ENABLE_ENV = "DEVMEM_VLLM"
_OFF = ("0", "false", "no", "off")
_ON = ("", "1", "true", "yes", "on")

log = logging.getLogger("vllm.devmem")  # a child of vLLM's logger: its lines appear in vLLM's log


def enabled(environ: Any = None) -> bool:
    """Whether ``DEVMEM_VLLM`` leaves the plugin on (it is on unless set to 0, false, no or off)."""
    value = (os.environ if environ is None else environ).get(ENABLE_ENV, "1")
    return value.strip().lower() not in _OFF


def register() -> None:
    """vLLM's ``vllm.general_plugins`` entry point: arrange for the GPU worker to be patched when it is imported."""
    if not enabled():
        log.info("devmem: %s=%s, vLLM sizes its KV cache itself", ENABLE_ENV, os.environ.get(ENABLE_ENV))
        return
    value = os.environ.get(ENABLE_ENV, "1")
    if value.strip().lower() not in _ON:
        log.warning(
            "devmem: %s=%r is none of %s (on) or %s (off); the plugin stays on",
            ENABLE_ENV,
            value[:80],
            ", ".join(_ON[1:]),
            ", ".join(_OFF),
        )
    why = supported_version()
    if why is not None:
        log.warning("devmem: %s; vLLM sizes its KV cache itself", why)
        return
    module = sys.modules.get(WORKER_MODULE)
    if module is not None:
        _patch(module)
    elif not any(isinstance(f, _WorkerImportHook) for f in sys.meta_path):
        sys.meta_path.insert(0, _WorkerImportHook())


def _patch(module: ModuleType) -> None:
    from devmem.integrations.vllm.worker import patch_worker

    worker_class = getattr(module, "Worker", None)
    if not isinstance(worker_class, type):
        log.warning("devmem: %s has no class Worker; vLLM sizes its KV cache itself", module.__name__)
        return
    patch_worker(worker_class)


class _WorkerImportHook(importlib.abc.MetaPathFinder):
    """Patches vLLM's GPU worker module right after vLLM imports it."""

    def find_spec(self, name: str, path: Sequence[str] | None, target: ModuleType | None = None) -> Any:
        if name != WORKER_MODULE:
            return None
        spec = importlib.machinery.PathFinder.find_spec(name, path)
        if spec is None or spec.loader is None:
            return spec
        loader, exec_module = spec.loader, spec.loader.exec_module

        def exec_and_patch(module: ModuleType) -> None:
            exec_module(module)
            _patch(module)

        loader.exec_module = exec_and_patch  # type: ignore[method-assign]
        return spec


__all__ = ["ENABLE_ENV", "enabled", "register"]
