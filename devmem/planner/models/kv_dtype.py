"""The KV-cache dtype a checkpoint declares, read as vLLM 0.34.0 resolves ``--kv-cache-dtype auto``.

vLLM takes the quantization config from config.json's ``quantization_config``, else from ``hf_quant_config.json``
beside it (ModelOpt 0.29 and before), and marks it ModelOpt where its ``producer.name`` is ``modelopt``
(``_normalize_quantization_config``). Then:

- ModelOpt (``quant_method`` ``modelopt*``): ``resolve_kv_cache_dtype_string`` reads ``kv_cache_scheme`` (a dict:
  8-bit float and not dynamic is fp8, 4-bit float nvfp4) or ``kv_cache_quant_algo`` (``FP8`` is fp8, ``NVFP4``
  nvfp4), in ``quantization`` first, then at the top; any other value falls back to ``auto`` with a warning. It
  sets the cache dtype of every layer.
- compressed-tensors: ``Attention.__init__`` caches fp8 where the config has a ``kv_cache_scheme`` (vLLM accepts only
  an 8-bit float, symmetric, per-tensor or per-head scheme and refuses to start on another). MLA layers are built by
  ``MLAAttention``, which does not read it: their latent stays in the served dtype.

Anything else leaves the cache in the served dtype. ``--kv-cache-dtype`` other than ``auto`` wins over all of it.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from devmem.errors import UnknownArchitectureError
from devmem.planner.models.reading import _shown

#: ModelOpt's ``quant_algo`` values and the quant_method vLLM gives them (any other is refused by vLLM).
_MODELOPT_ALGOS = {
    "FP8": "modelopt",
    "FP8_PER_CHANNEL_PER_TOKEN": "modelopt",
    "FP8_PB_WO": "modelopt",
    "NVFP4": "modelopt_fp4",
    "MIXED_PRECISION": "modelopt_mixed",
}


#: ModelOpt's KV-cache algorithm names vLLM maps (``MODELOPT_TO_VLLM_KV_CACHE_DTYPE_MAP``), as devmem names them.
_MODELOPT_KV = {"fp8": "fp8", "nvfp4": "nvfp4"}


@dataclass(frozen=True)
class DeclaredKvDtype:
    """A KV-cache dtype a checkpoint declares: ``name`` (``fp8`` or ``nvfp4``), ``source`` (the file and key, for
    people) and ``mla`` (whether MLA layers take it too: ModelOpt's does, compressed-tensors' does not)."""

    name: str
    source: str
    mla: bool


def checkpoint_quantization(
    raw: Mapping[str, Any], hf_quant_config: Mapping[str, Any] | None
) -> tuple[Mapping[str, Any] | None, str]:
    """The quantization config vLLM reads for the checkpoint and the file it came from: config.json's top-level
    ``quantization_config``, else ``hf_quant_config.json``'s content."""
    quant = raw.get("quantization_config")
    if isinstance(quant, Mapping):
        return quant, "config.json's quantization_config"
    if quant is None and hf_quant_config is not None:
        return hf_quant_config, "hf_quant_config.json"
    return None, ""


def quant_method(quant: Mapping[str, Any], where: str, model_type: str | None) -> str:
    """``quant_method`` as vLLM normalizes it: ModelOpt's by ``producer.name`` and ``quantization.quant_algo``,
    lower case, ``compressed_tensors`` spelt ``compressed-tensors``."""
    producer = quant.get("producer")
    inner = quant.get("quantization")
    legacy = isinstance(inner, Mapping) and "modelopt_quant_config" in inner
    if (isinstance(producer, Mapping) and producer.get("name") == "modelopt") or legacy:
        algo = inner.get("quant_algo") if isinstance(inner, Mapping) else None
        if algo is not None:
            if str(algo).upper() not in _MODELOPT_ALGOS:
                raise UnknownArchitectureError(
                    f"quantization.quant_algo {_shown(algo)} in {where} is not a ModelOpt algorithm vLLM reads "
                    f"({', '.join(_MODELOPT_ALGOS)}): vLLM refuses the checkpoint",
                    model_type,
                    ("quantization.quant_algo",),
                )
            return _MODELOPT_ALGOS[str(algo).upper()]
    method = quant.get("quant_method", "")
    return method.lower().replace("compressed_tensors", "compressed-tensors") if isinstance(method, str) else ""


