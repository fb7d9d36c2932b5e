"""The conformance kit against the built-in ``cpu`` platform on the real kernel (real allocations),
in this suite and through the pytest plugin (``pytest --pyargs devmem.testing --devmem-platform cpu``)."""

from __future__ import annotations

import subprocess
import sys

import pytest

from devmem.cpu import CpuPlatform
from devmem.testing import HostFixtures, PlatformConformance


class CpuFixtures(HostFixtures):
    @pytest.fixture
    def platform(self):
        return CpuPlatform()


class TestCpuConformance(PlatformConformance, CpuFixtures):
    pass


def _pyargs(tmp_path, *options: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-rs", "-p", "no:cacheprovider", "--pyargs", "devmem.testing", *options],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
    )


@pytest.mark.slow  # a pytest subprocess running the kit
def test_plugin_certifies_the_installed_cpu_platform(tmp_path):
    done = _pyargs(tmp_path, "--devmem-platform", "cpu")
    assert done.returncode == 0, done.stdout + done.stderr
    assert "test_installed_platform.py::TestInstalledPlatform: device_count" in done.stdout


@pytest.mark.slow  # a pytest subprocess running the kit
def test_plugin_skips_the_installed_platform_tests_without_the_option(tmp_path):
    done = _pyargs(tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr
    assert " passed" not in done.stdout and " skipped" in done.stdout
    assert "runs only with --devmem-platform NAME" in done.stdout


def test_plugin_rejects_a_platform_that_is_not_registered(tmp_path):
    done = _pyargs(tmp_path, "--devmem-platform", "nope")
    assert done.returncode == pytest.ExitCode.USAGE_ERROR
    assert "--devmem-platform nope: DEVMEM_PLATFORM='nope' names no registered platform" in done.stderr
