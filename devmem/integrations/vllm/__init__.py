"""devmem inside stock vLLM: a ``vllm.general_plugins`` entry point that sizes vLLM's KV cache with
:class:`devmem.EngineMemory`, from this process's own memory (``pip install -e ".[vllm]"`` from the checkout,
docs/vllm.md).

vLLM calls :func:`register` in every process it starts, workers included. It does nothing where
``DEVMEM_VLLM=0``; where the installed vLLM is older than 0.24, or a method it wraps has another shape, it logs one
warning and vLLM runs as it came; a release newer than the newest verified one is tried where its shapes match, with
one log line saying so. Otherwise it patches vLLM's GPU worker when vLLM imports it
(:mod:`devmem.integrations.vllm.worker`), never before, so a process that runs no worker pays nothing.
"""

from __future__ import annotations

import logging
from types import ModuleType

from devmem.integrations.kit import Switch, installed_version, when_imported
from devmem.integrations.vllm.versions import WORKER_MODULE, version_note

#: The environment variable that turns the plugin off (``0``, ``false``, ``no`` or ``off``).
ENABLE_ENV = "DEVMEM_VLLM"

log = logging.getLogger("vllm.devmem")  # a child of vLLM's logger: its lines appear in vLLM's log
switch = Switch(ENABLE_ENV, "vLLM", log)


def register() -> None:
    """vLLM's ``vllm.general_plugins`` entry point: arrange for the GPU worker to be patched when it is imported."""
    if not switch.on():
        return
    go, note = version_note(installed_version("vllm", "vllm.version"))
    if not go:
        log.warning("devmem: %s; vLLM sizes its KV cache itself", note)
        return
    when_imported(WORKER_MODULE, lambda module: _patch(module, note))


def _patch(module: ModuleType, note: str | None = None) -> None:
    """Patch ``module``'s Worker; never raises into vLLM's import of it (one warning, stock vLLM)."""
    try:
        from devmem.integrations.vllm.worker import patch_worker

        worker_class = getattr(module, "Worker", None)
        if not isinstance(worker_class, type):
            log.warning("devmem: %s has no class Worker; vLLM sizes its KV cache itself", module.__name__)
            return
        if patch_worker(worker_class, module) and note is not None:
            log.info("devmem: %s", note)
    except Exception as exc:  # never a crash in vLLM's import: stock vLLM, said once
        log.warning(
            "devmem: patching %s failed (%s: %s); vLLM sizes its KV cache itself",
            module.__name__,
            type(exc).__name__,
            exc,
        )


__all__ = ["ENABLE_ENV", "register", "switch"]
