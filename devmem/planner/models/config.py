"""A text config read by name: the family's keys and aliases, transformers' defaults, dtypes, the longest context."""

from __future__ import annotations

import builtins
import numbers
from collections.abc import Mapping
from typing import Any

from devmem.errors import ModelConfigError, UnknownArchitectureError
from devmem.planner.model_defaults import FAMILY_DEFAULTS
from devmem.planner.models.reading import MAX_CONFIG_INT, _shown

#: Bytes per element of each dtype name a config or a user may give, and its short name.
_DTYPES: dict[str, tuple[str, int]] = {
    "float32": ("fp32", 4),
    "float": ("fp32", 4),
    "fp32": ("fp32", 4),
    "float16": ("fp16", 2),
    "half": ("fp16", 2),
    "fp16": ("fp16", 2),
    "bfloat16": ("bf16", 2),
    "bf16": ("bf16", 2),
    "fp8": ("fp8", 1),
    "fp8_e4m3": ("fp8", 1),
    "fp8_e5m2": ("fp8", 1),
    "float8_e4m3fn": ("fp8", 1),
    "float8_e5m2": ("fp8", 1),
}


#: KV-cache dtypes a user may ask for (vLLM's ``--kv-cache-dtype``): ``auto`` is the family's default (the model's
#: dtype, or what the checkpoint declares, as vLLM resolves it); ``fp8_ds_mla`` is DeepSeek sparse attention's packed
#: fp8 latent; ``nvfp4`` packs K and V in fp4 with fp8 scales.
KV_DTYPES = ("auto", "bf16", "fp16", "fp8", "fp8_ds_mla", "nvfp4", "fp32")


#: GPT-2's key names (GPT2Config's ``attribute_map``), shared by GPT-J, CodeGen and GPTBigCode.
_GPT2_KEYS = {
    "num_hidden_layers": "n_layer",
    "num_attention_heads": "n_head",
    "hidden_size": "n_embd",
    "max_position_embeddings": "n_positions",
    "intermediate_size": "n_inner",
}


#: Keys a family's config.json writes under another name (its transformers config class's ``attribute_map``),
#: where the rest of the family reads as devmem reads it.
_ALIASES = {
    "exaone": {"num_hidden_layers": "num_layers"},
    "dbrx": {
        "num_hidden_layers": "n_layers",
        "num_attention_heads": "n_heads",
        "hidden_size": "d_model",
        "max_position_embeddings": "max_seq_len",
        "num_key_value_heads": "attn_config.kv_n_heads",
        "num_local_experts": "ffn_config.moe_num_experts",
        "intermediate_size": "ffn_config.ffn_hidden_size",
    },
    "bloom": {"num_hidden_layers": "n_layer", "num_attention_heads": "n_head"},
    "gptj": _GPT2_KEYS,
    "gpt2": _GPT2_KEYS,
    "gpt_bigcode": _GPT2_KEYS,
    "codegen": _GPT2_KEYS,
    "gpt_neo": {
        "num_hidden_layers": "num_layers",
        "num_attention_heads": "num_heads",
    },
    "opt": {"intermediate_size": "ffn_dim"},
    "mpt": {
        "num_hidden_layers": "n_layers",
        "num_attention_heads": "n_heads",
        "hidden_size": "d_model",
        "max_position_embeddings": "max_seq_len",
        "num_key_value_heads": "attn_config.kv_n_heads",
        "qk_ln": "attn_config.qk_ln",
        "alibi": "attn_config.alibi",
        "prefix_lm": "attn_config.prefix_lm",
    },
    "chatglm": {
        "num_hidden_layers": "num_layers",
        "intermediate_size": "ffn_hidden_size",
        "head_dim": "kv_channels",
    },
}


#: Families whose transformers config class derives ``num_hidden_layers`` from a per-layer list, read where config.json
#: sets none: NemotronHConfig's is the length of ``layers_block_type`` (which ``layer_types`` and the older
#: ``hybrid_override_pattern`` also set), as in Nemotron 3 Ultra's config.json.
_LAYER_COUNT_FROM = {"nemotron_h": ("layers_block_type", "layer_types", "hybrid_override_pattern")}


