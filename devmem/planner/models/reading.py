"""The bounded reader of config files and checkpoints: a config.json, a safetensors index or shard is a regular file
of bounded size, depth and integer length, or one :class:`ModelConfigError` naming it."""

from __future__ import annotations

import json
import numbers
import os
import stat
import struct
from pathlib import Path
from typing import Any

from devmem.errors import ModelConfigError

#: The largest whole number a sizing key may hold (2**53: past every real dimension, exact as a float too).
MAX_CONFIG_INT = 2**53


#: What the bounded reader accepts: a config.json or a safetensors index of at most this many bytes, nested at
#: most this deep, integers of at most this many digits (a longer one is kept as a marker, refused if read).
MAX_JSON_BYTES = 64 << 20


MAX_JSON_DEPTH = 64


MAX_JSON_DIGITS = 30


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


def _is_dir(path: Path) -> bool:
    try:
        return path.is_dir()
    except (OSError, ValueError) as exc:
        raise ModelConfigError(f"{str(path)!r} cannot be examined: {exc}") from None


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
