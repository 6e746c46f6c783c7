"""A decide monitor fed from a results file, in file order, reading on from where it stopped.

The controller (on every graded row's report), the report (once, over each file given) and the
progress page (on each refresh) all feed their monitor this way, so they see the same rows in the
same order, each key's first row counting (the one a look used), and agree on every figure: under
xdist too, where reports reach the controller in another order than the rows reach the file.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from pytest_echo_bench.errors import StoreError
from pytest_echo_bench.ops.decide import Monitor, Sequential, monitor_of, sequential
from pytest_echo_bench.ops.results import Results
from pytest_echo_bench.store.keyscan import RowScan, ScanRow
from pytest_echo_bench.store.reader import parse_line
from pytest_echo_bench.store.records import row_key, scan_epoch


class DecideRow(ScanRow, gc=False):
    """The one field the monitor needs beyond the key; anything but ``true`` is not correct."""

    passed: Any = None


class FileFeed:
    """Feeds ``monitor`` the rows of ``path``: all of them the first time, then those appended since.

    A line that is not a row is skipped and an unreadable file feeds nothing: the feed must never
    break a run, and the report has read the file strictly already.
    """

    def __init__(self, path: Path, monitor: Monitor) -> None:
        self.path, self.monitor = path, monitor
        # One scan kept: it reads on from its ``end``, and its decoder is built once (a third of a
        # small update's time when built on every report).
        self.scan = RowScan(path, DecideRow, self._parse)
        self.default = ""  # the meta line's benchmark: that of a row that names none

    def update(self) -> bool:
        """Feed what was appended since the last call; True when a row completed an item of a pair."""
        fed = False
        scan = self.scan
        try:
            for fast, slow in scan.batches():
                if scan.meta is not None:
                    self.default = str(scan.meta.get("benchmark") or "")
                for row in fast:
                    fed |= self.monitor.add(row.benchmark or self.default, row.task_id, row.arm, scan_epoch(row.epoch),
                                            float(row.passed is True))
                for record in slow:
                    fed |= self._add(record)
        except OSError:
            pass  # not written yet, or unreadable for now: the next update reads on from where it is
        return fed

    def _parse(self, raw: bytes, lineno: int, strict: bool) -> dict[str, Any] | None:
        return parse_line(raw, self.path, lineno, False)

    def _add(self, record: dict[str, Any]) -> bool:
        if record.get("_meta"):
            return False
        try:
            benchmark, task_id, arm, epoch = row_key(record, self.default)
        except StoreError:
            return False
        return self.monitor.add(benchmark, task_id, arm, epoch, float(record.get("passed") is True))


def replay(results: Results, stop_reason: str | None = None) -> Sequential | None:
    """The report's figures: the plan of the first meta line that has one, fed the rows of each file
    in file order, as the controller read them (a key's first row counts, the one a look used, not the
    newest that the rest of the report counts)."""
    watch = next((w for w in map(monitor_of, results.metas) if w is not None), None)
    if watch is None:
        return None
    if isinstance(watch, Monitor):
        for path in results.paths:
            FileFeed(path, watch).update()
    return sequential(watch, stop_reason)
