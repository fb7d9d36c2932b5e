"""A vendor backend shipped as a separate wheel (tests/vendor_wheel, ``devmem-acme``).

devmem-kv and devmem-acme are built into wheels by this interpreter (offline, without build isolation), and
devmem-acme is installed from that wheel directory into a throwaway virtual environment, which must fetch
devmem-kv from there as a dependency. The other packages (pluggy, psutil, pytest, ...) come from the
environment running these tests, inside a virtualenv or not: the throwaway one sees its site-packages, less
devmem's own distributions, through a ``.pth`` file. No entry point is patched: devmem finds the wheel as it
would in the field.
"""

from __future__ import annotations

import json
import os
import shutil
import site
import subprocess
import sys
from pathlib import Path

import pytest

import devmem

pytestmark = pytest.mark.slow  # builds two wheels and a virtualenv: `pytest -m slow` and CI run them

REPO = Path(__file__).resolve().parents[2]
VENDOR = REPO / "tests" / "vendor_wheel"
IGNORE = shutil.ignore_patterns("__pycache__", "*.egg-info", "build", "dist", ".pytest_cache")


def _env(**extra: str) -> dict[str, str]:
    env = {
        k: v
        for k, v in os.environ.items()
        if k not in ("PYTHONPATH", "DEVMEM_PLATFORM", "DEVMEM_LOAD_PLUGINS", "VIRTUAL_ENV")
    }
    env.update(PIP_DISABLE_PIP_VERSION_CHECK="1", PIP_NO_INDEX="1", PYTHONDONTWRITEBYTECODE="1", **extra)
    return env


