"""Every reference page under docs/ is found from the README and from docs/architecture.md, and
every relative link in them points at a file that exists."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs"
LINK = re.compile(r"\]\(([^)#\s]+)(?:#[^)]*)?\)")  # [text](target#anchor)


def _targets(page: Path) -> set[Path]:
    """The files the page's relative Markdown links point at."""
    text = page.read_text(encoding="utf-8")
    return {
        (page.parent / t).resolve()
        for t in LINK.findall(text)
        if "://" not in t and not t.startswith("mailto:")
    }


PAGES = sorted(p for p in DOCS.glob("*.md") if p.name != "architecture.md")


@pytest.mark.parametrize("index", ["README.md", "docs/architecture.md"])
def test_every_reference_page_is_linked_from_the_readme_and_the_architecture(index: str) -> None:
    linked = _targets(ROOT / index)
    assert PAGES and [p.name for p in PAGES if p.resolve() not in linked] == []


@pytest.mark.parametrize(
    "page", [ROOT / "README.md", *sorted(DOCS.glob("*.md"))], ids=lambda p: p.name
)
def test_every_relative_link_points_at_a_file(page: Path) -> None:
    assert [
        str(t.relative_to(ROOT)) if t.is_relative_to(ROOT) else str(t)
        for t in _targets(page)
        if not t.exists()
    ] == []
