"""devmem inside stock vLLM: a ``vllm.general_plugins`` entry point that sizes vLLM's KV cache with
:class:`devmem.EngineMemory`, from this process's own memory (``pip install -e ".[vllm]"`` from the checkout,
docs/vllm.md).

vLLM calls :func:`register` in every process it starts, workers included. It does nothing where
``DEVMEM_VLLM=0``; where the installed vLLM is older than 0.24, or a method it wraps has another shape, it logs one
warning and vLLM runs as it came. Otherwise it patches vLLM's GPU worker when vLLM imports it
(:mod:`devmem.integrations.vllm.worker`), never before, so a process that runs no worker pays nothing.
"""

from __future__ import annotations

from devmem.integrations import kit
from devmem.integrations.vllm.worker import ENABLE_ENV, OLDEST, VERIFIED, WORKER_MODULE, patch_worker, switch


def register() -> None:
    """vLLM's ``vllm.general_plugins`` entry point: arrange for the GPU worker to be patched when it is imported."""
    if not switch.on():
        return
    go, note = kit.version_note("vLLM", kit.installed_version("vllm", "vllm.version"), OLDEST, VERIFIED)
    if not go:
        switch.declined(str(note))
        return
    kit.when_imported(WORKER_MODULE, lambda module: kit.patch_in(module, "Worker", patch_worker, switch, note))


__all__ = ["ENABLE_ENV", "register", "switch"]
