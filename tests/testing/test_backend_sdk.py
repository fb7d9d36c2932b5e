"""The backend SDK (devmem.sdk) is what backends build on: the built-in backends and the example vendor wheel import
devmem only through it, devmem's public API and devmem.testing, and each other only through their packages."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

import devmem.sdk

REPO = Path(__file__).resolve().parents[2]
BACKENDS = {
    "devmem_nvidia": REPO / "devmem_nvidia",
    "devmem_rocm": REPO / "devmem_rocm",
    "devmem_uma": REPO / "devmem_uma",
    "devmem_acme": REPO / "tests" / "vendor_wheel",
}
#: What a backend may import of devmem.
PUBLIC = {"devmem", "devmem.sdk", "devmem.testing"}
#: devmem's modules and folders, which a backend may not name (``devmem.platform``, ``devmem.engine``, ...).
PRIVATE = {p.stem for p in (REPO / "devmem").glob("*.py")} | {
    p.name for p in (REPO / "devmem").iterdir() if p.is_dir() and p.name not in ("sdk", "testing")
}


def imported_modules(tree: ast.AST) -> list[tuple[int, str]]:
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found += [(node.lineno, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            found.append((node.lineno, node.module))
            if node.module == "devmem":  # `from devmem import host` names a private module too
                found += [(node.lineno, f"devmem.{a.name}") for a in node.names if a.name in PRIVATE]
    return found


def devmem_attributes(tree: ast.AST) -> list[tuple[int, str]]:
    """``devmem.sdk.host`` and the like reached as attributes of ``import devmem``."""
    return [
        (node.lineno, f"devmem.{node.attr}")
        for node in ast.walk(tree)
        if isinstance(node, ast.Attribute)
        and isinstance(node.value, ast.Name)
        and node.value.id == "devmem"
        and node.attr in PRIVATE
    ]


def disallowed(package: str, path: Path) -> list[str]:
    tree = ast.parse(path.read_text(), str(path))
    where = path.relative_to(REPO) if path.is_relative_to(REPO) else path
    bad = []
    for line, module in imported_modules(tree) + devmem_attributes(tree):
        top = module.split(".")[0]
        if top == "devmem" and module not in PUBLIC:
            bad.append(f"{where}:{line} imports {module}")
        elif (
            top in BACKENDS
            and top not in (package, module)
            and not (module == f"{top}.testing" and path.name == "testing.py")
        ):
            bad.append(f"{where}:{line} reaches into {module} instead of {top}'s package API")
    return bad


@pytest.mark.parametrize("package", sorted(BACKENDS))
def test_backend_imports_only_the_sdk_the_public_api_and_the_kit(package):
    bad = [line for path in sorted(BACKENDS[package].rglob("*.py")) for line in disallowed(package, path)]
    assert not bad, "private devmem imports in a backend (use devmem.sdk):\n" + "\n".join(bad)


def test_the_check_flags_a_private_import(tmp_path):
    module = tmp_path / "backend.py"
    module.write_text(
        "import devmem\nfrom devmem.sdk.host import Files\nfrom devmem.host import Files\nfrom devmem import engine\n"
        "x = devmem.platform\n"
    )
    assert [line.split(" imports ")[1] for line in disallowed("devmem_x", module)] == [
        "devmem.sdk.host",
        "devmem.host",
        "devmem.engine",
        "devmem.platform",
    ]


def test_the_check_flags_reaching_into_another_backend(tmp_path):
    module = tmp_path / "survey.py"
    module.write_text("import devmem_rocm\nfrom devmem_nvidia.pidns import namespace_pids\n")
    assert len(disallowed("devmem_uma", module)) == 1


def test_every_sdk_name_resolves():
    missing = [name for name in devmem.sdk.__all__ if getattr(devmem.sdk, name, None) is None]
    assert not missing


def test_the_sdk_gives_the_same_objects_as_their_modules():
    from devmem._host import Files
    from devmem.platform import PlatformBase
    from devmem.sdk.visible import index

    assert (devmem.sdk.Files, devmem.sdk.PlatformBase, devmem.sdk.device_index) == (Files, PlatformBase, index)


def test_importing_the_sdk_loads_none_of_its_modules():
    code = (
        "import sys, devmem.sdk; "
        "print(sorted(m for m in ('devmem._host', 'devmem.sdk.dmem', 'devmem.sdk.drm', 'devmem.sdk.lazy', "
        "'devmem.sdk.limits', 'devmem.sdk.sessions', 'devmem.sdk.visible') "
        "if m in sys.modules))"
    )
    done = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "[]"


def test_the_core_imports_nothing_of_the_sdk():
    """The SDK lends backends the core's utilities, never the other way: outside devmem/sdk, devmem imports its
    own private modules (devmem._forksafe, devmem._lazy, devmem._host, devmem._hookspecs), never devmem.sdk."""
    core = [p for p in sorted((REPO / "devmem").rglob("*.py")) if "sdk" not in p.relative_to(REPO / "devmem").parts]
    bad = [
        f"{path.relative_to(REPO)}:{line} imports {module}"
        for path in core
        for line, module in imported_modules(ast.parse(path.read_text(), str(path)))
        if module == "devmem.sdk" or module.startswith("devmem.sdk.")
    ]
    bad += [  # `from devmem import sdk`
        f"{path.relative_to(REPO)}:{node.lineno} imports devmem.sdk"
        for path in core
        for node in ast.walk(ast.parse(path.read_text(), str(path)))
        if isinstance(node, ast.ImportFrom) and node.module == "devmem" and any(a.name == "sdk" for a in node.names)
    ]
    assert not bad, "the core imports the SDK (import the private core module instead):\n" + "\n".join(bad)
