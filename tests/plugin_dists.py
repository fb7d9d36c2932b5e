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
from devmem.host import CpuPlatform

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


def platform_dist(site: Path, dist: str, name: str, priority: int, found: bool = True,
                  reason: str = "test hardware present", action: str = "") -> str:
    """A well-behaved backend providing platform ``name`` (host memory under another name)."""
    cls = f"Platform_{name.replace('-', '_')}"
    return write_dist(site, dist, SPEC_SOURCE.format(cls=cls, name=name, priority=priority, found=found, reason=reason,
                                                     action=action))
