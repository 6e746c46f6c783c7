"""A decide monitor fed from a results file, in file order, reading on from where it stopped.

The controller (on every graded row's report), the report (once, over each file given) and the
progress page (on each refresh) all feed their monitor this way, so they see the same rows in the
same order, each key's first row counting (the one a look used), and agree on every figure: under
xdist too, where reports reach the controller in another order than the rows reach the file.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any

from pytest_echo_bench.analysis.decide.monitor import (
    Monitor,
    PairFigures,
    Sequential,
    monitor_of,
    score_of,
    sequential,
)
from pytest_echo_bench.results.ending import Collection
from pytest_echo_bench.results.read import Results
from pytest_echo_bench.store.files import STATUSES, legacy_status
from pytest_echo_bench.store.keyscan import RowScan
from pytest_echo_bench.store.reader import parse_line
from pytest_echo_bench.store.records import scan_epoch
from pytest_echo_bench.store.rows import StatusRow, fields_of


class FileFeed:
    """Feeds ``monitor`` the rows of ``path``: all of them the first
    time, then those appended since.

    A line that is not a row is skipped and an unreadable file feeds nothing: the feed must never
    break a run, and the report has read the file strictly already.
    """

    def __init__(self, path: Path, monitor: Monitor) -> None:
        self.path, self.monitor = path, monitor
        # One scan kept: it reads on from its ``end``, and its decoder is built once (a third of a
        # small update's time when built on every report).
        self.scan = RowScan(path, StatusRow, self._parse)
        self.default = ""  # the meta line's benchmark: that of a row that names none

    def update(self) -> bool:
        """Feed what was appended since the last call; True when a
        row completed an item of a pair."""
        fed = False
        scan = self.scan
        try:
            for fast, slow in scan.batches():
                if scan.meta is not None:
                    self.default = str(scan.meta.get("benchmark") or "")
                # Slow rows first: in a batch with both they are line 1 (``keyscan._lines``).
                for row in [fields_of(StatusRow, record) for record in slow] + fast:
                    status = (
                        row.status
                        if row.status in STATUSES
                        else legacy_status(row.passed, row.detail)
                    )
                    fed |= self.monitor.add(
                        row.benchmark or self.default,
                        row.task_id,
                        row.arm,
                        scan_epoch(row.epoch),
                        score_of(status, row.passed is True),
                    )
        except OSError:
            # not written yet, or unreadable for now: the next update reads on from where it is
            pass
        return fed

    def _parse(self, raw: bytes, lineno: int, strict: bool) -> dict[str, Any] | None:
        return parse_line(raw, self.path, lineno, False)


def replay(results: Results, ended: Collection | None = None) -> Sequential | None:
    """The report's figures: the plan of the first meta line that has one, fed the rows of each file
    in file order, as the controller read them (a key's first row counts, the one a look used, not
    the newest that the rest of the report counts), with how the sweep ended (``results.ending``).
    Under xdist the file's order may differ from the controller's by a row or two: a decided stop's
    ``decided_at`` is the one the run recorded when it stopped."""
    watch = next((w for w in map(monitor_of, results.metas) if w is not None), None)
    if watch is None:
        return None
    ended = ended or Collection()
    if isinstance(watch, str):
        return sequential(
            watch, ended.stop_reason, merged_parts=ended.merged_parts, earlier=ended.earlier
        )
    for path in results.paths:
        FileFeed(path, watch).update()
    figures = _recorded(watch.figures(), ended)
    return sequential(
        watch,
        ended.stop_reason,
        figures=figures,
        merged_parts=ended.merged_parts,
        earlier=ended.earlier,
    )


def _recorded(figures: list[PairFigures], ended: Collection) -> list[PairFigures]:
    """``figures`` with the ``decided_at`` (and, for a pair the replay has not decided, the
    direction and verdict) that the run recorded at its decided stop: the look that stopped
    it is the run's, not a replay's."""
    recorded = {(p.get("benchmark"), p.get("a"), p.get("b")): p for p in ended.pairs}
    out = []
    for f in figures:
        rec = recorded.get((f.benchmark, f.a, f.b), {})
        at = rec.get("decided_at")
        if isinstance(at, int) and not isinstance(at, bool):
            same = f.decided_at is not None
            direction, verdict = rec.get("direction"), rec.get("verdict")
            f = replace(
                f,
                decided_at=at,
                direction=f.direction if same or not isinstance(direction, str) else direction,
                verdict=f.verdict if same or not isinstance(verdict, str) else verdict,
            )
        out.append(f)
    return out
