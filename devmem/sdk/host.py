"""Host memory: the filesystem boundary (:class:`Files`), /proc/meminfo and cgroup limits, for every backend
that reads the host, at the path backends know (its home is the core's private :mod:`devmem._host`, which the
``cpu`` platform, the command and the exporter read through)."""

from devmem._host import REAL_FILES as REAL_FILES
from devmem._host import Files as Files
from devmem._host import HostFiles as HostFiles
from devmem._host import cgroup_memory as cgroup_memory
from devmem._host import page_cache_bytes as page_cache_bytes
from devmem._host import parse_meminfo as parse_meminfo
from devmem._host import read_int as read_int
from devmem._host import read_meminfo as read_meminfo
from devmem._host import read_stripped as read_stripped

__all__ = [
    "REAL_FILES",
    "Files",
    "HostFiles",
    "cgroup_memory",
    "page_cache_bytes",
    "parse_meminfo",
    "read_int",
    "read_meminfo",
    "read_stripped",
]
