"""Which vLLM the plugin patches: the releases it was verified on, and the shape of every method it wraps.

Releases are told apart by what their classes have (the worker's methods here, the runner's and the configs' in
:mod:`devmem.integrations.vllm.worker`), never by a list of minor versions. The version only says whether a release
is older than the first the plugin knows (declined) or newer than the newest it was verified on (tried where the
shapes match, with one log line saying so).
"""

from __future__ import annotations

from typing import Any

from devmem.integrations import kit

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


def version_note(version: str | None) -> tuple[bool, str | None]:
    """Whether to patch vLLM ``version``, and the one line to log: a warning where it is declined, an info line
    where it is newer than the newest release verified (tried, since its shapes are checked next); ``None`` for a
    verified release."""
    if version is None:
        return False, "vLLM is not installed"
    found = kit.release(version)
    if found is None or len(found) < 2:
        return False, f"vLLM {version!r} is not a release this plugin knows"
    if found[:2] < OLDEST:
        return False, f"vLLM {version} is older than {OLDEST[0]}.{OLDEST[1]}, the first release this plugin knows"
    newest = max(VERIFIED)
    if found[:2] > newest:
        return True, (
            f"vLLM {version} is newer than {newest[0]}.{newest[1]}, the newest release this plugin was verified on: "
            "tried, since its worker's methods have the shapes the plugin knows"
        )
    return True, None


def shape_mismatches(worker_class: Any) -> list[str]:
    """What differs between the worker's methods and the parameters the plugin passes (empty: all match)."""
    return kit.shape_mismatches(worker_class, WORKER_METHODS)


__all__ = [
    "OLDEST",
    "RUNNER_METHODS",
    "VERIFIED",
    "WORKER_METHODS",
    "WORKER_MODULE",
    "shape_mismatches",
    "version_note",
]
