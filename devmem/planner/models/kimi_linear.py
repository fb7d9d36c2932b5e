"""Kimi-Linear: Kimi delta attention (KDA) layers beside MLA layers, placed by ``linear_attn_config``.

As vLLM's kimi_linear builds them: layer ``i`` is KDA where ``i + 1`` is in ``linear_attn_config.kda_layers`` and MLA
where it is in ``full_attn_layers`` (both 1-based). A KDA layer holds per sequence the short-convolution state of its
q, k and v (``3 x num_heads x head_dim`` channels, ``short_conv_kernel_size - 1`` columns, in the served dtype) and a
``num_heads x head_dim x head_dim`` recurrent state in float32 (vLLM's ``kda_state_dtype``), whatever the cache dtype.
"""

from __future__ import annotations

import numbers
from collections.abc import Mapping

from devmem.errors import UnknownArchitectureError
from devmem.planner.models.config import _Config
from devmem.planner.models.kinds import FULL, KDA
from devmem.planner.models.reading import MAX_CONFIG_INT, _shown

KEY = "linear_attn_config"


def _entry(c: _Config, name: str) -> object:
    config = c.get(KEY)
    if not isinstance(config, Mapping):
        raise c.refuse(KEY, f"config key {KEY} must be an object, got {_shown(config)}")
    return config.get(name)


def kda_dims(c: _Config) -> tuple[int, int, int]:
    """``(heads, head dim, conv kernel)`` of a KDA layer, from ``linear_attn_config``."""
    dims = []
    for name in ("num_heads", "head_dim", "short_conv_kernel_size"):
        value = _entry(c, name)
        if isinstance(value, bool) or not isinstance(value, numbers.Integral) or not 1 <= int(value) <= MAX_CONFIG_INT:
            raise UnknownArchitectureError(
                f"config of model_type {c.model_type!r}: {KEY}.{name}={_shown(value)} must be a whole number from 1 "
                f"to {MAX_CONFIG_INT} (the KDA state per sequence)",
                c.model_type,
                (f"{KEY}.{name}",),
            )
        dims.append(int(value))
    return dims[0], dims[1], dims[2]


def kimi_linear_layers(c: _Config, layers: int) -> list[str]:
    """Each layer's kind: KDA or MLA (full attention), every layer named once in the two 1-based lists."""
    placed: dict[int, str] = {}
    for name, kind in (("kda_layers", KDA), ("full_attn_layers", FULL)):
        listed = _entry(c, name)
        if not isinstance(listed, list) or not all(
            type(i) is int and 1 <= i <= layers and i not in placed for i in listed
        ):
            raise UnknownArchitectureError(
                f"config of model_type {c.model_type!r}: {KEY}.{name} must list distinct 1-based layer numbers up to "
                f"{layers}, none in the other list, got {_shown(listed)}",
                c.model_type,
                (f"{KEY}.{name}",),
            )
        placed.update(dict.fromkeys(listed, kind))
    if len(placed) != layers:
        missing = [i for i in range(1, layers + 1) if i not in placed]
        raise UnknownArchitectureError(
            f"config of model_type {c.model_type!r}: {KEY} places no layer {_shown(missing)} in kda_layers or "
            "full_attn_layers",
            c.model_type,
            (f"{KEY}.kda_layers",),
        )
    return [placed[i + 1] for i in range(layers)]


def kda_params(c: _Config, hidden: int) -> tuple[int, int]:
    """``(matrices, other)`` of one KDA mixer (vLLM's KimiDeltaAttention): q, k, v and o projections, the low-rank
    forget gate (f_a, f_b) and output gate (g_a, g_b), the beta projection; three convolutions, A_log, dt_bias and the
    output norm."""
    heads, head_dim, kernel = kda_dims(c)
    inner = heads * head_dim
    matrices = 4 * hidden * inner + 2 * (hidden * head_dim + head_dim * inner) + hidden * heads
    return matrices, 3 * inner * kernel + inner + heads + head_dim
