"""The kinds of layer a model's config names, as devmem counts them."""

from __future__ import annotations

FULL, SLIDING, CHUNKED = "full_attention", "sliding_attention", "chunked_attention"


MAMBA, MAMBA2, LINEAR, CONV = "mamba", "mamba2", "linear_attention", "short_conv"


#: MLP-only and mixture-of-experts-only layers (NemotronH's ``-`` and ``E``): weights, no cache.
NO_CACHE = ("mlp", "moe")


ATTENTION = (FULL, SLIDING, CHUNKED)
