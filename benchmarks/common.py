"""What the benchmarks share: engines in child processes, a co-tenant that churns memory, tables, result files.

Engines run in children of a forkserver that imported torch and devmem once and never touched a device, so
every engine is a fresh process with its own CUDA context and its own per-process figures, yet starts in a
fraction of a second instead of importing torch again. The benchmark process itself never creates a CUDA
context; it reads the device only through devmem's platform (NVML on NVIDIA GPUs).
"""

from __future__ import annotations

import contextlib
import importlib.util
import json
import math
import mmap
import multiprocessing
import os
import platform as host
import random
import shutil
import sys
import tempfile
import threading
import time
import traceback
from collections import Counter
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path
from typing import Any

import devmem
from devmem import GiB, MiB, device_report
from devmem.types import KiB

ROOT = Path(__file__).resolve().parents[1]
ENGINE_PATH = ROOT / "examples" / "engine.py"
#: Budgets within this of each other count as identical: the GPU driver maps device memory in 2 MiB pages; on
#: the cpu platform the per-process figure is anonymous RSS, which glibc's arenas and thread stacks move by a few MiB.
SAME_BUDGET = {"gpu": 2 * MiB, "cpu": 8 * MiB}

_CTX = multiprocessing.get_context("forkserver")
_CTX.set_forkserver_preload(["torch", "devmem", "transformers"])


@contextlib.contextmanager
def private_ledger() -> Iterator[str]:
    """A reservation ledger of this run's own (``DEVMEM_LEDGER_DIR`` pointed at a fresh directory) while the block
    runs, so a smoke run's engines never leave entries in the machine's shared ledger; the variable and the
    directory are restored and removed afterwards."""
    before = os.environ.get("DEVMEM_LEDGER_DIR")
    directory = tempfile.mkdtemp(prefix="devmem-bench-ledger-")
    os.environ["DEVMEM_LEDGER_DIR"] = directory
    try:
        yield directory
    finally:
        if before is None:
            os.environ.pop("DEVMEM_LEDGER_DIR", None)
        else:
            os.environ["DEVMEM_LEDGER_DIR"] = before
        shutil.rmtree(directory, ignore_errors=True)


def round_profile_store(tmp: str, shape: str, scenario: str, mode: str) -> str:
    """The profile store (``DEVMEM_PROFILE_DIR``) of one round of engines started as separate processes: a folder of
    the round's own under ``tmp``, so that no round plans from what an earlier round's starts stored (a graph figure
    learnt by a solo start would otherwise make the pair after it a restart, and their ratio to solo compare a first
    start with later ones). A ``-warm`` round repeats the round it names, and reads that round's store."""
    base = scenario.removesuffix("-warm")
    return os.path.join(tmp, "profiles", f"{shape}_{base}_{mode}")


class StackSampler:
    """Where one thread spends a stretch of wall time, by sampling its stack about every ``interval`` seconds from
    another thread (a profiler that traces every call would slow the work it times). Each sample counts the time
    since the previous one: a C call that holds the GIL (a garbage collection, some runtime calls) keeps the sampler
    out until it returns, and the function that made it is still on the stack then. ``top(n)``: the innermost
    devmem, transformers, vLLM or SGLang function of the samples, with their seconds, most first."""

    PACKAGES = ("devmem", "transformers", "vllm", "sglang")

    def __init__(self, interval: float = 0.01, thread: threading.Thread | None = None):
        self.interval = interval
        self._ident = (thread or threading.current_thread()).ident
        self._seconds: Counter[str] = Counter()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._sample, name="devmem-bench-sampler", daemon=True)

    def __enter__(self) -> StackSampler:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()

    def _sample(self) -> None:
        last = time.perf_counter()
        while not self._stop.wait(self.interval):
            where, now = self._innermost(), time.perf_counter()
            self._seconds[where] += now - last
            last = now
        self._seconds["(the end: after the last sample)"] += time.perf_counter() - last

    def _innermost(self) -> str:
        """The innermost package function on the sampled thread's stack. No frame outlives this call: a frame held
        between samples would keep a returned function's locals (its tensors) alive, and the memory the sampled
        work measures with them."""
        frame = sys._current_frames().get(self._ident)
        try:
            while frame is not None:
                name = frame.f_globals.get("__name__", "")
                if name.split(".")[0] in self.PACKAGES:
                    return f"{name}.{frame.f_code.co_name}"
                frame = frame.f_back
            return "(outside the packages)"
        finally:
            del frame

    def top(self, n: int = 15) -> list[tuple[str, float]]:
        return [(where, round(seconds, 3)) for where, seconds in self._seconds.most_common(n)]


def on_accelerator(platform: Any) -> bool:
    """True on a GPU platform (torch device ``cuda``), False on the ``cpu`` platform (host memory)."""
    return platform.name != "cpu"


