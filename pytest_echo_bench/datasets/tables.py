"""Records from a plain data file: JSON (a list, or a mapping holding one), gzipped JSON, JSON
Lines, CSV, Parquet and Arrow. Every format is read from a regular file of at most
``MAX_FILE_BYTES`` (``store.paths``: a FIFO or a device is refused unopened); Parquet and Arrow need
``pyarrow``, an optional extra, named in the message when it is missing.

Only the records of the window a spec asks for (``start``, ``limit``) become Python values: Parquet
and Arrow are read a batch at a time and the reading stops at the window's end, CSV and JSON Lines a
record at a time. Before this an 8M-row Parquet file with ``limit: 5`` was converted whole (a
MemoryError, pytest's INTERNALERROR). Text files may start with a UTF-8 byte order mark (Excel
writes one): it is not part of the first column's name.
"""

from __future__ import annotations

import csv
import gzip
import importlib
import io
import itertools
import json
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

from pytest_echo_bench.store.paths import read_regular

Fail = Callable[[str], Exception]
# MMLU-Pro's test set with outputs is 4 MB gzipped; this only stops a wrong path
MAX_FILE_BYTES = 512 << 20
MAX_INFLATED_BYTES = 2 << 30  # a gzipped file inflates within this; a gzip bomb stops here
# where a JSON mapping keeps its records
_LIST_KEYS = ("outputs", "data", "examples", "records", "rows")

FORMATS = {
    ".json": "json",
    ".jsonl": "jsonl",
    ".csv": "csv",
    ".parquet": "parquet",
    ".arrow": "arrow",
    ".feather": "arrow",
}


def file_format(path: Path) -> str | None:
    """The format of ``path`` by its name (``x.json.gz`` is gzipped JSON), or None when unknown."""
    name = path.name.lower()
    if name.endswith(".gz"):
        name = name[:-3]
    return next((kind for ext, kind in FORMATS.items() if name.endswith(ext)), None)


def read_table(
    path: Path, fail: Fail, start: int = 0, end: int | None = None
) -> list[dict[str, Any]]:
    """The records ``start`` to ``end`` (None: the last) of ``path``,
    each a mapping of column to value."""
    kind = file_format(path)
    if kind is None:
        raise fail(
            f"cannot tell the format of {path.name}: name it .json, .json.gz, .jsonl, .csv, "
            ".parquet or .arrow"
        )
    data = _bytes(path, fail)
    if kind in ("parquet", "arrow"):
        return _columnar(kind, data, fail, start, end)
    try:
        text = data.decode("utf-8-sig")  # a byte order mark is no part of the first column's name
    except UnicodeDecodeError as exc:
        raise fail(f"is not UTF-8: byte 0x{data[exc.start]:02x} at offset {exc.start}") from None
    if kind == "json":
        records = _json(text, fail)[start:end]
    else:
        rows = _csv(text) if kind == "csv" else _json_lines(text, fail)
        records = _window(rows, start, end, fail)
    for i, record in enumerate(records, start):
        if not isinstance(record, dict):
            raise fail(f"record {i} is {type(record).__name__}, not a mapping of field to value")
    return records


def _window(rows: Iterator[Any], start: int, end: int | None, fail: Fail) -> list[Any]:
    """The rows ``start`` to ``end`` of a lazy reader (CSV, JSON Lines): the rest is never read."""
    try:
        return list(itertools.islice(rows, start, end))
    except csv.Error as exc:  # a CSV field over csv's size limit
        raise fail(f"is not readable CSV ({exc})") from None


def _bytes(path: Path, fail: Fail) -> bytes:
    try:
        data = read_regular(path, MAX_FILE_BYTES, fail)
    except OSError as exc:
        raise fail(f"cannot be read: {exc.strerror or exc}") from exc
    if not path.name.lower().endswith(".gz"):
        return data
    try:
        with gzip.GzipFile(fileobj=io.BytesIO(data)) as f:
            inflated = f.read(MAX_INFLATED_BYTES + 1)
    except (OSError, EOFError) as exc:
        raise fail(f"is not a whole gzip file ({exc})") from None
    if len(inflated) > MAX_INFLATED_BYTES:
        raise fail(f"inflates beyond {MAX_INFLATED_BYTES:,} bytes")
    return inflated


