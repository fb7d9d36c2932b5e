"""A model's memory shape from its Hugging Face ``config.json``: KV bytes per token, state per sequence, weights.

Pure Python: the config is read as JSON (transformers is never imported) and every figure is an exact int.
What is counted per architecture, with the formulas, is in docs/models.md:

- attention layers hold K and V for every token: ``2 x kv_heads_per_rank x head_dim x kv_dtype`` bytes per layer;
  a sliding-window layer holds at most its window of tokens per sequence (the planner caps it);
- MLA layers (DeepSeek-V2/V3) hold one latent shared by every head: ``(kv_lora_rank + qk_rope_head_dim) x
  kv_dtype`` bytes per layer, the same on every tensor-parallel rank;
- recurrent layers (Mamba in Jamba, gated-delta-net linear attention in Qwen3-Next) hold a fixed state per
  sequence, whatever its length: a convolution state and an SSM state, split across ranks;
- mixture-of-experts changes the weights only.

Tensor parallelism follows vLLM: ``kv_heads_per_rank = max(1, kv_heads // tp)``, where ``tp`` must divide the
KV heads, or the KV heads ``tp`` (then each KV head is replicated on ``tp // kv_heads`` ranks); ``tp`` must
divide the attention heads and the recurrent heads too. A config devmem cannot read exactly raises
:class:`UnknownArchitectureError` naming the missing or unmodelled keys: it never guesses.
"""

from __future__ import annotations

import builtins
import json
import math
import numbers
import os
import struct
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from devmem.errors import ModelConfigError, UnknownArchitectureError
from devmem.results import Explanation
from devmem.units import format_size

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
#: KV-cache dtypes a user may ask for; ``auto`` is the model's dtype.
KV_DTYPES = ("auto", "bf16", "fp16", "fp8", "fp32")

FULL, SLIDING, MAMBA, LINEAR = "full_attention", "sliding_attention", "mamba", "linear_attention"
_LAYER_TYPES = {"full_attention": FULL, "sliding_attention": SLIDING, "linear_attention": LINEAR}
_BLOCK_TYPES = {"attention": FULL, "mamba": MAMBA}

#: Keys that the transformers config class of a family fills in when a published config.json leaves them out
#: (Gemma 3's text_config, for one, gives neither head_dim nor the sliding-window pattern).
_FAMILY_DEFAULTS: dict[str, dict[str, Any]] = {
    "gemma": {"head_dim": 256},
    "gemma2": {"head_dim": 256, "sliding_window": 4096},
    "gemma3_text": {
        "head_dim": 256,
        "sliding_window": 4096,
        "sliding_window_pattern": 6,
        "num_key_value_heads": 4,
        "vocab_size": 262208,
    },
}
_FAMILY_DEFAULTS["gemma3"] = _FAMILY_DEFAULTS["gemma3_text"]
#: Families whose config class ties the output embedding to the input one unless told otherwise.
_TIED_BY_DEFAULT = {"gemma", "gemma2", "gemma3", "gemma3_text"}
#: Families with a norm on each query and key head (two ``head_dim`` vectors per attention layer).
_QK_NORM = {"qwen3", "qwen3_moe", "qwen3_next", "gemma3", "gemma3_text"}
#: Families whose q, k and v projections carry a bias whatever ``attention_bias`` says.
_QKV_BIAS = {"qwen2", "qwen2_moe"}
#: Families whose full-attention query projection also produces an output gate (twice the query width).
_GATED_QUERY = {"qwen3_next"}

#: Config keys that change the KV cache in ways devmem does not model: a config setting one is refused.
_UNMODELLED = {
    "attention_chunk_size": "chunked local attention (Llama 4)",
    "num_kv_shared_layers": "KV shared across layers (Gemma 3n)",
    "index_topk": "the sparse-attention indexer cache (DeepSeek-V3.2)",
    "hybrid_override_pattern": "the NemotronH hybrid layout",
    "attn_layer_indices": "the Bamba hybrid layout",
    "cross_attention_layers": "cross-attention layers (Mllama)",
    "multi_query": "Falcon's multi-query flag",
    "n_head_kv": "a KV-head count under the key n_head_kv",
    "num_kv_heads": "a KV-head count under the key num_kv_heads",
    "multi_query_group_num": "a KV-head count under the key multi_query_group_num (ChatGLM)",
    "kv_n_heads": "a KV-head count under the key kv_n_heads",
}
#: Bounds past any real model, so a hostile config cannot make devmem build huge lists or loop for ever.
MAX_LAYERS = 10_000
MAX_TP = 1024
#: Top-level keys a nested ``text_config`` inherits when it does not set them.
_INHERITED = ("torch_dtype", "dtype", "tie_word_embeddings", "quantization_config", "model_type")


