"""devmem inside stock vLLM: a ``vllm.general_plugins`` entry point that sizes vLLM's KV cache with
:class:`devmem.EngineMemory`, from this process's own memory (``pip install "devmem-kv[vllm]"``, docs/vllm.md).

vLLM calls :func:`register` in every process it starts, workers included. It does nothing where
``DEVMEM_VLLM=0``; where the installed vLLM is not one this plugin was verified on, or a method it wraps has
another shape, it logs one warning and vLLM runs as it came. Otherwise it patches vLLM's GPU worker when vLLM
imports it (:mod:`devmem.integrations.vllm.worker`), never before, so a process that runs no worker pays nothing.
"""

from __future__ import annotations

import logging
from types import ModuleType

from devmem.integrations.kit import Switch, when_imported
from devmem.integrations.vllm.versions import WORKER_MODULE, supported_version

#: The environment variable that turns the plugin off (``0``, ``false``, ``no`` or ``off``).
ENABLE_ENV = "DEVMEM_VLLM"

log = logging.getLogger("vllm.devmem")  # a child of vLLM's logger: its lines appear in vLLM's log
switch = Switch(ENABLE_ENV, "vLLM", log)


def register() -> None:
    """vLLM's ``vllm.general_plugins`` entry point: arrange for the GPU worker to be patched when it is imported."""
    if not switch.on():
        return
    why = supported_version()
    if why is not None:
        log.warning("devmem: %s; vLLM sizes its KV cache itself", why)
        return
    when_imported(WORKER_MODULE, _patch)


def _patch(module: ModuleType) -> None:
    from devmem.integrations.vllm.worker import patch_worker

    worker_class = getattr(module, "Worker", None)
    if not isinstance(worker_class, type):
        log.warning("devmem: %s has no class Worker; vLLM sizes its KV cache itself", module.__name__)
        return
    patch_worker(worker_class)


__all__ = ["ENABLE_ENV", "register", "switch"]
