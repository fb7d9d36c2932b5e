"""A config turned into a :class:`~devmem.planner.models.ModelMemory`'s fields: refusals, layer kinds, attention,
state, dtypes, weights. The class itself is handed in (``make``), so that this module imports none of it."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, TypeVar

from devmem.errors import ModelConfigError, UnknownArchitectureError
from devmem.planner.models.attention import _attention_shape
from devmem.planner.models.config import KV_DTYPES, MAX_LAYERS, _Config, _dtype, _max_context, _served_dtype
from devmem.planner.models.gemma4 import gemma4_specs
from devmem.planner.models.kinds import ATTENTION, CHUNKED, FULL, MAMBA2, RECURRENT, SLIDING
from devmem.planner.models.layers import _layer_kinds, _resolve_recurrent
from devmem.planner.models.mimo_v2 import mimo_v2_specs
from devmem.planner.models.nemotron_nas import FAMILIES as NAS_FAMILIES
from devmem.planner.models.nemotron_nas import nas_specs
from devmem.planner.models.reading import _shown
from devmem.planner.models.recurrent import _recurrent_states
from devmem.planner.models.spec import FP8_DS_MLA, AttentionSpec
from devmem.planner.models.weights import _estimate_weights

M = TypeVar("M")

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
    "block_types": "RecurrentGemma's recurrent blocks",
}


#: Keys of :data:`_UNMODELLED` a family reads as vLLM reads them: Falcon's (``multi_query`` unless
#: ``new_decoder_architecture``, then ``num_kv_heads``), GPTBigCode's ``multi_query`` (one KV head), ChatGLM's
#: ``multi_query_group_num`` (the KV heads where ``multi_query_attention``) and Kimi-Linear's ``linear_attn_config``
#: (its KDA layers).
_KV_KEYS_READ = {
    "falcon": ("multi_query", "num_kv_heads"),
    "gpt_bigcode": ("multi_query",),
    "chatglm": ("multi_query_group_num",),
    "kimi_linear": ("linear_attn_config",),
}


#: Families whose config class places recurrent layers where the config.json says nothing: refused by model_type.
_UNMODELLED_FAMILIES = {
    "minimax": "MiniMaxConfig alternates full and lightning (linear) attention layers where config.json lists none",
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


#: Families whose attention layers differ in shape: their mapping onto per-layer specs (the rest: one shape for all).
_PER_LAYER_SPECS = {
    "gemma4": gemma4_specs,
    "gemma4_text": gemma4_specs,
    "mimo_v2": mimo_v2_specs,
    "mimo_v2_flash": mimo_v2_specs,
    **dict.fromkeys(NAS_FAMILIES, nas_specs),
}
#: The families whose vLLM config hook sets the SSM-state dtype from config.json, the key it reads and its default
#: where config.json sets none (vLLM 0.28.0, vllm/model_executor/models/config.py: NemotronHForCausalLMConfig reads
#: mamba_ssm_cache_dtype, else float32; Qwen3_5ForConditionalGenerationConfig reads mamba_ssm_dtype, else none).
#: Every other family keeps the SSM state in the served dtype (mamba_utils: "auto" is the conv state's dtype), whatever
#: its config.json says.
_VLLM_SSM_DTYPE: dict[str, tuple[str, str | None]] = {
    "nemotron_h": ("mamba_ssm_cache_dtype", "float32"),
    **dict.fromkeys(("qwen3_5", "qwen3_5_text", "qwen3_5_moe", "qwen3_5_moe_text"), ("mamba_ssm_dtype", None)),
}
#: Keys that name an SSM-state dtype in some family's config.json.
_SSM_DTYPE_KEYS = ("mamba_ssm_dtype", "mamba_ssm_cache_dtype")


def _build(make: Callable[..., M], raw: Mapping[str, Any], **options: Any) -> M:
    """``make`` (the model's class) called with the fields ``raw`` gives (:func:`_build_memory`), every refusal
    naming the family: a :class:`ModelConfigError` raised without a ``model_type`` gets the config's."""
    try:
        return _build_memory(make, raw, **options)
    except ModelConfigError as exc:
        if getattr(exc, "model_type", None) is None:
            exc.model_type = _Config(raw).model_type  # type: ignore[attr-defined]
            if exc.model_type and "model_type" not in str(exc):  # type: ignore[attr-defined]
                exc.args = (f"config of model_type {exc.model_type!r}: {exc}",)  # type: ignore[attr-defined]
        raise


def _refuse_shared_indexers(c: _Config) -> None:
    """Sparse attention whose layers share one indexer (GLM-5.2's ``indexer_types`` "shared", ``index_topk_freq``
    above 1) is refused: whether a sharing layer still caches an indexer key is not modelled."""
    types, freq = c.values.get("indexer_types"), c.values.get("index_topk_freq")
    if types is not None:
        key, value, sharing = "indexer_types", types, not isinstance(types, list) or any(t != "full" for t in types)
    else:
        key, value, sharing = "index_topk_freq", freq, freq not in (None, 1)
    if sharing:
        raise UnknownArchitectureError(
            f"config of model_type {c.model_type!r} sets {key}={_shown(value)}: layers that reuse another layer's "
            "sparse-attention indexer (or an indexer schedule devmem cannot read), whose cache devmem does not model",
            c.model_type,
            (key,),
        )


def _ssm_dtype(c: _Config, conv_name: str, conv_bytes: int, notes: list[str]) -> int:
    """The SSM state's dtype as vLLM's config hook for the family sets it (:data:`_VLLM_SSM_DTYPE`), else the
    convolution state's (the served dtype)."""
    key, default = _VLLM_SSM_DTYPE.get(c.model_type or "", ("", None))
    given = c.values.get(key) if key and key not in c.defaults else None
    if given is None and default is None:
        ignored = [k for k in _SSM_DTYPE_KEYS if k in c.values and k not in c.defaults]
        if ignored:
            notes.append(
                f"config.json sets {', '.join(ignored)}, which vLLM reads for {c.model_type} no more than for any "
                f"family without a hook of its own: the SSM state is in {conv_name}, as the convolution state"
            )
        return conv_bytes
    try:
        name, size = _dtype(given if given is not None else default, f"config key {key}")
    except ModelConfigError as exc:
        raise c.refuse(key, str(exc)) from None
    source = (
        f"{key} in config.json"
        if given is not None
        else f"config.json sets no {key}: vLLM's default for {c.model_type}"
    )
    if size != conv_bytes or given is None:
        notes.append(f"the SSM state is {name} ({source}); the convolution state {conv_name}")
    return size


def _build_memory(
    make: Callable[..., M],
    raw: Mapping[str, Any],
    *,
    kv_dtype: str,
    tp: int,
    dtype: str | None,
    state_dtype: str,
    weights_bytes: int | None,
    weights_source: str | None,
) -> M:
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
    if c.model_type in _UNMODELLED_FAMILIES and not c.has("layer_types") and not c.has("attn_type_list"):
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
    kv_name, kv_bytes = (
        (model_dtype, model_bytes)
        if kv_dtype == "auto"
        else _dtype("fp8" if kv_dtype == FP8_DS_MLA else kv_dtype, "kv_dtype")
    )
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
    if recurrent_keys and not any(k in RECURRENT for k in state_kinds):
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
    window = (
        c.first_int("sliding_window", "sliding_window_size", why="sliding-window layers") if SLIDING in kinds else None
    )
    chunk = c.int("attention_chunk_size") if CHUNKED in kinds else None
    if CHUNKED in kinds and chunk is None:
        c.require("attention_chunk_size", why="chunked-local attention layers")
    states = _recurrent_states(c, state_kinds)
    ssm_bytes = _ssm_dtype(c, conv_name, conv_bytes, notes) if states and state_dtype == "auto" else conv_bytes
    rope_dim, indexer = 0, 0
    if style == "mla":
        rope_dim = c.int("qk_rope_head_dim")
        if c.has("index_topk") or c.model_type in ("deepseek_v32", "glm_moe_dsa"):
            _refuse_shared_indexers(c)
            index_dim = c.int("index_head_dim", why="the sparse-attention indexer's key cache")
            indexer = index_dim + -(-index_dim // 128) * 4
            notes.append(
                f"DeepSeek sparse attention's indexer caches a key per token per layer: {index_dim} fp8 B + "
                f"{-(-index_dim // 128)} x 4 B scales = {indexer} B (vLLM's DeepseekV32IndexerCache)"
            )
            if kv_dtype in ("fp8", FP8_DS_MLA):
                kv_name, kv_bytes = FP8_DS_MLA, 1
                notes.append(
                    f"an fp8 cache of DeepSeek sparse attention is vLLM's packed latent ({FP8_DS_MLA}): the latent in "
                    "fp8 with a 4-byte scale per 128, the rope part in bf16"
                )
            else:
                notes.append(
                    f"the latent is cached in {kv_name}, as vLLM caches it unless an fp8 cache is asked for "
                    f"(--kv-cache-dtype fp8 or {FP8_DS_MLA}: the packed fp8 latent)"
                )
    if kv_dtype == FP8_DS_MLA and not indexer:
        raise UnknownArchitectureError(
            f"config of model_type {c.model_type!r} has no DeepSeek sparse attention (index_topk): kv_cache_dtype "
            f"{FP8_DS_MLA} is that attention's packed latent; use fp8, bf16 or auto",
            c.model_type,
            ("index_topk",),
        )
    if style == "mla" and not indexer and kv_name == "fp8":
        notes.append("fp8 MLA counted at 1 byte per latent element (vLLM's fp8 MLA cache)")
    specs: tuple[AttentionSpec, ...] = ()
    if c.model_type in _PER_LAYER_SPECS:
        specs = tuple(_PER_LAYER_SPECS[c.model_type](c, kinds, kv, head_dim, window))
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
    return make(
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
        attention_specs=specs,
    )
