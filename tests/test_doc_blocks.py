"""Every code block of the README, docs/*.md and examples/README.md runs as written, and every sample output is
what the command prints.

A block is run by its info string: ``python`` (a script), ``bash``/``sh`` (``bash -e``), ``console`` or no info
string with lines starting ``$ `` (each command run; the lines after it, up to the next ``$ ``, are its output), and
``toml`` (parsed). ``text`` is prose laid out (a tree, a synopsis, a message quoted). An HTML comment on the line
before the fence changes that, with the reason:

- ``<!-- doc-test: skip REASON -->``: not run (it needs a GPU, a download, a vendor package);
- ``<!-- doc-test: compile-only REASON -->``: Python compiled, not run (a fragment of a larger program);
- ``<!-- doc-test: recorded PATH -->``: a sample output recorded on other hardware; it must equal the file PATH.

Blocks run in a fresh directory holding only what the repository ships (``examples``, ``benchmarks`` and ``docs``,
links to the repository's: a model a doc plans for is one of ``examples/configs``), on the cpu platform, with this
checkout's ``devmem`` first on ``PATH``. In a sample output, a line ``...`` stands for any lines, and a line ending
in `` ...`` for any line starting with the rest. An untagged block that is neither fails: say what it is. Every
Python block but a ``compile-only`` fragment uses only the names it defines or imports, a skipped one too.
"""

from __future__ import annotations

import builtins
import os
import re
import subprocess
import symtable
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
DOCS = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md")), REPO / "examples" / "README.md"]
#: Blocks that take more than a few seconds (they serve a model on the CPU): run by CI, not by default.
SLOW = re.compile(r"examples/engine\.py|benchmarks/|\btransformers\b")
FENCE = re.compile(r"^```([\w-]*)[^\n]*\n(.*?)^```[ \t]*$", re.S | re.M)
MARK = re.compile(r"<!--\s*doc-test:\s*(skip|compile-only|recorded)\s+(.*?)\s*-->\s*\n$")


@dataclass(frozen=True)
class Block:
    doc: Path
    line: int
    lang: str
    body: str
    mark: str | None
    reason: str

    @property
    def id(self) -> str:
        return f"{self.doc.relative_to(REPO)}:{self.line}"


def blocks() -> list[Block]:
    found = []
    for doc in DOCS:
        text = doc.read_text(encoding="utf-8")
        for m in FENCE.finditer(text):
            before = text[: m.start()]
            mark = MARK.search(before[before.rfind("\n", 0, len(before) - 1) + 1 :])
            lang = m.group(1) or ("console" if m.group(2).startswith("$ ") else "")
            found.append(
                Block(doc, before.count("\n") + 1, lang, m.group(2), mark and mark.group(1), mark and mark.group(2))
            )
    return found


BLOCKS = blocks()


def param(block: Block):
    runs = block.mark is None and block.lang != "text"
    marks = [pytest.mark.slow] if runs and SLOW.search(block.body) else []
    return pytest.param(block, id=block.id, marks=marks)


@pytest.fixture
def workdir(tmp_path) -> tuple[Path, dict[str, str]]:
    """A directory with the repository's examples, benchmarks and docs; the environment that runs this checkout's
    devmem on the cpu platform, with a ledger and a profile store of its own."""
    for name in ("examples", "benchmarks", "docs"):
        (tmp_path / name).symlink_to(REPO / name)
    bin_dir = tmp_path / ".bin"
    bin_dir.mkdir()
    (bin_dir / "devmem").write_text(f'#!/bin/sh\nexec "{sys.executable}" -m devmem "$@"\n')
    (bin_dir / "devmem").chmod(0o755)
    # a script, not a link: a link to a virtualenv's python runs the base interpreter, without the venv's packages
    (bin_dir / "python").write_text(f'#!/bin/sh\nexec "{sys.executable}" "$@"\n')
    (bin_dir / "python").chmod(0o755)
    env = {k: v for k, v in os.environ.items() if k not in ("COLUMNS", "NO_COLOR", "DEVMEM_LOAD_PLUGINS")}
    env.update(
        DEVMEM_PLATFORM="cpu",
        DEVMEM_LEDGER_DIR=str(tmp_path / ".ledger"),  # a block's reservations are its own, never the host's
        DEVMEM_PROFILE_DIR=str(tmp_path / ".profiles"),
        PATH=f"{bin_dir}{os.pathsep}{env.get('PATH', '')}",
        PYTHONPATH=os.pathsep.join(filter(None, [str(REPO), env.get("PYTHONPATH")])),
    )
    return tmp_path, env