def _modelopt_kv(quant: Mapping[str, Any], where: str, notes: list[str]) -> DeclaredKvDtype | None:
    """``get_kv_cache_quant_algo_string``: the first of ``kv_cache_scheme`` and ``kv_cache_quant_algo`` set, in
    ``quantization`` then at the top."""
    inner = quant.get("quantization", quant)
    inner = inner if isinstance(inner, Mapping) else {}
    found = None
    for key in ("kv_cache_scheme", "kv_cache_quant_algo"):
        for holder, prefix in ((inner, "quantization." if inner is not quant else ""), (quant, "")):
            if holder.get(key):
                found = (f"{prefix}{key}", holder[key])
                break
        if found:
            break
    if found is None:
        return None
    key, value = found
    name = None
    if isinstance(value, Mapping):
        if value.get("type") == "float" and value.get("num_bits") == 8 and value.get("dynamic") is False:
            name = "fp8"
        elif value.get("type") == "float" and value.get("num_bits") == 4:
            name = "nvfp4"
    elif isinstance(value, str):
        name = _MODELOPT_KV.get(value.lower())
    if name is None:
        notes.append(
            f"{key} {_shown(value)} in {where} is not a value vLLM maps to a cache dtype (it warns and falls back to "
            "auto): the cache is counted in the served dtype"
        )
        return None
    return DeclaredKvDtype(name, f"{key} {_shown(value)} in {where}, ModelOpt", mla=True)


def _compressed_tensors_kv(quant: Mapping[str, Any], where: str, model_type: str | None) -> DeclaredKvDtype | None:
    """compressed-tensors' ``kv_cache_scheme``, refused where vLLM's ``validate_kv_cache_scheme`` refuses it."""
    scheme = quant.get("kv_cache_scheme")
    if scheme is None:
        return None
    if not isinstance(scheme, Mapping):
        raise UnknownArchitectureError(
            f"kv_cache_scheme {_shown(scheme)} in {where} is not an object: vLLM cannot read it",
            model_type,
            ("quantization_config.kv_cache_scheme",),
        )
    problems = []
    if scheme.get("type") != "float" or scheme.get("num_bits") != 8:
        problems.append(f"num_bits {_shown(scheme.get('num_bits'))}, type {_shown(scheme.get('type'))}")
    if scheme.get("strategy") not in ("tensor", "attn_head"):
        problems.append(f"strategy {_shown(scheme.get('strategy'))}")
    if not scheme.get("symmetric"):
        problems.append(f"symmetric {_shown(scheme.get('symmetric'))}")
    if problems:
        raise UnknownArchitectureError(
            f"kv_cache_scheme in {where} has {', '.join(problems)}: vLLM takes only an 8-bit float, symmetric scheme "
            "per tensor or per head (attn_head) for a compressed-tensors KV cache and refuses to start otherwise",
            model_type,
            ("quantization_config.kv_cache_scheme",),
        )
    return DeclaredKvDtype("fp8", f"an 8-bit float kv_cache_scheme in {where}, compressed-tensors", mla=False)


def layer_quantization(
    raw: Mapping[str, Any], hf_quant_config: Mapping[str, Any] | None
) -> tuple[Mapping[str, Any] | None, str]:
    """The quantization config vLLM builds the layers with (``get_quant_config``): :func:`checkpoint_quantization`'s,
    else the text config's ``quantization_config``, else ``compression_config``, and where it came from."""
    quant, where = checkpoint_quantization(raw, hf_quant_config)
    if quant is None:
        text = raw.get("text_config")
        for holder, key in ((text, "quantization_config"), (raw, "compression_config")):
            if isinstance(holder, Mapping) and isinstance(holder.get(key), Mapping):
                return holder[key], f"config.json's {'text_config.' if holder is text else ''}{key}"
    return quant, where


def declared_kv_dtype(
    raw: Mapping[str, Any],
    hf_quant_config: Mapping[str, Any] | None,
    model_type: str | None,
    notes: list[str],
) -> DeclaredKvDtype | None:
    """The KV-cache dtype the checkpoint declares, as vLLM 0.34.0 resolves ``auto`` (None: none declared, the served
    dtype). A declaration vLLM refuses is an :class:`UnknownArchitectureError` naming the key."""
    quant, where = checkpoint_quantization(raw, hf_quant_config)
    compressed, where = layer_quantization(raw, hf_quant_config)  # what the Attention layers are built with
    if quant is not None and quant_method(quant, where, model_type).startswith("modelopt"):
        return _modelopt_kv(quant, where, notes)
    if compressed is not None and quant_method(compressed, where, model_type) == "compressed-tensors":
        return _compressed_tensors_kv(compressed, where, model_type)
    return None
