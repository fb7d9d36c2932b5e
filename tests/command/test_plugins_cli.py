"""Resolution as ``devmem info`` and ``devmem plugins`` show it, run in a subprocess with real throwaway plugins."""

from __future__ import annotations

import json
import os
import subprocess
import sys

from plugin_dists import memory_dist, platform_dist, write_dist

from devmem.types import MiB


def devmem(site, *args: str, **env: str) -> subprocess.CompletedProcess:
    environ = {k: v for k, v in os.environ.items() if k not in ("DEVMEM_PLATFORM", "DEVMEM_LOAD_PLUGINS")}
    environ.update(PYTHONPATH=os.pathsep.join(filter(None, [str(site), environ.get("PYTHONPATH")])), **env)
    return subprocess.run(
        [sys.executable, "-m", "devmem", *args], capture_output=True, text=True, env=environ, timeout=60
    )


def test_info_shows_the_higher_priority_duplicate_and_detects_once(site):
    low, low_calls = memory_dist(site, "alpha-vendor", "dup", priority=10, total=1000 * MiB)
    high, high_calls = memory_dist(site, "zeta-vendor", "dup", priority=90, total=9000 * MiB)
    done = devmem(site, "info", "--json", DEVMEM_LOAD_PLUGINS=f"{low},{high}")
    assert done.returncode == 0, done.stderr
    info = json.loads(done.stdout)
    assert (info["platform"], info["distribution"]) == ("dup", "zeta-vendor")
    assert info["devices"][0]["total"] == 9000 * MiB
    assert high_calls.read_text().splitlines() == ["detect", "factory"]
    assert low_calls.read_text().splitlines() == ["detect"]


def test_plugins_table_shows_both_providers_and_why_one_wins(site):
    low, _ = memory_dist(site, "alpha-vendor", "dup", priority=10, total=1000 * MiB)
    high, _ = memory_dist(site, "zeta-vendor", "dup", priority=90, total=9000 * MiB)
    done = devmem(site, "plugins", DEVMEM_LOAD_PLUGINS=f"{low},{high}", COLUMNS="400")
    assert done.returncode == 0, done.stderr
    rows = done.stdout.splitlines()
    winner = next(r for r in rows if "zeta-vendor" in r.split()[:5])
    loser = next(r for r in rows if "alpha-vendor" in r.split()[:5])
    assert winner.startswith("*") and "this one wins" in winner
    assert not loser.startswith("*") and "priority 90" in loser


def test_plugin_calling_sys_exit_in_detect_does_not_end_the_command(site):
    body = """
    import sys
    import devmem
    @devmem.hookimpl
    def devmem_platforms():
        yield devmem.PlatformSpec(name="quitter", priority=50, detect=lambda: sys.exit(3), factory=object)
    """
    entry = write_dist(site, "vendor-quitter", body)
    done = devmem(site, "plugins", "--json", DEVMEM_LOAD_PLUGINS=entry)
    assert done.returncode == 0, done.stderr
    quitter = next(c for c in json.loads(done.stdout) if c["name"] == "quitter")
    assert not quitter["detected"] and "SystemExit" in quitter["reason"]
    assert "'vendor-quitter'" in done.stderr and "SystemExit" in done.stderr


def test_plugins_shows_a_plugins_control_characters_as_escapes(site):
    entry = platform_dist(site, "loud-vendor", "loud", 5, found=False, reason="no device\x1b]0;retitled\x07\x1b[2J")
    done = devmem(site, "plugins", DEVMEM_LOAD_PLUGINS=entry)
    assert done.returncode == 0, done.stderr
    assert "\x1b" not in done.stdout and "\x07" not in done.stdout
    assert "no device\\x1b]0;retitled\\x07\\x1b[2J" in done.stdout
