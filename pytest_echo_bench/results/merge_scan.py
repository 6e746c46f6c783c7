"""What merge reads of each results file: per row its key, its verdict and status (for the
conflicts) and where its line is (to write it back byte for byte), each key's newest row kept.

``scan_columns`` decodes those fields of every line of a 1 MB chunk with msgspec
(``store.keyscan.RowScan`` into ``store.rows.StatusRow``), and any chunk it cannot take goes to
the full parser line by line, as the report reads its columns. ``scan_records`` parses every line
whole (``store.reader.iter_records``): the reference, which the tests compare it against
(tests/results/test_merge_columns.py), and what ``merge(fast=False)`` reads.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass, field
from itertools import accumulate
from pathlib import Path
from typing import Any

from pytest_echo_bench.errors import StoreError
from pytest_echo_bench.store.files import STATUSES, UNGRADED, row_status
from pytest_echo_bench.store.keyscan import RowScan
from pytest_echo_bench.store.reader import iter_records, parse_line
from pytest_echo_bench.store.records import Key, Meta, row_key
from pytest_echo_bench.store.rows import StatusRow

# where a key's newest row is: (file index, offset), and its passed and status
Place = tuple[int, int, bool, str]
# The file's meta line, its benchmarks' first lines, duplicates, changed
# verdicts, its keys (each once), and the rows its rows replaced (each key's older place).
Scan = tuple["Meta | None", dict[str, int], int, list[tuple[Key, Place, Place]], int,
             list[tuple[Key, Place]]]
# benchmark -> the fingerprint its rows in files without one were recorded with
Assumed = dict[str, str]
# each status as one string: a million places share a few
_STATUS = {status: status for status in STATUSES}


@dataclass
class _Tally:
    """What one file's scan found so far: each key's newest place goes into ``kept``."""

    index: int
    kept: dict[Key, Place]
    names: dict[str, int] = field(default_factory=dict)  # benchmark -> its first row's line
    changed: list[tuple[Key, Place, Place]] = field(default_factory=list)
    # the rows replaced by a newer one, which merge drops: what they spent is kept (``spent``)
    dropped: list[tuple[Key, Place]] = field(default_factory=list)
    duplicates: int = 0
    again: int = 0  # rows whose key this file had already
    rows: int = 0

    def keep(self, key: Key, place: Place, lineno: int) -> None:
        self.names.setdefault(key[0], lineno)
        older = self.kept.get(key)
        self.kept[key] = place
        self.rows += 1
        if older is not None:
            self.repeated(key, older, place)

    def repeated(self, key: Key, older: Place, place: Place) -> None:
        self.duplicates += 1
        self.dropped.append((key, older))
        self.again += older[0] == self.index
        # a retried error or unjudged row (no grade) is expected to change
        if older[2] != place[2] and older[3] not in UNGRADED:
            self.changed.append((key, older, place))

    def scan(self, meta: dict[str, Any] | None, path: Path) -> Scan:
        meta_line = Meta.from_json(meta, f"{path}:1") if meta is not None else None
        return (meta_line, self.names, self.duplicates, self.changed, self.rows - self.again,
                self.dropped)


def only(assumed: Assumed | None) -> str:
    """The benchmark of rows naming none in a file without a meta line: the one assumed, if one."""
    return next(iter(assumed)) if assumed and len(assumed) == 1 else ""


def scan_records(path: Path, index: int, assumed: Assumed | None, kept: dict[Key, Place]) -> Scan:
    """One file read a line at a time into ``kept`` (each key's newest row, by its place, not its
    line: a million rows' lines are read again when written, never held): the file's meta line,
    the first line of each benchmark its rows name, its duplicates and its changed verdicts."""
    tally = _Tally(index, kept)
    meta: dict[str, Any] | None = None
    default = only(assumed)
    for record in iter_records(path):
        row = record.data
        if row.get("_meta"):
            if record.lineno == 1:
                meta, default = row, str(row.get("benchmark") or "") or only(assumed)
            continue
        place = (index, record.offset, row.get("passed") is True, sys.intern(row_status(row)))
        tally.keep(row_key(row, default), place, record.lineno)
    return tally.scan(meta, path)


def scan_columns(path: Path, index: int, assumed: Assumed | None, kept: dict[Key, Place]) -> Scan:
    """``scan_records``' result, each line decoded into the few fields merge reads."""
    slow_lines: list[int] = []  # the line of each row the full parser read, in order

    def parse(raw: bytes, lineno: int, strict: bool) -> dict[str, Any] | None:
        record = parse_line(raw, path, lineno, strict)
        if record is not None and not record.get("_meta"):
            slow_lines.append(lineno)
        return record

    tally = _Tally(index, kept)
    scan = RowScan(path, StatusRow, parse)
    try:
        for fast, slow in scan.batches():
            base, first = scan.end  # where this batch's first line is
            # where each of its lines starts, and where the one after it does
            starts = list(accumulate(map((1).__add__, map(len, scan.lines)), initial=base))
            default = str((scan.meta or {}).get("benchmark") or "") or only(assumed)
            for row, lineno in zip(slow, slow_lines, strict=True):
                place = (index, starts[lineno - first], row.get("passed") is True,
                         sys.intern(row_status(row)))
                tally.keep(row_key(row, default), place, lineno)
            slow_lines.clear()
            # the rows read fast are the batch's last lines, each a row
            _keep_fast(tally, fast, default, starts[len(starts) - 1 - len(fast):-1],
                       first + len(scan.lines) - len(fast))
    except StoreError:
        raise
    except OSError as exc:
        raise StoreError(f"cannot read results file {path}: {exc.strerror or exc}") from exc
    return tally.scan(scan.meta, path)


def _keep_fast(tally: _Tally, rows: list[StatusRow], default: str, offsets: list[int],
               lineno: int) -> None:
    """``_Tally.keep`` of each row read fast, inlined: merge's loop over a million rows."""
    kept, names, index = tally.kept, tally.names, tally.index
    for n, (row, offset) in enumerate(zip(rows, offsets, strict=True), lineno):
        epoch = row.epoch
        key = (row.benchmark or default, row.task_id, row.arm,
               epoch if epoch is not None and epoch > 1 else 1)
        status = _STATUS.get(row.status)  # type: ignore[arg-type]
        place = (index, offset, row.passed is True, status or sys.intern(row.verdict()))
        if key[0] not in names:
            names[key[0]] = n
        older = kept.get(key)
        kept[key] = place
        if older is not None:
            tally.repeated(key, older, place)
    tally.rows += len(rows)
