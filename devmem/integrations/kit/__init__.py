"""What every engine adapter needs beside its engine-specific lines: one kit, so that no adapter copies plumbing.

An adapter (the vLLM plugin, the SGLang plugin) patches a stock engine's classes so that :class:`devmem.EngineMemory`
sizes its KV cache; an entry point that sizes a model's engine in one call (transformers' ``size_continuous_batching``)
checks its request and reads the model. Each thing they share is here once, a module per job:

- :mod:`.switch`: :class:`Switch`, the environment variable that turns the adapter off (on once installed; ``0``,
  ``false``, ``no`` or ``off`` turn it off, with one log line; any other value is named in one warning and leaves it
  on) and the gate on the engine's release (:func:`installed_version`, :func:`release`, :func:`version_note`);
- :mod:`.shapes`: the feature checks (:func:`parameters`, :func:`parameter`, :func:`accepts`,
  :func:`shape_mismatches`, :func:`names_used`, :func:`source`), so that a release is recognised by its shapes;
- :mod:`.patching`: :func:`when_imported`, :func:`wrap`, :func:`guarded`, :func:`current`, :func:`around`,
  :func:`patch_class` and :func:`patch_in`: the engine patched when it imports its module, each step giving the share
  back when it fails, never an exception into the engine's import;
- :mod:`.starts`: :class:`Starts`, the engine's EngineMemory tied to its owner so an abandoned start gives its share
  back; :func:`memory_of`, :func:`allocating` and :func:`closing`;
- :mod:`.accounting`: what a sizing reserves and says: :func:`weights_per_rank`, :func:`graphs_after_cache`,
  :func:`grown_since_baseline` and :func:`log_sizing`;
- :mod:`.sizing`: the one-call sizing entry: :func:`begin_sizing`, :class:`Sizing` and :func:`share_request`;
- :mod:`.model`: reading and steering the model and its engine: :func:`unwrapped`, :func:`check_one_device`,
  :func:`storage_bytes`, :func:`model_bytes`, :func:`forward_tokens`, :func:`logged`, :func:`copied` and
  :func:`after_current_stream`;
- :mod:`.layers`: a transformers model's anatomy: :func:`text_config`, :func:`kv_shape`, :func:`decoder_layers`,
  :func:`layer_attention`, :func:`attention_types`, :func:`one_layer_per_attention_type`, :func:`model_key` and
  :func:`attention_read_bytes`.

Everything an adapter says goes to one logger, a child of the engine's (``vllm.devmem``, ``sglang.devmem``), so its
lines appear in the engine's own log. Importing the kit imports no engine and no torch.
"""

from __future__ import annotations

from devmem.integrations.kit.accounting import graphs_after_cache, grown_since_baseline, log_sizing, weights_per_rank
from devmem.integrations.kit.layers import (
    attention_read_bytes,
    attention_types,
    decoder_layers,
    kv_shape,
    layer_attention,
    model_key,
    one_layer_per_attention_type,
    text_config,
)
from devmem.integrations.kit.model import (
    after_current_stream,
    check_one_device,
    copied,
    forward_tokens,
    logged,
    model_bytes,
    storage_bytes,
    unwrapped,
)
from devmem.integrations.kit.patching import (
    PATCHED,
    WRAPPED,
    around,
    current,
    guarded,
    patch_class,
    patch_in,
    when_imported,
    wrap,
)
from devmem.integrations.kit.shapes import accepts, names_used, parameter, parameters, shape_mismatches, source
from devmem.integrations.kit.sizing import Sizing, begin_sizing, share_request
from devmem.integrations.kit.starts import Starts, allocating, closing, memory_of
from devmem.integrations.kit.switch import OFF, ON, Switch, installed_version, release, version_note

__all__ = [
    "OFF",
    "ON",
    "PATCHED",
    "Sizing",
    "Starts",
    "Switch",
    "WRAPPED",
    "accepts",
    "after_current_stream",
    "allocating",
    "around",
    "attention_read_bytes",
    "attention_types",
    "begin_sizing",
    "check_one_device",
    "closing",
    "copied",
    "current",
    "decoder_layers",
    "forward_tokens",
    "graphs_after_cache",
    "grown_since_baseline",
    "guarded",
    "installed_version",
    "kv_shape",
    "layer_attention",
    "log_sizing",
    "logged",
    "memory_of",
    "model_bytes",
    "model_key",
    "names_used",
    "one_layer_per_attention_type",
    "parameter",
    "parameters",
    "patch_class",
    "patch_in",
    "release",
    "shape_mismatches",
    "share_request",
    "source",
    "storage_bytes",
    "text_config",
    "unwrapped",
    "version_note",
    "weights_per_rank",
    "when_imported",
    "wrap",
]
