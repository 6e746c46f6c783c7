"""The general dataset loaders: items written in the spec (``inline``) and JSON Lines files.

Both read ``id``, ``input`` and ``target`` by default; with ``fields:`` (or ``choices:``) each
record is mapped as the table loaders map theirs (``datasets.fields``), so a file of ``question``
and ``answer`` needs only ``fields: {input: "{question}", target: answer}``.

A dataset path must name a regular file (a directory for loaders that read one): anything else is
refused by ``stat`` before it is opened, naming the spec, the key and the path. A JSONL file is read
a line at a time, each at most ``MAX_LINE_BYTES``: before this a FIFO hung collection and
``/dev/zero`` (one endless line) ran it into MemoryError.
"""

from __future__ import annotations

import codecs
import json
import os
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from pytest_echo_bench.datasets.example import NO_METADATA, Example
from pytest_echo_bench.datasets.fields import to_examples
from pytest_echo_bench.errors import UnavailableError
from pytest_echo_bench.spec.load import Spec
from pytest_echo_bench.store.paths import open_regular, refusal

# one JSONL item, newline included: far above any real one, far below memory
MAX_LINE_BYTES = 16 << 20


def _text(value: Any, key: str, fail: Callable[[str], Exception]) -> str:
    if isinstance(value, str):
        return value
    if isinstance(value, bytes):  # YAML's !!binary: its text, never the repr b'...'
        try:
            return value.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise fail(
                f"{key} holds bytes that are not UTF-8 text (byte 0x{value[exc.start]:02x} "
                "at offset "
                f"{exc.start})"
            ) from None
    if not isinstance(value, (dict, list)):
        return str(value)
    try:
        return json.dumps(value)
    except (TypeError, ValueError) as exc:  # a date or a set inside, keys that are not text
        raise fail(f"{key} must be text, a number, or JSON lists and mappings ({exc})") from None


def _from_record(record: Any, fail: Callable[[str], Exception]) -> Example:
    if not isinstance(record, dict):
        raise fail("an item must be a mapping with id, input and target")
    for key in ("id", "input", "target"):
        if key not in record or record[key] is None:
            raise fail(f"item is missing {key!r}{_fields_hint(record)}")
    metadata = record.get("metadata") or {
        k: v for k, v in record.items() if k not in ("id", "input", "target", "subtask")
    }
    if not isinstance(metadata, dict):
        raise fail(f"metadata must be a mapping, got {type(metadata).__name__}")
    subtask = record.get("subtask")
    return Example(
        _text(record["id"], "id", fail),
        _text(record["input"], "input", fail),
        _text(record["target"], "target", fail),
        str(subtask) if subtask is not None else None,
        dict(metadata) if metadata else NO_METADATA,
    )


def _fields_hint(record: dict[str, Any]) -> str:
    """What to write when a record's keys are not the usual three: the keys it has, and ``fields:``
    (not for an item that only lacks one of them, ``{id, input}``: that is a missing target)."""
    if not set(map(str, record)) - {"id", "input", "target", "subtask", "metadata"}:
        return ""
    keys = ", ".join(map(str, list(record)[:12])) + (", ..." if len(record) > 12 else "")
    return (f" (it has {keys}): name the record's own keys with the dataset's fields:, e.g. "
            "fields: {input: \"{question}\", target: answer}")


def mapped(spec: Spec) -> bool:
    """Records go through the field map (``datasets.fields``) rather than the usual three keys."""
    return "fields" in spec.dataset or "choices" in spec.dataset


def inline(spec: Spec) -> list[Example]:
    items = spec.dataset.get("items")
    if not isinstance(items, list) or not items:
        raise spec.error("inline loader needs a non-empty 'items' list", "dataset", "items")
    for i, rec in enumerate(items):
        if not isinstance(rec, dict):
            raise spec.error(
                "an item must be a mapping with id, input and target", "dataset", "items", i
            )
    if mapped(spec):
        start, end = window(spec)
        return to_examples(spec, items[start:end], start, "items")
    examples = []
    for i, rec in enumerate(items):
        def fail(message: str, i: int = i) -> Exception:
            return spec.error(message, "dataset", "items", i)
        examples.append(_from_record(rec, fail))
    return slice_examples(spec, examples)


