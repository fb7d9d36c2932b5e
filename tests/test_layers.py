"""The layers hold: devmem's modules import one another without a cycle, the engine and the exporter never import the
command, and the planner (pure arithmetic) never reaches the platform contract.

The graph is read from the source with :mod:`ast`, over devmem/, devmem_nvidia/, devmem_rocm/ and devmem_uma/: an
arrow for every ``import`` and ``from ... import`` of one of their modules, at module level and inside a function
alike. A lazy in-function import still counts: it defers when a module loads, not which module depends on which, so
a cycle through one is still a cycle of layers (and the reason such imports were written: "they import this module").
Imports under ``if TYPE_CHECKING:`` are left out: they never run. ``from package import name`` is an arrow to
``package.name`` where that is a module, else to ``package``; importing ``a.b.c`` loads ``a`` and ``a.b`` too, but
only the module named is an arrow (a package's ``__init__`` hands names on). Modules loaded by name at run time
(``importlib.import_module``, entry points, :func:`devmem._lazy.lazy_exports`'s tables) are not arrows.
"""

from __future__ import annotations

import ast
from collections.abc import Iterable
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
PACKAGES = ("devmem", "devmem_nvidia", "devmem_rocm", "devmem_uma")


def modules(root: Path, packages: Iterable[str]) -> dict[str, Path]:
    """Every module of ``packages`` under ``root``: dotted name -> file (a package is its ``__init__.py``)."""
    found = {}
    for package in packages:
        for path in sorted((root / package).rglob("*.py")):
            parts = path.relative_to(root).with_suffix("").parts
            found[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return found


def _type_checking(node: ast.If) -> bool:
    test = node.test
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def _known(name: str, known: dict[str, Path]) -> str | None:
    """``name``, or the longest leading part of it that is a known module (``a.b.attr`` -> ``a.b``)."""
    while name and name not in known:
        name = name.rpartition(".")[0]
    return name or None


def imports(name: str, path: Path, known: dict[str, Path]) -> dict[str, int]:
    """The known modules that module ``name`` (at ``path``) imports, each with the line of its first import."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found: dict[str, int] = {}

    def add(target: str | None, line: int) -> None:
        if target is not None and target != name:
            found.setdefault(target, line)

    def visit(node: ast.AST) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.If) and _type_checking(child):
                for other in child.orelse:
                    visit(other)
                continue
            if isinstance(child, ast.Import):
                for alias in child.names:
                    add(_known(alias.name, known), child.lineno)
            elif isinstance(child, ast.ImportFrom):
                base = child.module or ""
                if child.level:
                    anchor = package.rsplit(".", child.level - 1)[0] if child.level > 1 else package
                    base = f"{anchor}.{base}" if base else anchor
                for alias in child.names:
                    full = f"{base}.{alias.name}"
                    add(full if full in known else _known(base, known), child.lineno)
            visit(child)

    visit(ast.parse(path.read_text(encoding="utf-8"), str(path)))
    return found


def import_graph(root: Path, packages: Iterable[str]) -> dict[str, dict[str, int]]:
    """Module -> the modules it imports (-> the line), over ``packages`` under ``root``."""
    known = modules(root, packages)
    return {name: imports(name, path, known) for name, path in known.items()}


def cycles(graph: dict[str, dict[str, int]]) -> list[list[str]]:
    """The strongly connected parts of ``graph`` of more than one module, each sorted (Tarjan's algorithm)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def connect(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for target in graph.get(node, {}):
            if target not in index:
                connect(target)
                low[node] = min(low[node], low[target])
            elif target in on_stack:
                low[node] = min(low[node], index[target])
        if low[node] == index[node]:
            part = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                part.append(member)
                if member == node:
                    break
            if len(part) > 1:
                found.append(sorted(part))

    for node in sorted(graph):
        if node not in index:
            connect(node)
    return sorted(found)


def arrows(graph: dict[str, dict[str, int]], part: list[str]) -> list[str]:
    """The arrows among the modules of ``part``, as ``a -> b (line n)``."""
    return [f"{a} -> {b} (line {line})" for a in part for b, line in sorted(graph[a].items()) if b in part]


def _in(module: str, package: str) -> bool:
    return module == package or module.startswith(package + ".")


def path_to(graph: dict[str, dict[str, int]], start: str, goal: str) -> list[str] | None:
    """A shortest chain of imports from ``start`` to ``goal``, or ``None`` where ``start`` never reaches it."""
    came_from: dict[str, str | None] = {start: None}
    frontier = [start]
    while frontier:
        following = []
        for node in frontier:
            for target in sorted(graph.get(node, {})):
                if target in came_from:
                    continue
                came_from[target] = node
                if target == goal:
                    chain: list[str] = [goal]
                    while (step := came_from[chain[-1]]) is not None:
                        chain.append(step)
                    return chain[::-1]
                following.append(target)
        frontier = following
    return None


@pytest.fixture(scope="module")
def graph() -> dict[str, dict[str, int]]:
    return import_graph(REPO, PACKAGES)


def test_devmems_modules_import_one_another_without_a_cycle(graph):
    found = cycles(graph)
    assert found == [], "import cycles (lazy imports count):\n" + "\n\n".join(
        "\n".join(arrows(graph, part)) for part in found
    )


@pytest.mark.parametrize("layer", ["devmem.engine", "devmem.exporter"])
def test_the_engine_and_the_exporter_import_nothing_of_the_command(graph, layer):
    bad = [
        f"{module} -> {target} (line {line})"
        for module, targets in sorted(graph.items())
        if _in(module, layer)
        for target, line in sorted(targets.items())
        if _in(target, "devmem.command")
    ]
    assert not bad, f"{layer} imports the command:\n" + "\n".join(bad)


def test_the_planner_never_reaches_the_platform_contract(graph):
    chains = [path_to(graph, module, "devmem.platform") for module in sorted(graph) if _in(module, "devmem.planner")]
    bad = [" -> ".join(chain) for chain in chains if chain is not None]
    assert not bad, "the planner reaches devmem.platform:\n" + "\n".join(bad)


def test_the_graph_counts_every_package_of_the_distribution(graph):
    assert {module.partition(".")[0] for module in graph} == set(PACKAGES)


def _tree(tmp_path: Path, files: dict[str, str]) -> dict[str, dict[str, int]]:
    for name, text in files.items():
        path = tmp_path / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return import_graph(tmp_path, ["pkg"])


def test_a_cycle_through_an_import_inside_a_function_is_found(tmp_path):
    graph = _tree(
        tmp_path,
        {
            "pkg/__init__.py": "",
            "pkg/a.py": "from pkg.b import thing\n",
            "pkg/b.py": "def thing():\n    from pkg import a\n    return a\n",
        },
    )
    assert cycles(graph) == [["pkg.a", "pkg.b"]]


def test_an_import_for_type_checkers_only_is_no_arrow(tmp_path):
    graph = _tree(
        tmp_path,
        {
            "pkg/__init__.py": "",
            "pkg/a.py": "from pkg.b import thing\n",
            "pkg/b.py": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from pkg.a import x\nthing = 1\n",
        },
    )
    assert (graph["pkg.b"], cycles(graph)) == ({}, [])


def test_relative_imports_and_names_of_modules_are_arrows_to_those_modules(tmp_path):
    graph = _tree(
        tmp_path,
        {
            "pkg/__init__.py": "from . import sub\n",
            "pkg/sub/__init__.py": "",
            "pkg/sub/x.py": "from ..sub import y\nfrom .y import name\nimport pkg.sub.y as z\n",
            "pkg/sub/y.py": "name = 1\n",
        },
    )
    assert (graph["pkg"], graph["pkg.sub.x"]) == ({"pkg.sub": 1}, {"pkg.sub.y": 1})


def test_a_chain_of_imports_to_a_module_is_named_whole(tmp_path):
    graph = _tree(
        tmp_path,
        {
            "pkg/__init__.py": "",
            "pkg/a.py": "import pkg.b\n",
            "pkg/b.py": "def f():\n    import pkg.c\n",
            "pkg/c.py": "",
        },
    )
    assert (path_to(graph, "pkg.a", "pkg.c"), path_to(graph, "pkg.c", "pkg.a")) == (["pkg.a", "pkg.b", "pkg.c"], None)