def _run(cmd: list[str | Path], cwd: Path, **extra: str) -> subprocess.CompletedProcess:
    done = subprocess.run(
        [str(c) for c in cmd], cwd=cwd, env=_env(**extra), capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, f"{' '.join(map(str, cmd))} exited {done.returncode}:\n{done.stdout}\n{done.stderr}"
    return done


def _devmem_source(dest: Path) -> Path:
    """A copy of this repository's distribution, so building it writes nothing into the working tree."""
    dest.mkdir()
    for name in ("pyproject.toml", "README.md", "LICENSE"):
        if (REPO / name).exists():
            shutil.copy(REPO / name, dest / name)
    for pkg in REPO.iterdir():
        if pkg.name.startswith("devmem") and (pkg / "__init__.py").exists():
            shutil.copytree(pkg, dest / pkg.name, ignore=IGNORE)
    return dest


def _this_environment_without_devmem(dest: Path) -> Path:
    """A directory of links to everything installed in this interpreter's site-packages except devmem's own
    distributions (whatever their names: devmem-kv, an editable install, a vendor's)."""
    dest.mkdir()
    dirs = [*site.getsitepackages(), *([site.getusersitepackages()] if site.ENABLE_USER_SITE else [])]
    for directory in map(Path, dirs):
        if not directory.is_dir():
            continue
        for entry in directory.iterdir():
            link = dest / entry.name
            if "devmem" not in entry.name.lower() and not link.exists():
                link.symlink_to(entry)
    return dest


@pytest.fixture(scope="module")
def vendor_env(tmp_path_factory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("vendor_wheel")
    source = root / "devmem-acme"
    shutil.copytree(VENDOR, source, ignore=IGNORE)
    wheels = root / "wheels"
    pip = [sys.executable, "-m", "pip"]
    _run(
        pip + ["wheel", "--no-deps", "--no-build-isolation", "-w", wheels, _devmem_source(root / "devmem-src"), source],
        root,
    )
    venv = root / "venv"
    _run([sys.executable, "-m", "venv", "--without-pip", venv], root)
    python = venv / "bin" / "python"
    purelib = Path(_run([python, "-c", "import sysconfig; print(sysconfig.get_path('purelib'))"], root).stdout.strip())
    outer = _this_environment_without_devmem(root / "outer-site")
    (purelib / "outer-site.pth").write_text(f"import site; site.addsitedir({str(outer)!r})\n")
    _run(pip + ["--python", python, "install", "--no-index", "--find-links", wheels, "devmem-acme"], root)
    return {"python": python, "devmem": venv / "bin" / "devmem", "venv": venv, "source": source}


def test_installing_the_vendor_wheel_brings_devmem_kv_from_the_wheel_directory(vendor_env):
    code = (
        "import importlib.metadata as m; d = m.distribution('devmem-kv'); "
        "print(d.version); print(d.locate_file('devmem/__init__.py'))"
    )
    version, init = _run([vendor_env["python"], "-c", code], vendor_env["venv"]).stdout.split()
    assert version == devmem.__version__
    assert Path(init).is_file() and Path(init).is_relative_to(vendor_env["venv"]), init


def test_wheel_and_devmem_are_imported_from_the_environment(vendor_env):
    done = _run(
        [vendor_env["python"], "-c", "import devmem, devmem_acme; print(devmem.__file__); print(devmem_acme.__file__)"],
        vendor_env["venv"],
    )
    for path in done.stdout.split():
        assert Path(path).is_relative_to(vendor_env["venv"]), f"{path} is not installed in the throwaway environment"


def test_plugins_lists_the_vendor_platform_with_its_distribution(vendor_env):
    candidates = json.loads(_run([vendor_env["devmem"], "plugins", "--json"], vendor_env["venv"]).stdout)
    acme = [c for c in candidates if c["name"] == "acme"]
    assert len(acme) == 1, candidates
    assert acme[0]["plugin"] == "acme"
    assert (acme[0]["distribution"], acme[0]["version"]) == ("devmem-acme", "0.3.1")
    assert acme[0]["detected"] and acme[0]["priority"] == 50


def test_devmem_platform_selects_the_vendor_platform(vendor_env):
    info = json.loads(_run([vendor_env["devmem"], "info", "--json"], vendor_env["venv"], DEVMEM_PLATFORM="acme").stdout)
    assert info["platform"] == "acme"
    assert "DEVMEM_PLATFORM" in info["chosen_because"]
    assert [d["name"] for d in info["devices"]] == ["ACME reference accelerator (host memory)"]


def test_a_platform_written_to_the_six_member_protocol_still_works(vendor_env):
    info = json.loads(
        _run([vendor_env["devmem"], "info", "--json"], vendor_env["venv"], DEVMEM_PLATFORM="acme-classic").stdout
    )
    assert info["platform"] == "acme-classic"
    device = info["devices"][0]
    assert device["total"] > 0 and device["process"] > 0
    assert device["sources"]["total"].startswith("reported by acme-classic (devmem_acme.classic.")


def test_vendor_conformance_file_passes_where_the_wheel_is_installed(vendor_env):
    done = _run(
        [vendor_env["python"], "-m", "pytest", "-q", "-rs", "-p", "no:cacheprovider", "tests/test_acme_conformance.py"],
        cwd=vendor_env["source"],
    )
    assert " passed" in done.stdout and "failed" not in done.stdout, done.stdout
    assert "not registered" not in done.stdout, "the kit did not find acme through its entry point: " + done.stdout


def test_vendor_scripted_library_runs_the_kit_on_the_neutral_scenario(vendor_env):
    done = _run(
        [vendor_env["python"], "-m", "pytest", "-q", "-rs", "-p", "no:cacheprovider", "--devmem-times"]
        + ["tests/test_acme_scripted.py"],
        cwd=vendor_env["source"],
    )
    assert " passed" in done.stdout and "failed" not in done.stdout, done.stdout
    assert "TestAcmeScripted" in done.stdout, "the kit's per-call timings name the scripted class: " + done.stdout
    assert "TestAcmeClassicScripted" in done.stdout, "the kit ran on the six-member platform: " + done.stdout
