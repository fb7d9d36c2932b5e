"""Overhead: devmem's calls against the raw vendor and runtime calls they wrap, and import + resolve time.

In one run, interleaved round by round so machine noise hits every case alike, medians reported:

- The issue-23 goals side by side, in one run: on nvml, ``device_memory_info`` within 2x of the raw reading it
  stands for (no CUDA context: ``nvmlDeviceGetMemoryInfo`` v2 and its two figures, ``free`` and ``total -
  reserved``; with one: ``torch.cuda.mem_get_info``) and ``get_process_memory_usage`` within 1.2x of the raw
  process list (+ finding this process in it), each with and without a context. Each goal's two calls are timed
  as a pair, on their own, the one called first alternating round by round: a vendor call's time depends on the
  call before it, so neither side always follows the same one. The no-context side runs in a child interpreter
  that never imports torch (``--no-context-child``); on other platforms the child measures the calls against
  their raw reads without goals.
- nvml platform: ``device_memory_info`` against raw ``nvmlDeviceGetMemoryInfo`` (v2) and ``torch.cuda.mem_get_info``;
  ``get_process_memory_usage`` and ``other_processes_memory`` against raw ``nvmlDeviceGetComputeRunningProcesses``;
  ``device_count`` against ``nvmlDeviceGetCount``; ``MemorySnapshot.measure`` against the snapshot engines take
  today (``torch.cuda.mem_get_info`` + the process list + torch's allocator statistics). This process first
  creates its CUDA context through torch, as an engine has when it measures.
- cpu platform: against reading ``/proc/meminfo`` and ``/proc/self/statm`` raw.
- other platforms: against ``torch.cuda.mem_get_info`` where torch sees the device.
- Import and resolve: fresh interpreters running ``import devmem``, ``current_platform()`` and a first
  ``device_memory_info``, beside ``python -c pass`` and the raw library's own import and first call.

Usage: python benchmarks/overhead.py [--rounds 2000] [--import-runs 10] [--out DIR_OR_FILE.json] [--quick]

H200: python benchmarks/overhead.py --out benchmarks/results/h200/ (about 2 minutes)
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from typing import Any

from common import format_table, machine, write_outputs

import devmem
from devmem.engine import MemorySnapshot

Cases = dict[str, Callable[[], object]]


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--device", type=int, default=0)
    p.add_argument("--rounds", type=int, default=2000, help="calls of each case, interleaved")
    p.add_argument("--import-runs", type=int, default=10, help="fresh interpreters per import case")
    p.add_argument("--quick", action="store_true", help="200 rounds and 2 import runs (for CI)")
    p.add_argument("--out", default=None, help="a .json file, or a folder to write overhead.json/.txt into")
    p.add_argument("--no-context-child", action="store_true", help=argparse.SUPPRESS)
    return p.parse_args(argv)


#: (devmem call, raw case it stands for, goal ratio): the overhead goals.
GOALS = {
    "device_memory_info, no context": ("device_memory_info", "raw NVML memory info (v2) and its figures", 2.0),
    "get_process_memory_usage, no context": ("get_process_memory_usage", "raw process list + filter", 1.2),
    "device_memory_info, with a context": ("device_memory_info", "torch.cuda.mem_get_info", 2.0),
    "get_process_memory_usage, with a context": ("get_process_memory_usage", "raw process list + filter", 1.2),
}


def nvml_process_filter(platform: Any, device: int) -> tuple[Any, Callable[[], object]]:
    """pynvml (initialised) and the raw read ``get_process_memory_usage`` stands for: the compute process list
    of the very handle devmem reads, and this process's entry in it."""
    import pynvml

    pynvml.nvmlInit()
    handle, pid = platform.visible_device(device).handle, os.getpid()
    processes = pynvml.nvmlDeviceGetComputeRunningProcesses

    def raw() -> object:
        return next((p.usedGpuMemory for p in processes(handle) if p.pid == pid), None)

    return pynvml, raw