def same_budget(platform: Any) -> int:
    """How close two budgets must be to count as identical on this platform (``SAME_BUDGET``)."""
    return SAME_BUDGET["gpu" if on_accelerator(platform) else "cpu"]


def utilization_for(nbytes: int, total: int) -> float:
    """The utilization whose request is about ``nbytes`` of ``total`` (CPU runs size by bytes, not by share)."""
    return max(1e-6, math.floor(nbytes / total * 1e6) / 1e6)


def engine_argv(**options: Any) -> list[str]:
    """``--name value`` arguments for examples/engine.py; ``True`` is a bare flag, ``None``/``False`` omitted."""
    argv: list[str] = []
    for name, value in options.items():
        flag = "--" + name.replace("_", "-")
        if value is True:
            argv.append(flag)
        elif value is not None and value is not False:
            argv += [flag, str(value)]
    return argv


def _load_engine() -> Any:
    module = sys.modules.get("devmem_example_engine")
    if module is None:
        spec = importlib.util.spec_from_file_location("devmem_example_engine", ENGINE_PATH)
        module = importlib.util.module_from_spec(spec)
        sys.modules[spec.name] = module
        spec.loader.exec_module(module)
    return module


def engine_shapes() -> dict[str, tuple[str, dict[str, Any]]]:
    """examples/engine.py's named model shapes: the transformers config class and its arguments, by name."""
    return _load_engine().MODELS


def _engine_child(conn: Any, argv: list[str]) -> None:
    try:
        result = _load_engine().run(argv)
    except BaseException:  # reported to the parent, which records it as this engine's failure
        result = {
            "ok": False,
            "failure": {"stage": "engine", "kind": "crash", "message": traceback.format_exc()[-4000:]},
        }
    conn.send(result)
    conn.close()


def _collect(procs: list[tuple[Any, Any]], timeout: float) -> list[Any]:
    """What each child sent (``None`` for one that died or ran out of time), after it exited."""
    deadline = time.monotonic() + timeout
    results = []
    for proc, conn in procs:
        result = None
        if conn.poll(max(0.0, deadline - time.monotonic())):
            try:
                result = conn.recv()
            except EOFError:
                result = None
        proc.join(max(0.0, deadline - time.monotonic()))
        if proc.is_alive():
            proc.kill()
            proc.join()
        conn.close()
        results.append((result, proc.exitcode))
    return results


def spawn(target: Any, args_list: Sequence[tuple], timeout: float = 300.0) -> list[tuple[Any, int | None]]:
    """Run ``target(conn, *args)`` in one fresh child per entry, all at once; ``(what it sent, exit code)`` each."""
    procs = []
    for args in args_list:
        recv, send = _CTX.Pipe(duplex=False)
        proc = _CTX.Process(target=target, args=(send, *args), daemon=True)
        proc.start()
        send.close()
        procs.append((proc, recv))
    return _collect(procs, timeout)


_warm = False


def run_engines(argvs: Sequence[list[str]], timeout: float = 300.0) -> list[dict[str, Any]]:
    """Run examples/engine.py once per argv, all at the same time, each in its own process; their JSON results.

    The first call first runs the first engine once more, alone, and discards it, so that the code every engine
    maps (torch's, the BLAS libraries') is in the page cache and no measured engine pays for loading it.
    """
    global _warm
    if not _warm:
        _warm = True
        first = list(argvs[0])
        for option in ("--start-at", "--hold"):
            if option in first:
                del first[first.index(option) : first.index(option) + 2]
        run_engines([first], timeout)
    out = []
    for argv, (result, code) in zip(argvs, spawn(_engine_child, [(list(a),) for a in argvs], timeout), strict=True):
        if result is None:
            result = {
                "ok": False,
                "failure": {
                    "stage": "engine",
                    "kind": "died",
                    "message": f"the engine process ended with exit code {code} without a result",
                },
            }
        result["argv"] = list(argv)
        out.append(result)
    return out


def _churn(
    conn: Any,
    stop: Any,
    ready: Any,
    device: int | None,
    nbytes: int,
    hold: tuple[float, float],
    gap: tuple[float, float],
    seed: int,
) -> None:
    """Allocate ``nbytes``, hold them, free them, pause; until ``stop`` is set. Sends the number of cycles."""
    rng, cycles = random.Random(seed), 0
    if device is not None:
        import torch

        torch.cuda.set_device(device)
    while not stop.is_set():
        if device is None:
            block = mmap.mmap(-1, nbytes)
            for offset in range(0, nbytes, mmap.PAGESIZE):
                block[offset] = 1
        else:
            block = torch.empty(nbytes, dtype=torch.uint8, device=f"cuda:{device}")
            torch.cuda.synchronize(device)
        ready.set()
        time.sleep(rng.uniform(*hold))
        if device is None:
            block.close()
        else:
            del block
            torch.cuda.synchronize(device)
            torch.cuda.empty_cache()
        cycles += 1
        time.sleep(rng.uniform(*gap))
    conn.send(cycles)
    conn.close()


