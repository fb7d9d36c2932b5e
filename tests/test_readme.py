"""The README's Python snippets type-check with mypy (the project's configuration); those that need no GPU run."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
SNIPPETS = re.findall(r"```python\n(.*?)```", (REPO / "README.md").read_text(encoding="utf-8"), re.S)
ENGINE = next(s for s in SNIPPETS if "EngineMemory" in s)
SCRIPTED = next(s for s in SNIPPETS if "ScriptedNvml" in s)


@pytest.fixture(scope="module")
def mypy_report(tmp_path_factory) -> dict[str, str]:
    """mypy's findings for each snippet, by snippet file name, from one run."""
    pytest.importorskip("mypy", reason="mypy is not installed (pip install -e '.[test]')")
    root = tmp_path_factory.mktemp("readme")
    files = []
    for index, snippet in enumerate(SNIPPETS):
        files.append(root / f"readme_snippet_{index}.py")
        files[-1].write_text(snippet, encoding="utf-8")
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "mypy",
            "--config-file",
            REPO / "pyproject.toml",
            "--cache-dir",
            root / "cache",
            "--no-error-summary",
            *files,
        ],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode in (0, 1), done.stdout + done.stderr  # 2: mypy itself failed
    return {f.name: "\n".join(line for line in done.stdout.splitlines() if f.name in line) for f in files}


def test_the_readme_has_python_snippets():
    assert len(SNIPPETS) >= 2


@pytest.mark.slow  # one mypy run: `pytest -m slow` and CI run it
@pytest.mark.parametrize("index", range(len(SNIPPETS)))
def test_readme_python_snippet_type_checks(mypy_report, index):
    assert mypy_report[f"readme_snippet_{index}.py"] == ""


def test_readme_engine_snippet_runs_on_the_cpu_platform(tmp_path):
    env = {**os.environ, "DEVMEM_PLATFORM": "cpu"}
    done = subprocess.run(
        [sys.executable, "-c", ENGINE], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    assert "KV cache" in done.stdout, done.stdout
    assert "layout: one allocation, rounded up once to 2.00 MiB" in done.stdout, done.stdout
    assert "allocated " in done.stdout, done.stdout


def test_readme_scripted_machine_snippet_runs(tmp_path):
    done = subprocess.run([sys.executable, "-c", SCRIPTED], cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
