"""The vLLM releases the plugin's tests run on: each installed in a folder of its own (``.ci/run``:
``pip install --no-deps --target <root>/vllm-<release>``), each run in a pytest process of its own, since two vLLMs
cannot share one interpreter (a second import re-registers vLLM's torch types). :func:`outcome` runs
``tests/integrations/vllm_plugin_cases.py`` once per release and answers each case's result from that run's JUnit
report."""

from __future__ import annotations

import ast
import functools
import os
import subprocess
import sys
import tempfile
import xml.etree.ElementTree as ElementTree
from dataclasses import dataclass
from pathlib import Path

import pytest

#: The releases the plugin is checked on in CI: the newest patch of every minor release from 0.24 to 0.34
#: (docs/vllm.md's table). .ci/run reads this tuple to install them.
RELEASES = (
    "0.24.0",
    "0.25.1",
    "0.26.0",
    "0.27.1",
    "0.28.0",
    "0.29.0",
    "0.30.0",
    "0.31.0",
    "0.32.0",
    "0.33.0",
    "0.34.0",
)
#: Where the releases are installed, one folder each (``vllm-<release>``); /tmp by default, as .ci/run does.
ROOT_ENV = "DEVMEM_TEST_VLLM_ROOT"
#: Which release a case process was started for (the cases check that it is the one they imported).
RELEASE_ENV = "DEVMEM_TEST_VLLM_RELEASE"
CASES = Path(__file__).with_name("vllm_plugin_cases.py")
#: A release's cases finish in well under a minute on two cores; a process past this is killed and reported.
TIMEOUT_S = 600


def folder(release: str) -> Path:
    return Path(os.environ.get(ROOT_ENV) or "/tmp") / f"vllm-{release}"


def case_names() -> list[str]:
    """The cases' test functions, read from the file (importing it would import vLLM)."""
    tree = ast.parse(CASES.read_text())
    return [node.name for node in tree.body if isinstance(node, ast.FunctionDef) and node.name.startswith("test_")]


@dataclass(frozen=True)
class Outcome:
    status: str  # "passed", "failed" or "skipped"
    text: str


@functools.cache
def outcomes(release: str) -> dict[str, list[Outcome]]:
    """Every case's outcomes (one per parameter set) in one pytest process importing ``release`` from its folder."""
    with tempfile.TemporaryDirectory() as tmp:
        report = Path(tmp) / "report.xml"
        env = dict(os.environ)
        env[RELEASE_ENV] = release
        env["PYTHONPATH"] = os.pathsep.join([str(folder(release)), *filter(None, [os.environ.get("PYTHONPATH")])])
        argv = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", f"--junitxml={report}", str(CASES)]
        try:
            done = subprocess.run(
                argv, cwd=CASES.parents[1], env=env, capture_output=True, text=True, timeout=TIMEOUT_S
            )
            output = done.stdout + done.stderr
        except subprocess.TimeoutExpired as exc:
            output = f"killed after {TIMEOUT_S} s: {exc.stdout or ''}{exc.stderr or ''}"
        if not report.exists():
            return {"": [Outcome("failed", f"vLLM {release}'s cases left no report:\n{output[-8000:]}")]}
        return _parsed(report)


def _parsed(report: Path) -> dict[str, list[Outcome]]:
    found: dict[str, list[Outcome]] = {}
    for case in ElementTree.parse(report).iter("testcase"):
        name = case.get("name", "").split("[")[0]
        status, text = "passed", ""
        for child in case:
            if child.tag in ("failure", "error"):
                status, text = "failed", f"{child.get('message', '')}\n{child.text or ''}"
                break
            if child.tag == "skipped":
                status, text = "skipped", child.get("message", "")
        found.setdefault(name, []).append(Outcome(status, text))
    return found


def check(release: str, case: str) -> None:
    """Pass, fail or skip as ``case`` did on ``release`` (skipped where the release is not installed)."""
    where = folder(release)
    if not (where / "vllm").is_dir():
        pytest.skip(
            f"vLLM {release} is not installed in {where} (.ci/run installs it: pip install --no-deps --target {where})"
        )
    found = outcomes(release)
    if "" in found:
        pytest.fail(found[""][0].text, pytrace=False)
    if case not in found:
        pytest.fail(f"vLLM {release}'s cases ran no {case} (collected: {sorted(found)})", pytrace=False)
    failed = [o.text for o in found[case] if o.status == "failed"]
    if failed:
        pytest.fail(f"on vLLM {release}:\n" + "\n".join(failed), pytrace=False)
    if all(o.status == "skipped" for o in found[case]):
        pytest.skip(f"on vLLM {release}: {found[case][0].text}")
