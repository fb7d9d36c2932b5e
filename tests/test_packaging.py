"""The installed distribution's metadata: its name, what a default install pulls in, its version and licence."""

from __future__ import annotations

from importlib import metadata
from pathlib import Path

import pytest

import devmem

DIST = "devmem-kv"


def _requirements() -> dict[str, list[str]]:
    """Requirement name -> the environment markers it is declared with ("" for none)."""
    found: dict[str, list[str]] = {}
    for line in metadata.requires(DIST) or []:
        spec, _, marker = line.partition(";")
        name = spec.split("[")[0].strip()
        for sep in "<>=!~ (":
            name = name.split(sep)[0]
        found.setdefault(name.lower(), []).append(marker.strip())
    return found


def test_amdsmi_is_only_the_rocm_extra():
    # PyPI's amdsmi raises KeyError at import where ROCm is absent, breaking other libraries that probe for it
    assert _requirements()["amdsmi"] == ['extra == "rocm"']


def test_nvidia_ml_py_is_a_default_dependency():
    # a pure-Python ctypes wrapper: importing it without a driver loads nothing and raises nothing
    assert "" in _requirements()["nvidia-ml-py"]


def test_the_distribution_version_is_the_package_version():
    assert metadata.version(DIST) == devmem.__version__


def _project() -> dict:
    tomllib = pytest.importorskip("tomllib", reason="tomllib is Python 3.11+")
    with open(Path(__file__).resolve().parents[1] / "pyproject.toml", "rb") as f:
        return tomllib.load(f)["project"]


def test_the_metadata_names_its_authors_and_maintainers():
    project = _project()
    assert project["authors"] == project["maintainers"] == [{"name": "devmem developers"}]


def test_the_metadata_classifies_the_project_for_an_index_page():
    classifiers = set(_project()["classifiers"])
    assert {
        "Environment :: Console",
        "Environment :: GPU",
        "Typing :: Typed",
        "Operating System :: POSIX :: Linux",
    } <= (classifiers)


def test_the_project_urls_name_files_the_repository_holds():
    urls = _project()["urls"]
    root = Path(__file__).resolve().parents[1]
    assert set(urls) == {"Documentation", "Changelog"} and all((root / path).is_file() for path in urls.values())


def test_the_examples_and_transformers_extras_want_the_same_transformers_with_no_upper_bound():
    extras = _project()["optional-dependencies"]
    wanted = [[r for r in extras[name] if r.startswith("transformers")] for name in ("examples", "transformers")]
    assert wanted[0] == wanted[1] == ["transformers>=5.17"]  # installing devmem never replaces a user's transformers


def test_the_transformers_docs_and_the_integration_name_the_same_verified_releases():
    import re

    root = Path(__file__).resolve().parents[1]
    docs = " ".join((root / "docs" / "transformers.md").read_text().split())
    source = (root / "devmem" / "integrations" / "transformers.py").read_text()
    integration = re.sub(r'"\s+"', "", source)  # adjacent string literals joined, as Python joins them
    (said,) = set(re.findall(r"verified on transformers (\d+\.\d+ to \d+\.\d+)", docs))
    assert f"verified on transformers {said}" in integration
    (low,) = [r for r in _project()["optional-dependencies"]["transformers"] if r.startswith("transformers")]
    assert said.startswith(low.removeprefix("transformers>="))
