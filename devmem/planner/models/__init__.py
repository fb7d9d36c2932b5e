"""A model's memory shape from its Hugging Face ``config.json``: KV bytes per token, state per sequence, weights.

Pure Python: the config is read as JSON (transformers is never imported) and every figure is an exact int.
What is counted per architecture, with the formulas, is in docs/models.md; the shapes are the ones vLLM's KV
cache specs give:

- attention layers hold K and V for every token: ``2 x kv_heads_per_rank x head_dim x kv_dtype`` bytes per layer;
  a sliding-window layer holds at most its window of tokens per sequence, a chunked-local one (Llama 4) at most
  its chunk (the planner caps both);
- MLA layers (DeepSeek-V2/V3) hold one latent shared by every head: ``(kv_lora_rank + qk_rope_head_dim) x
  kv_dtype`` bytes per layer, the same on every tensor-parallel rank; DeepSeek-V3.2 adds its sparse-attention
  indexer's key (``index_head_dim`` fp8 bytes plus a 4-byte scale per 128) and caches the latent in vLLM's
  ``fp8_ds_mla`` layout (656 bytes for DeepSeek's shape);
- recurrent layers (Mamba in Jamba, Mamba2 in NemotronH and Bamba, gated-delta-net linear attention in Qwen3-Next
  and Qwen3.5, lightning attention in MiniMax-Text-01, Kimi delta attention in Kimi-Linear, short convolutions in
  LFM2) hold a fixed state per sequence, whatever its length, split across ranks;
- mixture-of-experts and MLP-only layers change the weights only.

Tensor parallelism follows vLLM: ``kv_heads_per_rank = max(1, kv_heads // tp)``, where ``tp`` must divide the
KV heads, or the KV heads ``tp`` (then each KV head is replicated on ``tp // kv_heads`` ranks); ``tp`` must
divide the attention heads and the recurrent heads too. The dtype is resolved as engines resolve "auto": a
float32 checkpoint, or one that names no dtype, is served in bf16; the KV cache takes the dtype a quantized checkpoint
declares (:mod:`.kv_dtype`). A config devmem cannot read exactly raises
:class:`UnknownArchitectureError` naming the missing or unmodelled keys: it never guesses. Config files are read
by one bounded reader (:func:`read_json`): a file that is not a regular file, too large, not UTF-8, nested too
deep or holding an integer too long to be a size is one :class:`ModelConfigError` naming it.
"""

from devmem.errors import ModelConfigError, UnknownArchitectureError
from devmem.planner.models.config import KV_DTYPES, MAX_LAYERS, MAX_TP
from devmem.planner.models.kinds import (
    ATTENTION,
    CHUNKED,
    CONV,
    FULL,
    KDA,
    LIGHTNING,
    LINEAR,
    MAMBA,
    MAMBA2,
    NO_CACHE,
    SLIDING,
)
from devmem.planner.models.memory import ModelMemory, load_model
from devmem.planner.models.reading import (
    MAX_CONFIG_INT,
    MAX_JSON_BYTES,
    MAX_JSON_DEPTH,
    MAX_JSON_DIGITS,
    checkpoint_weights,
    read_json,
)
from devmem.planner.models.recurrent import RecurrentState
from devmem.planner.models.spec import FP8_DS_MLA, AttentionSpec

__all__ = [
    "ATTENTION",
    "AttentionSpec",
    "CHUNKED",
    "CONV",
    "FP8_DS_MLA",
    "FULL",
    "KDA",
    "KV_DTYPES",
    "LIGHTNING",
    "LINEAR",
    "MAMBA",
    "MAMBA2",
    "MAX_CONFIG_INT",
    "MAX_JSON_BYTES",
    "MAX_JSON_DEPTH",
    "MAX_JSON_DIGITS",
    "MAX_LAYERS",
    "MAX_TP",
    "NO_CACHE",
    "SLIDING",
    "ModelConfigError",
    "ModelMemory",
    "RecurrentState",
    "UnknownArchitectureError",
    "checkpoint_weights",
    "load_model",
    "read_json",
]
