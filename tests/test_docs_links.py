"""The README and docs are self-contained: every document they point at is in the repository."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
LINK = re.compile(r"\]\(([^)#\s]+)(?:#[^)]*)?\)")
# a .md file named in prose or code spans: `docs/rewards.md`, (design.md, principle 1)
NAMED = re.compile(r"(?<![\w/.-])((?:docs/)?[\w-]+\.md)\b")


@pytest.mark.parametrize("doc", DOCS, ids=lambda p: p.name)
def test_every_document_a_doc_points_at_exists(doc: Path) -> None:
    text = doc.read_text()
    missing = []
    for target in LINK.findall(text):
        if "://" in target or target.startswith("mailto:"):
            continue
        if not (doc.parent / target).exists():
            missing.append(target)
    for name in NAMED.findall(text):
        if not any((base / name).exists() for base in (doc.parent, ROOT, ROOT / "docs")):
            missing.append(name)
    lacking = sorted(set(missing))
    assert not lacking, f"{doc.relative_to(ROOT)} points at files the repository lacks: {lacking}"


@pytest.mark.parametrize("doc", DOCS, ids=lambda p: p.name)
def test_no_doc_points_outside_the_repository(doc: Path) -> None:
    text = doc.read_text()
    outside = re.findall(r"(?:\.\./shared|/work/\S+|/home/\S+)", text)
    if doc.name in ("machines.md", "design.md"):  # measured-machine prose may name host paths
        outside = [o for o in outside if "shared" in o]
    assert not outside, f"{doc.relative_to(ROOT)} points outside the repository: {outside}"
