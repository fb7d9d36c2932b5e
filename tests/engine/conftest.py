"""The engine's tests' devices: a scripted 64 GiB host for the cpu platform, and a scripted H200 with the torch
runtime scripted on it (devmem.testing)."""

from __future__ import annotations

import ctypes
import platform as platform_module
import sys

import pytest

from devmem import GiB
from devmem.cpu import CpuPlatform
from devmem.testing.scenario import HostMemory, Scenario
from devmem.testing.torch_runtime import ScriptedTorch
from devmem_nvidia.nvml_platform import NvmlPlatform
from devmem_nvidia.testing import ScriptedNvml, h200_scenario


@pytest.fixture
def host():
    """The cpu platform on a scripted 64 GiB host (60 GiB free)."""
    return CpuPlatform(files=Scenario(host=HostMemory(total=64 * GiB, free=60 * GiB)).fs)


@pytest.fixture
def h200():
    """A scripted H200 (devmem_nvidia.testing)."""
    return h200_scenario()


@pytest.fixture
def torch_rt(h200, monkeypatch):
    """torch's CUDA runtime scripted on the H200, in place of torch while the test runs."""
    rt = ScriptedTorch(h200, "cuda")
    monkeypatch.setitem(sys.modules, "torch", rt)
    return rt


@pytest.fixture
def platform(h200):
    """The nvml platform reading the scripted H200."""
    return NvmlPlatform(nvml=ScriptedNvml(h200), files=h200.fs, environ=h200.environ)


@pytest.fixture
def freed_c_heap():
    """Bytes this process freed whose pages glibc's heap keeps resident (so they count in its memory on the cpu
    platform) until ``malloc_trim`` gives them back; skipped on other C libraries."""
    if platform_module.libc_ver()[0] != "glibc":
        pytest.skip("the C heap's free pages: glibc's malloc_trim")
    libc = ctypes.CDLL(None)
    libc.malloc.restype, libc.malloc.argtypes = ctypes.c_void_p, [ctypes.c_size_t]
    libc.free.argtypes = [ctypes.c_void_p]
    chunk, count = 96 * 1024, 256  # below glibc's mmap threshold: on the heap, each freed one kept resident
    chunks = [libc.malloc(chunk) for _ in range(count + 1)]
    for address in chunks:
        ctypes.memset(address, 1, chunk)
    for address in chunks[:-1]:  # the last one, above them, keeps the heap's top from being trimmed at free
        libc.free(address)
    yield chunk * count
    libc.free(chunks[-1])