def no_context_child(args: argparse.Namespace) -> None:
    """In an interpreter that never imported torch (so no CUDA context): devmem's two calls beside their raw reads,
    printed as JSON medians in seconds."""
    platform = devmem.current_platform()
    cases: Cases = {
        "device_memory_info": lambda: platform.device_memory_info(args.device),
        "get_process_memory_usage": lambda: platform.get_process_memory_usage(args.device),
    }
    if platform.name == "nvml":
        pynvml, raw_list = nvml_process_filter(platform, args.device)
        handle = platform.visible_device(args.device).handle

        def raw_memory() -> object:
            m = pynvml.nvmlDeviceGetMemoryInfo(handle, pynvml.nvmlMemory_v2)
            return m.free, m.total - m.reserved  # what cudaMemGetInfo reports

        cases["raw nvmlDeviceGetMemoryInfo (v2)"] = lambda: pynvml.nvmlDeviceGetMemoryInfo(handle, pynvml.nvmlMemory_v2)
        cases["raw NVML memory info (v2) and its figures"] = raw_memory
        cases["raw process list + filter"] = raw_list
    else:
        raw, _, _ = cpu_raw() if platform.name == "cpu" else ({}, {}, "")
        cases.update(raw)
    found = medians(cases, args.rounds)
    pairs = paired_goals(cases, "no context", args.rounds)
    print(json.dumps({"torch_imported": "torch" in sys.modules, "median_s": found, "pairs_s": pairs}))


def paired_goals(cases: Cases, side: str, rounds: int) -> dict[str, tuple[float, float]]:
    """For each goal of ``side`` ("no context" or "with a context") whose two calls are among ``cases``: the
    median seconds of devmem's call and of the raw one, timed as a pair (:func:`paired_medians`)."""
    out = {}
    for name, (ours, raw, _) in GOALS.items():
        if name.endswith(side) and ours in cases and raw in cases:
            out[name] = paired_medians(cases[ours], cases[raw], rounds)
    return out


def paired_medians(ours: Callable[[], object], raw: Callable[[], object], rounds: int) -> tuple[float, float]:
    """Median seconds per call of ``ours`` and ``raw``, each round calling both, the first of them alternating."""
    ours(), raw()
    samples: tuple[list[float], list[float]] = ([], [])
    clock = time.perf_counter
    for round_ in range(rounds):
        for which in (0, 1) if round_ % 2 else (1, 0):
            call = ours if which == 0 else raw
            start = clock()
            call()
            samples[which].append(clock() - start)
    return statistics.median(samples[0]), statistics.median(samples[1])


def no_context_medians(device: int, rounds: int) -> tuple[dict[str, float], dict[str, tuple[float, float]]]:
    """:func:`no_context_child` in a fresh interpreter; its medians in seconds, and its goals' paired medians."""
    repo = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))  # this checkout's devmem, as imported here
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([repo, os.environ.get("PYTHONPATH", "")]))
    done = subprocess.run(
        [sys.executable, __file__, "--no-context-child", "--device", str(device), "--rounds", str(rounds)],
        check=True,
        capture_output=True,
        text=True,
        env=env,
    )
    answer = json.loads(done.stdout.strip().splitlines()[-1])
    assert not answer["torch_imported"], "the no-context child imported torch"
    return answer["median_s"], {name: tuple(pair) for name, pair in answer["pairs_s"].items()}


def goals(pairs: dict[str, tuple[float, float]]) -> dict[str, dict[str, Any]]:
    """Each measured goal's devmem and raw medians (us), ratio and whether it is met."""
    out = {}
    for name, (ours_s, raw_s) in pairs.items():
        ours, raw, goal = GOALS[name]
        ratio = ours_s / raw_s
        out[name] = {
            "devmem_us": ours_s * 1e6,
            "raw": raw,
            "raw_us": raw_s * 1e6,
            "ratio": ratio,
            "goal": goal,
            "met": ratio <= goal,
        }
    return out


def devmem_cases(platform: Any, device: int) -> Cases:
    """The platform's calls (``other_processes_memory`` where the platform has it) and a whole snapshot."""
    cases: Cases = {
        "device_memory_info": lambda: platform.device_memory_info(device),
        "get_process_memory_usage": lambda: platform.get_process_memory_usage(device),
        "device_count": platform.device_count,
        "is_integrated_gpu": lambda: platform.is_integrated_gpu(device),
        "pages_instead_of_failing": lambda: platform.pages_instead_of_failing(device),
        "MemorySnapshot.measure": lambda: MemorySnapshot.measure(device, platform),
    }
    others = getattr(platform, "other_processes_memory", None)
    if callable(others):
        cases["other_processes_memory"] = lambda: others(device)
    return cases


