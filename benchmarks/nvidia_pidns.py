"""What the nvml platform returns inside a PID namespace that NVML does not see (it reports host PIDs).

Runs itself twice under ``unshare``, in a process that holds a CUDA context and a 512 MiB tensor:

- ``mount-proc``: ``unshare --pid --fork --mount-proc``, like a container without ``--pid=host``: /proc
  shows only the namespace, so ``NSpid`` has one entry and the host PID must be learned from allocations.
- ``host-proc``: ``unshare --pid --fork`` without a new /proc: ``NSpid`` shows the host PID too.

In each it records NVML's raw process list, the platform's answer with and without PID learning, the
reasons and notes, and torch's own figures. Without CUDA, NVML or ``unshare`` it records why and exits 0.
``unshare --pid`` needs root; otherwise a user namespace (``--user --map-root-user``) is tried.

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

    from devmem.host import REAL_FILES
    from devmem_nvidia import NvmlPlatform, session_for
    from devmem_nvidia.nvml_access import running_processes
    from devmem_nvidia.pidns import namespace_pids

    tensor = torch.empty(HELD, dtype=torch.uint8, device="cuda:0")
    torch.cuda.synchronize()
    plain = NvmlPlatform(learn_pid=False)
    learning = NvmlPlatform()
    handle = plain.visible_device(0).handle
    raw = {pid: e.used for pid, e in running_processes(session_for(), handle).items()}
    out = {
        "pid_here": os.getpid(),
        "nspid": namespace_pids(REAL_FILES),
        "nvml_processes": raw,
        "torch_reserved": torch.cuda.memory_reserved(0),
        "without_learning": {"process": plain.get_process_memory_usage(0),
                             "reason": plain.process_memory_reason(0), "notes": plain.notes(0)},
        "with_learning": {"process": learning.get_process_memory_usage(0),
                          "reason": learning.process_memory_reason(0), "notes": learning.notes(0),
                          "others": learning.other_processes_memory(0)},
    }
    del tensor
    return out


def run_variant(name: str, flags: list[str]) -> dict:
    base = [shutil.which("unshare") or "unshare"]
    attempts = [base + flags, base + ["--user", "--map-root-user"] + flags]
    errors = []
    for cmd in attempts:
        done = subprocess.run(cmd + [sys.executable, os.path.abspath(__file__), "--inner"],
                              capture_output=True, text=True, timeout=300)
        if done.returncode == 0:
            result = json.loads(done.stdout.strip().splitlines()[-1])
            result["command"] = " ".join(cmd)
            return result
        errors.append({"command": " ".join(cmd), "rc": done.returncode, "stderr": done.stderr.strip()[-3000:]})
    return {"failed": errors}


def expectations(results: dict) -> dict:
    """What the design promises in each variant, checked against what came back."""
    checks = {}
    mp = results.get("mount-proc", {})
    if "with_learning" in mp:
        host_entries = {int(pid): used for pid, used in mp["nvml_processes"].items()}
        learned = mp["with_learning"]["process"]
        checks["mount-proc: NVML does not list the namespace PID"] = mp["pid_here"] not in host_entries
        checks["mount-proc: without learning the answer is None with a reason"] = (
            mp["without_learning"]["process"] is None and bool(mp["without_learning"]["reason"]))
        checks["mount-proc: learning finds this process's NVML figure"] = learned in host_entries.values()
        checks["mount-proc: that figure includes the 512 MiB tensor"] = learned is not None and learned >= HELD
    hp = results.get("host-proc", {})
    if "with_learning" in hp:
        checks["host-proc: NSpid shows the host PID"] = len(hp["nspid"]) > 1
        checks["host-proc: found through NSpid without learning"] = hp["without_learning"]["process"] is not None
    return checks


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
    from devmem_nvidia import session_for

    nvml_ok, nvml_why = session_for().probe()
    if not cuda or not nvml_ok:
        results["skipped"] = "needs torch with a CUDA device" if not cuda else f"needs NVML: {nvml_why}"
    elif shutil.which("unshare") is None:
        results["skipped"] = "the unshare command (util-linux) is not installed"
    else:
        for name, flags in VARIANTS.items():
            results[name] = run_variant(name, flags)
        results["expectations"] = expectations(results)
    text = json.dumps(results, indent=2, default=str)
    print(text)
    if args.out:
        Path(args.out).mkdir(parents=True, exist_ok=True)
        (Path(args.out) / "nvidia_pidns.json").write_text(text + "\n")


if __name__ == "__main__":
    main()
