"""pytest plugin (entry point ``pytest11``): ``--devmem-platform NAME`` certifies an installed platform.

``pytest --pyargs devmem.testing --devmem-platform NAME`` runs the conformance kit
(:mod:`devmem.testing.test_installed_platform`) against the platform ``NAME`` on this machine (``devmem plugins``
lists the names). Without
the option those tests skip. The plugin also prints the per-call and detection times that the kit
records: each class's with ``--devmem-platform`` or ``--devmem-times``, else one line saying how many classes
have them (a whole suite's would push pytest's verdict off the screen). It is loaded by every pytest run where
devmem is installed, so it imports nothing but pytest.
"""

from __future__ import annotations

import pytest

INSTALLED_MODULE = "devmem.testing.test_installed_platform"

pytest.register_assert_rewrite("devmem.testing.conformance")


def pytest_addoption(parser):
    group = parser.getgroup("devmem")
    group.addoption(
        "--devmem-platform",
        default=None,
        metavar="NAME",
        help="run devmem's conformance kit against the installed platform NAME",
    )
    group.addoption(
        "--devmem-times",
        action="store_true",
        default=False,
        help="print each conformance class's time per call in the summary (with --devmem-platform too)",
    )


def pytest_configure(config):
    name = config.getoption("devmem_platform", None)
    if not name:
        return
    import devmem
    from devmem.testing.fixtures import installed_platform

    try:
        installed_platform(name)
    except devmem.DevmemError as exc:
        raise pytest.UsageError(f"--devmem-platform {name}: {exc}") from exc


def pytest_report_header(config):
    name = config.getoption("devmem_platform", None)
    if name:
        return f"devmem: certifying the installed platform {name!r} ({INSTALLED_MODULE})"
    return None


def pytest_collection_modifyitems(config, items):
    if config.getoption("devmem_platform", None):
        return
    skip = pytest.mark.skip(
        reason="devmem's installed-platform conformance runs only with --devmem-platform NAME "
        "(`devmem plugins` lists the names)"
    )
    for item in items:
        module = getattr(item, "module", None)
        if getattr(module, "__name__", None) == INSTALLED_MODULE:
            item.add_marker(skip)


def _format(prop: str, value: object) -> str:
    if prop == "devmem_call_seconds" and isinstance(value, dict):
        return ", ".join(f"{member} {seconds * 1e6:.1f} us" for member, seconds in value.items())
    if prop == "devmem_detect_seconds" and isinstance(value, (int, float)):
        return f"resolution in a fresh process {value * 1e3:.0f} ms"
    return ""


def pytest_terminal_summary(terminalreporter):
    lines = []
    for reports in terminalreporter.stats.values():
        for report in reports:
            for prop, value in getattr(report, "user_properties", ()):
                text = _format(prop, value)
                if text and getattr(report, "when", "call") == "call":
                    lines.append(f"{'::'.join(report.nodeid.split('::')[:2])}: {text}")
    if not lines:
        return
    config = terminalreporter.config
    if config.getoption("devmem_times", False) or config.getoption("devmem_platform", None):
        terminalreporter.write_sep("-", "devmem: time per call (median)")
        for line in sorted(lines):
            terminalreporter.write_line(line)
    else:
        classes = len({line.split(": ", 1)[0] for line in lines})
        what = "class" if classes == 1 else "classes"
        shows = "--devmem-times shows them"
        terminalreporter.write_line(f"devmem: times per call of {classes} conformance {what}: {shows}")
