"""The end-of-run table: per arm, what the results file holds (resumed runs included)."""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .errors import StoreError
from .records import Key, row_key
from .store import iter_records


@dataclass
class ArmTally:
    items: int = 0
    correct: int = 0
    unparseable: int = 0
    errors: int = 0
    wall: float = 0.0
    not_completed: int = 0

    @property
    def pass_rate(self) -> float:
        return self.correct / self.items if self.items else 0.0


def tally(path: Path) -> dict[tuple[str, str], ArmTally]:
    """Count each (benchmark, task_id, arm) once, even in a file with duplicated rows."""
    arms: dict[tuple[str, str], ArmTally] = defaultdict(ArmTally)
    default = ""
    seen: set[Key] = set()
    try:
        # One row at a time; the table only counts, and resume is what refuses garbage.
        for record in iter_records(path, strict=False):
            if record.data.get("_meta"):
                default = str(record.data.get("benchmark", "")) if record.lineno == 1 else default
                continue
            _count(arms, seen, record.data, default)
    except StoreError:
        return defaultdict(ArmTally)
    return arms


def _count(arms: dict[tuple[str, str], ArmTally], seen: set[Key], row: dict[str, Any], default: str) -> None:
    key = row_key(row, default)
    if key in seen:
        return
    seen.add(key)
    t = arms[(key[0], key[2])]
    t.items += 1
    t.correct += bool(row.get("passed"))
    t.unparseable += row.get("status", row.get("detail")) == "unparseable"
    t.errors += row.get("status") == "error"
    t.wall += float(row.get("wall_seconds") or 0.0)


def summarize(path: Path, not_completed: dict[tuple[str, str], int]) -> list[str]:
    arms = tally(path)
    for key, count in not_completed.items():
        arms[key].not_completed += count
    if not arms:
        return []
    header = ("benchmark", "arm", "items", "correct", "pass rate", "unparseable", "errors", "not completed", "mean wall s")
    rows = [header] + [
        (b, a, str(t.items), str(t.correct), f"{t.pass_rate:.3f}", str(t.unparseable), str(t.errors),
         str(t.not_completed), f"{t.wall / t.items:.3f}" if t.items else "-")
        for (b, a), t in sorted(arms.items())
    ]
    widths = [max(len(r[i]) for r in rows) for i in range(len(header))]
    return ["  ".join(c.ljust(w) if i < 2 else c.rjust(w) for i, (c, w) in enumerate(zip(r, widths, strict=True))) for r in rows]
