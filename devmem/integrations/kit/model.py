"""Reading and steering a model and its engine for a one-call sizing: the model itself (:func:`unwrapped`), on one
device with its weights loaded (:func:`check_one_device`), its bytes (:func:`storage_bytes`, :func:`model_bytes`),
the tokens of each forward (:func:`forward_tokens`), the warnings its engine logs (:func:`logged`), a config
copied with values set (:func:`copied`) and a step ordered after the current stream (:func:`after_current_stream`)."""

from __future__ import annotations

import contextlib
import copy
import logging
from collections.abc import Iterator
from typing import Any

from devmem.planner.sizing import SizingError


def unwrapped(model: Any) -> Any:
    """The model itself where ``model`` is wrapped by ``torch.compile`` (whose engine methods it reaches through)."""
    inner = getattr(model, "_orig_mod", None)
    return inner if inner is not None and type(model).__name__ == "OptimizedModule" else model


def check_one_device(model: Any, engine: str) -> None:
    """Refuse, naming why, a model whose weights are not loaded (the meta device) or are on several devices
    (``engine`` puts the KV cache on ``model.device``)."""
    devices = sorted({str(p.device) for p in model.parameters()} | {str(b.device) for b in model.buffers()})
    if "meta" in devices:
        raise SizingError(
            f"the model's weights are on the meta device (devices {devices}): they are not loaded, so nothing "
            "can run or be measured; load the weights (from_pretrained, or build the model outside "
            "torch.device('meta')) before sizing"
        )
    if len(devices) > 1:
        raise SizingError(
            f"the model's parameters and buffers are on several devices ({', '.join(devices)}): devmem sizes the "
            f"KV cache of one device, where {engine} puts it (model.device); put the whole model on one device"
        )


def storage_bytes(roots: list[Any], device: Any, seen: set[int], enter: str = "") -> tuple[int, int]:
    """Bytes and count of the distinct ``device`` storages reachable from ``roots`` through lists, tuples, sets,
    dicts and the objects of the package ``enter`` (``"transformers."``; modules are not entered); ``seen`` holds
    storages already counted."""
    import torch

    total = count = 0
    visited: set[int] = set()
    stack = list(roots)
    while stack:
        obj = stack.pop()
        if id(obj) in visited:
            continue
        visited.add(id(obj))
        if isinstance(obj, torch.Tensor):
            if obj.device != device:
                continue
            storage = obj.untyped_storage()
            if storage.data_ptr() in seen:
                continue
            seen.add(storage.data_ptr())
            total += storage.nbytes()
            count += 1
        elif isinstance(obj, dict):
            stack.extend(obj.values())
        elif isinstance(obj, (list, tuple, set, frozenset)):
            stack.extend(obj)
        elif (
            enter
            and not isinstance(obj, torch.nn.Module)
            and type(obj).__module__.startswith(enter)
            and hasattr(obj, "__dict__")
        ):
            stack.extend(vars(obj).values())
    return total, count


def model_bytes(model: Any) -> int:
    """Bytes of the model's parameters and buffers on its device (each storage once)."""
    return storage_bytes([list(model.parameters()), list(model.buffers())], model.device, set())[0]


def copied(config: Any, **values: Any) -> Any:
    """A deep copy of ``config`` with ``values`` set (the caller's object is never changed)."""
    out = copy.deepcopy(config)
    for name, value in values.items():
        setattr(out, name, value)
    return out


@contextlib.contextmanager
def forward_tokens(model: Any) -> Iterator[list[int]]:
    """The query tokens of each forward of ``model`` (a torch module) meanwhile: its ``input_ids``' last dimension."""
    tokens: list[int] = []

    def count(module: Any, args: Any, kwargs: dict[str, Any], output: Any) -> None:
        ids = kwargs.get("input_ids", args[0] if args else None)
        if ids is not None:
            tokens.append(int(ids.shape[-1]))

    hook = model.register_forward_hook(count, with_kwargs=True)
    try:
        yield tokens
    finally:
        hook.remove()


def after_current_stream(owner: Any, method: str, stream: Any) -> None:
    """Make ``owner.method`` run with ``stream`` ordered after the current stream, and the current stream after it:
    for an engine that writes a step's inputs on the current stream and computes on ``stream`` without a wait (on a
    busy device the step could read inputs not yet written)."""
    import torch

    step = getattr(owner, method)

    def ordered(*args: Any, **kwargs: Any) -> Any:
        current = torch.get_device_module(stream.device).current_stream(stream.device)
        stream.wait_stream(current)
        result = step(*args, **kwargs)
        current.wait_stream(stream)
        return result

    setattr(owner, method, ordered)


@contextlib.contextmanager
def logged(logger: str, phrase: str) -> Iterator[list[str]]:
    """The first lines of the warnings ``logger`` writes with ``phrase`` in them meanwhile (an engine that catches
    its own errors, out of memory included, and logs them)."""
    found: list[str] = []

    class Collect(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            message = record.getMessage()
            if phrase in message:
                found.append(message.splitlines()[0])

    handler, target = Collect(logging.WARNING), logging.getLogger(logger)
    target.addHandler(handler)
    try:
        yield found
    finally:
        target.removeHandler(handler)
