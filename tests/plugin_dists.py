"""Real installed distributions, written on the fly: a ``.dist-info`` with an entry point and its module.

importlib.metadata discovers them on ``sys.path`` exactly as it discovers a vendor wheel's, so the
resolution tests exercise real entry-point loading without monkeypatching devmem.
"""

from __future__ import annotations

import itertools
import textwrap
from pathlib import Path

_serial = itertools.count()

SPEC_SOURCE = """
import devmem
from devmem.cpu import CpuPlatform

class {cls}(CpuPlatform):
    name = {name!r}

@devmem.hookimpl
def devmem_platforms():
    yield devmem.PlatformSpec(
        name={name!r}, priority={priority}, description="test platform",
        detect=lambda: devmem.Detection({found}, {reason!r}, {action!r}), factory={cls},
    )
"""


def write_dist(site: Path, dist: str, body: str, entry_name: str | None = None, version: str = "1.0") -> str:
    """Install a distribution ``dist`` into ``site`` whose ``devmem`` entry point loads a module made of ``body``.

    Returns the entry-point name (unique per call unless given).
    """
    serial = next(_serial)
    module = f"devmem_testdist_{serial}"
    entry = entry_name or f"{dist.replace('-', '_')}_{serial}"
    (site / f"{module}.py").write_text(textwrap.dedent(body))
    info = site / f"{dist.replace('-', '_')}_{serial}-{version}.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {dist}\nVersion: {version}\n")
    (info / "entry_points.txt").write_text(f"[devmem]\n{entry} = {module}\n")
    return entry


def platform_dist(
    site: Path,
    dist: str,
    name: str,
    priority: int,
    found: bool = True,
    reason: str = "test hardware present",
    action: str = "",
) -> str:
    """A well-behaved backend providing platform ``name`` (host memory under another name)."""
    cls = f"Platform_{name.replace('-', '_')}"
    return write_dist(
        site, dist, SPEC_SOURCE.format(cls=cls, name=name, priority=priority, found=found, reason=reason, action=action)
    )


MEMORY_SOURCE = """
import devmem
from pathlib import Path

class Platform_{serial}(devmem.PlatformBase):
    name = {name!r}
    torch_device = None
    dist_backend = None

    def device_count(self):
        return 1

    def _memory(self, device):
        return devmem.sdk.DeviceMemory(devmem.MemoryInfo(free={total} // 2, total={total}), {{"total": {dist!r}}})

    def _is_integrated(self, device):
        return True

    def _pages_instead_of_failing(self, device):
        return True

def build():
    with open({calls!r}, "a") as f:
        f.write("factory\\n")
    return Platform_{serial}()

def detect():
    with open({calls!r}, "a") as f:
        f.write("detect\\n")
    return devmem.Detection({found}, "scripted")

@devmem.hookimpl
def devmem_platforms():
    yield devmem.PlatformSpec(name={name!r}, priority={priority}, detect=detect, factory=build)
"""


def memory_dist(site: Path, dist: str, name: str, priority: int, total: int, found: bool = True) -> tuple[str, Path]:
    """A backend providing platform ``name`` with one device of ``total`` bytes; returns the entry-point name and
    a file where each ``detect`` and ``factory`` call appends a line."""
    calls = site / f"{dist}-{next(_serial)}.calls"
    calls.touch()
    body = MEMORY_SOURCE.format(
        serial=next(_serial), name=name, priority=priority, total=total, dist=dist, calls=str(calls), found=found
    )
    return write_dist(site, dist, body), calls
