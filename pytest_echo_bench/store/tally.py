"""Per-arm counts of a results file, read incrementally: the end-of-run table, resume's start-up
count and the live summary all build on ``FileTally``."""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import msgspec

from pytest_echo_bench.errors import StoreError
from pytest_echo_bench.store.files import STATUSES, legacy_status
from pytest_echo_bench.store.keyscan import RowScan, ScanRow
from pytest_echo_bench.store.reader import parse_line
from pytest_echo_bench.store.records import KeySet


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


class TallyRow(ScanRow, gc=False):
    """The fields the table counts; the rest of each row is validated, not built.

    Typed as our writer writes them (faster to decode); a row with other types goes to the
    full parser and is counted by the same rules.
    """

    passed: bool | None = None
    status: str | None | msgspec.UnsetType = msgspec.UNSET  # older rows: the verdict is in detail
    detail: str | None = None
    wall_seconds: float | None = None


class FileTally:
    """Per-arm counts of a results file, each (benchmark, task_id, arm) once, kept up to date.

    ``update`` reads only what was appended since the last call: a resumed run counts the rows
    it starts with once, and its end-of-run table reads just the rows it added.
    """

    def __init__(self) -> None:
        self.arms: dict[tuple[str, str], ArmTally] = defaultdict(ArmTally)
        self.seen = KeySet()  # every key counted: the recorded keys resume deselects
        self.meta: dict[str, Any] | None = None
        self.end = (0, 1)  # where the next update starts reading: byte offset, line number

    def update(self, path: Path, strict: bool = False) -> dict[tuple[str, str], ArmTally]:
        """Count what was appended since the last update.

        Not ``strict`` (the table only counts), a line that is not a row is skipped; ``strict``
        (resume reading what it deselects), it is refused with its line number, as by ``read_index``.
        """
        scan = RowScan(path, TallyRow, lambda raw, lineno, last_ok: parse_line(raw, path, lineno, strict and last_ok),
                       start=self.end)
        try:
            for fast, slow in scan.batches():
                self.meta = scan.meta or self.meta
                self._add(fast, slow)
        except StoreError:
            raise
        except OSError as exc:
            if strict:
                raise StoreError(f"cannot read results file {path}: {exc.strerror or exc}") from exc
        self.end = scan.end
        return self.arms

    def _add(self, fast: list[TallyRow], slow: list[dict[str, Any]]) -> None:
        arms, by_arm, default = self.arms, self.seen.by_arm, str((self.meta or {}).get("benchmark", ""))
        # One loop, no call per row: a resumed million-row file is counted here.
        for r in fast + [_from_dict(d) for d in slow]:
            arm = (r.benchmark or default, r.arm)
            ids = by_arm.get(arm)
            if ids is None:
                ids = by_arm[arm] = set()
            elif r.task_id in ids:
                continue
            ids.add(r.task_id)
            t = arms[arm]
            t.items += 1
            t.correct += bool(r.passed)
            verdict = r.status if r.status in STATUSES else legacy_status(r.passed, r.detail)
            t.unparseable += verdict == "unparseable"
            t.errors += verdict == "error"
            t.wall += float(r.wall_seconds or 0.0)


def _from_dict(d: dict[str, Any]) -> TallyRow:
    """A row the full parser read, with the key rules of ``records.row_key`` (its values kept as they are)."""
    return TallyRow(task_id=str(d["task_id"]), arm=str(d["arm"]),
                    benchmark=str(d["benchmark"]) if d.get("benchmark") else None, passed=d.get("passed"),
                    status=d.get("status", msgspec.UNSET), detail=d.get("detail"), wall_seconds=d.get("wall_seconds"))
