"""Reading a results file: every record in full (reports, merge, regrade), or only the recorded
keys, fast (resume). A line that is not a row is refused with its line number, nothing changed."""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, BinaryIO

from pytest_echo_bench.errors import StoreError
from pytest_echo_bench.store.checks import current_meta, meta_problem, row_problem
from pytest_echo_bench.store.files import STATUSES, UNGRADED, row_status
from pytest_echo_bench.store.keyscan import RowScan, ScanRow
from pytest_echo_bench.store.metalines import NO_HEAD, check_later_meta
from pytest_echo_bench.store.paths import open_results
from pytest_echo_bench.store.records import KeySet, row_key
from pytest_echo_bench.store.rows import StatusRow


@dataclass(frozen=True)
class Record:
    lineno: int
    data: dict[str, Any]
    raw: bytes  # the line as stored, newline-terminated
    offset: int = 0  # where the line starts in the file: a reader may keep this instead of ``raw``


def read_records(
    path: Path, strict: bool = True, upto: int | None = None
) -> tuple[dict[str, Any] | None, list[Record]]:
    """The meta line and the rows of a results file (its first ``upto`` bytes).

    A last line without a newline counts if it is a whole row (a writer killed just before the
    newline) and is skipped otherwise (a torn row). Any other line that is not a row raises a
    StoreError naming it when ``strict``, and is skipped when not (best-effort readers). A meta line
    of another sweep after line 1 (``store.metalines``) is refused either way: the rows after it
    are not this file's sweep's.
    """
    meta: dict[str, Any] | None = None
    rows: list[Record] = []
    for record in iter_records(path, strict, upto):
        if record.data.get("_meta"):
            meta = record.data if record.lineno == 1 else meta
        else:
            rows.append(record)
    return meta, rows


def iter_records(path: Path, strict: bool = True, upto: int | None = None) -> Iterator[Record]:
    """The records of ``read_records``, the meta line among them, one at a time.

    Read a line at a time, so that a reader which keeps less than every row (merge, export,
    estimate, the end-of-run table) holds less than the file: reading it whole and splitting it
    took 1.2 GB for a million rows before a single row was parsed.
    """
    try:
        with open_results(path) as f:
            yield from _records(f, path, strict, upto)
    except StoreError:  # a line refused: its own message (a StoreError is an OSError too)
        raise
    except OSError as exc:
        raise StoreError(f"cannot read results file {path}: {exc.strerror or exc}") from exc


def _records(f: BinaryIO, path: Path, strict: bool, upto: int | None) -> Iterator[Record]:
    offset, head = 0, NO_HEAD
    for lineno, raw in enumerate(f, 1):
        # the line ``upto`` cuts is the last, torn or not
        if upto is not None and offset + len(raw) > upto:
            raw = raw[:max(upto - offset, 0)]
        last = not raw.endswith(b"\n")
        line = raw if last else raw[:-1]
        if line.strip():
            record = parse_line(line, path, lineno, strict and not last)
            if record is not None and record.get("_meta") is True:
                head = record if lineno == 1 else head
                check_later_meta(head, record, path, lineno)
            if record is not None:
                yield Record(lineno, record, raw + b"\n" if last else raw, offset)
        offset += len(raw)
        if last:
            return


def parse_line(raw: bytes, path: Path, lineno: int, strict: bool) -> dict[str, Any] | None:
    """The record of one line, checked by ``store.checks``'s rules; None for a line to skip.

    A line that is not a row, a row whose key fields are wrong and a first line whose meta fields
    are wrong are refused naming the file and line when ``strict``, and skipped when not. A first
    line that is a meta line comes back in today's shape (``store.checks.current_meta``).
    """
    try:
        record = json.loads(raw)
    except (ValueError, RecursionError):
        record = None
    if lineno == 1 and isinstance(record, dict) and record.get("_meta") is True:
        record = current_meta(record)  # an older writer's meta line, as every reader reads it
    problem = _problem(record, lineno) if isinstance(record, dict) else "not a results row"
    if problem is None:
        return record
    if strict:
        raise StoreError(
            f"{path}:{lineno}: {problem} ({raw[:60]!r}); remove or fix that line, then try again"
        )
    return None


def _problem(record: dict[str, Any], lineno: int) -> str | None:
    marker = record.get("_meta", False)
    # only line 1 is checked as a header; a later one is one of ``store.metalines``'s
    if marker is True:
        return meta_problem(record) if lineno == 1 else None
    if marker is not False or "task_id" not in record or "arm" not in record:
        return "not a results row"
    return row_problem(record)


@dataclass
class ResultsIndex:
    """What resume needs from a results file: its meta and the set of recorded keys."""

    meta: dict[str, Any] | None
    keys: KeySet = field(default_factory=KeySet)
    size: int = 0


def read_index(path: Path, upto: int | None = None, retry_errors: bool = False) -> ResultsIndex:
    """Recorded keys (up to byte ``upto``); garbage refused with its line number.

    The same keys as ``read_records`` gives (tests/store/test_fastpaths.py), read by ``keyscan``: a
    million rows in under two seconds instead of about eight. With ``retry_errors`` a key whose
    newest row is an error or unjudged is left out, so resume runs it again (newest row per key
    wins).
    """
    def parse(raw: bytes, lineno: int, strict: bool) -> dict[str, Any] | None:
        return parse_line(raw, path, lineno, strict)

    keys = KeySet()
    try:
        if retry_errors:
            newest = RowScan(path, StatusRow, parse, upto)
            for checked, slow in newest.batches():
                _add_newest(keys, checked, slow, str((newest.meta or {}).get("benchmark", "")))
            return ResultsIndex(newest.meta, keys, path.stat().st_size if upto is None else upto)
        scan = RowScan(path, ScanRow, parse, upto)
        for fast, slow in scan.batches():
            default = str((scan.meta or {}).get("benchmark", ""))
            keys.add_rows(fast, default)
            for record in slow:
                keys.add(row_key(record, default))
    except StoreError:
        raise
    except OSError as exc:
        raise StoreError(f"cannot read results file {path}: {exc.strerror or exc}") from exc
    size = path.stat().st_size if upto is None else upto
    return ResultsIndex(scan.meta, keys, size)


def _add_newest(
    keys: KeySet, fast: list[StatusRow], slow: list[dict[str, Any]], default: str
) -> None:
    """Keys whose newest row so far is graded (not an error, not unjudged). A batch with rows of
    both kinds is the first one, whose slow rows are only line 1: slow rows come first in the file
    (``keyscan._lines``)."""
    for record in slow:
        key = row_key(record, default)
        keys.discard(key) if row_status(record) in UNGRADED else keys.add(key)
    by_arm = keys.by_arm
    for r in fast:  # resume's hot loop with --bench-retry-errors: no call per row for current rows
        arm = (r.benchmark or default, r.arm, r.epoch if r.epoch is not None and r.epoch > 1 else 1)
        ids = by_arm.get(arm)
        if ids is None:
            ids = by_arm[arm] = set()
        status = r.status
        if status not in KNOWN and r.verdict() in UNGRADED:
            ids.discard(r.task_id)
        else:
            ids.add(r.task_id)


# a row with one of these statuses is graded: a retrying resume deselects it
KNOWN = frozenset(STATUSES) - UNGRADED
