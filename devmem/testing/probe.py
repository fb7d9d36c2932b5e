"""Resolution in a fresh interpreter, with one plugin loaded: what it costs and what it drags in.

The conformance kit uses it to check that detection stays cheap: no torch import, no device runtime loaded
or initialised (none of the ``runtime_markers`` each platform declares in its ``PlatformSpec`` appears in
``/proc/self/maps``), and a bounded cost: the CPU time import and detection took (``cpu_seconds``; the wall
time, ``seconds``, is reported beside it, and grows with whatever else the machine runs).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

_PROBE = r"""
import json, sys, time
start, cpu = time.perf_counter(), time.process_time()
import devmem
candidates = devmem.platform_candidates()
seconds, cpu_seconds = time.perf_counter() - start, time.process_time() - cpu
try:
    with open("/proc/self/maps") as f:
        maps = f.read()
except OSError:
    maps = ""
# A runtime library, or the device node a runtime opens when it initialises, as each platform declares them.
markers = {m for c in candidates for m in c.runtime_markers}
runtimes = sorted(m for m in markers if m in maps)
print(json.dumps({"seconds": seconds, "cpu_seconds": cpu_seconds, "torch": "torch" in sys.modules, "runtimes": runtimes,
                  "candidates": [c.as_dict() for c in candidates]}))
"""


def run_detection_probe(plugin: str) -> dict:
    """Resolve in a fresh interpreter with only ``plugin`` (and ``cpu``) loaded; report cost and side effects."""
    env = {k: v for k, v in os.environ.items() if k != "DEVMEM_PLATFORM"}
    env["DEVMEM_LOAD_PLUGINS"] = plugin
    done = subprocess.run([sys.executable, "-c", _PROBE], env=env, capture_output=True, text=True, timeout=120)
    if done.returncode != 0:
        raise AssertionError(
            f"resolving with plugin {plugin!r} failed in a fresh process: {done.stderr.strip()[-2000:]}"
        )
    return json.loads(done.stdout.strip().splitlines()[-1])