def _dtype(name: object, what: str) -> tuple[str, int]:
    key = str(name).removeprefix("torch.").lower() if isinstance(name, str) else None
    if key not in _DTYPES:
        raise ModelConfigError(f"{what} {name!r} is not a dtype devmem knows: use one of {', '.join(sorted(_DTYPES))}")
    return _DTYPES[key]


@dataclass(frozen=True)
class RecurrentState:
    """The fixed per-sequence state of one kind of recurrent layer, in elements, before tensor parallelism.

    ``conv_elements`` is the convolution state of one layer (``channels x (kernel - 1)``), ``ssm_elements`` its
    SSM or linear-attention state (``conv_text`` and ``ssm_text`` say how); both are split evenly across
    ranks, each of which must divide every count in ``split``.
    """

    kind: str
    layers: int
    conv_elements: int
    ssm_elements: int
    split: tuple[tuple[str, int], ...]
    conv_text: str
    ssm_text: str

    def bytes_per_sequence(self, tp: int, conv_bytes: int, ssm_bytes: int) -> int:
        """Bytes one sequence holds in these layers on one of ``tp`` ranks."""
        return self.layers * (self.conv_elements // tp * conv_bytes + self.ssm_elements // tp * ssm_bytes)


@dataclass(frozen=True)
class ModelMemory:
    """What one model costs in memory, per tensor-parallel rank: KV bytes per token, state per sequence, weights.

    Build it with :meth:`from_config` or :meth:`from_pretrained_dir`. Layer counts are of the whole model;
    every ``*_bytes`` property is per rank at ``tp``. ``kv_layer_bytes_per_token`` is one attention layer's
    K and V (or MLA latent) for one token; ``sliding_window`` caps what each sliding layer holds per sequence.
    """

    model_type: str
    num_layers: int
    full_attention_layers: int
    sliding_attention_layers: int
    sliding_window: int | None
    attention: str
    num_attention_heads: int
    num_kv_heads: int
    head_dim: int
    dtype: str
    dtype_bytes: int
    kv_dtype: str
    kv_dtype_bytes: int
    states: tuple[RecurrentState, ...] = ()
    conv_state_dtype_bytes: int = 2
    ssm_state_dtype_bytes: int = 2
    weights_bytes: int = 0
    weights_source: str = "estimated from config.json"
    max_context: int | None = None
    tp: int = 1
    layer_source: str = ""
    notes: tuple[str, ...] = field(default=())

    def __post_init__(self) -> None:
        if isinstance(self.tp, bool) or not isinstance(self.tp, int) or self.tp < 1:
            raise ModelConfigError(f"tp must be a whole number >= 1 (tensor-parallel ranks), got {self.tp!r}")
        problems = self._tp_problems(self.tp)
        if problems:
            valid = [t for t in range(1, min(self.num_attention_heads, MAX_TP) + 1) if not self._tp_problems(t)]
            raise ModelConfigError(
                f"tp={self.tp} cannot split {self.model_type}: {'; '.join(problems)}. "
                f"Tensor-parallel sizes this model allows: {', '.join(map(str, valid))}"
            )

    def _tp_problems(self, tp: int) -> list[str]:
        problems = []
        if self.num_attention_heads % tp:
            problems.append(f"{self.num_attention_heads} attention heads are not a multiple of {tp}")
        if self.attention != "mla":
            kv = self.num_kv_heads
            if (kv >= tp and kv % tp) or (kv < tp and tp % kv):
                problems.append(f"{kv} KV heads neither split evenly over {tp} ranks nor replicate evenly onto them")
        for state in self.states:
            problems += [f"{what} {count} is not a multiple of {tp}" for what, count in state.split if count % tp]
        return problems

    @classmethod
    def from_config(
        cls,
        config: Mapping[str, Any] | str | os.PathLike,
        *,
        kv_dtype: str = "auto",
        tp: int = 1,
        dtype: str | None = None,
        state_dtype: str = "auto",
        weights_bytes: int | None = None,
        weights_source: str | None = None,
    ) -> ModelMemory:
        """The memory shape of the model a config describes (a dict, a config.json, or a folder holding one).

        ``dtype`` overrides the config's ``torch_dtype``/``dtype`` (engines serve float32 checkpoints in 16 bits);
        ``kv_dtype`` is ``auto`` (the model dtype), ``bf16``, ``fp16``, ``fp8`` or ``fp32``; ``state_dtype``
        (``auto`` = the model dtype) is the recurrent state's. Without ``weights_bytes`` the weights are
        estimated from the config, matrix by matrix (docs/models.md says what is counted).
        """
        raw = _read_config(config) if not isinstance(config, Mapping) else dict(config)
        return _build(
            raw,
            kv_dtype=kv_dtype,
            tp=tp,
            dtype=dtype,
            state_dtype=state_dtype,
            weights_bytes=weights_bytes,
            weights_source=weights_source,
        )

    @classmethod
    def from_pretrained_dir(cls, path: str | os.PathLike, **options: Any) -> ModelMemory:
        """:meth:`from_config` on ``path/config.json``, with the weights read from the checkpoint when present:
        ``model.safetensors.index.json``'s ``metadata.total_size``, else the tensor bytes of the safetensors
        files; otherwise estimated from the config, and said so."""
        folder = Path(path)
        if not folder.is_dir():
            raise ModelConfigError(f"{str(path)!r} is not a folder holding a model's config.json")
        found = checkpoint_weights(folder)
        if found is not None and options.get("weights_bytes") is None:
            options["weights_bytes"], options["weights_source"] = found
        return cls.from_config(folder / "config.json", **options)

    def splits_over(self, tp: int) -> bool:
        """Whether ``tp`` ranks can split this model (heads, KV heads and recurrent heads)."""
        return not self._tp_problems(tp)

    def at_tp(self, tp: int) -> ModelMemory:
        """The same model split over ``tp`` ranks (raises :class:`ModelConfigError` where it cannot be)."""
        return replace(self, tp=tp)

    @property
    def attention_layers(self) -> int:
        return self.full_attention_layers + self.sliding_attention_layers

    @property
    def kv_heads_per_rank(self) -> int:
        """KV heads each rank holds: ``max(1, kv_heads // tp)`` (vLLM's rule); 1 latent for MLA on every rank."""
        return 1 if self.attention == "mla" else max(1, self.num_kv_heads // self.tp)

    @property
    def kv_layer_bytes_per_token(self) -> int:
        """Bytes one attention layer holds per token on one rank: K and V, or the MLA latent."""
        entries = self.head_dim if self.attention == "mla" else 2 * self.kv_heads_per_rank * self.head_dim
        return entries * self.kv_dtype_bytes

    @property
    def kv_bytes_per_token(self) -> int:
        """KV bytes per token over every attention layer, on one rank (sliding layers not yet capped)."""
        return self.attention_layers * self.kv_layer_bytes_per_token

    @property
    def full_bytes_per_token(self) -> int:
        return self.full_attention_layers * self.kv_layer_bytes_per_token

    @property
    def sliding_bytes_per_token(self) -> int:
        return self.sliding_attention_layers * self.kv_layer_bytes_per_token

    @property
    def state_bytes_per_sequence(self) -> int:
        """Fixed bytes each sequence holds in recurrent layers on one rank, whatever its length."""
        return sum(
            s.bytes_per_sequence(self.tp, self.conv_state_dtype_bytes, self.ssm_state_dtype_bytes) for s in self.states
        )

    @property
    def weights_bytes_per_rank(self) -> int:
        """``ceil(weights / tp)``: the weights split evenly (replicated norms and biases are not counted twice)."""
        return -(-self.weights_bytes // self.tp)

    @property
    def weights_estimated(self) -> bool:
        return self.weights_source.startswith("estimated")

    def explain(self) -> str:
        """For people, one line each: the layers, the per-token and per-sequence arithmetic, the weights."""
        if self.attention == "mla":
            kv = f"{self.head_dim} latent (kv_lora_rank + qk_rope_head_dim), the same on every rank"
        else:
            split = "" if self.tp == 1 else f" (max(1, {self.num_kv_heads} // tp {self.tp}))"
            kv = f"2 x {self.kv_heads_per_rank} KV heads per rank{split} x head dim {self.head_dim}"
        kinds = (
            (self.full_attention_layers, "full-attention"),
            (self.sliding_attention_layers, f"sliding-window ({self.sliding_window})"),
            *((s.layers, s.kind) for s in self.states),
        )
        summary = ", ".join(f"{n} {k}" for n, k in kinds if n)
        source = f" (from {self.layer_source})" if self.layer_source else ""
        capped = (
            f"; the {self.sliding_attention_layers} sliding layers hold at most {self.sliding_window} tokens "
            "per sequence"
            if self.sliding_attention_layers
            else ""
        )
        lines = [
            f"model: {self.model_type}, {self.num_layers} layers: {summary}{source}",
            f"attention: {self.attention.upper()}, {self.num_attention_heads} heads; tensor parallel {self.tp}",
            (
                f"KV per token per layer: {kv} x {self.kv_dtype} {self.kv_dtype_bytes} B = "
                f"{self.kv_layer_bytes_per_token} B"
            ),
            (
                f"KV per token: {self.attention_layers} attention layers x {self.kv_layer_bytes_per_token} B = "
                f"{self.kv_bytes_per_token} B{capped}"
            ),
        ]
        for s in self.states:
            each = s.bytes_per_sequence(self.tp, self.conv_state_dtype_bytes, self.ssm_state_dtype_bytes)
            lines.append(
                f"state per sequence, {s.kind}: {s.layers} layers x ({s.conv_text} x "
                f"{self.conv_state_dtype_bytes} B + {s.ssm_text} x {self.ssm_state_dtype_bytes} B) / tp "
                f"{self.tp} = {each} B"
            )
        per_rank = f"; per rank {format_size(self.weights_bytes_per_rank)}" if self.tp > 1 else ""
        lines.append(
            f"weights: {format_size(self.weights_bytes)} ({self.weights_bytes} bytes, {self.weights_source}){per_rank}"
        )
        lines += [f"note: {note}" for note in self.notes]
        return Explanation("\n".join(lines))

    def as_dict(self) -> dict[str, object]:
        return {
            "model_type": self.model_type,
            "num_layers": self.num_layers,
            "full_attention_layers": self.full_attention_layers,
            "sliding_attention_layers": self.sliding_attention_layers,
            "sliding_window": self.sliding_window,
            "recurrent_layers": {s.kind: s.layers for s in self.states},
            "layer_source": self.layer_source,
            "attention": self.attention,
            "num_attention_heads": self.num_attention_heads,
            "num_kv_heads": self.num_kv_heads,
            "kv_heads_per_rank": self.kv_heads_per_rank,
            "head_dim": self.head_dim,
            "dtype": self.dtype,
            "kv_dtype": self.kv_dtype,
            "kv_dtype_bytes": self.kv_dtype_bytes,
            "tp": self.tp,
            "kv_layer_bytes_per_token": self.kv_layer_bytes_per_token,
            "kv_bytes_per_token": self.kv_bytes_per_token,
            "state_bytes_per_sequence": self.state_bytes_per_sequence,
            "weights_bytes": self.weights_bytes,
            "weights_bytes_per_rank": self.weights_bytes_per_rank,
            "weights_source": self.weights_source,
            "weights_estimated": self.weights_estimated,
            "max_context": self.max_context,
            "notes": list(self.notes),
        }


def load_model(path: str | os.PathLike, **options: Any) -> ModelMemory:
    """A model from a path: a folder (:meth:`ModelMemory.from_pretrained_dir`), a ``config.json`` (the same, on
    its folder) or another JSON config file (:meth:`ModelMemory.from_config`, weights estimated)."""
    file = Path(path)
    if file.is_dir():
        return ModelMemory.from_pretrained_dir(file, **options)
    if file.name == "config.json" and file.is_file():
        return ModelMemory.from_pretrained_dir(file.parent, **options)
    return ModelMemory.from_config(file, **options)


def _read_config(path: str | os.PathLike) -> dict[str, Any]:
    file = Path(path)
    if file.is_dir():
        file = file / "config.json"
    try:
        data = json.loads(file.read_text())
    except FileNotFoundError:
        raise ModelConfigError(
            f"no model config at {str(file)!r}: give a config.json or a folder holding one"
        ) from None
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ModelConfigError(f"{str(file)!r} is not a readable JSON config: {exc}") from None
    if not isinstance(data, dict):
        raise ModelConfigError(f"{str(file)!r} holds a JSON {type(data).__name__}, not a config object")
    return data


def _safetensors_data_bytes(file: Path) -> int:
    """Tensor bytes of one .safetensors file: its size less the 8-byte length and the JSON header."""
    size = file.stat().st_size
    with file.open("rb") as handle:
        head = handle.read(8)
    if len(head) < 8 or struct.unpack("<Q", head)[0] > size - 8:
        raise ModelConfigError(f"{str(file)!r} is not a safetensors file (its header length does not fit the file)")
    return size - 8 - struct.unpack("<Q", head)[0]


def checkpoint_weights(folder: str | os.PathLike) -> tuple[int, str] | None:
    """``(bytes, where from)`` of a checkpoint's weights, or ``None`` when the folder holds none.

    ``model.safetensors.index.json``'s ``metadata.total_size`` when present, else the tensor bytes of
    ``model.safetensors`` or of the ``model-*-of-*.safetensors`` shards.
    """
    folder = Path(folder)
    index = folder / "model.safetensors.index.json"
    if index.is_file():
        try:
            total = json.loads(index.read_text())["metadata"]["total_size"]
        except (OSError, ValueError, KeyError, TypeError) as exc:
            raise ModelConfigError(f"{str(index)!r} has no readable metadata.total_size: {exc!r}") from None
        if isinstance(total, bool) or not isinstance(total, int) or total <= 0:
            raise ModelConfigError(f"{str(index)!r}: metadata.total_size must be a byte count > 0, got {total!r}")
        return total, "model.safetensors.index.json metadata.total_size"
    files = (
        [folder / "model.safetensors"]
        if (folder / "model.safetensors").is_file()
        else sorted(folder.glob("model-*-of-*.safetensors"))
    )
    if not files:
        return None
    return sum(_safetensors_data_bytes(f) for f in files), f"tensor bytes of {len(files)} safetensors file(s)"


class _Config:
    """A flattened text config with typed, named reads that raise :class:`UnknownArchitectureError`."""

    def __init__(self, raw: Mapping[str, Any]):
        text = raw.get("text_config")
        self.nested = isinstance(text, Mapping)
        merged = dict(text) if isinstance(text, Mapping) else dict(raw)
        if self.nested:
            merged.update({k: raw[k] for k in _INHERITED if k in raw and merged.get(k) is None})
        self.model_type = merged.get("model_type") if isinstance(merged.get("model_type"), str) else None
        self.values = {
            **_FAMILY_DEFAULTS.get(self.model_type or "", {}),
            **{k: v for k, v in merged.items() if v is not None},
        }

    def has(self, key: str) -> bool:
        return key in self.values

    def missing(self, *keys: str) -> list[str]:
        return [k for k in keys if k not in self.values]

    def require(self, *keys: str, why: str) -> None:
        absent = self.missing(*keys)
        if absent:
            raise UnknownArchitectureError(
                f"config of model_type {self.model_type!r} lacks {', '.join(absent)}, which {why} needs; "
                "devmem does not guess them",
                self.model_type,
                tuple(absent),
            )

    def int(self, key: str, *, positive: bool = True, why: str = "sizing") -> int:
        self.require(key, why=why)
        value = self.values[key]
        if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value < (1 if positive else 0):
            raise ModelConfigError(f"config key {key}={value!r} must be a whole number >= {1 if positive else 0}")
        return int(value)

    def get_int(self, key: str, default: builtins.int, *, positive: bool = False) -> builtins.int:
        return self.int(key, positive=positive) if key in self.values else default


def _layer_kinds(c: _Config, layers: int) -> tuple[list[str], str]:
    """Each layer's kind and which config keys said so."""

    def listed(key: str, table: Mapping[str, str]) -> list[str]:
        values = c.values[key]
        if not isinstance(values, list) or len(values) != layers:
            raise ModelConfigError(f"config key {key} must list one entry per layer ({layers}), got {values!r:.200}")
        unknown = sorted({repr(v) for v in values if not isinstance(v, str) or v not in table})
        if unknown:
            raise UnknownArchitectureError(
                f"config of model_type {c.model_type!r}: {key} holds {', '.join(unknown)}, layers devmem "
                f"does not model (known: {', '.join(table)})",
                c.model_type,
                (key,),
            )
        return [table[v] for v in values]

    if c.has("layer_types"):
        return listed("layer_types", _LAYER_TYPES), "layer_types"
    if c.has("layers_block_type"):
        return listed("layers_block_type", _BLOCK_TYPES), "layers_block_type"
    if c.has("attn_layer_period") or c.has("attn_layer_offset"):
        period, offset = c.int("attn_layer_period"), c.int("attn_layer_offset", positive=False)
        return (
            [FULL if i % period == offset else MAMBA for i in range(layers)],
            f"attn_layer_period {period}, attn_layer_offset {offset}",
        )
    if c.has("full_attention_interval") and c.has("linear_num_value_heads"):
        interval = c.int("full_attention_interval")
        return (
            [FULL if (i + 1) % interval == 0 else LINEAR for i in range(layers)],
            f"full_attention_interval {interval}",
        )
    if not c.has("sliding_window"):
        return [FULL] * layers, ""
    if c.model_type == "gemma2":
        return [SLIDING if i % 2 == 0 else FULL for i in range(layers)], "gemma2: even layers slide"
    for key in ("sliding_window_pattern", "_sliding_window_pattern"):
        if c.has(key):
            pattern = c.int(key)
            return [FULL if (i + 1) % pattern == 0 else SLIDING for i in range(layers)], f"{key} {pattern}"
    if c.values.get("use_sliding_window") is False:
        return [FULL] * layers, "use_sliding_window false"
    if c.has("use_sliding_window") and c.has("max_window_layers"):
        first = c.int("max_window_layers", positive=False)
        return [SLIDING if i >= first else FULL for i in range(layers)], f"max_window_layers {first}"
    return [SLIDING] * layers, "sliding_window, on every layer"


def _recurrent_states(c: _Config, kinds: list[str]) -> tuple[RecurrentState, ...]:
    states = []
    if MAMBA in kinds:
        c.require("hidden_size", "mamba_d_state", "mamba_d_conv", "mamba_expand", why="the Mamba state per sequence")
        inner = c.int("mamba_expand") * c.int("hidden_size")
        d_state, d_conv = c.int("mamba_d_state"), c.int("mamba_d_conv")
        states.append(
            RecurrentState(
                MAMBA,
                kinds.count(MAMBA),
                inner * (d_conv - 1),
                inner * d_state,
                (("Mamba inner size", inner),),
                f"conv {inner} x (d_conv {d_conv} - 1)",
                f"ssm {inner} x d_state {d_state}",
            )
        )
    if LINEAR in kinds:
        keys = (
            "linear_num_key_heads",
            "linear_key_head_dim",
            "linear_num_value_heads",
            "linear_value_head_dim",
            "linear_conv_kernel_dim",
        )
        c.require(*keys, why="the linear-attention state per sequence")
        nk, dk, nv, dv, kernel = (c.int(k) for k in keys)
        conv = 2 * nk * dk + nv * dv
        states.append(
            RecurrentState(
                LINEAR,
                kinds.count(LINEAR),
                conv * (kernel - 1),
                nv * dk * dv,
                (("linear key heads", nk), ("linear value heads", nv)),
                f"conv (2 x {nk} x {dk} + {nv} x {dv}) x (kernel {kernel} - 1)",
                f"state {nv} x {dk} x {dv}",
            )
        )
    return tuple(states)


def _attention_shape(c: _Config) -> tuple[str, int, int, int, list[str]]:
    """``(attention kind, attention heads, KV heads, head dim or MLA latent width, notes)``."""
    heads = c.int("num_attention_heads")
    if c.has("kv_lora_rank"):
        c.require("qk_rope_head_dim", why="the MLA latent (kv_lora_rank + qk_rope_head_dim)")
        return "mla", heads, 1, c.int("kv_lora_rank") + c.int("qk_rope_head_dim"), []
    notes = []
    if c.has("head_dim"):
        head_dim = c.int("head_dim")
    else:
        hidden = c.int("hidden_size", why="head_dim (hidden_size / num_attention_heads when head_dim is absent)")
        if hidden % heads:
            raise UnknownArchitectureError(
                f"config of model_type {c.model_type!r} has no head_dim and hidden_size {hidden} is not a multiple of "
                f"num_attention_heads {heads}",
                c.model_type,
                ("head_dim",),
            )
        head_dim = hidden // heads
    if c.has("num_key_value_heads"):
        kv = c.int("num_key_value_heads")
    else:
        kv = heads
        notes.append(
            "num_key_value_heads is absent: every attention head has its own K and V (as transformers reads it)"
        )
    if heads % kv:
        raise ModelConfigError(f"num_attention_heads {heads} is not a multiple of num_key_value_heads {kv}")
    kind = "mha" if kv == heads else "mqa" if kv == 1 else "gqa"
    return kind, heads, kv, head_dim, notes


def _mlp_params(c: _Config, layer: int, hidden: int) -> tuple[int, int]:
    """``(matrix parameters, other parameters)`` of one layer's MLP or mixture of experts."""

    def dense() -> int:
        return 3 * hidden * c.int("intermediate_size", why="the weights estimate")

    if c.get_int("num_local_experts", 0):  # Mixtral: every layer
        experts = c.int("num_local_experts")
        return experts * dense(), hidden * experts
    if c.has("n_routed_experts"):  # DeepSeek-V2/V3
        first, freq = c.get_int("first_k_dense_replace", 0), c.get_int("moe_layer_freq", 1, positive=True)
        if layer < first or layer % freq:
            return dense(), 0
        experts, inner = c.int("n_routed_experts"), c.int("moe_intermediate_size", why="the weights estimate")
        shared = c.get_int("n_shared_experts", 0)
        return (experts + shared) * 3 * hidden * inner, hidden * experts + experts
    if c.get_int("num_experts", 0) and c.has("expert_layer_period"):  # Jamba
        period, offset = c.int("expert_layer_period"), c.get_int("expert_layer_offset", 0)
        experts = c.int("num_experts")
        return (experts * dense(), hidden * experts) if experts > 1 and layer % period == offset else (dense(), 0)
    if c.get_int("num_experts", 0) and c.has("moe_intermediate_size"):  # Qwen2/3-MoE, Qwen3-Next
        step, dense_layers = c.get_int("decoder_sparse_step", 1, positive=True), c.values.get("mlp_only_layers", [])
        if not isinstance(dense_layers, list):
            raise ModelConfigError(f"config key mlp_only_layers must list layer indices, got {dense_layers!r:.200}")
        experts = c.int("num_experts")
        if layer in dense_layers or (layer + 1) % step:
            return dense(), 0
        shared = c.get_int("shared_expert_intermediate_size", 0)
        return (
            experts * 3 * hidden * c.int("moe_intermediate_size") + 3 * hidden * shared,
            hidden * experts + (hidden if shared else 0),
        )
    return dense(), 0


def _layer_params(c: _Config, kind: str, layer: int, attention: tuple[str, int, int, int]) -> tuple[int, int]:
    hidden = c.int("hidden_size", why="the weights estimate")
    mlp, router = _mlp_params(c, layer, hidden)
    norms = 2 * hidden
    if kind == MAMBA:
        inner, d_state, d_conv = c.int("mamba_expand") * hidden, c.int("mamba_d_state"), c.int("mamba_d_conv")
        rank = c.values.get("mamba_dt_rank", "auto")
        rank = math.ceil(hidden / 16) if rank == "auto" else c.int("mamba_dt_rank")
        matrices = hidden * 2 * inner + inner * (rank + 2 * d_state) + rank * inner + inner * hidden
        return mlp + matrices, router + norms + inner * (d_conv + 1) + inner * (d_state + 2) + rank + 2 * d_state
    if kind == LINEAR:
        nk, dk = c.int("linear_num_key_heads"), c.int("linear_key_head_dim")
        nv, dv = c.int("linear_num_value_heads"), c.int("linear_value_head_dim")
        kernel = c.int("linear_conv_kernel_dim")
        matrices = hidden * (2 * nk * dk + 2 * nv * dv) + hidden * 2 * nv + nv * dv * hidden
        return mlp + matrices, router + norms + (2 * nk * dk + nv * dv) * kernel + 2 * nv + dv
    style, heads, kv, head_dim = attention
    if style == "mla":
        rank, rope = c.int("kv_lora_rank"), c.int("qk_rope_head_dim")
        nope = c.int("qk_nope_head_dim", why="the weights estimate")
        v_dim = c.int("v_head_dim", why="the weights estimate")
        q_rank = c.values.get("q_lora_rank")
        query = heads * (nope + rope) * (hidden if q_rank is None else c.int("q_lora_rank"))
        query += 0 if q_rank is None else hidden * c.int("q_lora_rank")
        matrices = query + hidden * (rank + rope) + rank * heads * (nope + v_dim) + heads * v_dim * hidden
        return mlp + matrices, router + norms + rank + (0 if q_rank is None else c.int("q_lora_rank"))
    gate = 2 if c.model_type in _GATED_QUERY else 1
    matrices = hidden * heads * head_dim * gate + 2 * hidden * kv * head_dim + heads * head_dim * hidden
    bias = 0
    if c.values.get("attention_bias") is True:
        bias = (heads + 2 * kv) * head_dim + hidden
    elif c.model_type in _QKV_BIAS:
        bias = (heads + 2 * kv) * head_dim
    qk_norm = 2 * head_dim if c.model_type in _QK_NORM else 0
    return mlp + matrices, router + norms + bias + qk_norm


def _estimate_weights(
    c: _Config, kinds: list[str], attention: tuple[str, int, int, int], dtype_bytes: int
) -> tuple[int, list[str]]:
    """Bytes of the weights a config describes, counted matrix by matrix, and notes on what is approximate.

    Embeddings (and the output head unless tied), per layer the attention or recurrent projections, the MLP or
    every expert with its router, the norms. Gated MLPs (three matrices) are assumed.
    """
    hidden, vocab = c.int("hidden_size", why="the weights estimate"), c.int("vocab_size", why="the weights estimate")
    tied = c.values.get("tie_word_embeddings", c.model_type in _TIED_BY_DEFAULT)
    matrices, other = 0, vocab * hidden * (1 if tied else 2) + hidden
    for layer, kind in enumerate(kinds):
        m, o = _layer_params(c, kind, layer, attention)
        matrices, other = matrices + m, other + o
    notes = []
    quant = c.values.get("quantization_config")
    bits = dtype_bytes * 8
    if isinstance(quant, Mapping):
        method = quant.get("quant_method", "unknown")
        given = quant.get("bits", quant.get("w_bit"))
        if method == "fp8":
            bits = 8
        elif isinstance(given, int) and not isinstance(given, bool) and 0 < given <= 32:
            bits = given
        else:
            notes.append(
                f"quantization_config (quant_method {method!r}) is not modelled: the estimate counts "
                "the weight matrices at the model dtype and overstates them"
            )
        if bits != dtype_bytes * 8:
            notes.append(
                f"weight matrices counted at {bits} bits (quantization_config, quant_method {method!r}); "
                "quantization scales are not counted"
            )
    if c.get_int("num_nextn_predict_layers", 0) or c.get_int("mtp_num_hidden_layers", 0):
        notes.append("multi-token-prediction layers are not counted (engines load them only for speculative decoding)")
    return -(-matrices * bits // 8) + other * dtype_bytes, notes


def _build(
    raw: Mapping[str, Any],
    *,
    kv_dtype: str,
    tp: int,
    dtype: str | None,
    state_dtype: str,
    weights_bytes: int | None,
    weights_source: str | None,
) -> ModelMemory:
    c = _Config(raw)
    if c.model_type is None:
        raise UnknownArchitectureError(
            "config has no model_type: it is not a Hugging Face model config", None, ("model_type",)
        )
    refused = [k for k in _UNMODELLED if c.values.get(k) not in (None, False)]
    if refused:
        raise UnknownArchitectureError(
            f"config of model_type {c.model_type!r} sets {', '.join(refused)}: "
            f"{'; '.join(_UNMODELLED[k] for k in refused)}, which devmem does not model",
            c.model_type,
            tuple(refused),
        )
    c.require(
        "num_hidden_layers",
        "num_attention_heads",
        *([] if c.has("head_dim") or c.has("kv_lora_rank") else ["hidden_size"]),
        why="the KV cache per token",
    )
    layers = c.int("num_hidden_layers")
    if layers > MAX_LAYERS:
        raise ModelConfigError(
            f"config key num_hidden_layers={layers} is more layers than devmem sizes (at most {MAX_LAYERS})"
        )
    given_dtype = dtype if dtype is not None else c.values.get("torch_dtype", c.values.get("dtype"))
    if given_dtype is None:
        raise UnknownArchitectureError(
            f"config of model_type {c.model_type!r} names no dtype (torch_dtype or dtype): give one (dtype=, --dtype)",
            c.model_type,
            ("torch_dtype",),
        )
    model_dtype, model_bytes = _dtype(
        given_dtype, "model dtype" if dtype is not None else "the config's dtype (give another with dtype= or --dtype)"
    )
    if kv_dtype not in KV_DTYPES:
        raise ModelConfigError(f"kv_dtype {kv_dtype!r} is not one of {', '.join(KV_DTYPES)}")
    kv_name, kv_bytes = (model_dtype, model_bytes) if kv_dtype == "auto" else _dtype(kv_dtype, "kv_dtype")
    conv_name, conv_bytes = (model_dtype, model_bytes) if state_dtype == "auto" else _dtype(state_dtype, "state_dtype")
    ssm_key = next((k for k in ("mamba_ssm_dtype", "mamba_ssm_cache_dtype") if c.has(k)), None)
    ssm_bytes = _dtype(c.values[ssm_key], ssm_key)[1] if ssm_key and state_dtype == "auto" else conv_bytes
    kinds, source = _layer_kinds(c, layers)
    if FULL not in kinds and SLIDING not in kinds:
        raise UnknownArchitectureError(
            f"config of model_type {c.model_type!r} has no attention layer: a KV cache of tokens does not apply",
            c.model_type,
            ("layer_types",),
        )
    style, heads, kv, head_dim, notes = _attention_shape(c)
    window = c.int("sliding_window") if SLIDING in kinds else None
    states = _recurrent_states(c, kinds)
    if weights_bytes is None:
        weights_bytes, weight_notes = _estimate_weights(c, kinds, (style, heads, kv, head_dim), model_bytes)
        weights_source = "estimated from config.json" + (" (text model only)" if c.nested else "")
        notes += weight_notes
    elif isinstance(weights_bytes, bool) or not isinstance(weights_bytes, int) or weights_bytes < 0:
        raise ModelConfigError(f"weights_bytes must be a byte count >= 0, got {weights_bytes!r}")
    if style == "mla" and kv_name == "fp8":
        notes.append(
            "fp8 MLA counted at 1 byte per latent element; FlashMLA's fp8 layout (656 B per token per "
            "layer for DeepSeek-V3) is not modelled"
        )
    if ssm_key and state_dtype == "auto" and ssm_bytes != conv_bytes:
        notes.append(f"the SSM state is {c.values[ssm_key]} ({ssm_key}); the convolution state {conv_name}")
    max_context = c.values.get("max_position_embeddings")
    return ModelMemory(
        model_type=c.model_type,
        num_layers=layers,
        full_attention_layers=kinds.count(FULL),
        sliding_attention_layers=kinds.count(SLIDING),
        sliding_window=window,
        attention=style,
        num_attention_heads=heads,
        num_kv_heads=kv,
        head_dim=head_dim,
        dtype=model_dtype,
        dtype_bytes=model_bytes,
        kv_dtype=kv_name,
        kv_dtype_bytes=kv_bytes,
        states=states,
        conv_state_dtype_bytes=conv_bytes,
        ssm_state_dtype_bytes=ssm_bytes,
        weights_bytes=weights_bytes,
        weights_source=weights_source or "given",
        tp=tp,
        layer_source=source,
        notes=tuple(notes),
        max_context=max_context if isinstance(max_context, int) and not isinstance(max_context, bool) else None,
    )
