"""Every Markdown table in the README and docs/ renders as a table: a group of `|` lines starts
with a header and its delimiter row after a blank line, and every row has the header's cells.

A paragraph left inside the options table once turned every row after it into a line of raw pipes.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
DELIMITER = re.compile(r"^\|?\s*:?-+:?\s*(\|\s*:?-+:?\s*)*\|?$")
CELL_BREAK = re.compile(r"(?<!\\)\|")  # GFM splits on every pipe not escaped, in code spans too


def cells(row: str) -> int:
    """The cells GFM gives a row: its pipes, less the outer ones."""
    inner = row.strip()
    inner = inner[1:] if inner.startswith("|") else inner
    inner = inner[:-1] if inner.endswith("|") and not inner.endswith("\\|") else inner
    return len(CELL_BREAK.split(inner))


def blocks(text: str) -> list[tuple[int, list[str], str]]:
    """Each group of consecutive lines starting with `|` outside fenced code: its first line number,
    its lines, and the line before it."""
    found: list[tuple[int, list[str], str]] = []
    fenced, before, group, start = False, "", [], 0
    for number, line in enumerate(text.splitlines(), 1):
        if line.lstrip().startswith("```"):
            fenced = not fenced
        if not fenced and line.startswith("|"):
            if not group:
                start = number
            group.append(line)
            continue
        if group:
            found.append((start, group, before))
            group = []
        before = line
    if group:
        found.append((start, group, before))
    return found


def problems(text: str) -> list[str]:
    """What keeps a table of ``text`` from rendering as one, by line number."""
    found: list[str] = []
    for start, rows, before in blocks(text):
        if len(rows) < 2 or not DELIMITER.match(rows[1].strip()):
            found.append(
                f"line {start}: rows without a header and delimiter row: they render as raw pipes"
            )
            continue
        if before.strip() and not before.lstrip().startswith("#"):
            found.append(f"line {start}: a table right after a paragraph line: it renders as text")
        width = cells(rows[0])
        found += [f"line {start + i}: {cells(row)} cells, the header has {width}"
                  for i, row in enumerate(rows) if cells(row) != width]
    return found


def test_a_paragraph_inside_a_table_is_found() -> None:
    table = "| a | b |\n|---|---|\n| 1 | 2 |\n\nsome text\n\n| 3 | 4 |\n| 5 | `x|y` |\n"
    assert problems(table) == [
        "line 7: rows without a header and delimiter row: they render as raw pipes"
    ]
    assert problems("| a | b |\n|---|---|\n| 1 | `x|y` |\n") == [
        "line 3: 3 cells, the header has 2"
    ]
    assert problems("| a | b |\n|---|---|\n| 1 | `x\\|y` |\n") == []


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.name)
def test_every_table_renders_as_a_table(page: Path) -> None:
    assert problems(page.read_text(encoding="utf-8")) == []