class Churner:
    """A co-tenant process that allocates and frees ``nbytes`` in a loop (random hold and gap times, seconds).

    ``device`` is a CUDA device index, or ``None`` for host memory (the cpu platform). Use as a context
    manager; ``cycles`` holds how many allocate/free cycles it made once it stopped.
    """

    def __init__(
        self,
        device: int | None,
        nbytes: int,
        hold: tuple[float, float] = (0.02, 0.15),
        gap: tuple[float, float] = (0.02, 0.15),
        seed: int = 0,
    ):
        self.device, self.nbytes, self.hold, self.gap, self.seed = device, nbytes, hold, gap, seed
        self.cycles: int | None = None

    def __enter__(self) -> Churner:
        self._stop, ready = _CTX.Event(), _CTX.Event()
        self._recv, send = _CTX.Pipe(duplex=False)
        self._proc = _CTX.Process(
            target=_churn,
            daemon=True,
            args=(send, self._stop, ready, self.device, self.nbytes, self.hold, self.gap, self.seed),
        )
        self._proc.start()
        send.close()
        if not ready.wait(180):
            self._proc.kill()
            raise RuntimeError(f"the churning co-tenant did not allocate {self.nbytes} bytes within 180 s")
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        ((self.cycles, _),) = _collect([(self._proc, self._recv)], 60.0)


def settle(platform: Any, device: int, free_before: int, slack: int, timeout: float) -> float:
    """Wait until the device's free memory is back within ``slack`` of ``free_before``; seconds waited."""
    start = time.monotonic()
    while platform.device_memory_info(device).free < free_before - slack and time.monotonic() - start < timeout:
        time.sleep(0.1)
    return time.monotonic() - start


def machine(platform: Any, device: int) -> dict[str, Any]:
    """The machine and device a benchmark ran on."""
    report = device_report(platform, device)
    return {
        "platform": platform.name,
        "device": device,
        "device_name": report.name,
        "total": report.total,
        "free_at_start": report.free,
        "notes": report.notes,
        "devmem": devmem.__version__,
        "python": sys.version.split()[0],
        "host": f"{host.machine()}, {os.cpu_count()} cores",
    }


def mib(nbytes: int | float | None, digits: int = 1) -> str:
    return "-" if nbytes is None else f"{nbytes / MiB:.{digits}f}"


def gib(nbytes: int | float | None) -> str:
    return "-" if nbytes is None else f"{nbytes / GiB:.3f}"


def failure_text(result: dict[str, Any]) -> str:
    failure = result.get("failure")
    return "" if not failure else f"{failure['kind']} ({failure['stage']})"


def _is_number(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return True


def format_table(headers: Sequence[str], rows: Iterable[Sequence[Any]]) -> str:
    """A plain-text table: text left-aligned, numbers right-aligned."""
    cells = [["" if v is None else str(v) for v in row] for row in rows]
    widths = [max([len(h), *(len(r[i]) for r in cells)]) for i, h in enumerate(headers)]
    numeric = [all(_is_number(r[i]) for r in cells if r[i] not in ("", "-")) for i in range(len(headers))]

    def line(values: Sequence[str]) -> str:
        cells = zip(values, widths, numeric, strict=True)
        return "  ".join(v.rjust(w) if n else v.ljust(w) for v, w, n in cells).rstrip()

    return "\n".join([line(headers), line(["-" * w for w in widths]), *(line(r) for r in cells)])


def write_outputs(out: str | None, name: str, result: dict[str, Any], text: str) -> list[Path]:
    """Write ``result`` as JSON and ``text`` (the printed tables) beside it; ``out`` is a .json file or a folder."""
    if not out:
        return []
    path = Path(out)
    if path.suffix == ".json":
        path.parent.mkdir(parents=True, exist_ok=True)
        json_path = path
    else:
        path.mkdir(parents=True, exist_ok=True)
        json_path = path / f"{name}.json"
    txt_path = json_path.with_suffix(".txt")
    json_path.write_text(json.dumps(result, indent=2, default=str) + "\n")
    txt_path.write_text(text + "\n")
    return [json_path, txt_path]


__all__ = [
    "Churner",
    "ENGINE_PATH",
    "GiB",
    "KiB",
    "MiB",
    "SAME_BUDGET",
    "engine_argv",
    "engine_shapes",
    "failure_text",
    "format_table",
    "gib",
    "machine",
    "mib",
    "on_accelerator",
    "run_engines",
    "same_budget",
    "settle",
    "spawn",
    "utilization_for",
    "write_outputs",
]
