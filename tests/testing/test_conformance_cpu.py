"""The conformance kit against the built-in ``cpu`` platform on the real kernel (real allocations),
in this suite and through the pytest plugin (``pytest --pyargs devmem.testing --devmem-platform cpu``)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

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


def _timed(*options: str) -> list[str]:
    """The summary of a pytest run of this file's timed test (each call's median time), with ``options``."""
    test = f"{__file__}::TestCpuConformance::test_every_call_is_cheap"
    argv = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *options, test]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=120, cwd=Path(__file__).parents[2])
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout.splitlines()


def test_a_run_says_in_one_line_how_to_see_the_times_per_call_and_ends_with_its_verdict():
    lines = _timed()
    assert lines[-2] == "devmem: times per call of 1 conformance class: --devmem-times shows them", lines
    assert " passed" in lines[-1] and not any("memory_sources" in line for line in lines)


@pytest.mark.slow  # a pytest subprocess timing every call
def test_devmem_times_prints_each_classes_time_per_call():
    lines = _timed("--devmem-times")
    assert any(
        line.startswith("tests/testing/test_conformance_cpu.py::TestCpuConformance: device_count") for line in lines
    )