def dataset_path(spec: Spec, want: str = "file") -> Path:
    """The dataset's ``path`` (relative to the spec): an existing regular file, or
    directory when ``want`` says so."""
    raw = spec.dataset.get("path")
    if not isinstance(raw, str) or not raw:
        raise spec.error("this loader needs a 'path'", "dataset", "path")
    path = Path(raw).expanduser()
    if not path.is_absolute():
        path = spec.path.parent / path  # relative to the spec, so a sweep runs from any directory
    if not path.exists():
        if spec.dataset.get("optional") is True:
            # An example spec shipped for data the user may not have: skip it, do not fail the run.
            raise UnavailableError(
                f"dataset not found: {path} ({spec.path.name} marks it optional; "
                "set the path to run this benchmark)"
            )
        raise spec.error(f"dataset not found: {path}", "dataset", "path")
    why = refusal(path, want)
    if why is not None:
        raise spec.error(f"dataset path {path} {why}", "dataset", "path")
    return path


def _lines(spec: Spec, path: Path) -> Iterator[tuple[int, bytes]]:
    """The lines of regular file ``path``, numbered from 1, each read with at
    most MAX_LINE_BYTES in memory."""
    try:
        fd = open_regular(
            path, lambda why: spec.error(f"dataset path {path} {why}", "dataset", "path")
        )
    except OSError as exc:
        raise spec.error(
            f"cannot read dataset {path}: {exc.strerror or exc}", "dataset", "path"
        ) from exc
    with os.fdopen(fd, "rb") as f:
        for lineno, raw in enumerate(iter(lambda: f.readline(MAX_LINE_BYTES + 1), b""), 1):
            if len(raw) > MAX_LINE_BYTES:
                raise spec.error(
                    f"{path}:{lineno}: line is longer than {MAX_LINE_BYTES:,} bytes; one item per "
                    "line, each a JSON object",
                    "dataset",
                    "path",
                )
            yield lineno, raw


def jsonl(spec: Spec) -> list[Example]:
    path = dataset_path(spec)
    examples: list[Example] = []
    records: list[dict[str, Any]] = []
    # decoded per line, so a stray byte is reported with its line
    for lineno, raw in _lines(spec, path):
        def fail(m: str, lineno: int = lineno) -> Exception:
            return spec.error(f"{path}:{lineno}: {m}", "dataset", "path")
        # a byte order mark is no part of the item
        if lineno == 1 and raw.startswith(codecs.BOM_UTF8):
            raw = raw[len(codecs.BOM_UTF8):]
        try:
            line = raw.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise fail(f"not UTF-8: byte 0x{raw[exc.start]:02x} at column {exc.start + 1}") from exc
        if not line.strip():
            continue
        try:
            record = json.loads(line)
        # a 5,000-digit number; [[[[... nested 100,000 deep
        except (ValueError, RecursionError) as exc:
            raise fail(f"not valid JSON ({getattr(exc, 'msg', None) or exc})") from exc
        if not mapped(spec):
            examples.append(_from_record(record, fail))
        elif isinstance(record, dict):
            records.append(record)
        else:
            raise fail("an item must be a JSON object")
    if not (examples or records):
        raise spec.error(f"dataset {path} has no items", "dataset", "path")
    if records:
        start, end = window(spec)
        return to_examples(spec, records[start:end], start, f"dataset {path}")
    return slice_examples(spec, examples)


def slice_examples(spec: Spec, examples: list[Example]) -> list[Example]:
    start, end = window(spec)
    return examples[start:end]


def window(spec: Spec) -> tuple[int, int | None]:
    """The items ``start`` and ``limit`` keep, as a slice's bounds (no end without a limit)."""
    start = spec.dataset.get("start", 0)
    limit = spec.dataset.get("limit", spec.dataset.get("n_per_subtask"))
    for key, value in (("start", start), ("limit", limit)):
        if value is not None and (
            isinstance(value, bool) or not isinstance(value, int) or value < 0
        ):
            raise spec.error(f"must be a whole number >= 0, got {value!r}", "dataset", key)
    return start, None if limit is None else start + limit