def nvml_raw(platform: Any, device: int) -> tuple[Cases, dict[str, tuple[str, str]], str]:
    import pynvml
    import torch

    torch.cuda.set_device(device)
    torch.empty(1, device=f"cuda:{device}")
    torch.cuda.synchronize(device)
    pynvml.nvmlInit()
    visible = platform.visible_device(device)  # the very handle devmem reads, so both sides ask the same GPU
    handle, which = visible.handle, f"{visible.uuid}"
    processes = pynvml.nvmlDeviceGetComputeRunningProcesses

    def raw_snapshot() -> object:
        return (
            torch.cuda.mem_get_info(device),
            processes(handle),
            torch.cuda.memory_allocated(device),
            torch.cuda.memory_reserved(device),
            torch.cuda.max_memory_allocated(device),
        )

    raw = {
        "raw nvmlDeviceGetMemoryInfo (v2)": lambda: pynvml.nvmlDeviceGetMemoryInfo(handle, pynvml.nvmlMemory_v2),
        "torch.cuda.mem_get_info": lambda: torch.cuda.mem_get_info(device),
        "raw NVML memory info + torch.cuda.mem_get_info": lambda: (
            pynvml.nvmlDeviceGetMemoryInfo(handle, pynvml.nvmlMemory_v2),
            torch.cuda.mem_get_info(device),
        ),
        "raw nvmlDeviceGetComputeRunningProcesses": lambda: processes(handle),
        "raw nvmlDeviceGetCount": pynvml.nvmlDeviceGetCount,
        "raw process list + filter": nvml_process_filter(platform, device)[1],
        "raw snapshot (mem_get_info + processes + torch stats)": raw_snapshot,
    }
    pairs = {
        "device_memory_info / raw NVML": ("device_memory_info", "raw nvmlDeviceGetMemoryInfo (v2)"),
        "device_memory_info / torch.cuda.mem_get_info": ("device_memory_info", "torch.cuda.mem_get_info"),
        # what devmem reads in a process with a context: NVML's device figures and the runtime's (caps NVML misses)
        "device_memory_info / raw NVML + runtime": (
            "device_memory_info",
            "raw NVML memory info + torch.cuda.mem_get_info",
        ),
        "get_process_memory_usage / raw process list": (
            "get_process_memory_usage",
            "raw nvmlDeviceGetComputeRunningProcesses",
        ),
        "other_processes_memory / raw process list": (
            "other_processes_memory",
            "raw nvmlDeviceGetComputeRunningProcesses",
        ),
        "device_count / raw nvmlDeviceGetCount": ("device_count", "raw nvmlDeviceGetCount"),
        "MemorySnapshot.measure / raw snapshot": (
            "MemorySnapshot.measure",
            "raw snapshot (mem_get_info + processes + torch stats)",
        ),
    }
    return raw, pairs, f"real NVML and torch {torch.__version__} on {which}, with this process's CUDA context"


def cpu_raw() -> tuple[Cases, dict[str, tuple[str, str]], str]:
    def meminfo() -> tuple[int, int]:
        with open("/proc/meminfo") as f:
            fields = {k: v for k, _, v in (line.partition(":") for line in f)}
        return int(fields["MemTotal"].split()[0]) * 1024, int(fields["MemAvailable"].split()[0]) * 1024

    def statm() -> int:
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1])

    raw = {
        "raw /proc/meminfo": meminfo,
        "raw /proc/self/statm": statm,
        "raw snapshot (/proc/meminfo + statm)": lambda: (meminfo(), statm()),
    }
    pairs = {
        "device_memory_info / raw /proc/meminfo": ("device_memory_info", "raw /proc/meminfo"),
        "get_process_memory_usage / raw statm": ("get_process_memory_usage", "raw /proc/self/statm"),
        "MemorySnapshot.measure / raw snapshot": ("MemorySnapshot.measure", "raw snapshot (/proc/meminfo + statm)"),
    }
    return raw, pairs, "host memory through /proc (the cpu platform adds cgroup limits)"


def torch_raw(device: int) -> tuple[Cases, dict[str, tuple[str, str]], str]:
    import torch

    if not torch.cuda.is_available():
        return {}, {}, "no raw counterpart here: torch sees no device"
    return (
        {"torch.cuda.mem_get_info": lambda: torch.cuda.mem_get_info(device)},
        {"device_memory_info / torch.cuda.mem_get_info": ("device_memory_info", "torch.cuda.mem_get_info")},
        f"torch {torch.__version__}",
    )


def medians(cases: Cases, rounds: int) -> dict[str, float]:
    """Median seconds per call of each case, interleaved round by round after one warm-up call each."""
    for call in cases.values():
        call()
    samples: dict[str, list[float]] = {name: [] for name in cases}
    clock = time.perf_counter
    for _ in range(rounds):
        for name, call in cases.items():
            start = clock()
            call()
            samples[name].append(clock() - start)
    return {name: statistics.median(values) for name, values in samples.items()}


