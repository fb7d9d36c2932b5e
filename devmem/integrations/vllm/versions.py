"""Which vLLM the plugin patches: the versions it was verified on, and the shape of every method it wraps.

An answer is ``None`` (go ahead) or one sentence saying why not, which the plugin logs once as a warning before
leaving vLLM as it came.
"""

from __future__ import annotations

from importlib import metadata
from typing import Any

from devmem.integrations import kit

#: The module holding vLLM's GPU worker, which the plugin patches.
WORKER_MODULE = "vllm.v1.worker.gpu_worker"

#: The vLLM releases the plugin was verified on (major, minor): docs/vllm.md says where.
SUPPORTED = ((0, 24),)

#: Every method the plugin wraps or calls, with the parameters it passes (a method may take more, with defaults).
WORKER_METHODS = {
    "init_device": ("self",),
    "determine_available_memory": ("self",),
    "initialize_from_config": ("self", "kv_cache_config"),
    "compile_or_warm_up_model": ("self",),
    "get_kv_cache_spec": ("self",),
    "shutdown": ("self",),
}
RUNNER_METHODS = {
    "profile_run": ("self",),
    "profile_cudagraph_memory": ("self",),
}


def supported_version(version: str | None = None) -> str | None:
    """``None`` where vLLM ``version`` (the installed one by default) is one the plugin was verified on."""
    if version is None:
        try:
            version = metadata.version("vllm")
        except metadata.PackageNotFoundError:  # a copy on sys.path without its metadata
            try:
                from vllm.version import __version__
            except ImportError:
                return "vLLM is not installed"
            version = str(__version__)
    parts = version.split(".")
    try:
        release = (int(parts[0]), int(parts[1]))
    except (IndexError, ValueError):
        return f"vLLM {version!r} is not a release this plugin knows"
    if release not in SUPPORTED:
        known = ", ".join(f"{a}.{b}.x" for a, b in SUPPORTED)
        return f"vLLM {version} is not a release this plugin was verified on ({known})"
    return None


def shape_mismatches(worker_class: Any, runner_class: Any) -> list[str]:
    """What differs between the classes' methods and the parameters the plugin passes (empty: all match)."""
    return kit.shape_mismatches(worker_class, WORKER_METHODS) + kit.shape_mismatches(runner_class, RUNNER_METHODS)


__all__ = ["RUNNER_METHODS", "SUPPORTED", "WORKER_METHODS", "WORKER_MODULE", "shape_mismatches", "supported_version"]