def run(argv: list[str], cwd: Path, env: dict[str, str]) -> subprocess.CompletedProcess:
    return subprocess.run(argv, cwd=cwd, env=env, capture_output=True, text=True, timeout=600)


def commands(body: str) -> list[tuple[str, list[str]]]:
    """``$ `` commands (joined over trailing backslashes), each with the output lines shown after it."""
    out: list[tuple[str, list[str]]] = []
    lines = body.splitlines()
    i = 0
    while i < len(lines):
        if not lines[i].startswith("$ "):
            raise AssertionError(f"output before any command: {lines[i]!r}")
        command = lines[i][2:]
        while command.endswith("\\"):
            i += 1
            command = command[:-1] + lines[i].strip()
        i += 1
        shown = []
        while i < len(lines) and not lines[i].startswith("$ "):
            shown.append(lines[i])
            i += 1
        out.append((command, shown))
    return out


def matches(shown: list[str], printed: list[str]) -> bool:
    """Whether ``printed`` is what ``shown`` shows: ``...`` is any lines, ``text ...`` any line starting so."""
    if not shown:
        return not printed
    head, rest = shown[0], shown[1:]
    if head == "...":
        return any(matches(rest, printed[k:]) for k in range(len(printed) + 1))
    if not printed:
        return False
    same = printed[0].startswith(head[:-4]) if head.endswith(" ...") else printed[0] == head
    return same and matches(rest, printed[1:])


def test_every_block_is_found_and_known():
    unknown = [b.id for b in BLOCKS if b.lang not in ("python", "bash", "sh", "console", "toml", "text")]
    assert len(BLOCKS) >= 20 and unknown == [], f"give these blocks an info string (text for prose): {unknown}"


@pytest.mark.parametrize("block", [param(b) for b in BLOCKS])
def test_doc_block_runs_as_written(block: Block, workdir):
    cwd, env = workdir
    if block.mark == "skip":
        pytest.skip(block.reason)
    if block.mark == "recorded":
        [(_, shown)] = commands(block.body)
        recorded = (REPO / block.reason).read_text(encoding="utf-8").splitlines()
        assert shown == recorded, f"{block.id} differs from {block.reason}"
        return
    if block.lang == "python":
        compile(block.body, block.id, "exec")
        if block.mark == "compile-only":
            return
        done = run([sys.executable, "-c", block.body], cwd, env)
        assert done.returncode == 0, f"{block.id}:\n{done.stderr[-3000:]}"
    elif block.lang in ("bash", "sh"):
        done = run(["bash", "-e", "-c", block.body], cwd, env)
        assert done.returncode == 0, f"{block.id}:\n{done.stdout[-2000:]}\n{done.stderr[-3000:]}"
    elif block.lang == "console":
        for command, shown in commands(block.body):
            done = run(["bash", "-c", command], cwd, env)
            assert done.returncode in (0, 1) and "Traceback" not in done.stderr, f"{command}\n{done.stderr}"
            printed = done.stdout.splitlines()
            assert not shown or matches(shown, printed), f"{block.id}: {command}\n" + "\n".join(printed)
    elif block.lang == "toml":
        pytest.importorskip("tomllib", reason="tomllib is Python 3.11+").loads(block.body)


