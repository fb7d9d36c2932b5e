"""The engine's tests' devices: a scripted 64 GiB host for the cpu platform, and a scripted H200 with the torch
runtime scripted on it (devmem.testing)."""

from __future__ import annotations

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
