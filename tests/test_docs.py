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
