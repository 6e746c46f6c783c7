"""The rows this run has appended, for a worker to check before it calls for an item.

When xdist loses a worker it gives that worker's queued items to others; the lost worker may have
recorded some of them already (it starts the calls of the items it will run next). The results
file is the source of truth: once the controller has marked the run as having lost a worker
(``RUN.jsonl.lost``), every item is looked up among the rows appended since the run began, and one
found there is reported from its row instead of being called and recorded a second time.
"""

from __future__ import annotations

import json
import threading
from pathlib import Path
from typing import Any

from pytest_echo_bench.store.files import lost_path
from pytest_echo_bench.store.keyscan import RowScan, ScanRow
from pytest_echo_bench.store.reader import parse_line
from pytest_echo_bench.store.records import Key, KeySet, row_key


class RunRows:
    def __init__(self, results: Path, start: int, default_benchmark: str) -> None:
        self.results, self.start, self.default = results, start, default_benchmark
        self.keys = KeySet()
        self._end = (start, 1 if start == 0 else 2)  # the meta line, if any, is before ``start``
        self._lost = lost_path(results)
        self._active = False
        self._lock = threading.Lock()  # calls in flight look items up from several threads

    def find(self, key: Key) -> dict[str, Any] | None:
        """The row this run recorded for ``key``, or None (always None until a worker was lost)."""
        if not self._active:
            if not self._lost.exists():  # one stat per item: the common case costs nothing more
                return None
            self._active = True
        with self._lock:
            self._update()
            return self._row(key) if key in self.keys else None

    def _update(self) -> None:
        scan = RowScan(
            self.results,
            ScanRow,
            lambda raw, lineno, strict: parse_line(raw, self.results, lineno, False),
            start=self._end,
        )
        for fast, slow in scan.batches():
            self.keys.add_rows(fast, self.default)
            for record in slow:
                self.keys.add(row_key(record, self.default))
        self._end = scan.end

    def _row(self, key: Key) -> dict[str, Any] | None:
        # Rare (items a lost worker had recorded): a scan for the task id, then the full parse.
        # The newest row of the key wins, as everywhere the file is read.
        needle = b'"task_id":' + json.dumps(key[1], ensure_ascii=True).encode("ascii")
        found = None
        with open(self.results, "rb") as f:
            f.seek(self.start)
            for raw in f:
                if needle in raw:
                    record = parse_line(raw.rstrip(b"\n"), self.results, 0, False)
                    if (
                        record is not None
                        and not record.get("_meta")
                        and row_key(record, self.default) == key
                    ):
                        found = record
        return found
