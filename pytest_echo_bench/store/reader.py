"""Reading a results file: every record in full (reports, merge, regrade), or only the recorded
keys, fast (resume). A line that is not a row is refused with its line number, nothing changed."""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pytest_echo_bench.errors import StoreError
from pytest_echo_bench.store.keyscan import RowScan, ScanRow
from pytest_echo_bench.store.records import KeySet, row_key


@dataclass(frozen=True)
class Record:
    lineno: int
    data: dict[str, Any]
    raw: bytes  # the line as stored, newline-terminated


def read_records(path: Path, strict: bool = True, upto: int | None = None) -> tuple[dict[str, Any] | None, list[Record]]:
    """The meta line and the rows of a results file (its first ``upto`` bytes).

    A last line without a newline counts if it is a whole row (a writer killed just before the
    newline) and is skipped otherwise (a torn row). Any other line that is not a row raises a
    StoreError naming it when ``strict``, and is skipped when not (best-effort readers).
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

    For readers that only count (the end-of-run table): a list of a whole sweep's parsed rows
    was the largest peak of a run's memory.
    """
    lines = _read(path, upto).split(b"\n")
    for lineno, raw in enumerate(lines, 1):
        if not raw.strip():
            continue
        last = lineno == len(lines)
        record = parse_line(raw, path, lineno, strict and not last)
        if record is not None:
            yield Record(lineno, record, raw + b"\n")


def _read(path: Path, upto: int | None) -> bytes:
    try:
        with open(path, "rb") as f:
            return f.read() if upto is None else f.read(upto)
    except OSError as exc:
        raise StoreError(f"cannot read results file {path}: {exc.strerror or exc}") from exc


def parse_line(raw: bytes, path: Path, lineno: int, strict: bool) -> dict[str, Any] | None:
    try:
        record = json.loads(raw)
    except (ValueError, RecursionError):
        record = None
    if isinstance(record, dict) and (record.get("_meta") or ("task_id" in record and "arm" in record)):
        return record
    if strict:
        raise StoreError(f"{path}:{lineno}: not a results row ({raw[:60]!r}); remove or fix that line, then try again")
    return None


@dataclass
class ResultsIndex:
    """What resume needs from a results file: its meta and the set of recorded keys."""

    meta: dict[str, Any] | None
    keys: KeySet = field(default_factory=KeySet)
    size: int = 0


def read_index(path: Path, upto: int | None = None) -> ResultsIndex:
    """Recorded keys (up to byte ``upto``); garbage refused with its line number.

    The same keys as ``read_records`` gives (tests/test_fastpaths.py), read by ``keyscan``: a
    million rows in under two seconds instead of about eight.
    """
    scan = RowScan(path, ScanRow, lambda raw, lineno, strict: parse_line(raw, path, lineno, strict), upto)
    keys = KeySet()
    try:
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
