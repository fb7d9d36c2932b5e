"""What one model costs in memory per tensor-parallel rank (:class:`ModelMemory`), and :func:`load_model`."""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from devmem import arguments
from devmem.errors import ModelConfigError
from devmem.planner.models.build import _build
from devmem.planner.models.config import MAX_TP
from devmem.planner.models.kinds import CHUNKED, FULL, SLIDING
from devmem.planner.models.reading import _is_dir, _shown, _whole_number, checkpoint_weights, read_json
from devmem.planner.models.recurrent import RecurrentState
from devmem.planner.models.spec import KV, MLA, SPARSE_MLA, AttentionSpec
from devmem.units import format_size


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
    attention_specs: tuple[AttentionSpec, ...] = ()

    def __post_init__(self) -> None:
        if not self.attention_specs:  # one spec for every layer of each kind, from the model-wide shape
            object.__setattr__(self, "attention_specs", self._uniform_specs())
        tp = arguments.integer(
            "tp", self.tp, minimum=1, what="a whole number of tensor-parallel ranks", error=ModelConfigError
        )
        object.__setattr__(self, "tp", tp)
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

    def _uniform_specs(self) -> tuple[AttentionSpec, ...]:
        layout = KV if self.attention != "mla" else SPARSE_MLA if self.indexer_bytes_per_token else MLA
        v_size = self.head_dim if layout == KV else 0
        kinds = (
            (FULL, self.full_attention_layers, None),
            (SLIDING, self.sliding_attention_layers, self.sliding_window),
            (CHUNKED, self.chunked_attention_layers, self.attention_chunk_size),
        )
        return tuple(
            AttentionSpec(
                kind,
                self.num_kv_heads,
                self.head_dim,
                v_size,
                window,
                layout,
                self.mla_rope_dim,
                self.indexer_bytes_per_token,
            )
            for kind, layers, window in kinds
            for _ in range(layers)
        )

    def _tp_problems(self, tp: int) -> list[str]:
        problems = []
        if self.num_attention_heads % tp:
            problems.append(f"{self.num_attention_heads} attention heads are not a multiple of {tp}")
        for kv in sorted({s.kv_heads for s in self.attention_specs if s.layout == KV}):
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
        kv_cache_dtype: str | None = None,
    ) -> ModelMemory:
        """The memory shape of the model a config describes (a dict, a config.json, or a folder holding one).

        ``dtype`` overrides the dtype the model is served in (by default the config's ``torch_dtype``/``dtype``
        as engines resolve it: float32 or none given is bf16); ``kv_cache_dtype`` (vLLM's name; ``kv_dtype`` is the
        same) is ``auto`` (the family's default as vLLM sets it: the served dtype), ``bf16``, ``fp16``, ``fp8``,
        ``fp8_ds_mla`` (DeepSeek sparse attention's packed latent) or ``fp32``; ``state_dtype`` (``auto`` = the
        served dtype) is the recurrent state's. ``tp`` and ``weights_bytes`` take any whole number (numpy integers
        too). Without ``weights_bytes`` the weights are estimated from the config, matrix by matrix (docs/models.md).
        """
        if isinstance(config, Mapping):
            raw = dict(config)
        else:
            file = Path(config)
            raw = read_json(file / "config.json" if _is_dir(file) else file)
        if kv_cache_dtype is not None and kv_dtype not in ("auto", kv_cache_dtype):
            raise ModelConfigError(
                f"kv_cache_dtype {_shown(kv_cache_dtype)} and kv_dtype {_shown(kv_dtype)} disagree: give one of them"
            )
        kv_dtype = kv_dtype if kv_cache_dtype is None else kv_cache_dtype
        tp = _whole_number("tp", tp, 1)
        if weights_bytes is not None:
            weights_bytes = _whole_number("weights_bytes", weights_bytes, 0)
        return _build(
            cls,
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
        """Bytes the largest attention layer holds per token on one rank: K and V, or the MLA latent (and indexer
        key); every layer's where they all hold the same (:attr:`uniform_layers`)."""
        return max((self._layer_bytes(s) for s in self.attention_specs), default=0)

    @property
    def uniform_layers(self) -> bool:
        """Whether every attention layer holds the same bytes per token."""
        return len({self._layer_bytes(s) for s in self.attention_specs}) <= 1

    def _layer_bytes(self, spec: AttentionSpec) -> int:
        return spec.bytes_per_token(self.tp, self.kv_dtype, self.kv_dtype_bytes)

    def _kind_bytes(self, kind: str) -> int:
        return sum(self._layer_bytes(s) for s in self.attention_specs if s.kind == kind)

    @property
    def kv_bytes_per_token(self) -> int:
        """KV bytes per token over every attention layer, on one rank (sliding and chunked layers not capped)."""
        return sum(self._layer_bytes(s) for s in self.attention_specs)

    @property
    def full_bytes_per_token(self) -> int:
        """KV bytes per token of the full-attention layers: what every further token of a long context costs."""
        return self._kind_bytes(FULL)

    @property
    def sliding_bytes_per_token(self) -> int:
        return self._kind_bytes(SLIDING)

    @property
    def chunked_bytes_per_token(self) -> int:
        return self._kind_bytes(CHUNKED)

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
        groups = _grouped(self.attention_specs)
        shapes: dict[str, int] = {}  # layers of one shape share a line, whatever span they hold
        for spec, n in groups.items():
            text = spec.text(self.tp, self.kv_dtype, self.kv_dtype_bytes)
            shapes[text] = shapes.get(text, 0) + n
        per_layer = [
            f"KV per token per layer{'' if len(shapes) == 1 else f', {n} layers'}: {text}" for text, n in shapes.items()
        ]
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
            *per_layer,
            (
                f"KV per token: {self.attention_layers} attention layers x {self.kv_layer_bytes_per_token} B = "
                f"{self.kv_bytes_per_token} B{cap}"
                if self.uniform_layers
                else f"KV per token: {' + '.join(f'{n} x {self._layer_bytes(s)}' for s, n in groups.items())} B = "
                f"{self.kv_bytes_per_token} B (full layers {self.full_bytes_per_token} B){cap}"
            ),
        ]
        for s in self.states:
            each = s.bytes_per_sequence(self.tp, self.conv_state_dtype_bytes, self.ssm_state_dtype_bytes)
            lines.append(
                f"state per sequence, {s.kind}: {s.layers} layers x ({s.conv_text} x "
                f"{self.conv_state_dtype_bytes} B + {s.ssm_text} x {s.ssm_bytes(self.ssm_state_dtype_bytes)} B) / tp "
                f"{self.tp} = {each} B"
            )
        if self.max_context is not None:
            lines.append(f"max context: {self.max_context} tokens ({self.max_context_source})")
        per_rank = f"; per rank {format_size(self.weights_bytes_per_rank)}" if self.tp > 1 else ""
        lines.append(
            f"weights: {format_size(self.weights_bytes)} ({self.weights_bytes} bytes, {self.weights_source}){per_rank}"
        )
        lines += [f"note: {note}" for note in self.notes]
        return "\n".join(lines)

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
            "full_bytes_per_token": self.full_bytes_per_token,
            "attention_specs": [
                {**{k: getattr(spec, k) for k in spec.__dataclass_fields__}, "layers": n}
                for spec, n in _grouped(self.attention_specs).items()
            ],
            "state_bytes_per_sequence": self.state_bytes_per_sequence,
            "weights_bytes": self.weights_bytes,
            "weights_bytes_per_rank": self.weights_bytes_per_rank,
            "weights_source": self.weights_source,
            "weights_estimated": self.weights_estimated,
            "max_context": self.max_context,
            "max_context_source": self.max_context_source,
            "notes": list(self.notes),
        }


def _grouped(specs: tuple[AttentionSpec, ...]) -> dict[AttentionSpec, int]:
    """Each distinct spec and how many layers have it, in layer order."""
    groups: dict[AttentionSpec, int] = {}
    for spec in specs:
        groups[spec] = groups.get(spec, 0) + 1
    return groups


def load_model(path: str | os.PathLike, **options: Any) -> ModelMemory:
    """A model from a path: a folder (:meth:`ModelMemory.from_pretrained_dir`), a ``config.json`` (the same, on
    its folder) or another JSON config file (:meth:`ModelMemory.from_config`, weights estimated)."""
    file = Path(path)
    if _is_dir(file):
        return ModelMemory.from_pretrained_dir(file, **options)
    if file.name == "config.json" and _is_dir(file.parent):
        return ModelMemory.from_pretrained_dir(file.parent, **options)
    return ModelMemory.from_config(file, **options)
