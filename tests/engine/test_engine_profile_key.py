"""devmem.engine.profile_key: where a stored profile's figures were measured, as its key holds it."""

from __future__ import annotations

import pytest

import devmem
from devmem import GiB
from devmem.engine.profile_key import allocator_settings, driver_version, environment_key, library_versions
from devmem.engine.profile_store import canonical

torch = pytest.importorskip("torch")


def test_the_versions_are_devmems_torchs_and_the_engines():
    versions = library_versions(engine="1.2.3")
    assert (versions["devmem"], versions["torch"], versions["engine"]) == (
        devmem.__version__,
        torch.__version__,
        "1.2.3",
    )
    assert {"torch_cuda", "torch_hip"} <= set(versions)


def test_the_allocators_settings_are_its_pytorch_alloc_variables(monkeypatch):
    monkeypatch.setenv("PYTORCH_CUDA_ALLOC_CONF", "expandable_segments:True")
    monkeypatch.setenv("PYTORCH_OTHER", "x")
    assert allocator_settings().get("PYTORCH_CUDA_ALLOC_CONF") == "expandable_segments:True"
    assert "PYTORCH_OTHER" not in allocator_settings()


def test_the_cpu_has_no_driver_version():
    assert driver_version(torch.device("cpu")) is None


def test_the_environment_names_the_platforms_device_and_its_total(host):
    key = environment_key(host, 0, 64 * GiB, torch.device("cpu"), engine="1.2.3")
    assert (key["platform"], key["device_name"], key["device_total"]) == ("cpu", host.device_name(0), 64 * GiB)
    assert key["versions"]["engine"] == "1.2.3" and key["driver_version"] is None


def test_a_changed_allocator_setting_changes_the_key(host, monkeypatch):
    before = canonical(environment_key(host, 0, 64 * GiB, torch.device("cpu")))
    monkeypatch.setenv("PYTORCH_CUDA_ALLOC_CONF", "expandable_segments:True")
    assert canonical(environment_key(host, 0, 64 * GiB, torch.device("cpu"))) != before