def undefined_names(source: str) -> list[str]:
    """The global names ``source`` reads that it neither assigns, imports nor defines, builtins aside."""
    top = symtable.symtable(source, "<block>", "exec")
    defined = {s.get_name() for s in top.get_symbols() if s.is_assigned() or s.is_imported() or s.is_namespace()}
    read: set[str] = set()
    tables = [top]
    while tables:
        table = tables.pop()
        read.update(s.get_name() for s in table.get_symbols() if s.is_referenced() and (table is top or s.is_global()))
        tables.extend(table.get_children())
    return sorted(read - defined - set(dir(builtins)))


def discarded(source: str) -> list[str]:
    """The statements of ``source`` that compute a value for a reader and drop it: a bare expression that is no
    call (``model.kv_bytes_per_token``), or an ``explain()``/``as_dict()`` whose text goes nowhere."""
    import ast

    found = []
    statements = list(ast.parse(source).body)
    while statements:  # the program's own statements, in blocks (with, for, if) too; not a function's
        node = statements.pop(0)
        if isinstance(node, (ast.With, ast.For, ast.If, ast.While, ast.Try)):
            statements += [*node.body, *getattr(node, "orelse", [])]
        if not isinstance(node, ast.Expr) or isinstance(node.value, ast.Constant):  # a docstring, `...`
            continue
        value = node.value
        shown = isinstance(value, ast.Call) and not (
            isinstance(value.func, ast.Attribute) and value.func.attr in ("explain", "as_dict")
        )
        if not shown:
            found.append(ast.unparse(value))
    return found


@pytest.mark.parametrize("block", [pytest.param(b, id=b.id) for b in BLOCKS if b.lang == "python" and b.mark is None])
def test_python_block_prints_what_it_computes(block: Block):
    assert discarded(block.body) == [], f"{block.id}: print what these compute"


def test_a_value_computed_and_dropped_is_found():
    source = "x = load()\nx.kv_bytes_per_token\nwith x:\n    plan(x).explain()\nprint(plan(x).explain())\nrun(x)\n..."
    assert discarded(source) == ["x.kv_bytes_per_token", "plan(x).explain()"]


@pytest.mark.parametrize(
    "block", [pytest.param(b, id=b.id) for b in BLOCKS if b.lang == "python" and b.mark != "compile-only"]
)
def test_python_block_uses_only_the_names_it_defines(block: Block):
    try:
        names = undefined_names(block.body)
    except SyntaxError:
        if block.mark != "skip":
            raise
        pytest.skip(f"not Python: {block.reason}")
    assert names == [], f"{block.id} reads names it does not define: {names}"


def test_undefined_names_are_found_in_functions_and_at_the_top_level():
    assert undefined_names("import os\ndef f():\n    return os, name\nprint(prompts)\n") == ["name", "prompts"]


#: ``devmem plan`` / ``devmem fit`` with ``--model X`` anywhere in a doc, prose included.
MODEL_ARGUMENT = re.compile(r"devmem (?:plan|fit)\b[^`|\n]*?--model ([^\s`]+)")


def test_every_model_a_doc_plans_for_is_shipped():
    named = {(doc.name, m) for doc in DOCS for m in MODEL_ARGUMENT.findall(doc.read_text(encoding="utf-8"))}
    assert len(named) >= 5
    assert [(doc, m) for doc, m in named if m != "PATH" and not (REPO / m).is_file()] == []


@pytest.mark.parametrize(
    ("shown", "printed", "same"),
    [
        (["a", "...", "d"], ["a", "b", "c", "d"], True),
        (["a", "b ..."], ["a", "b and more"], True),
        (["a", "b"], ["a", "c"], False),
        (["a"], ["a", "b"], False),
    ],
)
def test_a_sample_output_matches_only_what_it_shows(shown, printed, same):
    assert matches(shown, printed) is same
