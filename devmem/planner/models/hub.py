"""A model given by its Hugging Face id (``ORG/NAME``), found in the local Hugging Face cache: devmem never downloads.

The cache is huggingface_hub's: ``HF_HUB_CACHE`` (or the older ``HUGGINGFACE_HUB_CACHE``), else ``HF_HOME/hub``, else
``$XDG_CACHE_HOME/huggingface/hub`` (``~/.cache/huggingface/hub``). A model ``ORG/NAME`` lies in
``models--ORG--NAME``; the snapshot is the commit ``refs/main`` names, else the only snapshot there.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

from devmem.errors import ModelConfigError

#: A Hub model id as huggingface_hub validates it: ``ORG/NAME`` of letters, digits, ``-``, ``_`` and ``.``.
_REPO_ID = re.compile(r"[\w.-]{1,96}/[\w.-]{1,96}")


def hub_cache() -> Path:
    """The Hugging Face cache folder huggingface_hub would use, from the environment."""
    for name in ("HF_HUB_CACHE", "HUGGINGFACE_HUB_CACHE"):
        if os.environ.get(name):
            return Path(os.environ[name]).expanduser()
    home = os.environ.get("HF_HOME") or os.path.join(os.environ.get("XDG_CACHE_HOME") or "~/.cache", "huggingface")
    return Path(home).expanduser() / "hub"


def is_repo_id(name: str) -> bool:
    """Whether ``name`` reads as a Hub model id (``ORG/NAME``), not a path."""
    return bool(_REPO_ID.fullmatch(name)) and ".." not in name and "--" not in name and not name.startswith(".")


def _snapshot(repo: Path) -> Path | None:
    """The snapshot of a cached model: the commit refs/main names, else the only one there."""
    try:
        ref = (repo / "refs" / "main").read_text(encoding="ascii", errors="replace").strip()[:64]
    except OSError:
        ref = ""
    if ref and (repo / "snapshots" / ref / "config.json").is_file():
        return repo / "snapshots" / ref
    try:
        found = [s for s in (repo / "snapshots").iterdir() if (s / "config.json").is_file()]
    except OSError:
        return None
    return found[0] if len(found) == 1 else None


def cached_model(repo_id: str) -> Path:
    """The cached snapshot folder of the model ``repo_id``, or a :class:`ModelConfigError` that says how to get it."""
    cache = hub_cache()
    repo = cache / ("models--" + repo_id.replace("/", "--"))
    snapshot = _snapshot(repo) if repo.is_dir() else None
    if snapshot is not None:
        return snapshot
    where = (
        f"its cache folder {str(repo)!r} holds no snapshot with a config.json that refs/main names"
        if repo.is_dir()
        else f"the Hugging Face cache {str(cache)!r} (HF_HUB_CACHE, else HF_HOME/hub) holds no copy of it"
    )
    raise ModelConfigError(
        f"no model config at {repo_id!r}: no such file or folder, and {where}. devmem does not download: get the "
        f"config with `hf download {repo_id} config.json` (add model.safetensors.index.json for the weights and "
        "hf_quant_config.json where the model has one), or give the model's folder"
    )
