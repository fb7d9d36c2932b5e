"""How a quantized checkpoint stores its weight matrices, read from its quantization config: the bits per weight (its
block scales included) and which of the decoder's matrices it covers.

- MXFP4 (gpt-oss): the routed experts only, 4 bits and an 8-bit scale per 32 (4.25 bits);
- ModelOpt (``quant_algo``): FP8 8 bits, NVFP4 4 bits and an fp8 scale per ``group_size`` (16: 4.5 bits);
- compressed-tensors (``config_groups``): the one weight width every group gives, with a scale per group (fp8 for a
  4-bit float, else 16 bits, and a zero point where not symmetric);
- fp8 (``quant_method`` fp8): 8 bits and a float32 scale per ``weight_block_size`` block;
- GPTQ and AWQ (``bits`` / ``w_bit``, ``group_size`` / ``q_group_size``): the width, a 16-bit scale and a packed
  zero point per group.

The embeddings, the output head, routers and norms stay in the served dtype, and so do the decoder's attention,
MLP or experts where the config's exclusions (``ignore``, ``exclude_modules``, ``modules_to_not_convert``) name them.
Per-tensor scales and GPTQ's ``g_idx`` are not counted.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Any

from devmem.planner.models.reading import _shown

#: The decoder's matrices a format may cover or leave out: attention (and recurrent mixers), dense MLPs (and shared
#: experts), routed experts.
ATTENTION, MLP, EXPERTS = "attention", "MLP", "experts"


@dataclass(frozen=True)
class WeightFormat:
    """``bits`` per weight of the matrices it covers; ``experts_only`` (MXFP4) or every decoder matrix but those
    ``excluded`` (``(bucket, layer)``, ``layer`` ``None`` for every layer); ``name`` and ``source`` for people."""

    name: str
    bits: Fraction
    source: str
    experts_only: bool = False
    excluded: frozenset[tuple[str, int | None]] = field(default=frozenset())

    def covers(self, bucket: str, layer: int) -> bool:
        if self.experts_only:
            return bucket == EXPERTS
        return (bucket, None) not in self.excluded and (bucket, layer) not in self.excluded

    def note(self, served: str) -> str:
        scope = "the routed experts" if self.experts_only else "the decoder's linear layers"
        left = sorted({f"{b}{'' if layer is None else f' of layer {layer}'}" for b, layer in self.excluded})
        kept = f"; {', '.join(left)} kept in {served} as the exclusions name them" if left else ""
        return (
            f"weights counted as {self.source} stores them: {scope} at {float(self.bits):g} bits per weight "
            f"({self.name}, block scales included){kept}; the embeddings, the output head, routers and norms in "
            f"{served}; per-tensor scales not counted"
        )


_NOT_DECODER = re.compile(r"vision|visual|vit\b|image|audio|projector|multi_modal|merger|patch_embed")
_LAYER = re.compile(r"layers?\\?\.(\d+)\\?\.")


def _excluded(entries: object) -> frozenset[tuple[str, int | None]]:
    """The decoder matrices an exclusion list names, read by the words its entries hold (regexes' ``re:`` too)."""
    found: set[tuple[str, int | None]] = set()
    for entry in entries if isinstance(entries, list) else []:
        if not isinstance(entry, str) or _NOT_DECODER.search(entry):
            continue
        text = entry.removeprefix("re:")
        match = _LAYER.search(text)
        layer = int(match.group(1)) if match else None
        if "shared_expert" in text:
            bucket = MLP
        elif "expert" in text:
            bucket = EXPERTS
        elif re.search(r"attn|attention|mixer|mamba", text):
            bucket = ATTENTION
        elif re.search(r"mlp|ffn|feed_forward", text) and not re.search(r"(^|\.)(gate|router)(\W|$)", text):
            bucket = MLP
        else:
            continue  # the output head, embeddings, routers: in the served dtype already
        found.add((bucket, layer))
    return frozenset(found)


def _int(value: object) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else None


def _compressed_tensors(quant: Mapping[str, Any], where: str) -> WeightFormat | str:
    groups = quant.get("config_groups")
    widths = set()
    for group in groups.values() if isinstance(groups, Mapping) else []:
        weights = group.get("weights") if isinstance(group, Mapping) else None
        if not isinstance(weights, Mapping) or _int(weights.get("num_bits")) is None:
            return f"a config group of {where} without weights of a whole num_bits"
        bits, size = weights["num_bits"], _int(weights.get("group_size"))
        scale = 0 if weights.get("strategy") not in ("group", "tensor_group") or size is None else size
        extra = Fraction(0)
        if scale:
            extra = Fraction(8 if weights.get("type") == "float" and bits == 4 else 16, scale)
            extra += 0 if weights.get("symmetric", True) else Fraction(bits, scale)
        widths.add(bits + extra)
    if len(widths) != 1:
        return f"config_groups of {where} give {len(widths)} weight widths"
    return WeightFormat("compressed-tensors", widths.pop(), where, excluded=_excluded(quant.get("ignore")))


def weight_format(quant: Mapping[str, Any], method: str, where: str) -> WeightFormat | str:
    """The weight format of a quantization config whose normalized ``quant_method`` is ``method``, or why it is not
    modelled (a string for the note)."""
    if method in ("mxfp4", "gpt_oss_mxfp4"):
        return WeightFormat("MXFP4", Fraction(17, 4), where, experts_only=True)
    if method.startswith("modelopt"):
        inner = quant.get("quantization", quant)
        inner = inner if isinstance(inner, Mapping) else quant
        algo = str(inner.get("quant_algo", "")).upper()
        excluded = _excluded(inner.get("exclude_modules", quant.get("ignore", quant.get("exclude_modules"))))
        if algo.startswith("FP8"):
            return WeightFormat(f"ModelOpt {algo}", Fraction(8), where, excluded=excluded)
        if algo == "NVFP4":
            group = _int(inner.get("group_size")) or 16
            return WeightFormat("ModelOpt NVFP4", 4 + Fraction(8, group), where, excluded=excluded)
        return f"ModelOpt quant_algo {_shown(algo)} in {where}"
    if method == "compressed-tensors":
        return _compressed_tensors(quant, where)
    if method == "fp8":
        block = quant.get("weight_block_size")
        extra = Fraction(0)
        if isinstance(block, list) and len(block) == 2 and all(_int(b) for b in block):
            extra = Fraction(32, block[0] * block[1])
        excluded = _excluded(quant.get("modules_to_not_convert", quant.get("ignored_layers")))
        return WeightFormat("fp8", 8 + extra, where, excluded=excluded)
    if method in ("gptq", "awq", "gptq_marlin", "awq_marlin"):
        bits = _int(quant.get("bits", quant.get("w_bit")))
        if bits is None or bits > 16:
            return f"{method} without a whole bits (or w_bit) in {where}"
        group = quant.get("group_size", quant.get("q_group_size", 128))
        extra = Fraction(16 + bits, group) if _int(group) else Fraction(0)
        return WeightFormat(method, bits + extra, where, excluded=_excluded(quant.get("modules_to_not_convert")))
    return f"quant_method {_shown(method)} in {where}"