#: Bounds past any real model, so a hostile config cannot make devmem build huge lists or loop for ever.
MAX_LAYERS = 10_000


MAX_TP = 1024


#: Top-level keys a nested ``text_config`` inherits when it does not set them.
_INHERITED = ("torch_dtype", "dtype", "tie_word_embeddings", "quantization_config", "model_type")


#: Keys naming a model's longest sequence, as vLLM reads them (the smallest present wins).
_MAX_LENGTH_KEYS = (
    "max_position_embeddings",
    "n_positions",
    "max_seq_len",
    "seq_length",
    "model_max_length",
    "max_sequence_length",
    "max_seq_length",
    "seq_len",
)


def _dtype(name: object, what: str) -> tuple[str, int]:
    key = str(name).removeprefix("torch.").lower() if isinstance(name, str) else None
    if key not in _DTYPES:
        raise ModelConfigError(
            f"{what} {_shown(name)} is not a dtype devmem knows: use one of {', '.join(sorted(_DTYPES))}"
        )
    return _DTYPES[key]


class _Config:
    """A flattened text config with typed, named reads that raise :class:`UnknownArchitectureError`.

    Keys the config leaves out are filled from the family's transformers defaults (``defaulted`` names those
    that were read); a key present with ``null`` is absent and gets no default.
    """

    def __init__(self, raw: Mapping[str, Any]):
        text = raw.get("text_config")
        self.nested = isinstance(text, Mapping)
        merged = dict(text) if isinstance(text, Mapping) else dict(raw)
        if self.nested:
            merged.update({k: raw[k] for k in _INHERITED if k in raw and merged.get(k) is None})
        self.model_type = merged.get("model_type") if isinstance(merged.get("model_type"), str) else None
        self.aliased: dict[str, str] = {}
        for key, alias in _ALIASES.get(self.model_type or "", {}).items():
            outer, _, inner = alias.partition(".")  # "attn_config.kv_n_heads": inside a nested object
            holder = merged.get(outer) if inner else merged
            if key not in merged and isinstance(holder, Mapping) and (inner or outer) in holder:
                merged[key], self.aliased[key] = holder[inner or outer], alias
        self.layer_count_from: str | None = None
        for key in _LAYER_COUNT_FROM.get(self.model_type or "", ()):
            if merged.get("num_hidden_layers") is None and isinstance(merged.get(key), list | str):
                merged["num_hidden_layers"], self.layer_count_from = len(merged[key]), key
                break
        self.family, defaults = FAMILY_DEFAULTS.get(self.model_type or "", ("", {}))
        self.defaults = {k: v for k, v in defaults.items() if k not in merged}
        self.values = {**self.defaults, **{k: v for k, v in merged.items() if v is not None}}
        self.explicit_null = {k for k, v in merged.items() if v is None}
        self.defaulted: dict[str, object] = {}

    def name(self, key: str) -> str:
        """``key`` as the family's config.json names it (GPT-2's ``n_head`` for ``num_attention_heads``)."""
        return self.aliased.get(key, _ALIASES.get(self.model_type or "", {}).get(key, key))

    def has(self, key: str) -> bool:
        return key in self.values

    def missing(self, *keys: str) -> list[str]:
        return [k for k in keys if k not in self.values]

    def require(self, *keys: str, why: str) -> None:
        absent = [self.name(k) for k in self.missing(*keys)]  # named as the family's config.json names them
        if absent:
            raise UnknownArchitectureError(
                f"config of model_type {self.model_type!r} lacks {', '.join(absent)}, which {why} needs; "
                "devmem does not guess them",
                self.model_type,
                tuple(absent),
            )

    def get(self, key: str, default: object = None) -> object:
        if key in self.defaults and key in self.values:
            self.defaulted[key] = self.values[key]
        return self.values.get(key, default)

    def refuse(self, key: str, text: str) -> UnknownArchitectureError:
        """The refusal of ``key`` (named as the family's config.json names it), naming the family."""
        name = self.name(key)
        return UnknownArchitectureError(f"config of model_type {self.model_type!r}: {text}", self.model_type, (name,))

    def int(self, key: str, *, positive: bool = True, why: str = "sizing") -> int:
        self.require(key, why=why)
        value = self.get(key)
        if (
            isinstance(value, bool)
            or not isinstance(value, numbers.Integral)
            or not (1 if positive else 0) <= int(value) <= MAX_CONFIG_INT
        ):
            raise self.refuse(
                key,
                f"config key {self.name(key)}={_shown(value)} must be a whole number from {1 if positive else 0} "
                f"to {MAX_CONFIG_INT}",
            )
        return int(value)

    def flag(self, key: str, default: bool) -> bool:
        """A true/false key (``default`` when absent); anything but a JSON boolean is refused by name."""
        value = self.get(key, default)
        if not isinstance(value, bool):
            raise self.refuse(key, f"config key {self.name(key)}={_shown(value)} must be true or false")
        return value

    def get_int(self, key: str, default: builtins.int, *, positive: bool = False) -> builtins.int:
        return self.int(key, positive=positive) if key in self.values else default

    def first_int(self, *keys: str, why: str) -> builtins.int:
        """The first of ``keys`` the config sets (aliases of one dimension)."""
        for key in keys:
            if key in self.values:
                return self.int(key)
        self.require(keys[0], why=why)
        raise AssertionError  # require raised


