"""What the nvml platform's calls cost next to the raw NVML calls they wrap, side by side in one run.

- ``get_process_memory_usage(0)`` vs one raw ``nvmlDeviceGetComputeRunningProcesses`` (target: within 2x)
- ``device_memory_info(0)`` vs one raw ``nvmlDeviceGetMemoryInfo(handle, nvmlMemory_v2)`` (target: within 2x)

The cases are interleaved round by round, so machine noise hits them alike; medians are reported. On a
machine with an NVIDIA GPU, this process first creates its CUDA context through torch (when torch sees the
GPU), so it is listed by NVML as an engine would be. Without NVML it runs against the scripted H200
(``--scripted`` forces that): the figures then measure devmem's Python overhead only and say so.

Usage: python benchmarks/nvml_overhead.py [--rounds 2000] [--out DIR_OR_FILE.json] [--scripted]
"""

from __future__ import annotations

import argparse
import json
import os
import platform as host
import statistics
import sys
import time
from pathlib import Path
from typing import Any, Callable


def cuda_context() -> str:
    """Create this process's CUDA context through torch where it can; say what happened."""
    try:
        import torch
    except ImportError:
        return "torch not installed: no CUDA context"
    if not torch.cuda.is_available():
        return f"torch {torch.__version__} sees no GPU: no CUDA context"
    torch.empty(1, device="cuda:0")
    torch.cuda.synchronize()
    return f"CUDA context created by torch {torch.__version__} on {torch.cuda.get_device_name(0)}"


def build(scripted: bool) -> tuple[Any, Any, Any, str]:
    """``(platform, nvml module, handle of CUDA device 0, what was measured)``."""
    from devmem_nvidia import NvmlPlatform
    from devmem_nvidia.nvml_access import session_for

    if not scripted:
        ok, why = session_for().probe()
        if ok:
            context = cuda_context()
            platform = NvmlPlatform()
            platform.device_count()
            return platform, session_for().nvml, platform.visible_device(0).handle, f"real NVML; {context}"
        print(f"NVML is not usable here ({why}); measuring against the scripted H200", file=sys.stderr)
    from devmem.testing import ScriptedNvml, h200_scenario

    sc = h200_scenario(context=True)
    nvml = ScriptedNvml(sc)
    platform = NvmlPlatform(nvml=nvml, files=sc.fs, environ=sc.environ)
    platform.device_count()
    return platform, nvml, platform.visible_device(0).handle, "scripted H200 (devmem's Python overhead only)"


def measure(cases: dict[str, Callable[[], object]], rounds: int) -> dict[str, float]:
    """Median seconds per call of each case, interleaved round by round."""
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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=2000)
    parser.add_argument("--out", default=None, help="a .json file, or a directory to write nvml_overhead.json into")
    parser.add_argument("--scripted", action="store_true", help="measure against the scripted H200 even with a GPU")
    args = parser.parse_args()

    platform, nvml, handle, what = build(args.scripted)
    version = getattr(nvml, "nvmlMemory_v2", None)
    cases = {
        "raw nvmlDeviceGetComputeRunningProcesses": lambda: nvml.nvmlDeviceGetComputeRunningProcesses(handle),
        "get_process_memory_usage(0)": lambda: platform.get_process_memory_usage(0),
        "raw nvmlDeviceGetMemoryInfo (v2)": lambda: nvml.nvmlDeviceGetMemoryInfo(handle, version),
        "device_memory_info(0)": lambda: platform.device_memory_info(0),
    }
    medians = measure(cases, args.rounds)
    pairs = {
        "get_process_memory_usage": ("get_process_memory_usage(0)", "raw nvmlDeviceGetComputeRunningProcesses"),
        "device_memory_info": ("device_memory_info(0)", "raw nvmlDeviceGetMemoryInfo (v2)"),
    }
    ratios = {name: medians[ours] / medians[raw] for name, (ours, raw) in pairs.items()}

    print(f"# {what}; {args.rounds} rounds")
    print(f"{'call':<45}{'median us':>12}")
    for name, seconds in medians.items():
        print(f"{name:<45}{seconds * 1e6:>12.2f}")
    for name, ratio in ratios.items():
        print(f"{name}: {ratio:.2f}x the raw call ({'within' if ratio <= 2 else 'OVER'} the 2x target)")

    result = {
        "measured": what,
        "rounds": args.rounds,
        "python": sys.version.split()[0],
        "machine": f"{host.machine()}, {os.cpu_count()} cores",
        "process_memory_usage": platform.get_process_memory_usage(0),
        "process_memory_reason": platform.process_memory_reason(0),
        "median_us": {name: seconds * 1e6 for name, seconds in medians.items()},
        "ratio_to_raw": ratios,
        "within_2x": {name: ratio <= 2 for name, ratio in ratios.items()},
    }
    if args.out:
        out = Path(args.out)
        if out.suffix != ".json":
            out.mkdir(parents=True, exist_ok=True)
            out = out / "nvml_overhead.json"
        out.write_text(json.dumps(result, indent=2) + "\n")
        print(f"wrote {out}")
    print(json.dumps(result))


if __name__ == "__main__":
    main()
