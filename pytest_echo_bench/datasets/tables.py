"""Records from a plain data file: JSON (a list, or a mapping holding one), gzipped JSON, JSON Lines,
CSV, Parquet and Arrow. Every format is read from a regular file of at most ``MAX_FILE_BYTES``
(``store.paths``: a FIFO or a device is refused unopened); Parquet and Arrow need ``pyarrow``, an
optional extra, named in the message when it is missing."""

from __future__ import annotations

import csv
import gzip
import importlib
import io
import json
from collections.abc import Callable
from pathlib import Path
from types import ModuleType
from typing import Any

from pytest_echo_bench.store.paths import read_regular

Fail = Callable[[str], Exception]
MAX_FILE_BYTES = 512 << 20  # MMLU-Pro's test set with outputs is 4 MB gzipped; this only stops a wrong path
MAX_INFLATED_BYTES = 2 << 30  # a gzipped file inflates within this; a gzip bomb stops here
_LIST_KEYS = ("outputs", "data", "examples", "records", "rows")  # where a JSON mapping keeps its records

FORMATS = {".json": "json", ".jsonl": "jsonl", ".csv": "csv", ".parquet": "parquet", ".arrow": "arrow",
           ".feather": "arrow"}


def file_format(path: Path) -> str | None:
    """The format of ``path`` by its name (``x.json.gz`` is gzipped JSON), or None when unknown."""
    name = path.name.lower()
    if name.endswith(".gz"):
        name = name[:-3]
    return next((kind for ext, kind in FORMATS.items() if name.endswith(ext)), None)


def read_table(path: Path, fail: Fail) -> list[dict[str, Any]]:
    """Every record of ``path`` as a mapping of column to value, in file order."""
    kind = file_format(path)
    if kind is None:
        raise fail(f"cannot tell the format of {path.name}: name it .json, .json.gz, .jsonl, .csv, .parquet or .arrow")
    data = _bytes(path, fail)
    if kind in ("parquet", "arrow"):
        return _columnar(kind, data, fail)
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise fail(f"is not UTF-8: byte 0x{data[exc.start]:02x} at offset {exc.start}") from None
    records = _csv(text, fail) if kind == "csv" else _json_lines(text, fail) if kind == "jsonl" else _json(text, fail)
    for i, record in enumerate(records):
        if not isinstance(record, dict):
            raise fail(f"record {i} is {type(record).__name__}, not a mapping of field to value")
    return records


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
        raise fail(f"holds no list of records (a JSON list, or a mapping with one of {', '.join(_LIST_KEYS)})")
    return data


def _json_lines(text: str, fail: Fail) -> list[Any]:
    records = []
    # "\n" only: str.splitlines also splits at U+2028 and U+0085, which JSON strings may hold raw.
    for lineno, line in enumerate(text.split("\n"), 1):
        if not line.strip():
            continue
        try:
            records.append(json.loads(line))
        except (ValueError, RecursionError) as exc:
            raise fail(f"line {lineno} is not valid JSON ({getattr(exc, 'msg', None) or exc})") from None
    return records


def _csv(text: str, fail: Fail) -> list[Any]:
    try:
        return list(csv.DictReader(io.StringIO(text, newline="")))
    except csv.Error as exc:  # a field over csv's size limit, a NUL
        raise fail(f"is not readable CSV ({exc})") from None


def pyarrow(fail: Fail, what: str) -> ModuleType:
    """The ``pyarrow`` package, or a message naming the extra that installs it."""
    try:
        return importlib.import_module("pyarrow")
    except ImportError:
        raise fail(f"{what} needs pyarrow: pip install 'pytest-echo-bench[parquet]'") from None


def _columnar(kind: str, data: bytes, fail: Fail) -> list[dict[str, Any]]:
    pa = pyarrow(fail, f"reading a .{kind} file")
    try:
        if kind == "parquet":
            table = importlib.import_module("pyarrow.parquet").read_table(pa.BufferReader(data))
        else:
            table = _arrow_table(pa, data)
    except (pa.ArrowException, OSError, ValueError) as exc:
        raise fail(f"is not a readable {kind} file ({exc})") from None
    records: list[dict[str, Any]] = table.to_pylist()
    return records


def _arrow_table(pa: ModuleType, data: bytes) -> Any:
    """An Arrow IPC file, or the stream form the ``datasets`` library writes."""
    try:
        return pa.ipc.open_file(pa.BufferReader(data)).read_all()
    except pa.ArrowInvalid:
        return pa.ipc.open_stream(pa.BufferReader(data)).read_all()
