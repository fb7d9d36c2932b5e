"""One attention layer's cache as a spec: what it holds per token, over which span, in which layout.

Every family maps its config onto a list of :class:`AttentionSpec` (one per attention layer); the KV bytes per token,
the cost of long contexts and the capacity are sums over that list, so a new family is a mapping, not new arithmetic.
"""

from __future__ import annotations

from dataclasses import dataclass

from devmem.planner.models.kinds import CHUNKED, FULL, SLIDING

#: Layouts: K and V per KV head; one MLA latent shared by every head; DeepSeek's sparse MLA (latent and indexer key).
KV, MLA, SPARSE_MLA = "kv", "mla", "sparse_mla"
#: vLLM's packed fp8 latent of sparse MLA: the latent in fp8 with a float32 scale per 128, the rope part in bf16.
FP8_DS_MLA = "fp8_ds_mla"
#: vLLM's NVFP4 cache of K and V: per head ``head_size / 2`` bytes of packed fp4 and ``head_size / 16`` fp8 scales
#: (``nvfp4_kv_cache_full_dim``).
NVFP4 = "nvfp4"


def nvfp4_head_bytes(head_size: int) -> int:
    """Bytes of one head's K (or V) for one token in vLLM's NVFP4 cache."""
    return head_size // 2 + head_size // 16


@dataclass(frozen=True)
class AttentionSpec:
    """One attention layer, as vLLM's KV cache spec shapes it (at ``tp = 1``).

    ``kind`` is the span it holds per sequence (``full_attention``, ``sliding_attention`` within ``window`` tokens,
    ``chunked_attention`` within its current ``window``-token chunk); ``layout`` how a token is stored: ``kv`` (K of
    ``k_head_size`` and V of ``v_head_size`` for each of ``kv_heads``), ``mla`` (one latent of ``k_head_size``, the
    same on every rank) or ``sparse_mla`` (the latent, of which ``rope_size`` is the rope part, plus an indexer key of
    ``indexer_bytes``).
    """

    kind: str
    kv_heads: int
    k_head_size: int
    v_head_size: int
    window: int | None = None
    layout: str = KV
    rope_size: int = 0
    indexer_bytes: int = 0

    def __post_init__(self) -> None:
        if self.kind not in (FULL, SLIDING, CHUNKED) or self.layout not in (KV, MLA, SPARSE_MLA):
            raise ValueError(f"attention spec of kind {self.kind!r}, layout {self.layout!r}: not one devmem sizes")

    def kv_heads_per_rank(self, tp: int) -> int:
        """``max(1, kv_heads // tp)`` (vLLM's rule); the latent for MLA, on every rank."""
        return 1 if self.layout != KV else max(1, self.kv_heads // tp)

    def bytes_per_token(self, tp: int, kv_dtype: str, kv_dtype_bytes: int) -> int:
        """Bytes this layer holds per token on one of ``tp`` ranks with a cache of ``kv_dtype``."""
        if self.layout == KV and kv_dtype == NVFP4:
            packed = nvfp4_head_bytes(self.k_head_size) + nvfp4_head_bytes(self.v_head_size)
            return self.kv_heads_per_rank(tp) * packed
        if self.layout == KV:
            return self.kv_heads_per_rank(tp) * (self.k_head_size + self.v_head_size) * kv_dtype_bytes
        if self.layout == SPARSE_MLA and kv_dtype == FP8_DS_MLA:
            latent = self.k_head_size - self.rope_size
            return latent + -(-latent // 128) * 4 + self.rope_size * 2 + self.indexer_bytes
        return self.k_head_size * kv_dtype_bytes + self.indexer_bytes

    def text(self, tp: int, kv_dtype: str, kv_dtype_bytes: int) -> str:
        """The arithmetic of :meth:`bytes_per_token`, for people."""
        each = self.bytes_per_token(tp, kv_dtype, kv_dtype_bytes)
        if self.layout == KV:
            split = "" if tp == 1 else f" (max(1, {self.kv_heads} // tp {tp}))"
            heads = f"{self.kv_heads_per_rank(tp)} KV heads per rank{split}"
            if kv_dtype == NVFP4:
                packed = " + ".join(f"({size} / 2 + {size} / 16)" for size in (self.k_head_size, self.v_head_size))
                return f"{heads} x ({packed}) B of packed fp4 and fp8 scales ({NVFP4}) = {each} B"
            if self.k_head_size == self.v_head_size:
                return f"2 x {heads} x head dim {self.k_head_size} x {kv_dtype} {kv_dtype_bytes} B = {each} B"
            return (
                f"{heads} x (K head {self.k_head_size} + V head {self.v_head_size}) x {kv_dtype} {kv_dtype_bytes} B "
                f"= {each} B"
            )
        indexer = f" + indexer key {self.indexer_bytes} B" if self.indexer_bytes else ""
        if self.layout == SPARSE_MLA and kv_dtype == FP8_DS_MLA:
            latent = self.k_head_size - self.rope_size
            layout = (
                f"{latent} fp8 + {-(-latent // 128)} x 4 B scales + rope {self.rope_size} x bf16 2 B ({FP8_DS_MLA})"
            )
        else:
            layout = f"{self.k_head_size} latent (kv_lora_rank + qk_rope_head_dim) x {kv_dtype} {kv_dtype_bytes} B"
        return f"{layout}{indexer}, the same on every rank = {each} B"
