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
- recurrent layers (Mamba in Jamba, Mamba2 in NemotronH and Bamba, gated-delta-net linear attention in Qwen3-Next,
  short convolutions in LFM2) hold a fixed state per sequence, whatever its length, split across ranks;
- mixture-of-experts and MLP-only layers change the weights only.

Tensor parallelism follows vLLM: ``kv_heads_per_rank = max(1, kv_heads // tp)``, where ``tp`` must divide the
KV heads, or the KV heads ``tp`` (then each KV head is replicated on ``tp // kv_heads`` ranks); ``tp`` must
divide the attention heads and the recurrent heads too. The dtype is resolved as engines resolve "auto": a
float32 checkpoint, or one that names no dtype, is served in bf16. A config devmem cannot read exactly raises
:class:`UnknownArchitectureError` naming the missing or unmodelled keys: it never guesses. Config files are read
by one bounded reader (:func:`read_json`): a file that is not a regular file, too large, not UTF-8, nested too
deep or holding an integer too long to be a size is one :class:`ModelConfigError` naming it.
"""

from __future__ import annotations

import builtins
import json
import math
import numbers
import os
import stat
import struct
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from devmem.errors import ModelConfigError, UnknownArchitectureError
from devmem.planner.model_defaults import FAMILY_DEFAULTS
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
#: vLLM's DeepSeek-V3.2 latent layout: the latent in fp8 with a float32 scale per 128, the rope part in bf16.
FP8_DS_MLA = "fp8_ds_mla"

FULL, SLIDING, CHUNKED = "full_attention", "sliding_attention", "chunked_attention"
MAMBA, MAMBA2, LINEAR, CONV = "mamba", "mamba2", "linear_attention", "short_conv"
#: MLP-only and mixture-of-experts-only layers (NemotronH's ``-`` and ``E``): weights, no cache.
NO_CACHE = ("mlp", "moe")
ATTENTION = (FULL, SLIDING, CHUNKED)
#: Layer names in ``layer_types`` / ``layers_block_type``, as transformers' config classes write them.
_LAYER_TYPES = {
    "full_attention": FULL,
    "attention": FULL,
    "indexed_attention": FULL,
    "sliding_attention": SLIDING,
    "chunked_attention": CHUNKED,
    "linear_attention": LINEAR,
    "mamba": MAMBA,
    "conv": CONV,
    "mlp": "mlp",
    "moe": "moe",
}
#: NemotronH's ``hybrid_override_pattern``: one character per layer.
_PATTERN = {"M": MAMBA2, "*": FULL, "-": "mlp", "E": "moe"}
#: Families whose ``linear_attention`` / ``mamba`` layers are Mamba2 (transformers' NemotronHConfig names them so).
_MAMBA2_FAMILIES = {"nemotron_h", "granitemoehybrid", "bamba", "falcon_h1", "zamba2"}
#: Families whose attention is MLA: without ``kv_lora_rank`` they are refused, never sized as multi-head.
_MLA_FAMILIES = {"deepseek_v2", "deepseek_v3", "deepseek_v32", "kimi_k2", "minicpm3", "kimi_linear"}
#: Families with MLA projections whose engine caches the expanded K and V of every head, not the latent (vLLM's
#: MiniCPM3: K and V of ``qk_nope_head_dim + qk_rope_head_dim`` per head, V zero-padded to it).
_EXPANDED_MLA = {"minicpm3"}
#: Families whose config class ties the output embedding to the input one unless told otherwise.
_TIED_BY_DEFAULT = {
    "gemma",
    "gemma2",
    "gemma3",
    "gemma3_text",
    "lfm2",
    "cohere",
    "cohere2",
    "minicpm3",
    "starcoder2",
    "smollm3",
    "ernie4_5",
    "bloom",
    "gpt2",
    "gpt_bigcode",
    "gpt_neo",
    "opt",
    "mpt",
}
#: Families with a norm on each query and key head (two ``head_dim`` vectors per attention layer).
_QK_NORM = {"qwen3", "qwen3_moe", "qwen3_next", "gemma3", "gemma3_text"}
#: Families with a norm over the whole query and key projections (OLMo 2, OLMoE).
_QK_NORM_ALL = {"olmo2", "olmoe"}
#: Families whose q, k and v projections carry a bias whatever ``attention_bias`` says.
_QKV_BIAS = {"qwen2", "qwen2_moe"}
#: Families with one norm per layer (Cohere's attention and MLP run in parallel) or four (Gemma 2 and 3 norm
#: after attention and around the MLP too).
_ONE_NORM = {"cohere", "cohere2"}
_FOUR_NORMS = {"gemma2", "gemma3", "gemma3_text"}


@dataclass(frozen=True)
class _Ungated:
    """A family whose MLP is two matrices (up and down, no gate) and whose norms are LayerNorms.

    ``norms`` LayerNorms per layer (and ``more_norms`` beside the final one); biases on the q/k/v projections and on
    the attention output where ``qkv_bias`` / ``out_bias`` (unless the family's bias switch or ``attention_bias``
    turns them off), on the output head where ``head_bias``; ``positions`` is ``None`` without learned position
    embeddings, else the rows beyond the maximum context (OPT keeps 2); ``bias_switch`` names the key that turns
    every bias off, the LayerNorms' too where ``norm_bias_switched`` (MPT's ``no_bias``).
    """

    norms: int
    qkv_bias: bool
    out_bias: bool
    head_bias: bool = False
    more_norms: int = 0
    positions: int | None = None
    bias_switch: str = "use_bias"
    norm_bias_switched: bool = False


#: The families with an ungated MLP and LayerNorms (GPT-2's Conv1D layers hold the same matrices as Linear ones).
_LAYERNORM_UNGATED = {
    "gpt_neox": _Ungated(2, True, True),
    "starcoder2": _Ungated(2, True, True),
    "phi": _Ungated(1, True, True, head_bias=True),  # attention and MLP side by side after one norm
    "gptj": _Ungated(1, False, False, head_bias=True),
    "codegen": _Ungated(1, False, False, head_bias=True),  # GPT-J's layer, fused qkv_proj
    "bloom": _Ungated(2, True, True, more_norms=1),  # and a LayerNorm on the embeddings
    "gpt2": _Ungated(2, True, True, positions=0),
    "gpt_bigcode": _Ungated(2, True, True, positions=0),
    "gpt_neo": _Ungated(2, False, True, positions=0),
    "opt": _Ungated(2, True, True, positions=2, bias_switch="enable_bias"),
    "mpt": _Ungated(2, True, True, bias_switch="no_bias", norm_bias_switched=True),
}
#: Families whose every layer has a dense MLP of ``shared_intermediate_size`` beside its experts.
_GRANITE_SHARED_MLP = {"granitemoehybrid", "granitemoeshared"}
#: Families whose full-attention query projection also produces an output gate (twice the query width).
_GATED_QUERY = {"qwen3_next"}

#: Config keys that change the KV cache in ways devmem does not model: a config setting one is refused.
_UNMODELLED = {
    "num_kv_shared_layers": "KV shared across layers (Gemma 3n)",
    "linear_attn_config": "Kimi-Linear's delta-attention layers",
    "cross_attention_layers": "cross-attention layers (Mllama)",
    "multi_query": "a multi-query flag (read for Falcon only)",
    "n_head_kv": "a KV-head count under the key n_head_kv",
    "num_kv_heads": "a KV-head count under the key num_kv_heads",
    "multi_query_group_num": "a KV-head count under the key multi_query_group_num (ChatGLM)",
    "kv_n_heads": "a KV-head count under the key kv_n_heads",
    "use_cla": "cross-layer attention (Hunyuan's CLA: adjacent layers share one KV cache)",
    "attn_type_list": "MiniMax's lightning (linear) attention layers",
    "block_types": "RecurrentGemma's recurrent blocks",
}
#: KV-head keys a family reads as vLLM reads them: Falcon's (``multi_query`` unless ``new_decoder_architecture``,
#: then ``num_kv_heads``), GPTBigCode's ``multi_query`` (one KV head) and ChatGLM's ``multi_query_group_num`` (the KV
#: heads where ``multi_query_attention``).
_KV_KEYS_READ = {
    "falcon": ("multi_query", "num_kv_heads"),
    "gpt_bigcode": ("multi_query",),
    "chatglm": ("multi_query_group_num",),
}
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
#: Families whose config class places recurrent layers where the config.json says nothing: refused by model_type.
_UNMODELLED_FAMILIES = {
    "minimax": "MiniMaxConfig alternates full and lightning (linear) attention layers",
    "recurrent_gemma": "RecurrentGemmaConfig places recurrent blocks between its local-attention layers",
}
#: Keys that describe recurrent layers: a config setting one whose layers devmem cannot place is refused.
_RECURRENT_KEYS = (
    "mamba_d_state",
    "mamba_n_heads",
    "mamba_num_heads",
    "mamba_d_ssm",
    "ssm_state_size",
    "linear_num_value_heads",
    "conv_L_cache",
)
#: Bounds past any real model, so a hostile config cannot make devmem build huge lists or loop for ever.
MAX_LAYERS = 10_000
MAX_TP = 1024
#: The largest whole number a sizing key may hold (2**53: past every real dimension, exact as a float too).
MAX_CONFIG_INT = 2**53
#: What the bounded reader accepts: a config.json or a safetensors index of at most this many bytes, nested at
#: most this deep, integers of at most this many digits (a longer one is kept as a marker, refused if read).
MAX_JSON_BYTES = 64 << 20
MAX_JSON_DEPTH = 64
MAX_JSON_DIGITS = 30
#: Top-level keys a nested ``text_config`` inherits when it does not set them.
_INHERITED = ("torch_dtype", "dtype", "tie_word_embeddings", "quantization_config", "model_type")
#: Keys naming a model's longest sequence, as vLLM reads them (the smallest present wins).
_MAX_LENGTH_KEYS = (
    "max_position_embeddings",
    "n_positions",
    "max_seq_len",
    "seq_length",
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


def _whole_number(name: str, value: object, minimum: int) -> int:
    """``value`` as a Python int (numpy integers included), or a :class:`ModelConfigError` naming it."""
    if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value < minimum:
        raise ModelConfigError(f"{name} must be a whole number >= {minimum}, got {_shown(value)}")
    return int(value)


class _LongInteger:
    """An integer literal too long to be any size (kept as its digit count, so nothing converts it)."""

    def __init__(self, digits: int):
        self.digits = digits

    def __repr__(self) -> str:
        return f"<an integer of {self.digits} digits>"


def _shown(value: object) -> str:
    """``repr(value)`` cut to 200 characters (a hostile value can be long or deep)."""
    try:
        text = repr(value)
    except (ValueError, RecursionError):
        text = f"<a {type(value).__name__}>"
    return text if len(text) <= 200 else text[:197] + "..."


def _parse_int(text: str) -> int | _LongInteger:
    digits = len(text.lstrip("-"))
    return _LongInteger(digits) if digits > MAX_JSON_DIGITS else int(text)


def _depth(value: object) -> int:
    """How deeply ``value`` nests lists and objects (iteratively: no recursion limit to hit)."""
    deepest, stack = 0, [(value, 1)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, dict | list):
            deepest = max(deepest, depth)
            if depth <= MAX_JSON_DEPTH:
                stack.extend((v, depth + 1) for v in (item.values() if isinstance(item, dict) else item))
    return deepest


def _open_regular(file: Path, what: str) -> int:
    """A descriptor of ``file`` opened for reading, refused unless it is a regular file (no FIFO, device,
    directory or dangling link: opening never blocks)."""
    try:
        fd = os.open(file, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0))
    except FileNotFoundError:
        if file.is_symlink():
            raise ModelConfigError(
                f"{what} {str(file)!r} is a symbolic link to {os.readlink(file)!r}, which does not exist "
                "(a moved or pruned cache?)"
            ) from None
        raise ModelConfigError(f"no {what} at {str(file)!r}") from None
    except (OSError, ValueError) as exc:
        raise ModelConfigError(f"{what} {str(file)!r} cannot be opened: {exc}") from None
    try:
        mode = os.fstat(fd).st_mode
    except OSError as exc:
        os.close(fd)
        raise ModelConfigError(f"{what} {str(file)!r} cannot be read: {exc}") from None
    if not stat.S_ISREG(mode):
        os.close(fd)
        kind = "a directory" if stat.S_ISDIR(mode) else "not a regular file (a device, FIFO or socket)"
        raise ModelConfigError(f"{what} {str(file)!r} is {kind}")
    return fd


def read_json(path: str | os.PathLike, what: str = "model config") -> dict[str, Any]:
    """The JSON object in ``path``, read with bounds: a regular file of at most :data:`MAX_JSON_BYTES`, UTF-8,
    nested at most :data:`MAX_JSON_DEPTH` deep. Integers longer than :data:`MAX_JSON_DIGITS` digits are kept as
    a marker that any sizing read refuses by name. Anything else is one :class:`ModelConfigError`."""
    file = Path(path)
    fd = _open_regular(file, what)
    try:
        with os.fdopen(fd, "rb") as handle:
            data = handle.read(MAX_JSON_BYTES + 1)
    except OSError as exc:
        raise ModelConfigError(f"{what} {str(file)!r} cannot be read: {exc}") from None
    if len(data) > MAX_JSON_BYTES:
        raise ModelConfigError(f"{what} {str(file)!r} is larger than {MAX_JSON_BYTES} bytes: not a config")
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ModelConfigError(f"{what} {str(file)!r} is not UTF-8 text (byte {exc.start})") from None
    try:
        value = json.loads(text, parse_int=_parse_int)
    except RecursionError:
        raise ModelConfigError(f"{what} {str(file)!r} nests deeper than {MAX_JSON_DEPTH} levels") from None
    except ValueError as exc:
        raise ModelConfigError(f"{what} {str(file)!r} is not valid JSON: {exc}") from None
    if not isinstance(value, dict):
        raise ModelConfigError(f"{what} {str(file)!r} holds a JSON {type(value).__name__}, not an object")
    if _depth(value) > MAX_JSON_DEPTH:
        raise ModelConfigError(f"{what} {str(file)!r} nests deeper than {MAX_JSON_DEPTH} levels")
    return value


@dataclass(frozen=True)
class RecurrentState:
    """The fixed per-sequence state of one kind of recurrent layer, in elements at ``tp = 1``.

    ``conv_elements`` is the convolution state of one layer (``(kernel - 1) x channels``), ``ssm_elements`` its
    SSM or linear-attention state (``conv_text`` and ``ssm_text`` say how); both are split evenly across
    ranks, each of which must divide every count in ``split``. Mamba2's ``groups`` (B and C, ``group_elements``
    conv elements each) are replicated up to ``tp`` where they do not split, as vLLM does.
    """

    kind: str
    layers: int
    conv_elements: int
    ssm_elements: int
    split: tuple[tuple[str, int], ...]
    conv_text: str
    ssm_text: str
    groups: int = 0
    group_elements: int = 0

    def conv_elements_at(self, tp: int) -> int:
        """One layer's convolution state on one of ``tp`` ranks."""
        extra = 0 if not self.groups or self.groups % tp == 0 else (tp - self.groups) * self.group_elements
        return (self.conv_elements + extra) // tp

    def tp_problems(self, tp: int) -> list[str]:
        problems = [f"{what} {count} is not a multiple of {tp}" for what, count in self.split if count % tp]
        if self.groups > 1 and self.groups % tp:
            problems.append(f"Mamba2 n_groups {self.groups} is neither 1 nor a multiple of {tp}")
        return problems

    def bytes_per_sequence(self, tp: int, conv_bytes: int, ssm_bytes: int) -> int:
        """Bytes one sequence holds in these layers on one of ``tp`` ranks."""
        return self.layers * self.layer_bytes(tp, conv_bytes, ssm_bytes)

    def layer_bytes(self, tp: int, conv_bytes: int, ssm_bytes: int) -> int:
        """Bytes one sequence holds in one of these layers on one of ``tp`` ranks (vLLM's MambaSpec page)."""
        return self.conv_elements_at(tp) * conv_bytes + self.ssm_elements // tp * ssm_bytes


