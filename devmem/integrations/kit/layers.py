"""A transformers model's decoder layers, found by what they hold (one attention module per layer, whose ``layer_idx``
is the layer's index), their attention types, and forwards run through one layer of each type
(:func:`one_layer_per_attention_type`), for engines that run transformers models in their own process."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

#: What an attention module may say of its own window: layers that differ in one of these differ in type.
WINDOW_ATTRIBUTES = ("sliding_window", "is_sliding", "attention_type", "layer_type")


def text_config(model: Any) -> Any:
    """The config of the model's text part (a multimodal model's ``get_text_config()``), else the model's own."""
    return model.config.get_text_config() if hasattr(model.config, "get_text_config") else model.config


def kv_shape(model: Any) -> tuple[int, int, int]:
    """(attention heads, key-value heads, head dimension) of the model's text config."""
    text = text_config(model)
    heads = int(getattr(text, "num_attention_heads", 1) or 1)
    kv_heads = int(getattr(text, "num_key_value_heads", None) or heads)
    return heads, kv_heads, int(getattr(text, "head_dim", None) or text.hidden_size // heads)


def layer_attention(layer: Any, index: int) -> Any | None:
    """The attention module of decoder layer ``index`` (the submodule whose ``layer_idx`` is ``index``), or None."""
    return next((m for m in layer.modules() if getattr(m, "layer_idx", None) == index and m is not layer), None)


def decoder_layers(model: Any) -> tuple[Any, str, Any] | None:
    """(parent, name, layers): the ``nn.ModuleList`` of one module per hidden layer, layer ``i`` holding the
    attention whose ``layer_idx`` is ``i`` (found by what it holds, not by its name), or ``None``."""
    import torch

    count = getattr(text_config(model), "num_hidden_layers", None)
    for module in model.modules():
        for name, child in module.named_children():
            if (
                isinstance(child, torch.nn.ModuleList)
                and len(child) == count
                and all(layer_attention(layer, i) is not None for i, layer in enumerate(child))
            ):
                return module, name, child
    return None


def attention_types(model: Any, layers: Any) -> list[tuple[Any, ...]]:
    """Each decoder layer's attention type: its ``layer_types`` entry in the config, where there is one, and what its
    attention module says of its own window (:data:`WINDOW_ATTRIBUTES`)."""
    named = getattr(text_config(model), "layer_types", None)
    return [
        (
            named[i] if named is not None and i < len(named) else None,
            *(getattr(layer_attention(layer, i), name, None) for name in WINDOW_ATTRIBUTES),
        )
        for i, layer in enumerate(layers)
    ]


@contextmanager
def one_layer_per_attention_type(model: Any) -> Iterator[int | None]:
    """Run the forwards through the first decoder layer of each attention type only (the same peak under
    ``no_grad``, in a fraction of the time; enter it after the cache exists), the config's ``layer_types`` holding
    the kept layers' meanwhile; yields how many run (``None``: the layers were not found, all run)."""
    import torch

    found = decoder_layers(model)
    if found is None:
        yield None
        return
    (parent, name, layers), text = found, text_config(model)
    types, named = attention_types(model, layers), getattr(text, "layer_types", None)
    kept = sorted({types.index(kind) for kind in set(types)})
    setattr(parent, name, torch.nn.ModuleList([layers[i] for i in kept]))
    if named is not None:
        text.layer_types = [named[i] for i in kept]
    try:
        yield len(kept)
    finally:
        setattr(parent, name, layers)
        if named is not None:
            text.layer_types = named


def model_key(model: Any) -> dict[str, Any]:
    """The part of a stored profile's key that the model decides: its config, class, dtype and attention."""
    return {
        "model": model.config.to_dict(),
        "model_class": type(model).__name__,
        "dtype": str(model.dtype),
        "attn_implementation": model.config._attn_implementation,
    }


def attention_read_bytes(model: Any, attn_implementation: str, block_tokens: int, max_batch_tokens: int) -> int:
    """Bytes a cache block of ``block_tokens`` adds to the attention step of a forward over ``max_batch_tokens`` query
    tokens, by the model's shapes: one layer's keys and values gathered (``sdpa``, ``eager``: also repeated to every
    head, and the mask's columns). An estimate, to place measurements, never a charge."""
    (heads, kv_heads, head_dim), itemsize = kv_shape(model), model.dtype.itemsize
    gathered = 2 * block_tokens * kv_heads * head_dim * itemsize
    if "flash" in attn_implementation:
        return gathered
    return gathered + 2 * block_tokens * heads * head_dim * itemsize + max_batch_tokens * block_tokens * itemsize
