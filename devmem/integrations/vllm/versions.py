"""Whether and which vLLM the plugin patches: its switch, the releases it was verified on, and the shape of every
method it wraps.

Releases are told apart by what their classes have (the worker's methods here, the runner's and the configs' in
:mod:`devmem.integrations.vllm.worker`), never by a list of minor versions. The version only says whether a release
is older than the first the plugin knows (declined) or newer than the newest it was verified on (tried where the
shapes match, with one log line saying so): :func:`devmem.integrations.kit.version_note`.
"""

from __future__ import annotations

import logging

from devmem.integrations import kit

#: The environment variable that turns the plugin off (``0``, ``false``, ``no`` or ``off``).
ENABLE_ENV = "DEVMEM_VLLM"

log = logging.getLogger("vllm.devmem")  # a child of vLLM's logger: its lines appear in vLLM's log
switch = kit.Switch(ENABLE_ENV, "vLLM", log)

#: The module holding vLLM's GPU worker (one class for both model runners in every release), which the plugin patches.
WORKER_MODULE = "vllm.v1.worker.gpu_worker"

#: The oldest release the plugin knows, and the releases it was verified on: docs/vllm.md says where (GPU or CPU).
OLDEST = (0, 24)
VERIFIED = ((0, 24), (0, 26), (0, 30), (0, 34))

#: Every worker method the plugin wraps or calls, with the parameters it passes (a method may take more, with
#: defaults).
WORKER_METHODS = {
    "init_device": ("self",),
    "determine_available_memory": ("self",),
    "initialize_from_config": ("self", "kv_cache_config"),
    "compile_or_warm_up_model": ("self",),
    "get_kv_cache_spec": ("self",),
    "shutdown": ("self",),
}
#: The model runner's (V1's or V2's, checked on the worker's own runner when it sizes).
RUNNER_METHODS = {"profile_run": ("self",), "capture_model": ("self",)}

__all__ = ["ENABLE_ENV", "OLDEST", "RUNNER_METHODS", "VERIFIED", "WORKER_METHODS", "WORKER_MODULE", "log", "switch"]