@dataclass(frozen=True)
class ModelMemory:
    """What one model costs in memory, per tensor-parallel rank: KV bytes per token, state per sequence, weights.

    Build it with :meth:`from_config` or :meth:`from_pretrained_dir`. Layer counts are of the whole model;
    every ``*_bytes`` property is per rank at ``tp``. ``kv_layer_bytes_per_token`` is one attention layer's
    K and V (or MLA latent, with the indexer key where there is one) for one token; ``sliding_window`` caps what
    each sliding layer holds per sequence, ``attention_chunk_size`` what each chunked-local layer holds.
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
    chunked_attention_layers: int = 0
    attention_chunk_size: int | None = None
    mla_rope_dim: int = 0
    indexer_bytes_per_token: int = 0
    max_context_source: str = ""

    def __post_init__(self) -> None:
        if isinstance(self.tp, bool) or not isinstance(self.tp, numbers.Integral) or self.tp < 1:
            raise ModelConfigError(f"tp must be a whole number >= 1 (tensor-parallel ranks), got {_shown(self.tp)}")
        object.__setattr__(self, "tp", int(self.tp))
        object.__setattr__(self, "weights_bytes", _whole_number("weights_bytes", self.weights_bytes, 0))
        if self.tp > MAX_TP:
            raise ModelConfigError(f"tp must be at most {MAX_TP} (tensor-parallel ranks), got {self.tp}")
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
            problems += state.tp_problems(tp)
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

        ``dtype`` overrides the dtype the model is served in (by default the config's ``torch_dtype``/``dtype``
        as engines resolve it: float32 or none given is bf16); ``kv_dtype`` is ``auto`` (the served dtype),
        ``bf16``, ``fp16``, ``fp8`` or ``fp32``; ``state_dtype`` (``auto`` = the served dtype) is the recurrent
        state's. ``tp`` and ``weights_bytes`` take any whole number (numpy integers too). Without
        ``weights_bytes`` the weights are estimated from the config, matrix by matrix (docs/models.md).
        """
        if isinstance(config, Mapping):
            raw = dict(config)
        else:
            file = Path(config)
            raw = read_json(file / "config.json" if _is_dir(file) else file)
        tp = _whole_number("tp", tp, 1)
        if weights_bytes is not None:
            weights_bytes = _whole_number("weights_bytes", weights_bytes, 0)
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
        if not _is_dir(folder):
            raise ModelConfigError(f"{str(path)!r} is not a folder holding a model's config.json")
        config = read_json(folder / "config.json")
        if options.get("weights_bytes") is None:
            found = checkpoint_weights(folder)
            if found is not None:
                options["weights_bytes"], options["weights_source"] = found
        return cls.from_config(config, **options)

    def splits_over(self, tp: int) -> bool:
        """Whether ``tp`` ranks can split this model (heads, KV heads and recurrent heads)."""
        return not self._tp_problems(_whole_number("tp", tp, 1))

    def at_tp(self, tp: int) -> ModelMemory:
        """The same model split over ``tp`` ranks (raises :class:`ModelConfigError` where it cannot be)."""
        return replace(self, tp=_whole_number("tp", tp, 1))

    @property
    def attention_layers(self) -> int:
        return self.full_attention_layers + self.sliding_attention_layers + self.chunked_attention_layers

    @property
    def recurrent_layers(self) -> int:
        return sum(s.layers for s in self.states)

    @property
    def kv_heads_per_rank(self) -> int:
        """KV heads each rank holds: ``max(1, kv_heads // tp)`` (vLLM's rule); 1 latent for MLA on every rank."""
        return 1 if self.attention == "mla" else max(1, self.num_kv_heads // self.tp)

    @property
    def kv_layer_bytes_per_token(self) -> int:
        """Bytes one attention layer holds per token on one rank: K and V, or the MLA latent (and indexer key)."""
        if self.attention != "mla":
            return 2 * self.kv_heads_per_rank * self.head_dim * self.kv_dtype_bytes
        if self.kv_dtype == FP8_DS_MLA:
            latent = self.head_dim - self.mla_rope_dim
            return latent + -(-latent // 128) * 4 + self.mla_rope_dim * 2 + self.indexer_bytes_per_token
        return self.head_dim * self.kv_dtype_bytes + self.indexer_bytes_per_token

    @property
    def kv_bytes_per_token(self) -> int:
        """KV bytes per token over every attention layer, on one rank (sliding and chunked layers not capped)."""
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
            latent = self.head_dim - self.mla_rope_dim
            if self.kv_dtype == FP8_DS_MLA:
                layout = (
                    f"{latent} fp8 + {-(-latent // 128)} x 4 B scales + rope {self.mla_rope_dim} x bf16 2 B "
                    f"({FP8_DS_MLA})"
                )
            else:
                layout = (
                    f"{self.head_dim} latent (kv_lora_rank + qk_rope_head_dim) x {self.kv_dtype} "
                    f"{self.kv_dtype_bytes} B"
                )
            indexer = f" + indexer key {self.indexer_bytes_per_token} B" if self.indexer_bytes_per_token else ""
            per_layer = (
                f"KV per token per layer: {layout}{indexer}, the same on every rank = {self.kv_layer_bytes_per_token} B"
            )
        else:
            split = "" if self.tp == 1 else f" (max(1, {self.num_kv_heads} // tp {self.tp}))"
            per_layer = (
                f"KV per token per layer: 2 x {self.kv_heads_per_rank} KV heads per rank{split} x head dim "
                f"{self.head_dim} x {self.kv_dtype} {self.kv_dtype_bytes} B = {self.kv_layer_bytes_per_token} B"
            )
        no_cache = max(0, self.num_layers - self.attention_layers - self.recurrent_layers)  # Falcon-H1 holds both
        kinds = (
            (self.full_attention_layers, "full-attention"),
            (self.sliding_attention_layers, f"sliding-window ({self.sliding_window})"),
            (self.chunked_attention_layers, f"chunked-local ({self.attention_chunk_size})"),
            *((s.layers, s.kind) for s in self.states),
            (no_cache, "MLP/MoE only (no cache)"),
        )
        summary = ", ".join(f"{n} {k}" for n, k in kinds if n)
        source = f" (from {self.layer_source})" if self.layer_source else ""
        capped = []
        if self.sliding_attention_layers:
            capped.append(f"the {self.sliding_attention_layers} sliding layers hold at most {self.sliding_window}")
        if self.chunked_attention_layers:
            capped.append(
                f"the {self.chunked_attention_layers} chunked layers at most {self.attention_chunk_size} "
                "(their current chunk)"
            )
        cap = f"; {' and '.join(capped)} tokens per sequence" if capped else ""
        lines = [
            f"model: {self.model_type}, {self.num_layers} layers: {summary}{source}",
            f"attention: {self.attention.upper()}, {self.num_attention_heads} heads; tensor parallel {self.tp}",
            per_layer,
            (
                f"KV per token: {self.attention_layers} attention layers x {self.kv_layer_bytes_per_token} B = "
                f"{self.kv_bytes_per_token} B{cap}"
            ),
        ]
        for s in self.states:
            each = s.bytes_per_sequence(self.tp, self.conv_state_dtype_bytes, self.ssm_state_dtype_bytes)
            lines.append(
                f"state per sequence, {s.kind}: {s.layers} layers x ({s.conv_text} x "
                f"{self.conv_state_dtype_bytes} B + {s.ssm_text} x {self.ssm_state_dtype_bytes} B) / tp "
                f"{self.tp} = {each} B"
            )
        if self.max_context is not None:
            lines.append(f"max context: {self.max_context} tokens ({self.max_context_source})")
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
            "chunked_attention_layers": self.chunked_attention_layers,
            "attention_chunk_size": self.attention_chunk_size,
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
            "indexer_bytes_per_token": self.indexer_bytes_per_token,
            "kv_bytes_per_token": self.kv_bytes_per_token,
            "state_bytes_per_sequence": self.state_bytes_per_sequence,
            "weights_bytes": self.weights_bytes,
            "weights_bytes_per_rank": self.weights_bytes_per_rank,
            "weights_source": self.weights_source,
            "weights_estimated": self.weights_estimated,
            "max_context": self.max_context,
            "max_context_source": self.max_context_source,
            "notes": list(self.notes),
        }


def _is_dir(path: Path) -> bool:
    try:
        return path.is_dir()
    except (OSError, ValueError) as exc:
        raise ModelConfigError(f"{str(path)!r} cannot be examined: {exc}") from None


def load_model(path: str | os.PathLike, **options: Any) -> ModelMemory:
    """A model from a path: a folder (:meth:`ModelMemory.from_pretrained_dir`), a ``config.json`` (the same, on
    its folder) or another JSON config file (:meth:`ModelMemory.from_config`, weights estimated)."""
    file = Path(path)
    if _is_dir(file):
        return ModelMemory.from_pretrained_dir(file, **options)
    if file.name == "config.json" and _is_dir(file.parent):
        return ModelMemory.from_pretrained_dir(file.parent, **options)
    return ModelMemory.from_config(file, **options)


def _safetensors_data_bytes(file: Path) -> int:
    """Tensor bytes of one .safetensors file: its size less the 8-byte length and the JSON header."""
    fd = _open_regular(file, "checkpoint shard")
    try:
        size = os.fstat(fd).st_size
        head = os.read(fd, 8)
    except OSError as exc:
        raise ModelConfigError(f"checkpoint shard {str(file)!r} cannot be read: {exc}") from None
    finally:
        os.close(fd)
    if len(head) < 8 or struct.unpack("<Q", head)[0] > size - 8:
        raise ModelConfigError(f"{str(file)!r} is not a safetensors file (its header length does not fit the file)")
    return size - 8 - struct.unpack("<Q", head)[0]


def checkpoint_weights(folder: str | os.PathLike) -> tuple[int, str] | None:
    """``(bytes, where from)`` of a checkpoint's weights, or ``None`` when the folder holds none.

    ``model.safetensors.index.json``'s ``metadata.total_size`` when present, else the tensor bytes of
    ``model.safetensors`` or of the ``model-*-of-*.safetensors`` shards. Every file goes through the bounded
    reader: a dangling link, a folder named like a shard or a device is one :class:`ModelConfigError`.
    """
    folder = Path(folder)
    index = folder / "model.safetensors.index.json"
    if os.path.lexists(index):
        metadata = read_json(index, "safetensors index").get("metadata")
        total = metadata.get("total_size") if isinstance(metadata, dict) else None
        if isinstance(total, bool) or not isinstance(total, int) or not 0 < total < MAX_CONFIG_INT:
            raise ModelConfigError(f"{str(index)!r}: metadata.total_size must be a byte count > 0, got {_shown(total)}")
        return total, "model.safetensors.index.json metadata.total_size"
    single = folder / "model.safetensors"
    try:
        files = [single] if os.path.lexists(single) else sorted(folder.glob("model-*-of-*.safetensors"))
    except OSError as exc:
        raise ModelConfigError(f"{str(folder)!r} cannot be listed: {exc}") from None
    if not files:
        return None
    return sum(_safetensors_data_bytes(f) for f in files), f"tensor bytes of {len(files)} safetensors file(s)"


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

    def int(self, key: str, *, positive: bool = True, why: str = "sizing") -> int:
        self.require(key, why=why)
        value = self.get(key)
        if (
            isinstance(value, bool)
            or not isinstance(value, numbers.Integral)
            or not (1 if positive else 0) <= int(value) <= MAX_CONFIG_INT
        ):
            raise ModelConfigError(
                f"config key {self.aliased.get(key, key)}={_shown(value)} must be a whole number from "
                f"{1 if positive else 0} "
                f"to {MAX_CONFIG_INT}"
            )
        return int(value)

    def flag(self, key: str, default: bool) -> bool:
        """A true/false key (``default`` when absent); anything but a JSON boolean is refused by name."""
        value = self.get(key, default)
        if not isinstance(value, bool):
            raise ModelConfigError(f"config key {key}={_shown(value)} must be true or false")
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


def _layer_kinds(c: _Config, layers: int) -> tuple[list[str], str]:
    """Each layer's kind and which config keys said so (recurrent kinds not yet told apart: see below)."""

    def listed(key: str, table: Mapping[str, str]) -> list[str]:
        values = c.get(key)
        if key == "hybrid_override_pattern" and isinstance(values, str):
            values = list(values)
        if not isinstance(values, list) or len(values) != layers:
            raise ModelConfigError(f"config key {key} must list one entry per layer ({layers}), got {_shown(values)}")
        unknown = sorted({_shown(v) for v in values if not isinstance(v, str) or v not in table})
        if unknown:
            raise UnknownArchitectureError(
                f"config of model_type {c.model_type!r}: {key} holds {', '.join(unknown)}, layers devmem "
                f"does not model (known: {', '.join(table)})",
                c.model_type,
                (key,),
            )
        return [table[v] for v in values]

    if c.model_type == "zamba2":
        return _zamba2_layers(c, layers), "layers_block_type: a shared attention block beside each hybrid's Mamba2"
    if c.model_type == "falcon_h1":  # the Mamba2 mixers beside them: _state_kinds
        return [FULL] * layers, "falcon_h1: an attention and a Mamba2 mixer side by side in every layer"
    if c.model_type == "gpt_neo":  # GPTNeoConfig expands attention_types: [[["global", "local"], 12]]
        local = _gpt_neo_local_layers(c, layers)
        return [FULL] * layers, (
            f"attention_types; its {local} local layers attend within window_size but transformers' cache keeps "
            "every token in them, so they are counted in full"
        )
    if c.has("layer_types"):
        return listed("layer_types", _LAYER_TYPES), "layer_types"
    if c.has("layers_block_type"):
        return listed("layers_block_type", _LAYER_TYPES), "layers_block_type"
    if c.has("hybrid_override_pattern"):
        return listed("hybrid_override_pattern", _PATTERN), "hybrid_override_pattern"
    if c.has("attn_layer_indices"):  # Bamba: attention at these indices, Mamba2 elsewhere
        indices = c.get("attn_layer_indices")
        if not isinstance(indices, list) or not all(isinstance(i, int) and 0 <= i < layers for i in indices):
            raise ModelConfigError(
                f"config key attn_layer_indices must list layer indices below {layers}, got {_shown(indices)}"
            )
        return [FULL if i in set(indices) else MAMBA2 for i in range(layers)], "attn_layer_indices"
    if c.has("full_attn_idxs"):  # LFM2: attention at these indices, short convolutions elsewhere
        indices = c.get("full_attn_idxs")
        if not isinstance(indices, list) or not all(isinstance(i, int) and 0 <= i < layers for i in indices):
            raise ModelConfigError(
                f"config key full_attn_idxs must list layer indices below {layers}, got {_shown(indices)}"
            )
        return [FULL if i in set(indices) else CONV for i in range(layers)], "full_attn_idxs"
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
    if c.has("attention_chunk_size"):  # Llama 4: rope layers attend in chunks, the NoPE layers fully
        c.int("attention_chunk_size")
        if c.get("no_rope_layers") not in (None, []):  # published empty: the config class fills it in
            flags = c.get("no_rope_layers")
            if not isinstance(flags, list) or len(flags) != layers or not all(f in (0, 1) for f in flags):
                raise ModelConfigError(
                    f"config key no_rope_layers must list 0 or 1 per layer ({layers}), got {_shown(flags)}"
                )
            return [CHUNKED if f else FULL for f in flags], "attention_chunk_size, no_rope_layers"
        interval = c.get_int("no_rope_layer_interval", 4, positive=True)
        return (
            [CHUNKED if (i + 1) % interval else FULL for i in range(layers)],
            f"attention_chunk_size, every {interval}th layer without rope attends fully",
        )
    if not c.has("sliding_window"):
        return [FULL] * layers, ""
    if c.model_type == "gemma2":
        return [SLIDING if i % 2 == 0 else FULL for i in range(layers)], "gemma2: even layers slide"
    if c.model_type == "gpt_oss":
        return [SLIDING if i % 2 == 0 else FULL for i in range(layers)], "gpt_oss: even layers slide"
    for key in ("sliding_window_pattern", "_sliding_window_pattern"):
        if c.has(key):
            pattern = c.int(key)
            return [FULL if (i + 1) % pattern == 0 else SLIDING for i in range(layers)], f"{key} {pattern}"
    if c.family == "Gemma3TextConfig":
        return (
            [FULL if (i + 1) % 6 == 0 else SLIDING for i in range(layers)],
            "Gemma3TextConfig's sliding_window_pattern 6",
        )
    if c.has("use_sliding_window") and not c.flag("use_sliding_window", True):
        return [FULL] * layers, "use_sliding_window false"
    if c.has("use_sliding_window") and c.has("max_window_layers"):
        first = c.int("max_window_layers", positive=False)
        return [SLIDING if i >= first else FULL for i in range(layers)], f"max_window_layers {first}"
    return [SLIDING] * layers, "sliding_window, on every layer"


def _zamba2_layers(c: _Config, layers: int) -> list[str]:
    """Zamba2's ``layers_block_type``: ``hybrid`` layers run a shared attention block (with its own KV cache) beside
    their Mamba2 mixer, ``mamba`` (``linear_attention``) layers the mixer alone. The mixers are added in _build."""
    c.require("layers_block_type", why="Zamba2's hybrid layers")
    types = c.get("layers_block_type")
    known = ("mamba", "linear_attention", "hybrid")
    if not isinstance(types, list) or len(types) != layers or not all(t in known for t in types):
        raise ModelConfigError(
            f"config key layers_block_type must list one of {', '.join(known)} per layer ({layers}), got "
            f"{_shown(types)}"
        )
    return [FULL if t == "hybrid" else MAMBA2 for t in types]


def _gpt_neo_local_layers(c: _Config, layers: int) -> int:
    """How many of GPT-Neo's layers are ``local`` as GPTNeoConfig expands ``attention_types`` (``[[kinds, repeats],
    ...]``), checking that it gives one ``global`` or ``local`` per layer. Local layers attend within
    ``window_size``, but transformers' DynamicCache keeps every token in them (and vLLM does not serve GPT-Neo)."""
    c.require("attention_types", why="GPT-Neo's global and local layers")
    groups: Any = c.get("attention_types")
    kinds: list[str] = []
    well_formed = isinstance(groups, list) and all(
        isinstance(g, list)
        and len(g) == 2
        and isinstance(g[0], list)
        and all(k in ("global", "local") for k in g[0])
        and isinstance(g[1], int)
        and not isinstance(g[1], bool)
        and 0 <= g[1] <= MAX_LAYERS
        for g in groups
    )
    if well_formed:
        for names, repeats in groups:
            kinds += names * repeats
            if len(kinds) > layers:
                break
    if not well_formed or len(kinds) != layers:
        raise ModelConfigError(
            f"config key attention_types must expand to one 'global' or 'local' per layer ({layers}) as "
            f"[[[kinds...], repeats], ...], got {_shown(groups)}"
        )
    return kinds.count("local")


def _resolve_recurrent(c: _Config, kinds: list[str]) -> list[str]:
    """``mamba`` and ``linear_attention`` layers as the family means them: Mamba2 in NemotronH (whose
    transformers config calls its Mamba2 layers ``linear_attention``) and the other Mamba2 hybrids."""
    mamba2 = c.model_type in _MAMBA2_FAMILIES or c.has("mamba_num_heads") or c.has("mamba_n_heads")
    if not mamba2:
        return kinds
    return [MAMBA2 if k in (MAMBA, LINEAR) and (k == MAMBA or c.model_type == "nemotron_h") else k for k in kinds]


def _recurrent_states(c: _Config, kinds: list[str]) -> tuple[RecurrentState, ...]:
    """The per-sequence state of each recurrent kind, as vLLM's MambaStateShapeCalculator shapes it."""
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
    if MAMBA2 in kinds:
        heads, head_dim, inner, groups, d_state, kernel = _mamba2_dims(c)
        channels = inner + 2 * groups * d_state
        states.append(
            RecurrentState(
                MAMBA2,
                kinds.count(MAMBA2),
                (kernel - 1) * channels,
                heads * head_dim * d_state,
                (("Mamba2 heads", heads),),
                f"conv (kernel {kernel} - 1) x ({inner} + 2 x {groups} groups x d_state {d_state})",
                f"ssm {heads} heads x {head_dim} x d_state {d_state}",
                groups,
                (kernel - 1) * 2 * d_state,
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
    if CONV in kinds:
        why = "the short-convolution state per sequence"
        channels = c.first_int("conv_dim", "hidden_size", why=why)
        kernel = c.int("conv_L_cache", why=why)
        states.append(
            RecurrentState(
                CONV,
                kinds.count(CONV),
                (kernel - 1) * channels,
                0,
                (("convolution channels", channels),),
                f"conv (L_cache {kernel} - 1) x {channels}",
                "no SSM state",
            )
        )
    return tuple(states)


def _mamba2_dims(c: _Config) -> tuple[int, int, int, int, int, int]:
    """``(heads, head dim, inner size, groups, d_state, conv kernel)`` of a Mamba2 layer, under NemotronH's keys
    (inner = heads x head dim) or Bamba's and Granite's (inner = mamba_expand x hidden_size)."""
    why = "the Mamba2 state per sequence"
    if c.model_type == "zamba2":  # Zamba2Config: head dim = mamba_expand x hidden_size / n_mamba_heads
        heads, inner = c.int("n_mamba_heads", why=why), c.int("mamba_expand", why=why) * c.int("hidden_size", why=why)
        if inner % heads:
            raise ModelConfigError(
                f"config key n_mamba_heads {heads} does not divide mamba_expand x hidden_size {inner}"
            )
        return (
            heads,
            inner // heads,
            inner,
            c.int("mamba_ngroups", why=why),
            c.int("mamba_d_state", why=why),
            c.int("mamba_d_conv", why=why),
        )
    if c.has("mamba_num_heads"):
        heads, head_dim = c.int("mamba_num_heads"), c.int("mamba_head_dim", why=why)
        return (
            heads,
            head_dim,
            heads * head_dim,
            c.first_int("n_groups", "mamba_n_groups", why=why),
            c.first_int("ssm_state_size", "mamba_d_state", why=why),
            c.first_int("conv_kernel", "mamba_d_conv", why=why),
        )
    heads = c.int("mamba_n_heads", why=why)
    if c.has("mamba_d_ssm"):  # Falcon-H1's inner size, as vLLM reads it
        inner = c.int("mamba_d_ssm", why=why)
    else:
        inner = c.int("mamba_expand", why=why) * c.int("hidden_size", why=why)
    if c.get("mamba_d_head") == "auto" and inner % heads == 0:  # the config classes' default: inner / heads
        head_dim = inner // heads
    else:
        head_dim = c.int("mamba_d_head", why=why)
    if heads * head_dim != inner:
        raise ModelConfigError(
            f"config keys mamba_n_heads {heads} x mamba_d_head {_shown(c.get('mamba_d_head'))} must equal the Mamba2 "
            f"inner size {inner} ({'mamba_d_ssm' if c.has('mamba_d_ssm') else 'mamba_expand x hidden_size'})"
        )
    return (
        heads,
        head_dim,
        inner,
        c.get_int("mamba_n_groups", 1, positive=True),
        c.int("mamba_d_state", why=why),
        c.int("mamba_d_conv", why=why),
    )


def _attention_shape(c: _Config) -> tuple[str, int, int, int, list[str]]:
    """``(attention kind, attention heads, KV heads, head dim or MLA latent width, notes)``."""
    heads = c.int("num_attention_heads")
    mla = c.model_type in _MLA_FAMILIES or c.has("kv_lora_rank") or c.has("qk_rope_head_dim")
    if mla:
        if "kv_lora_rank" in c.explicit_null or not c.has("kv_lora_rank"):
            raise UnknownArchitectureError(
                f"config of model_type {c.model_type!r} is MLA (multi-head latent attention) but "
                f"{'sets kv_lora_rank to null' if 'kv_lora_rank' in c.explicit_null else 'has no kv_lora_rank'}"
                ": its KV cache is the latent, which devmem does not size as multi-head attention",
                c.model_type,
                ("kv_lora_rank",),
            )
        c.require("qk_rope_head_dim", why="the MLA latent (kv_lora_rank + qk_rope_head_dim)")
        if c.model_type in _EXPANDED_MLA:
            nope, rope = c.int("qk_nope_head_dim", why="the expanded K and V per head"), c.int("qk_rope_head_dim")
            note = (
                f"{c.model_type}'s MLA projections are cached expanded, as vLLM caches them: K and V of every one of "
                f"the {heads} heads at qk_nope_head_dim {nope} + qk_rope_head_dim {rope} (V zero-padded), not the "
                "latent"
            )
            return "mha", heads, heads, nope + rope, [note]
        return "mla", heads, 1, c.int("kv_lora_rank") + c.int("qk_rope_head_dim"), []
    notes = []
    if c.model_type == "zamba2":  # the shared block attends over [hidden, embeddings]: 2 x hidden_size wide
        return _zamba2_attention(c, heads)
    if c.has("attention_head_dim") and ("head_dim" in c.defaults or not c.has("head_dim")):
        head_dim = c.int("attention_head_dim")  # NemotronH's name for it
    elif c.has("head_dim"):
        head_dim = c.int("head_dim")
    else:
        hidden = c.int("hidden_size", why="head_dim (hidden_size / num_attention_heads when head_dim is absent)")
        if hidden % heads:
            raise UnknownArchitectureError(
                f"config of model_type {c.model_type!r} has no head_dim and {c.name('hidden_size')} {hidden} is not a "
                f"multiple of {c.name('num_attention_heads')} {heads}",
                c.model_type,
                ("head_dim",),
            )
        head_dim = hidden // heads
    if c.model_type == "falcon":  # as vLLM reads it: one K/V head unless new_decoder_architecture
        multi_query = not c.flag("new_decoder_architecture", False) and c.flag("multi_query", True)
        kv = 1 if multi_query else c.int("num_kv_heads") if c.has("num_kv_heads") else heads
    elif c.model_type == "gpt_bigcode":  # GPTBigCodeConfig's multi_query (default true): one K/V head
        kv = 1 if c.flag("multi_query", True) else heads
    elif c.model_type == "chatglm":  # vLLM's GLMAttention: the groups where multi_query_attention
        kv = c.int("multi_query_group_num") if c.flag("multi_query_attention", False) else heads
        if heads % kv:
            raise ModelConfigError(f"num_attention_heads {heads} is not a multiple of multi_query_group_num {kv}")
        hidden = c.int("hidden_size", why="ChatGLM's head dim (hidden_size / num_attention_heads, as vLLM reads it)")
        if hidden % heads or head_dim != hidden // heads:
            raise UnknownArchitectureError(
                f"config of model_type 'chatglm' has kv_channels {head_dim} but hidden_size {hidden} / "
                f"num_attention_heads {heads} is not that: the modelling code caches kv_channels per head, vLLM "
                "hidden_size / num_attention_heads, and devmem does not choose between them",
                c.model_type,
                ("kv_channels",),
            )
    elif c.has("num_key_value_heads"):
        kv = c.int("num_key_value_heads")
    elif c.model_type == "dbrx":  # DbrxAttentionConfig's default is 1, vLLM's the attention heads: not guessed
        raise UnknownArchitectureError(
            "config of model_type 'dbrx' lacks attn_config.kv_n_heads, which the KV cache per token needs; "
            "devmem does not guess it",
            c.model_type,
            ("attn_config.kv_n_heads",),
        )
    else:
        kv = heads
        notes.append(
            f"{c.name('num_key_value_heads')} is absent: every attention head has its own K and V (as transformers "
            "reads it)"
        )
    if heads % kv:
        raise ModelConfigError(
            f"{c.name('num_attention_heads')} {heads} is not a multiple of {c.name('num_key_value_heads')} {kv}"
        )
    kind = "mha" if kv == heads else "mqa" if kv == 1 else "gqa"
    return kind, heads, kv, head_dim, notes


def _zamba2_attention(c: _Config, heads: int) -> tuple[str, int, int, int, list[str]]:
    """Zamba2's shared attention: ``num_attention_heads`` heads of ``2 x hidden_size / num_attention_heads`` (its
    ``attention_head_dim``), every head cached, as vLLM's Zamba2Attention caches them."""
    width = 2 * c.int("hidden_size")
    if width % heads:
        raise ModelConfigError(f"num_attention_heads {heads} does not divide Zamba2's attention width {width}")
    if c.has("num_key_value_heads") and c.int("num_key_value_heads") != heads:
        raise UnknownArchitectureError(
            f"config of model_type 'zamba2' sets num_key_value_heads {c.int('num_key_value_heads')}, not "
            f"num_attention_heads {heads}: transformers caches those K/V heads, vLLM every attention head, and "
            "devmem does not choose between them",
            c.model_type,
            ("num_key_value_heads",),
        )
    if c.flag("add_bias_linear", False) or not c.flag("use_conv_bias", True):
        key = "add_bias_linear" if c.flag("add_bias_linear", False) else "use_conv_bias"
        raise UnknownArchitectureError(
            f"config of model_type 'zamba2' sets {key} {c.flag(key, False)}: transformers and vLLM build those "
            "biases differently, and devmem does not choose between them",
            c.model_type,
            (key,),
        )
    return "mha", heads, heads, width // heads, []


def _zamba2_params(c: _Config, kinds: list[str], hidden: int, heads: int, head_dim: int) -> tuple[int, int]:
    """``(matrices, other)`` of Zamba2's layers: a Mamba2 mixer and its norm in every layer, a ``hidden x hidden``
    projection in each hybrid layer, ``num_mem_blocks`` shared blocks (attention over ``2 x hidden_size``, a gated
    MLP, two norms) and, per hybrid layer, a LoRA adapter of ``adapter_rank`` on the MLP's gate and up projection
    (and on q, k and v where ``use_shared_attention_adapter``)."""
    mixer, mixer_other = _mamba2_params(c, hidden)
    hybrid, width = kinds.count(FULL), heads * head_dim
    ffn = c.get_int("intermediate_size", 4 * hidden, positive=True)
    block = 3 * 2 * hidden * width + width * hidden + hidden * 2 * ffn + ffn * hidden
    rank = c.int("adapter_rank", why="the weights estimate")
    adapters = rank * (hidden + 2 * ffn)
    if c.flag("use_shared_attention_adapter", False):
        adapters += 3 * rank * (2 * hidden + width)
    blocks = c.int("num_mem_blocks", why="the weights estimate")
    matrices = len(kinds) * mixer + hybrid * (hidden * hidden + adapters) + blocks * block
    return matrices, len(kinds) * (mixer_other + hidden) + blocks * 3 * hidden


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
        raise ModelConfigError(f"config key {name}.factor={_shown(factor)} must be a number from 1 to 1024")
    base = scaling.get("original_max_position_embeddings")
    if rope_type == "yarn" and base is not None:
        if isinstance(base, bool) or not isinstance(base, int) or not 0 < base <= MAX_CONFIG_INT:
            raise ModelConfigError(
                f"config key {name}.original_max_position_embeddings={_shown(base)} must be a whole number "
                f"from 1 to {MAX_CONFIG_INT}"
            )
        return int(base * factor), f"{name} yarn: original_max_position_embeddings {base} x factor {factor}"
    return int(length * factor), f"{source} x {name} {rope_type} factor {factor}"


def _mlp_params(c: _Config, layer: int, hidden: int) -> tuple[int, int]:
    """``(matrix parameters, other parameters)`` of one layer's MLP or mixture of experts."""

    def dense() -> int:
        inner = c.int("intermediate_size", why="the weights estimate")
        if c.model_type == "lfm2" and c.values.get("block_auto_adjust_ff_dim") is True:  # Lfm2MLP's sizing
            multiple = c.get_int("block_multiple_of", 256, positive=True)
            factor = c.values.get("block_ffn_dim_multiplier", 1.0)
            scaled = int(2 * inner / 3)
            if isinstance(factor, int | float) and not isinstance(factor, bool) and 0 < factor <= 16:
                scaled = int(factor * scaled)
            inner = multiple * -(-scaled // multiple)
        return 3 * hidden * inner

    if c.model_type in ("llama4", "llama4_text"):  # MoE every interleave_moe_layer_step, with a shared expert
        step = c.get_int("interleave_moe_layer_step", 1, positive=True)
        if (layer + 1) % step:
            return 3 * hidden * c.int("intermediate_size_mlp", why="the weights estimate"), 0
        experts = c.int("num_local_experts")
        return (experts + 1) * dense(), hidden * experts
    if c.get_int("num_local_experts", 0):  # Mixtral, gpt-oss, Granite (with its shared MLP): every layer
        experts = c.int("num_local_experts")
        shared = c.get_int("shared_intermediate_size", 0) if c.model_type in _GRANITE_SHARED_MLP else 0
        return experts * dense() + 3 * hidden * shared, hidden * experts
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
            raise ModelConfigError(f"config key mlp_only_layers must list layer indices, got {_shown(dense_layers)}")
        experts = c.int("num_experts")
        if layer in dense_layers or (layer + 1) % step:
            return dense(), 0
        shared = c.get_int("shared_expert_intermediate_size", 0)
        return (
            experts * 3 * hidden * c.int("moe_intermediate_size") + 3 * hidden * shared,
            hidden * experts + (hidden if shared else 0),
        )
    if c.get_int("num_experts", 0) > 1:  # OLMoE: every layer, each expert of intermediate_size
        experts = c.int("num_experts")
        return experts * dense(), hidden * experts
    return dense(), 0


def _mamba2_params(c: _Config, hidden: int) -> tuple[int, int]:
    """``(matrices, other)`` of one Mamba2 mixer: in_proj (z, x, B, C, dt), the convolution, out_proj."""
    heads, _, inner, groups, d_state, kernel = _mamba2_dims(c)
    channels = inner + 2 * groups * d_state
    matrices = hidden * (inner + channels + heads) + inner * hidden
    return matrices, channels * (kernel + 1) + 3 * heads + inner


def _falcon_h1_mixer_params(c: _Config, hidden: int) -> tuple[int, int]:
    """``(matrices, other)`` of Falcon-H1's Mamba2 mixer (beside each layer's attention): its biases and gated norm
    only where ``mamba_conv_bias``, ``mamba_proj_bias`` (``in_proj``), ``projectors_bias`` (``out_proj``, as
    transformers' FalconH1Mixer builds it) and ``mamba_rms_norm`` say."""
    heads, _, inner, groups, d_state, kernel = _mamba2_dims(c)
    channels = inner + 2 * groups * d_state
    projected = inner + channels + heads
    other = channels * kernel + 3 * heads + (channels if c.flag("mamba_conv_bias", True) else 0)
    other += inner if c.flag("mamba_rms_norm", False) else 0
    other += (projected if c.flag("mamba_proj_bias", False) else 0) + (
        hidden if c.flag("projectors_bias", False) else 0
    )
    return hidden * projected + inner * hidden, other


def _cacheless_params(c: _Config, kind: str, hidden: int) -> tuple[int, int]:
    """NemotronH's MLP (``-``: up and down, relu2) and mixture-of-experts (``E``) layers."""
    if kind == "mlp":
        return 2 * hidden * c.int("intermediate_size", why="the weights estimate"), hidden
    experts = c.int("n_routed_experts", why="the weights estimate")
    inner = c.int("moe_intermediate_size", why="the weights estimate")
    shared = c.get_int("moe_shared_expert_intermediate_size", 0) * c.get_int("n_shared_experts", 1)
    return 2 * hidden * (experts * inner + shared), hidden * experts + experts + hidden


def _layer_params(c: _Config, kind: str, layer: int, attention: tuple[str, int, int, int]) -> tuple[int, int]:
    hidden = c.int("hidden_size", why="the weights estimate")
    if kind in ("mlp", "moe"):
        return _cacheless_params(c, kind, hidden)
    single_mixer = c.model_type == "nemotron_h"  # one mixer per layer: no MLP beside it
    own_mlp = single_mixer or c.model_type == "falcon" or c.model_type in _LAYERNORM_UNGATED  # counted below
    mlp, router = (0, 0) if own_mlp else _mlp_params(c, layer, hidden)
    norms = hidden * (1 if single_mixer or c.model_type in _ONE_NORM else 4 if c.model_type in _FOUR_NORMS else 2)
    if kind == MAMBA2:
        matrices, other = _mamba2_params(c, hidden)
        return mlp + matrices, router + norms + other
    if kind == CONV:
        channels = c.first_int("conv_dim", "hidden_size", why="the weights estimate")
        kernel = c.int("conv_L_cache", why="the weights estimate")
        return mlp + hidden * 3 * channels + channels * hidden, router + norms + channels * kernel
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
    if style == "mla" or c.model_type in _EXPANDED_MLA:
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
    if c.model_type == "falcon":  # fused QKV, an ungated MLP, LayerNorms; biases where the config says so
        inner = c.get_int("ffn_hidden_size", 4 * hidden, positive=True)
        biased = c.flag("bias", False)
        bias = (heads + 2 * kv) * head_dim + hidden + inner + hidden if biased else 0
        if c.flag("new_decoder_architecture", False):
            layer_norms = c.get_int("num_ln_in_parallel_attn", 2, positive=True)
        else:
            layer_norms = 1 if c.flag("parallel_attn", True) else 2
        return 2 * hidden * inner + matrices, 2 * hidden * layer_norms + bias
    if c.model_type in _LAYERNORM_UNGATED:
        shape = _LAYERNORM_UNGATED[c.model_type]
        if c.model_type == "mpt":  # MPTMLP: expansion_ratio x d_model; q and k LayerNorms of d_model where qk_ln
            inner = c.int("expansion_ratio", why="the weights estimate") * hidden
        else:  # GPT-2's n_inner, OPT's ffn_dim; absent or null: 4 x hidden
            inner = c.get_int("intermediate_size", 4 * hidden, positive=True)
        biased = _biases_on(c, shape)
        attention_biased = biased and c.flag("attention_bias", True)
        bias = (heads + 2 * kv) * head_dim if attention_biased and shape.qkv_bias else 0
        bias += hidden if attention_biased and shape.out_bias else 0
        norm = hidden if shape.norm_bias_switched and not biased else 2 * hidden
        norms = norm * (shape.norms + (2 if c.model_type == "mpt" and c.flag("qk_ln", False) else 0))
        return 2 * hidden * inner + matrices, norms + bias + (inner + hidden if biased else 0)
    if c.model_type == "chatglm":  # GLMBlock: biases where add_bias_linear (and on q/k/v where add_qkv_bias)
        linear_bias = c.flag("add_bias_linear", False)
        bias = (heads + 2 * kv) * head_dim if linear_bias or c.flag("add_qkv_bias", False) else 0
        bias += hidden + 2 * c.int("intermediate_size") + hidden if linear_bias else 0
        return mlp + matrices, router + 2 * _chatglm_norm(c, hidden) + bias
    bias = 0
    if c.values.get("attention_bias") is True:
        bias = (heads + 2 * kv) * head_dim + hidden
    elif c.model_type in _QKV_BIAS:
        bias = (heads + 2 * kv) * head_dim
    if c.model_type == "falcon_h1":
        mixer, mixer_other = _falcon_h1_mixer_params(c, hidden)
        mlp_bias = 2 * c.int("intermediate_size") + hidden if c.flag("mlp_bias", False) else 0
        return mlp + matrices + mixer, router + norms + bias + mixer_other + mlp_bias
    qk_norm = 2 * head_dim if c.model_type in _QK_NORM else 0
    if c.model_type in _QK_NORM_ALL:
        qk_norm = (heads + kv) * head_dim
    return mlp + matrices, router + norms + bias + qk_norm


def _biases_on(c: _Config, shape: _Ungated) -> bool:
    """Whether the family's bias switch leaves biases on (MPT's ``no_bias`` turns them off)."""
    if shape.bias_switch == "no_bias":
        return not c.flag("no_bias", True)
    return c.flag(shape.bias_switch, True)


def _chatglm_norm(c: _Config, hidden: int) -> int:
    """One ChatGLM norm's parameters: RMSNorm (a weight) where ``rmsnorm``, else a LayerNorm (weight and bias)."""
    return hidden if c.flag("rmsnorm", True) else 2 * hidden


def _estimate_weights(
    c: _Config, kinds: list[str], attention: tuple[str, int, int, int], dtype_bytes: int
) -> tuple[int, list[str]]:
    """Bytes of the weights a config describes, counted matrix by matrix, and notes on what is approximate.

    Embeddings (and the output head unless tied), per layer the attention or recurrent projections, the MLP or
    every expert with its router, the norms. Gated MLPs (three matrices) are assumed.
    """
    hidden = c.int("hidden_size", why="the weights estimate")
    vocab_key = "padded_vocab_size" if c.model_type == "chatglm" else "vocab_size"  # ChatGLM's embedding rows
    vocab = c.int(vocab_key, why="the weights estimate")
    tied = c.flag("tie_word_embeddings", c.model_type in _TIED_BY_DEFAULT)
    width = hidden
    if c.model_type == "opt" and c.get("word_embed_proj_dim") is not None:  # embeddings projected in and out
        width = c.int("word_embed_proj_dim")
    matrices, other = 0, vocab * width * (1 if tied else 2) + hidden
    if width != hidden:
        matrices += 2 * width * hidden
    if c.model_type == "falcon":
        other += hidden  # the final LayerNorm's bias
    if c.model_type == "chatglm":
        other = vocab * hidden * 2 + (0 if not c.flag("post_layer_norm", True) else _chatglm_norm(c, hidden))
    if c.model_type in _LAYERNORM_UNGATED:  # the final LayerNorm's bias, the others, the output head's bias
        shape = _LAYERNORM_UNGATED[c.model_type]
        other += 0 if shape.norm_bias_switched and not _biases_on(c, shape) else hidden  # MPT's no_bias: none
        other += 2 * hidden * shape.more_norms + (vocab if shape.head_bias else 0)
        if shape.positions is not None:  # learned position embeddings (OPT keeps 2 rows more)
            other += (c.int("max_position_embeddings", why="the position embeddings") + shape.positions) * hidden
        final_norm = c.flag("do_layer_norm_before", True) and not c.flag("_remove_final_layer_norm", False)
        if c.model_type == "opt" and not final_norm:
            other -= 2 * hidden  # OPTDecoder has no final LayerNorm then
    if c.model_type == "zamba2":
        m, o = _zamba2_params(c, kinds, hidden, attention[1], attention[3])
        matrices, other = matrices + m, other + o
    for layer, kind in enumerate(kinds if c.model_type != "zamba2" else []):
        m, o = _layer_params(c, kind, layer, attention)
        matrices, other = matrices + m, other + o
    notes = []
    quant = c.values.get("quantization_config")
    bits = dtype_bytes * 8
    if isinstance(quant, Mapping):
        method = quant.get("quant_method", "unknown")
        given = quant.get("bits", quant.get("w_bit"))
        groups = quant.get("config_groups")
        if given is None and isinstance(groups, Mapping):  # compressed-tensors: the width every group gives
            widths = {
                g["weights"].get("num_bits")
                if isinstance(g, Mapping) and isinstance(g.get("weights"), Mapping)
                else None
                for g in groups.values()
            }
            given = widths.pop() if len(widths) == 1 else None
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
    if c.values.get("is_encoder_decoder") is True:
        raise UnknownArchitectureError(
            f"config of model_type {c.model_type!r} is an encoder-decoder model (is_encoder_decoder: true): its "
            "decoder caches its own tokens and the encoder's output (cross-attention), which devmem does not model",
            c.model_type,
            ("is_encoder_decoder",),
        )
    read_here = _KV_KEYS_READ.get(c.model_type, ())
    refused = [k for k in _UNMODELLED if c.values.get(k) not in (None, False) and k not in read_here]
    if refused:
        raise UnknownArchitectureError(
            f"config of model_type {c.model_type!r} sets {', '.join(refused)}: "
            f"{'; '.join(_UNMODELLED[k] for k in refused)}, which devmem does not model",
            c.model_type,
            tuple(refused),
        )
    if c.model_type == "mpt" and (not c.flag("alibi", True) or c.flag("prefix_lm", False)):
        raise UnknownArchitectureError(
            "config of model_type 'mpt' sets attn_config.alibi false or attn_config.prefix_lm true: vLLM's MPT "
            "takes only ALiBi causal attention, and devmem does not model another",
            c.model_type,
            ("attn_config.alibi" if not c.flag("alibi", True) else "attn_config.prefix_lm",),
        )
    if c.model_type in _UNMODELLED_FAMILIES and not c.has("layer_types"):
        raise UnknownArchitectureError(
            f"config of model_type {c.model_type!r} has no layer_types: {_UNMODELLED_FAMILIES[c.model_type]}, "
            "which devmem does not model",
            c.model_type,
            ("layer_types",),
        )
    c.require(
        "num_hidden_layers",
        "num_attention_heads",
        *([] if c.has("head_dim") or c.has("kv_lora_rank") or c.has("attention_head_dim") else ["hidden_size"]),
        why="the KV cache per token",
    )
    layers = c.int("num_hidden_layers")
    if layers > MAX_LAYERS:
        raise ModelConfigError(
            f"config key num_hidden_layers={layers} is more layers than devmem sizes (at most {MAX_LAYERS})"
        )
    notes: list[str] = []
    model_dtype, model_bytes = _served_dtype(c, dtype, notes)
    if kv_dtype not in KV_DTYPES:
        raise ModelConfigError(f"kv_dtype {_shown(kv_dtype)} is not one of {', '.join(KV_DTYPES)}")
    kv_name, kv_bytes = (model_dtype, model_bytes) if kv_dtype == "auto" else _dtype(kv_dtype, "kv_dtype")
    if state_dtype != "auto" and not isinstance(state_dtype, str):
        raise ModelConfigError(f"state_dtype {_shown(state_dtype)} is not a dtype name")
    conv_name, conv_bytes = (model_dtype, model_bytes) if state_dtype == "auto" else _dtype(state_dtype, "state_dtype")
    quant = c.values.get("quantization_config")
    scheme = quant.get("kv_cache_scheme") if isinstance(quant, Mapping) else None
    if isinstance(scheme, Mapping) and kv_dtype == "auto":
        notes.append(
            f"the checkpoint ships KV-cache quantization scales (kv_cache_scheme, {_shown(scheme.get('num_bits'))} "
            f"bits): the cache is counted in {kv_name} (kv_dtype auto); an engine run with an fp8 cache "
            "(--kv-dtype fp8) holds half"
        )
    kinds, source = _layer_kinds(c, layers)
    kinds = _resolve_recurrent(c, kinds)
    state_kinds = kinds  # Falcon-H1's and Zamba2's attention layers run a Mamba2 mixer beside them
    if c.model_type in ("falcon_h1", "zamba2"):
        state_kinds = kinds + [MAMBA2] * kinds.count(FULL)
    recurrent_keys = [k for k in _RECURRENT_KEYS if k in c.values and k not in c.defaults]
    if recurrent_keys and not any(k in (MAMBA, MAMBA2, LINEAR, CONV) for k in state_kinds):
        raise UnknownArchitectureError(
            f"config of model_type {c.model_type!r} sets {', '.join(recurrent_keys)} (recurrent layers) but no layer "
            "list or pattern devmem reads places them: their state per sequence would be left out",
            c.model_type,
            tuple(recurrent_keys),
        )
    if not any(k in ATTENTION for k in kinds):
        raise UnknownArchitectureError(
            f"config of model_type {c.model_type!r} has no attention layer: a KV cache of tokens does not apply",
            c.model_type,
            ("layer_types",),
        )
    style, heads, kv, head_dim, attention_notes = _attention_shape(c)
    notes += attention_notes
    window = c.int("sliding_window") if SLIDING in kinds else None
    chunk = c.int("attention_chunk_size") if CHUNKED in kinds else None
    if CHUNKED in kinds and chunk is None:
        c.require("attention_chunk_size", why="chunked-local attention layers")
    states = _recurrent_states(c, state_kinds)
    ssm_key = next((k for k in ("mamba_ssm_dtype", "mamba_ssm_cache_dtype") if c.has(k)), None)
    ssm_bytes = conv_bytes
    if states and ssm_key and state_dtype == "auto":
        ssm_name, ssm_bytes = _dtype(c.get(ssm_key), f"config key {ssm_key}")
        if ssm_bytes != conv_bytes:
            default = f" ({c.family}'s default)" if ssm_key in c.defaults else ""
            notes.append(f"the SSM state is {ssm_name} ({ssm_key}{default}); the convolution state {conv_name}")
    rope_dim, indexer = 0, 0
    if style == "mla":
        rope_dim = c.int("qk_rope_head_dim")
        if c.has("index_topk") or c.model_type == "deepseek_v32":
            index_dim = c.int("index_head_dim", why="the sparse-attention indexer's key cache")
            indexer = index_dim + -(-index_dim // 128) * 4
            notes.append(
                f"DeepSeek-V3.2's indexer caches a key per token per layer: {index_dim} fp8 B + "
                f"{-(-index_dim // 128)} x 4 B scales = {indexer} B (vLLM's DeepseekV32IndexerCache)"
            )
            if kv_dtype in ("auto", "fp8"):
                kv_name, kv_bytes = FP8_DS_MLA, 1
                notes.append(
                    f"the latent is cached as vLLM caches DeepSeek-V3.2's by default ({FP8_DS_MLA}); "
                    "--kv-dtype bf16 caches it in 16 bits"
                )
        elif kv_name == "fp8":
            notes.append("fp8 MLA counted at 1 byte per latent element (vLLM's fp8 MLA cache)")
    if weights_bytes is None:
        weights_bytes, weight_notes = _estimate_weights(c, kinds, (style, heads, kv, head_dim), model_bytes)
        weights_source = "estimated from config.json" + (" (text model only)" if c.nested else "")
        notes += weight_notes
    max_context, context_source = _max_context(c)
    defaulted = {k: v for k, v in c.defaulted.items() if k not in ("tie_word_embeddings", "attention_bias")}
    if defaulted:
        notes.append(
            f"{', '.join(f'{k} {v}' for k, v in sorted(defaulted.items()))}: absent from config.json, "
            f"{c.family}'s defaults (as transformers reads it)"
        )
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
        max_context=max_context,
        chunked_attention_layers=kinds.count(CHUNKED),
        attention_chunk_size=chunk,
        mla_rope_dim=rope_dim,
        indexer_bytes_per_token=indexer,
        max_context_source=context_source,
    )


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
