"""A node of scripted H200s (devmem_nvidia.testing) on which real processes of this machine, started as serving
engines are (``python3 -m vllm.entrypoints.openai.api_server --model ...``, ``python3 .../vllm serve ...``,
``python3 -m sglang.launch_server --model-path ...``), hold memory: three engines on each device.

The engines are stand-ins, a module or script of the engine's name under a directory of their own that blocks on
its stdin; psutil sees their command lines as the real engines' are. Run as a script, it is ``devmem ARGV`` on
such a node (for tests that need a terminal: ``python tests/command/engine_node.py GPUS ARGV...``).
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

#: What each engine stand-in runs: block until its stdin closes (the test, or this script, ends).
_BLOCK = "import sys\nwhile sys.stdin.read(1):\n    pass\n"
#: Stand-ins, by path under the directory they live in.
_STAND_INS = (
    "vllm/__init__.py",
    "vllm/entrypoints/__init__.py",
    "vllm/entrypoints/openai/__init__.py",
    "vllm/entrypoints/openai/api_server.py",
    "sglang/__init__.py",
    "sglang/launch_server.py",
    "bin/vllm",
)
#: Three engines of a device, each with its GiB: argv after the interpreter (``{bin}``: the stand-ins' bin/).
ENGINES = (
    (
        ["{bin}/vllm", "serve", "meta-llama/Llama-3.1-70B-Instruct", "--tensor-parallel-size", "1"]
        + ["--gpu-memory-utilization", "0.40", "--max-model-len", "32768", "--port", "80{device}0"],
        40,
    ),
    (
        ["-m", "sglang.launch_server", "--model-path", "Qwen/Qwen3-8B", "--mem-fraction-static", "0.3"]
        + ["--port", "300{device}0", "--host", "0.0.0.0", "--context-length", "32768"],
        30,
    ),
    (
        ["-m", "vllm.entrypoints.openai.api_server", "--model", "mistralai/Mistral-Small-3.1-24B-Instruct-2503"]
        + ["--gpu-memory-utilization", "0.25", "--port", "80{device}1", "--enable-prefix-caching"],
        25,
    ),
)


def stand_ins(directory: Path) -> Path:
    """The engines' stand-ins under ``directory``; returns it."""
    for path in _STAND_INS:
        (directory / path).parent.mkdir(parents=True, exist_ok=True)
        (directory / path).write_text(_BLOCK if not path.endswith("__init__.py") else "")
    return directory


@contextmanager
def engine_node(gpus: int, directory: Path) -> Iterator[tuple[object, list[subprocess.Popen]]]:
    """A :class:`~devmem.testing.Scenario` of ``gpus`` H200s with :data:`ENGINES` on each (three processes per
    device, stand-ins under ``directory``), and the processes; they end with the block."""
    from devmem.testing import Scenario
    from devmem.types import GiB
    from devmem_nvidia.testing import ScriptedNvidiaGpu

    stand_ins(directory)
    env = {**os.environ, "PYTHONPATH": str(directory)}
    sc = Scenario(
        devices=[
            ScriptedNvidiaGpu(
                uuid=f"GPU-00000000-0000-0000-0000-0000000000{i:02d}", pci_bus_id=f"00000000:{16 + i:02x}:00.0"
            )
            for i in range(gpus)
        ]
    )
    procs: list[subprocess.Popen] = []
    try:
        for device in range(gpus):
            for argv, gib in ENGINES:
                words = [w.format(bin=directory / "bin", device=device) for w in argv]
                proc = subprocess.Popen([sys.executable, *words], stdin=subprocess.PIPE, env=env)
                procs.append(proc)
                sc.allocate(gib * GiB, device, pid=proc.pid)
        yield sc, procs
    finally:
        for proc in procs:
            proc.kill()
            proc.wait()


def main(argv: list[str]) -> int:
    """``devmem argv[1:]`` on a node of ``argv[0]`` GPUs, as the ``devmem`` command parses and runs it."""
    from devmem.command.main import _with_command, build_parser
    from devmem_nvidia.testing import scripted_platform

    with tempfile.TemporaryDirectory() as directory, engine_node(int(argv[0]), Path(directory)) as (sc, _):
        parser = build_parser()
        args = parser.parse_args(_with_command(argv[1:]))
        if getattr(args, "interval", None) is not None:
            args.watch = args.interval
        return args.handler(args, scripted_platform(sc))


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