def _max_context(c: _Config) -> tuple[int | None, str]:
    """The longest sequence the model takes, as vLLM derives it: the smallest length key, times the rope
    scaling factor (yarn: of ``original_max_position_embeddings``) except for llama3/longrope scaling and Gemma 3,
    whose ``max_position_embeddings`` is already scaled."""
    found = [(k, c.int(k)) for k in _MAX_LENGTH_KEYS if c.has(k)]
    if not found:
        return None, ""
    key, length = min(found, key=lambda kv: kv[1])
    source = f"{key} {length}" + (" (the family default)" if key in c.defaults else "")
    name = "rope_scaling" if isinstance(c.values.get("rope_scaling"), Mapping) else "rope_parameters"
    scaling = c.values.get(name)  # transformers 5 writes rope_scaling as rope_parameters
    if not isinstance(scaling, Mapping) or (c.model_type or "").startswith("gemma3"):
        return length, source
    rope_type = scaling.get("rope_type", scaling.get("type"))
    factor = scaling.get("factor")
    if rope_type in (None, "default", "su", "longrope", "llama3", "mrope") or factor is None:
        return length, source
    if isinstance(factor, bool) or not isinstance(factor, int | float) or not 1 <= factor <= 1024:
        raise c.refuse(name, f"config key {name}.factor={_shown(factor)} must be a number from 1 to 1024")
    base = scaling.get("original_max_position_embeddings")
    if rope_type == "yarn" and base is not None:
        if isinstance(base, bool) or not isinstance(base, int) or not 0 < base <= MAX_CONFIG_INT:
            raise c.refuse(
                name,
                f"config key {name}.original_max_position_embeddings={_shown(base)} must be a whole number "
                f"from 1 to {MAX_CONFIG_INT}",
            )
        return int(base * factor), f"{name} yarn: original_max_position_embeddings {base} x factor {factor}"
    return int(length * factor), f"{source} x {name} {rope_type} factor {factor}"


def _served_dtype(c: _Config, dtype: str | None, notes: list[str]) -> tuple[str, int]:
    """The dtype an engine serves the model in: ``dtype`` when given, else the config's as vLLM's "auto"
    resolves it on a GPU (float32, or no dtype at all, is bf16)."""
    if dtype is not None:
        return _dtype(dtype, "model dtype")
    given = c.values.get("torch_dtype", c.values.get("dtype"))
    if given is None:
        notes.append("the config names no dtype (torch_dtype or dtype): served in bf16, as vLLM's auto does")
        return "bf16", 2
    name, size = _dtype(given, "the config's dtype (give another with dtype= or --dtype)")
    if name == "fp32":
        notes.append(
            f"the config's dtype is {given}: served in bf16, as vLLM's auto does on GPUs (--dtype fp32 keeps it)"
        )
        return "bf16", 2
    return name, size
