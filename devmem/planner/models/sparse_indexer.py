"""Which layers of DeepSeek sparse attention build their own indexer, as vLLM 0.34.0's ``compute_skip_topk_layers``
reads the config: the others reuse the top-k of the closest preceding indexer layer and cache only the latent."""

from __future__ import annotations

from devmem.errors import UnknownArchitectureError
from devmem.planner.models.config import _Config
from devmem.planner.models.reading import _shown


def indexer_layers(c: _Config, layers: int) -> tuple[list[bool], str]:
    """For each layer whether it builds an indexer (and caches its key), and which config keys said so.

    ``indexer_types`` (GLM-5.2): one ``full`` or ``shared`` per layer; else ``index_topk_pattern`` (``S`` skips a
    layer), else ``index_topk_freq`` (default 1) from ``index_skip_topk_offset`` (default 2): layer ``i`` skips where
    ``max(i - offset + 1, 0) % freq`` is not 0.
    """
    types = c.values.get("indexer_types")
    if types is not None:
        if not isinstance(types, list) or len(types) != layers:
            raise c.refuse(
                "indexer_types",
                f"config key indexer_types must list one entry per layer ({layers}), got {_shown(types)}",
            )
        unknown = sorted({_shown(t) for t in types if t not in ("full", "shared")})
        if unknown:
            raise UnknownArchitectureError(
                f"config of model_type {c.model_type!r}: indexer_types holds {', '.join(unknown)}; vLLM takes only "
                "'full' and 'shared'",
                c.model_type,
                ("indexer_types",),
            )
        shared = types.count("shared")
        return [t == "full" for t in types], f"indexer_types: {layers - shared} full, {shared} shared"
    freq = c.values.get("index_topk_freq", 1)
    if isinstance(freq, bool) or not isinstance(freq, int) or freq <= 0:
        raise c.refuse("index_topk_freq", f"config key index_topk_freq={_shown(freq)} must be a whole number above 0")
    pattern = c.values.get("index_topk_pattern")
    if pattern is not None:
        if not isinstance(pattern, str | list) or not all(p in ("F", "S") for p in pattern):
            raise c.refuse(
                "index_topk_pattern",
                f"config key index_topk_pattern must hold F and S per layer, got {_shown(pattern)}",
            )
        built = [i >= len(pattern) or pattern[i] != "S" for i in range(layers)]
        return built, f"index_topk_pattern: {built.count(True)} layers with an indexer, {built.count(False)} sharing"
    offset = c.values.get("index_skip_topk_offset", 2)
    if isinstance(offset, bool) or not isinstance(offset, int):
        raise c.refuse(
            "index_skip_topk_offset", f"config key index_skip_topk_offset={_shown(offset)} must be a whole number"
        )
    built = [max(i - offset + 1, 0) % freq == 0 for i in range(layers)]
    if freq == 1:
        return built, ""
    return built, (
        f"index_topk_freq {freq} from index_skip_topk_offset {offset}: {built.count(True)} layers with an indexer, "
        f"{built.count(False)} sharing"
    )
