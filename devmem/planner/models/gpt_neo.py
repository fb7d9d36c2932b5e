"""GPT-Neo: global and local layers from ``attention_types``."""

from __future__ import annotations

from typing import Any

from devmem.planner.models.config import MAX_LAYERS, _Config
from devmem.planner.models.reading import _shown


def _gpt_neo_local_layers(c: _Config, layers: int) -> int:
    """How many of GPT-Neo's layers are ``local`` as GPTNeoConfig expands ``attention_types`` (``[[kinds, repeats],
    ...]``), checking that it gives one ``global`` or ``local`` per layer. Local layers attend within
    ``window_size``, but transformers' DynamicCache keeps every token in them (and vLLM does not serve GPT-Neo)."""
    c.require("attention_types", why="GPT-Neo's global and local layers")
    groups: Any = c.get("attention_types")
    kinds: list[str] = []
    well_formed = isinstance(groups, list) and all(
        isinstance(g, list)
        and len(g) == 2
        and isinstance(g[0], list)
        and all(k in ("global", "local") for k in g[0])
        and isinstance(g[1], int)
        and not isinstance(g[1], bool)
        and 0 <= g[1] <= MAX_LAYERS
        for g in groups
    )
    if well_formed:
        for names, repeats in groups:
            kinds += names * repeats
            if len(kinds) > layers:
                break
    if not well_formed or len(kinds) != layers:
        raise c.refuse(
            "attention_types",
            f"config key attention_types must expand to one 'global' or 'local' per layer ({layers}) as "
            f"[[[kinds...], repeats], ...], got {_shown(groups)}",
        )
    return kinds.count("local")
