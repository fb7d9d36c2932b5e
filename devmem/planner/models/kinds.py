"""The kinds of layer a model's config names, as devmem counts them."""

from __future__ import annotations

FULL, SLIDING, CHUNKED = "full_attention", "sliding_attention", "chunked_attention"


MAMBA, MAMBA2, LINEAR, CONV = "mamba", "mamba2", "linear_attention", "short_conv"


#: MiniMax's lightning (linear) attention: one ``head_dim x head_dim`` state per head (vLLM's ``linear_attention``).
LIGHTNING = "lightning_attention"


#: Kimi-Linear's Kimi delta attention: short convolutions of q, k and v and a float32 ``head_dim x head_dim`` state
#: per head.
KDA = "kimi_delta_attention"


#: Every recurrent kind: a fixed state per sequence.
RECURRENT = (MAMBA, MAMBA2, LINEAR, CONV, LIGHTNING, KDA)


#: MLP-only and mixture-of-experts-only layers (NemotronH's ``-`` and ``E``): weights, no cache.
NO_CACHE = ("mlp", "moe")


ATTENTION = (FULL, SLIDING, CHUNKED)