def _json(text: str, fail: Fail) -> list[Any]:
    try:
        data = json.loads(text)
    except (ValueError, RecursionError) as exc:
        raise fail(f"is not valid JSON ({getattr(exc, 'msg', None) or exc})") from None
    if isinstance(data, dict):
        data = next((data[k] for k in _LIST_KEYS if isinstance(data.get(k), list)), data)
    if not isinstance(data, list):
        raise fail(
            "holds no list of records (a JSON list, or a mapping with one of "
            f"{', '.join(_LIST_KEYS)})"
        )
    return data


def _json_lines(text: str, fail: Fail) -> Iterator[Any]:
    # "\n" only: str.splitlines also splits at U+2028 and U+0085, which JSON strings may hold raw.
    for lineno, line in enumerate(text.split("\n"), 1):
        if not line.strip():
            continue
        try:
            yield json.loads(line)
        except (ValueError, RecursionError) as exc:
            raise fail(
                f"line {lineno} is not valid JSON ({getattr(exc, 'msg', None) or exc})"
            ) from None


def _csv(text: str) -> Iterator[Any]:
    return iter(csv.DictReader(io.StringIO(text, newline="")))


def pyarrow(fail: Fail, what: str) -> ModuleType:
    """The ``pyarrow`` package, or a message naming the extra that installs it."""
    try:
        return importlib.import_module("pyarrow")
    except ImportError:
        raise fail(f"{what} needs pyarrow: pip install 'pytest-echo-bench[parquet]'") from None


BATCH_ROWS = 4096  # rows of a Parquet or Arrow file made Python values at a time


def _columnar(
    kind: str, data: bytes, fail: Fail, start: int, end: int | None
) -> list[dict[str, Any]]:
    pa = pyarrow(fail, f"reading a .{kind} file")
    records: list[dict[str, Any]] = []
    try:
        unread, batches = (
            _parquet_batches(pa, data, start)
            if kind == "parquet"
            else (0, _arrow_batches(pa, data))
        )
        skipped = start - unread  # rows still to skip once the batches start
        for batch in batches:
            if end is not None and len(records) >= end - start:
                break
            if skipped >= batch.num_rows:
                skipped -= batch.num_rows
                continue
            want = (
                batch.num_rows - skipped
                if end is None
                else min(batch.num_rows - skipped, end - start - len(records))
            )
            records.extend(batch.slice(skipped, want).to_pylist())
            skipped = 0
    except (pa.ArrowException, OSError, ValueError) as exc:
        raise fail(f"is not a readable {kind} file ({exc})") from None
    return records


def _parquet_batches(pa: ModuleType, data: bytes, start: int) -> tuple[int, Iterable[Any]]:
    """The rows of the row groups wholly before ``start`` (skipped unread), and the record batches
    of the rest, read as they are asked for."""
    parquet = importlib.import_module("pyarrow.parquet").ParquetFile(pa.BufferReader(data))
    groups, skipped = [], 0
    for i in range(parquet.metadata.num_row_groups):
        rows = parquet.metadata.row_group(i).num_rows
        if not groups and skipped + rows <= start:
            skipped += rows
        else:
            groups.append(i)
    batches = (
        parquet.iter_batches(batch_size=BATCH_ROWS, row_groups=groups, use_threads=False)
        if groups
        else ()
    )
    return skipped, batches


def _arrow_batches(pa: ModuleType, data: bytes) -> Iterable[Any]:
    """The record batches of an Arrow IPC file, or of the stream form the ``datasets`` library
    writes (zero-copy over ``data``: a batch costs memory only once it is made Python values)."""
    try:
        reader = pa.ipc.open_file(pa.BufferReader(data))
    except pa.ArrowInvalid:
        return iter(pa.ipc.open_stream(pa.BufferReader(data)))
    return (reader.get_batch(i) for i in range(reader.num_record_batches))
