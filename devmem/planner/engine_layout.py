"""The KV cache as vLLM's hybrid allocator lays it out: its block size, its groups, its blocks and the tokens it logs.

devmem's own figures (:mod:`devmem.planner.capacity`) count every layer exactly. vLLM (v1) allocates differently where a
model mixes layer kinds, and what it logs as "GPU KV cache size" is not the budget read as attention KV:

- every layer's page (one block of one layer) must be the same size: with recurrent layers the attention block
  size is raised to the smallest multiple of 16 (64 for MLA) whose page holds one sequence's recurrent state,
  and the state's page is padded to it;
- layers are grouped by kind into groups of equal size (the smallest kind's layer count, or the largest's when
  that is within 1.25 times of it); a kind whose layers do not fill its last group is padded with empty layers;
- the pool is ``group size`` tensors of ``num_blocks`` pages, ``num_blocks = budget // page // group size``, one
  block of every group taken from the same pool;
- "GPU KV cache size" is ``num_blocks // groups x block size`` tokens.

A sequence of ``c`` tokens takes ``ceil(c / block)`` blocks in a full-attention group, at most its window (plus
one block) in a sliding one, at most its chunk in a chunked-local one, one block in a recurrent one.
"""

from __future__ import annotations

from dataclasses import dataclass

from devmem.planner.models import ModelMemory

#: vLLM's attention kernels' block alignment: 16 tokens (64 for MLA's kernels).
BLOCK_ALIGNMENT, MLA_BLOCK_ALIGNMENT = 16, 64


def _cdiv(a: int, b: int) -> int:
    return -(-a // b)


@dataclass(frozen=True)
class EngineLayout:
    """vLLM's layout of one budget for one model (per rank)."""

    block_size: int
    page_bytes: int
    state_page_bytes: int
    groups: tuple[tuple[str, int, int], ...]
    group_size: int
    num_blocks: int
    usable_bytes: int

    @property
    def padding_layers(self) -> int:
        return sum(count * self.group_size - layers for _, layers, count in self.groups)

    @property
    def num_groups(self) -> int:
        return sum(count for _, _, count in self.groups)

    @property
    def tokens(self) -> int:
        """What vLLM logs as "GPU KV cache size": ``num_blocks // groups x block size``."""
        return self.num_blocks // self.num_groups * self.block_size

    def blocks_per_sequence(self, model: ModelMemory, context: int) -> int:
        full = _cdiv(context, self.block_size)
        total = 0
        for kind, _, count in self.groups:
            if kind == "full_attention":
                each = full
            elif kind == "sliding_attention":
                each = min(full, _cdiv(model.sliding_window or 0, self.block_size) + 1)
            elif kind == "chunked_attention":
                chunk = model.attention_chunk_size or 0
                each = min(full, _cdiv(chunk, self.block_size) + (1 if chunk % self.block_size else 0))
            else:
                each = 1
            total += each * count
        return total

    def sequences_at(self, model: ModelMemory, context: int) -> int:
        return self.num_blocks // self.blocks_per_sequence(model, context)

    def lines(self, model: ModelMemory, devmem_tokens: int, context: int | None, devmem_sequences: int | None):
        groups = ", ".join(
            f"{kind.replace('_', ' ')} {layers} layers in {count} group(s)" for kind, layers, count in self.groups
        )
        out = [
            f"as vLLM lays it out: block {self.block_size} tokens, page {self.page_bytes} B per layer"
            + (f" (recurrent state {self.state_page_bytes} B, padded to it)" if self.state_page_bytes else "")
            + f"; {groups} of {self.group_size}"
            + (f" ({self.padding_layers} padding layers)" if self.padding_layers else ""),
            f'  vLLM\'s "GPU KV cache size": {self.usable_bytes} B // page {self.page_bytes} B // group size '
            f"{self.group_size} = {self.num_blocks} blocks; // {self.num_groups} groups x {self.block_size} "
            f"= {self.tokens} tokens (devmem's tokens above: {devmem_tokens}, every attention layer holding each)",
        ]
        if context is not None and devmem_sequences is not None:
            vllm = self.sequences_at(model, context)
            close = "" if not devmem_sequences else f" ({100 * vllm / devmem_sequences:.1f}% of devmem's)"
            out.append(
                f"  sequences at {context} tokens in vLLM's layout: {self.num_blocks} blocks // "
                f"{self.blocks_per_sequence(model, context)} per sequence = {vllm}; devmem counts {devmem_sequences}"
                + close
            )
        return out

    def as_dict(self, model: ModelMemory, context: int | None) -> dict[str, object]:
        return {
            "block_size": self.block_size,
            "page_bytes": self.page_bytes,
            "state_page_bytes": self.state_page_bytes,
            "groups": [{"kind": k, "layers": n, "groups": g} for k, n, g in self.groups],
            "group_size": self.group_size,
            "padding_layers": self.padding_layers,
            "num_blocks": self.num_blocks,
            "tokens": self.tokens,
            "sequences_at_context": None if context is None else self.sequences_at(model, context),
        }


def engine_layout(model: ModelMemory, usable_bytes: int, block_size: int = 16) -> EngineLayout:
    """How vLLM (v1, prefix caching off for recurrent layers) lays ``usable_bytes`` out for ``model``."""
    per_token = model.kv_layer_bytes_per_token
    kinds = [
        ("full_attention", model.full_attention_layers),
        ("sliding_attention", model.sliding_attention_layers),
        ("chunked_attention", model.chunked_attention_layers),
        *((s.kind, s.layers) for s in model.states),
    ]
    kinds = [(k, n) for k, n in kinds if n]
    state_page = max(
        (s.layer_bytes(model.tp, model.conv_state_dtype_bytes, model.ssm_state_dtype_bytes) for s in model.states),
        default=0,
    )
    if state_page:
        align = MLA_BLOCK_ALIGNMENT if model.attention == "mla" else BLOCK_ALIGNMENT
        needed = align * _cdiv(state_page, align * per_token)
        block_size = max(block_size, needed)
    page = block_size * per_token
    groups: tuple[tuple[str, int, int], ...]
    if len(kinds) == 1:
        groups, group_size = ((kinds[0][0], kinds[0][1], 1),), kinds[0][1]
    else:
        fewest, most = min(n for _, n in kinds), max(n for _, n in kinds)
        group_size = most if most < fewest * 1.25 else fewest
        groups = tuple((k, n, _cdiv(n, group_size)) for k, n in kinds)
    return EngineLayout(
        block_size=block_size,
        page_bytes=page,
        state_page_bytes=state_page,
        groups=groups,
        group_size=group_size,
        num_blocks=max(0, usable_bytes) // page // group_size,
        usable_bytes=usable_bytes,
    )
