"""A serving engine's command line as a person names it: ``vllm Qwen/Qwen3-8B :8000``, not the interpreter, the
module path and every flag. What a screen shows where the whole command does not fit its column (``-v`` and
``--json`` keep the whole command).

An engine is known by its program (``vllm serve``, ``trtllm-serve``), or by the module or script an interpreter
runs (``python3 -m sglang.launch_server``, ``python3 /usr/local/bin/vllm serve``); its model is the value of its
model flag, or the first word after its program where the engine takes the model so.
"""

from __future__ import annotations

import re
from typing import NamedTuple


class Engine(NamedTuple):
    """How to find the model in one engine's command line."""

    #: The name shown for the engine.
    name: str
    #: Flags whose value is the model (``--model``, ``--model-path``).
    model_flags: tuple[str, ...]
    #: Words after the program before a positional model (``("serve",)`` for ``vllm serve MODEL``); ``None``
    #: where the engine takes no positional model.
    positional_after: tuple[str, ...] | None = None


_VLLM = Engine("vllm", ("--model",), ("serve",))
_SGLANG = Engine("sglang", ("--model-path", "--model"))

#: Engines by the program (the basename of ``argv[0]``, or of the script an interpreter runs).
PROGRAMS = {
    "vllm": _VLLM,
    "sglang": Engine("sglang", ("--model-path", "--model"), ("serve",)),
    "trtllm-serve": Engine("trtllm-serve", ("--model",), ()),
    "text-generation-launcher": Engine("tgi", ("--model-id",)),
    "llama-server": Engine("llama-server", ("-m", "--model", "-hf", "--hf-repo")),
    "lmdeploy": Engine("lmdeploy", ("--model-path",), ("serve", "api_server")),
}

#: Engines by the module ``python -m`` runs (the module, or a package above it).
MODULES = {
    "vllm": _VLLM,
    "sglang": _SGLANG,
    "tensorrt_llm": Engine("trtllm-serve", ("--model",)),
    "text_generation_server": Engine("tgi", ("--model-id",), ("serve",)),
    "lmdeploy": Engine("lmdeploy", ("--model-path",), ("serve", "api_server")),
}

_PYTHON = re.compile(r"(?:python|pypy)[0-9.]*")
#: The interpreter's own options that take a value as the next word.
_PYTHON_VALUES = frozenset({"-X", "-W", "-Q"})


def _basename(word: str) -> str:
    return word.rsplit("/", 1)[-1]


def _engine(words: list[str]) -> tuple[Engine, list[str]] | None:
    """The engine ``words`` runs and the words after its program (or module), or ``None``."""
    program = _basename(words[0])
    if program in PROGRAMS:
        return PROGRAMS[program], words[1:]
    if not _PYTHON.fullmatch(program):
        return None
    rest = words[1:]
    while rest and rest[0].startswith("-"):
        option = rest.pop(0)
        if option == "-m" and rest:
            module = rest.pop(0)
            engine = MODULES.get(module.split(".", 1)[0])
            return (engine, rest) if engine is not None else None
        if option == "-c":
            return None
        if option in _PYTHON_VALUES and rest:
            rest.pop(0)
    if rest and _basename(rest[0]) in PROGRAMS:
        return PROGRAMS[_basename(rest[0])], rest[1:]
    return None


def _flag_value(words: list[str], flags: tuple[str, ...]) -> str | None:
    for i, word in enumerate(words):
        name, equals, value = word.partition("=")
        if name in flags:
            if equals:
                return value or None
            if i + 1 < len(words) and not words[i + 1].startswith("-"):
                return words[i + 1]
    return None


def _model(engine: Engine, args: list[str]) -> str | None:
    model = _flag_value(args, engine.model_flags)
    if model is None and engine.positional_after is not None:
        steps = list(engine.positional_after)
        words = list(args)
        while steps and words and words[0] == steps[0]:
            steps.pop(0)
            words.pop(0)
        if not steps and words and not words[0].startswith("-"):
            model = words[0]
    if model is None:
        return None
    # a local path is named by its last part; a hub ID (org/name) is kept whole
    if model.startswith(("/", ".", "~")) or model.count("/") > 1:
        return _basename(model.rstrip("/")) or model
    return model


def engine_command(command: str) -> str | None:
    """``command`` (a command line, its words joined by spaces) as ``ENGINE MODEL`` (with ``:PORT`` where a
    ``--port`` is given) when it runs a known serving engine whose model it names; else ``None``."""
    words = command.split()
    found = _engine(words) if words else None
    if found is None:
        return None
    engine, args = found
    model = _model(engine, args)
    if model is None:
        return None
    port = _flag_value(args, ("--port",))
    return f"{engine.name} {model}" + (f" :{port}" if port and port.isdigit() else "")


def cut_command(command: str, room: int) -> str:
    """``command`` for a column of ``room`` characters: whole where it fits, else the engine and its model where
    :func:`engine_command` knows them, else its program named without its path, cut with ``...`` where even
    that is too long."""
    from devmem.command.format import without_program_path

    if len(command) <= room:
        return command
    text = engine_command(command) or without_program_path(command)
    return text if len(text) <= room else text[: max(0, room - 3)] + "..."


def named_briefly(processes: list[tuple[int, str | None]]) -> str:
    """What several processes (PID, command line or ``None`` where unseen) run, for the one line a screen gives
    them: each command as :func:`engine_command` names it (else its program; its PID where unseen), each once."""
    names = []
    for pid, command in processes:
        if not command:
            names.append(f"pid {pid}")
            continue
        names.append(engine_command(command) or command.split(" ", 1)[0].rsplit("/", 1)[-1])
    return ", ".join(dict.fromkeys(names))