def import_cases(platform_name: str) -> dict[str, str]:
    cases = {
        "python -c pass": "pass",
        "import devmem": "import devmem",
        "import devmem; current_platform()": "import devmem; devmem.current_platform()",
        "... and device_memory_info(0)": "import devmem; devmem.current_platform().device_memory_info(0)",
    }
    if platform_name == "nvml":
        cases["raw: import pynvml; nvmlInit(); nvmlDeviceGetMemoryInfo"] = (
            "import pynvml; pynvml.nvmlInit(); pynvml.nvmlDeviceGetMemoryInfo(pynvml.nvmlDeviceGetHandleByIndex(0))"
        )
    elif platform_name == "cpu":
        cases["raw: read /proc/meminfo"] = "open('/proc/meminfo').read()"
    return cases


def import_medians(cases: dict[str, str], runs: int) -> dict[str, float]:
    """Median wall seconds of a fresh interpreter per case, interleaved run by run."""
    samples: dict[str, list[float]] = {name: [] for name in cases}
    for _ in range(runs):
        for name, code in cases.items():
            start = time.perf_counter()
            subprocess.run([sys.executable, "-c", code], check=True, capture_output=True)
            samples[name].append(time.perf_counter() - start)
    return {name: statistics.median(values) for name, values in samples.items()}


def render(result: dict[str, Any]) -> str:
    head = f"# overhead on {result['machine']['device_name']} ({result['machine']['platform']}): {result['measured']}"
    calls = format_table(["call", "median us"], [[name, f"{us:.2f}"] for name, us in result["median_us"].items()])
    ratios = format_table(["devmem / raw", "ratio"], [[name, f"{r:.2f}"] for name, r in result["ratios"].items()])
    base = result["import_ms"]["python -c pass"]
    imports = format_table(
        ["fresh interpreter", "median ms", "added ms"],
        [[name, f"{ms:.1f}", f"{ms - base:.1f}"] for name, ms in result["import_ms"].items()],
    )
    sections = [head, calls, ratios]
    if result["goals"]:
        sections.append(
            format_table(
                ["case", "devmem us", "raw", "raw us", "ratio", "goal", "met"],
                [
                    [
                        name,
                        f"{g['devmem_us']:.2f}",
                        g["raw"],
                        f"{g['raw_us']:.2f}",
                        f"{g['ratio']:.2f}",
                        f"{g['goal']:.1f}x",
                        "yes" if g["met"] else "NO",
                    ]
                    for name, g in result["goals"].items()
                ],
            )
        )
    no_context = format_table(
        ["no CUDA context (child interpreter)", "median us"],
        [[name, f"{us:.2f}"] for name, us in result["no_context_median_us"].items()],
    )
    return "\n\n".join([*sections, no_context, imports])


def main(argv: list[str] | None = None) -> dict[str, Any]:
    args = parse_args(argv)
    if args.no_context_child:
        no_context_child(args)
        return {}
    rounds, runs = (200, 2) if args.quick else (args.rounds, args.import_runs)
    no_context, no_context_pairs = no_context_medians(args.device, rounds)  # first, while no torch is imported
    resolve_start = time.perf_counter()
    platform = devmem.current_platform()
    resolve_s = time.perf_counter() - resolve_start
    if platform.name == "nvml":
        raw, pairs, what = nvml_raw(platform, args.device)
    elif platform.name == "cpu":
        raw, pairs, what = cpu_raw()
    else:
        raw, pairs, what = torch_raw(args.device)
    cases = {**devmem_cases(platform, args.device), **raw}
    found = medians(cases, rounds)
    goal_pairs = {**no_context_pairs, **paired_goals(cases, "with a context", rounds)}
    imports = import_medians(import_cases(platform.name), runs)
    result = {
        "benchmark": "overhead",
        "command": ["python", "benchmarks/overhead.py", *(argv if argv is not None else sys.argv[1:])],
        "machine": machine(platform, args.device),
        "measured": what,
        "rounds": rounds,
        "import_runs": runs,
        "resolve_in_process_ms": resolve_s * 1e3,
        "median_us": {name: s * 1e6 for name, s in found.items()},
        "ratios": {name: found[ours] / found[raw_name] for name, (ours, raw_name) in pairs.items()},
        "no_context_median_us": {name: s * 1e6 for name, s in no_context.items()},
        "goals": goals(goal_pairs),
        "import_ms": {name: s * 1e3 for name, s in imports.items()},
    }
    text = render(result)
    print(text)
    for path in write_outputs(args.out, "overhead", result, text):
        print(f"wrote {path}")
    return result


if __name__ == "__main__":
    main()
