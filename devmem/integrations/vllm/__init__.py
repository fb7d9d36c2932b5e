"""devmem inside stock vLLM: a ``vllm.general_plugins`` entry point that sizes vLLM's KV cache with
:class:`devmem.EngineMemory` from this process's own memory (docs/vllm.md). Nothing where ``DEVMEM_VLLM=0``; a
release older than 0.24, or whose methods have other shapes, gets one warning and runs as it came; vLLM's GPU worker
is patched when vLLM imports it (:mod:`devmem.integrations.vllm.worker`), never before.
"""

from __future__ import annotations

from devmem.integrations import kit
from devmem.integrations.vllm.worker import ENABLE_ENV, OLDEST, VERIFIED, WORKER_MODULE, patch_worker, switch


def register() -> None:
    """vLLM's ``vllm.general_plugins`` entry point: arrange for the GPU worker to be patched when it is imported."""
    go, note = switch.admits("vllm", "vllm.version", OLDEST, VERIFIED)
    if go:
        kit.when_imported(WORKER_MODULE, lambda module: kit.patch_in(module, "Worker", patch_worker, switch, note))


__all__ = ["ENABLE_ENV", "register", "switch"]
