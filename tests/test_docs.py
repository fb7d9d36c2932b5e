"""What the code and the docs cite, the repository holds."""

from __future__ import annotations

import re
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
FOLDERS = ("devmem", "devmem_nvidia", "devmem_rocm", "devmem_uma", "tests", "benchmarks", "examples", "docs")
SOURCES = [p for d in FOLDERS for p in (REPO / d).rglob("*") if p.suffix in (".py", ".md")] + [REPO / "README.md"]


def test_every_cited_doc_exists():
    cited = {
        (src.relative_to(REPO), doc)
        for src in SOURCES
        for doc in re.findall(r"\bdocs/[\w.-]+\.md\b", src.read_text(encoding="utf-8"))
    }
    assert cited and not {(str(src), doc) for src, doc in cited if not (REPO / doc).is_file()}


def test_no_design_document_outside_the_repository_is_cited():
    here = Path(__file__).resolve()
    assert [str(src) for src in SOURCES if src != here and "DESIGN.md" in src.read_text(encoding="utf-8")] == []


def test_the_command_line_synopsis_shows_which_flags_exclude_each_other_as_the_parser_has_them():
    from devmem.command.main import build_parser

    parser = build_parser()
    commands = parser._subparsers._group_actions[0].choices  # type: ignore[union-attr]
    text = (REPO / "docs" / "models.md").read_text(encoding="utf-8")
    synopsis = text.split("## From the command line", 1)[1].split("```text\n", 1)[1].split("```", 1)[0]
    for usage in re.split(r"\n(?=devmem )", synopsis):
        command = commands[usage.split()[1]]
        groups = command._mutually_exclusive_groups
        exclusive = {frozenset(a.option_strings[-1] for a in g._group_actions) for g in groups}
        shown = {frozenset(pair) for pair in re.findall(r"\[(--[\w-]+)[^]|]*\| (--[\w-]+)[^]]*\]", usage)}
        flags = {flag for action in command._actions for flag in action.option_strings}
        assert shown == exclusive and set(re.findall(r"--[\w-]+", usage)) <= flags, usage
