"""The end-of-run table: per arm, what the results file holds (resumed runs included)."""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import msgspec

from .keyscan import RowScan
from .records import Key, row_key
from .store import parse_line


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


class TallyRow(msgspec.Struct, gc=False):
    """The fields the table counts; the rest of each row is validated, not built."""

    task_id: str
    arm: str
    benchmark: str | None = None
    passed: Any = None
    status: Any = msgspec.UNSET  # older rows carry the verdict in ``detail`` only
    detail: Any = None
    wall_seconds: Any = None


def tally(path: Path) -> dict[tuple[str, str], ArmTally]:
    """Count each (benchmark, task_id, arm) once, even in a file with duplicated rows."""
    arms: dict[tuple[str, str], ArmTally] = defaultdict(ArmTally)
    seen: set[Key] = set()
    # The table only counts, and resume is what refuses garbage: skip what is not a row.
    scan = RowScan(path, TallyRow, lambda raw, lineno, strict: parse_line(raw, path, lineno, False))
    try:
        for fast, slow in scan.batches():
            default = str((scan.meta or {}).get("benchmark", ""))
            for r in fast:
                status = None if r.status is msgspec.UNSET else r.status
                verdict = r.detail if r.status is msgspec.UNSET else r.status
                _count(arms, seen, (r.benchmark or default, r.task_id, r.arm), r.passed, status, verdict,
                       r.wall_seconds)
            for d in slow:
                _count(arms, seen, row_key(d, default), d.get("passed"), d.get("status"),
                       d.get("status", d.get("detail")), d.get("wall_seconds"))
    except OSError:
        return defaultdict(ArmTally)
    return arms


def _count(arms: dict[tuple[str, str], ArmTally], seen: set[Key], key: Key, passed: Any, status: Any,
           verdict: Any, wall: Any) -> None:
    """``verdict`` is the status, or an older row's detail; only a status says error."""
    if key in seen:
        return
    seen.add(key)
    t = arms[(key[0], key[2])]
    t.items += 1
    t.correct += bool(passed)
    t.unparseable += verdict == "unparseable"
    t.errors += status == "error"
    t.wall += float(wall or 0.0)


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
