"""What the nvml platform returns inside a fresh PID namespace: recorded, not judged.

Drivers differ here: some list processes in NVML under their host PID, others (580.159.04 on an H200)
under the PID the caller's namespace gives them. The script runs itself twice under ``unshare``, in a
process that holds a CUDA context and a 512 MiB tensor:

- ``mount-proc``: ``unshare --pid --fork --mount-proc``, like a container without ``--pid=host``: /proc
  shows only the namespace, so ``NSpid`` has one entry.
- ``host-proc``: ``unshare --pid --fork`` without a new /proc: ``NSpid`` shows the outer PID too (on the
  H200 CUDA did not initialise here, error 304; that failure is recorded).

In each it records NVML's raw process list, the platform's answer with and without PID learning, the
reasons and notes, and torch's own figures, then ``observations``: whether NVML lists the namespace PID,
whether ``NSpid`` shows an outer PID, whether the platform's figure equals NVML's figure for this process,
and whether that figure includes the 512 MiB tensor. Without CUDA, NVML or ``unshare`` it records why and
exits 0. ``unshare --pid`` needs root; otherwise a user namespace (``--user --map-root-user``) is tried.

Usage: python benchmarks/nvidia_pidns.py [--out DIR]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

from devmem.types import MiB

VARIANTS = {
    "mount-proc": ["--pid", "--fork", "--mount-proc"],
    "host-proc": ["--pid", "--fork"],
}
HELD = 512 * MiB


def inner() -> dict:
    """Inside the namespace: create a context, hold 512 MiB, ask the platform."""
    import torch

    from devmem.sdk import REAL_FILES
    from devmem_nvidia import NvmlPlatform, NvmlSession
    from devmem_nvidia.nvml_access import running_processes
    from devmem_nvidia.pidns import namespace_pids

    tensor = torch.empty(HELD, dtype=torch.uint8, device="cuda:0")
    torch.cuda.synchronize()
    plain = NvmlPlatform(learn_pid=False)
    learning = NvmlPlatform()
    learning.prepare(0)  # the explicit step that may allocate 42 + 26 MiB to learn the driver-side PID
    handle = plain.visible_device(0).handle
    raw = {pid: e.used for pid, e in running_processes(NvmlSession.shared(), handle).items()}
    out = {
        "pid_here": os.getpid(),
        "nspid": namespace_pids(REAL_FILES),
        "nvml_processes": raw,
        "torch_reserved": torch.cuda.memory_reserved(0),
        "without_learning": {
            "process": plain.get_process_memory_usage(0),
            "reason": plain.process_memory_reason(0),
            "notes": plain.notes(0),
        },
        "with_learning": {
            "process": learning.get_process_memory_usage(0),
            "reason": learning.process_memory_reason(0),
            "notes": learning.notes(0),
            "others": learning.other_processes_memory(0),
        },
    }
    del tensor
    return out


def run_variant(name: str, flags: list[str]) -> dict:
    base = [shutil.which("unshare") or "unshare"]
    attempts = [base + flags, base + ["--user", "--map-root-user"] + flags]
    errors = []
    for cmd in attempts:
        done = subprocess.run(
            cmd + [sys.executable, os.path.abspath(__file__), "--inner"], capture_output=True, text=True, timeout=300
        )
        if done.returncode == 0:
            result = json.loads(done.stdout.strip().splitlines()[-1])
            result["command"] = " ".join(cmd)
            return result
        errors.append({"command": " ".join(cmd), "rc": done.returncode, "stderr": done.stderr.strip()[-3000:]})
    return {"failed": errors}


def nvml_figure(variant: dict) -> int | None:
    """NVML's figure for this process: its entry under the namespace PID or an ``NSpid`` outer PID."""
    listed = {int(pid): used for pid, used in variant["nvml_processes"].items()}
    return next((listed[pid] for pid in (variant["pid_here"], *variant["nspid"]) if pid in listed), None)


def observations(results: dict) -> dict:
    """What each variant showed, as facts about this driver; a variant that did not run records its error."""
    seen: dict = {}
    for name in VARIANTS:
        variant = results.get(name, {})
        if "failed" in variant:
            seen[f"{name}: ran"] = False
            seen[f"{name}: error"] = (variant["failed"][-1]["stderr"].splitlines() or ["(no output)"])[-1]
            continue
        if "with_learning" not in variant:
            continue
        figure = variant["with_learning"]["process"]
        nvml = nvml_figure(variant)
        seen[f"{name}: ran"] = True
        listed = {int(p) for p in variant["nvml_processes"]}
        seen[f"{name}: NVML lists the namespace PID"] = variant["pid_here"] in listed
        seen[f"{name}: NSpid shows an outer PID"] = len(variant["nspid"]) > 1
        seen[f"{name}: found without learning"] = variant["without_learning"]["process"] is not None
        seen[f"{name}: platform figure equals NVML's figure for this process"] = nvml is not None and figure == nvml
        seen[f"{name}: figure includes the 512 MiB tensor"] = figure is not None and figure >= HELD
    return seen


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", default=None, help="directory to write nvidia_pidns.json into")
    parser.add_argument("--inner", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.inner:
        print(json.dumps(inner()))
        return

    results: dict = {}
    try:
        import torch

        cuda = torch.cuda.is_available()
    except ImportError:
        cuda = False
    from devmem_nvidia import NvmlSession

    nvml_ok, nvml_why = NvmlSession.shared().probe()
    if not cuda or not nvml_ok:
        results["skipped"] = "needs torch with a CUDA device" if not cuda else f"needs NVML: {nvml_why}"
    elif shutil.which("unshare") is None:
        results["skipped"] = "the unshare command (util-linux) is not installed"
    else:
        for name, flags in VARIANTS.items():
            results[name] = run_variant(name, flags)
        results["observations"] = observations(results)
    text = json.dumps(results, indent=2, default=str)
    print(text)
    if args.out:
        Path(args.out).mkdir(parents=True, exist_ok=True)
        (Path(args.out) / "nvidia_pidns.json").write_text(text + "\n")


if __name__ == "__main__":
    main()
