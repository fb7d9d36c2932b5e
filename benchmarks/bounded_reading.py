"""What the deadline on EngineMemory's readings costs: each platform call EngineMemory makes, straight and through
:class:`devmem._bounded.BoundedPlatform` (the call handed to the platform's one reused thread, given
``DEVMEM_READ_TIMEOUT``), side by side, interleaved round by round so that machine noise hits both alike; medians.

Cases: ``read(0)`` (one coherent reading: what a profile window's snapshots take), ``device_memory_info(0)``,
``get_process_memory_usage(0)``, ``device_count()``, and ``MemorySnapshot`` of a reading (the window's snapshot,
torch's allocator figures included). The added time per call, and per engine start (the calls one create,
profile window, plan and allocate lifecycle makes into its platform, counted on this machine), is the result.

Usage: python benchmarks/bounded_reading.py [--rounds 2000] [--device 0] [--out DIR_OR_FILE.json]

H200: python benchmarks/bounded_reading.py --out benchmarks/results/h200/ (under a minute)
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable
from typing import Any

from common import format_table, machine, write_outputs

import devmem
from devmem._bounded import BoundedPlatform
from devmem.engine.profiling import MemorySnapshot


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--device", type=int, default=0)
    p.add_argument("--rounds", type=int, default=2000, help="calls of each case, straight and bounded, interleaved")
    p.add_argument("--out", default=None, help="a .json file, or a folder to write bounded_reading.json/.txt into")
    return p.parse_args(argv)


def cases(platform: Any, device: int) -> dict[str, Callable[[Any], object]]:
    """Each case as a function of the platform it reads through."""
    return {
        "read": lambda p: p.read(device),
        "device_memory_info": lambda p: p.device_memory_info(device),
        "get_process_memory_usage": lambda p: p.get_process_memory_usage(device),
        "device_count": lambda p: p.device_count(),
        "snapshot": lambda p: MemorySnapshot._read(device, p),
    }


def timed(rounds: int, straight: Callable[[], object], bounded: Callable[[], object]) -> tuple[float, float]:
    """Medians in microseconds of ``straight`` and ``bounded``, called alternately (the first alternating)."""
    clock = time.perf_counter
    times: tuple[list[float], list[float]] = ([], [])
    for i in range(rounds):
        order = ((0, straight), (1, bounded)) if i % 2 else ((1, bounded), (0, straight))
        for side, call in order:
            start = clock()
            call()
            times[side].append(clock() - start)
    return statistics.median(times[0]) * 1e6, statistics.median(times[1]) * 1e6


def lifecycle_calls(device: int, platform: Any) -> int:
    """The calls one EngineMemory lifecycle (create, profile window, plan, allocate) makes into its platform."""
    calls = 0
    ask = BoundedPlatform.call

    def counted(self: BoundedPlatform, *args: Any) -> Any:
        nonlocal calls
        calls += 1
        return ask(self, *args)

    BoundedPlatform.call = counted  # type: ignore[method-assign]
    try:
        total = platform.device_memory_info(device).total
        memory = devmem.EngineMemory(
            device, utilization=min(1.0, 256 * 2**20 / total), platform=platform, reserve=False, check_startup=False
        )
        with memory.profile():
            pass
        memory.plan(page_size_bytes=4096, num_layers=1)
        memory.allocate()
        memory.close()
    finally:
        BoundedPlatform.call = ask  # type: ignore[method-assign]
    return calls


def main(argv: list[str] | None = None) -> dict[str, Any]:
    args = parse_args(argv)
    platform = devmem.current_platform()
    bounded = BoundedPlatform(platform)
    rows, result = [], {"machine": machine(platform, args.device), "rounds": args.rounds, "cases": {}}
    for name, case in cases(platform, args.device).items():
        case(platform), case(bounded)  # warm: the platform's caches, the thread
        straight, through = timed(args.rounds, lambda c=case: c(platform), lambda c=case: c(bounded))
        result["cases"][name] = {"straight_us": straight, "bounded_us": through, "added_us": through - straight}
        rows.append((name, f"{straight:.1f}", f"{through:.1f}", f"{through - straight:+.1f}"))
    calls = lifecycle_calls(args.device, platform)
    added = statistics.median(c["added_us"] for c in result["cases"].values())
    result["lifecycle"] = {"calls": calls, "added_us": calls * added}
    text = "\n".join(
        [
            f"{platform.name} device {args.device}, {args.rounds} rounds, medians",
            format_table(("call", "straight us", "bounded us", "added us"), rows),
            f"one engine lifecycle makes {calls} calls into its platform: about {calls * added:.0f} us added "
            f"(the median added per call, {added:.1f} us, times {calls})",
        ]
    )
    print(text)
    write_outputs(args.out, "bounded_reading", result, text)
    return result


if __name__ == "__main__":
    main()
