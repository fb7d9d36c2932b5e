"""The ``devmem`` command imports what the command it runs needs: no other command's module, no HTTP stack, and no
model registry on the screens that read no model. Each case runs the command in a fresh interpreter and lists the
modules it loaded; help texts still give the defaults those modules define."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
CONFIG = str(ROOT / "examples" / "configs" / "qwen3-8b.json")
#: What no command needs but the one that serves (the exporter) or reads a model (plan --model, fit).
HTTP = ("http.server", "wsgiref.simple_server", "socketserver", "prometheus_client", "devmem.exporter")
MODELS = ("devmem.planner.models", "devmem.planner.capacity", "devmem.planner.engine_layout")
#: Heavy modules the screens do without: dataclasses pulls in inspect (ast, dis, tokenize), hashlib OpenSSL, shutil
#: the compression modules (unless the interpreter's own start imported them already).
HEAVY = ("dataclasses", "hashlib", "shutil", "torch")
COMMAND_MODULES = {f"devmem.command.{c}" for c in ("info", "top", "plugins", "doctor", "plan", "fit", "exporter")}


def loaded(tmp_path: Path, *argv: str) -> set[str]:
    """The modules a fresh interpreter holds after ``devmem argv`` (the cpu platform, a ledger of the test's own),
    less those its start (``site``, and what the environment's ``.pth`` files import) holds already."""
    code = (
        "import json, sys\n"
        "from devmem.command.main import main\n"
        "code = main(sys.argv[1:])\n"
        "sys.stderr.write('\\nMODULES ' + json.dumps(sorted(sys.modules)))\n"
        "sys.exit(code)\n"
    )
    env = {k: v for k, v in os.environ.items() if k not in ("DEVMEM_LOAD_PLUGINS",)}
    env.update(DEVMEM_PLATFORM="cpu", DEVMEM_LEDGER_DIR=str(tmp_path / "ledger"))
    done = subprocess.run([sys.executable, "-c", code, *argv], capture_output=True, text=True, env=env, timeout=120)
    assert done.returncode == 0, done.stderr
    bare = "import json, sys; print(json.dumps(sorted(sys.modules)))"
    start = subprocess.run(
        [sys.executable, "-c", bare], capture_output=True, text=True, env=env, timeout=60, check=True
    )
    return set(json.loads(done.stderr.rpartition("MODULES ")[2])) - set(json.loads(start.stdout))


def under(modules: set[str], prefixes: tuple[str, ...] | set[str]) -> set[str]:
    return {m for m in modules for p in prefixes if m == p or m.startswith(p + ".")}


@pytest.mark.parametrize(
    ("argv", "own"),
    [((), "info"), (("info", "--json"), "info"), (("top", "-n", "1"), "top"), (("plugins",), "plugins")],
)
def test_a_screen_imports_no_other_command_no_http_stack_and_no_model_registry(tmp_path, argv, own):
    modules = loaded(tmp_path, *argv)
    others = COMMAND_MODULES - {f"devmem.command.{own}", "devmem.command.info"}  # top draws info's samples
    assert under(modules, others | set(HTTP) | set(MODELS) | set(HEAVY)) == set()


def test_plan_with_a_model_imports_the_model_registry_but_no_http_stack(tmp_path):
    modules = loaded(tmp_path, "plan", "--model", CONFIG, "--total", "80GiB")
    assert "devmem.planner.models" in modules
    assert under(modules, (*HTTP, "devmem.command.doctor", "devmem.command.exporter")) == set()


def test_help_still_gives_the_defaults_of_the_modules_it_no_longer_imports(tmp_path):
    from devmem.exporter.server import DEFAULT_LISTEN
    from devmem.planner.capacity import DEFAULT_BLOCK_SIZE

    env = dict(os.environ, COLUMNS="200", DEVMEM_PLATFORM="cpu")
    run = [sys.executable, "-m", "devmem"]
    exporter = subprocess.run([*run, "exporter", "--help"], capture_output=True, text=True, env=env, timeout=60)
    plan = subprocess.run([*run, "plan", "--help"], capture_output=True, text=True, env=env, timeout=60)
    overview = subprocess.run([*run, "--help"], capture_output=True, text=True, env=env, timeout=60)
    assert f"default {DEFAULT_LISTEN}" in exporter.stdout
    assert f"default {DEFAULT_BLOCK_SIZE}" in plan.stdout
    assert all(f"    {c.rpartition('.')[2]} " in overview.stdout for c in COMMAND_MODULES), overview.stdout
