"""The general dataset loaders: items written in the spec (``inline``) and JSON Lines files."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

from pytest_echo_bench.datasets.example import NO_METADATA, Example
from pytest_echo_bench.errors import UnavailableError
from pytest_echo_bench.spec.load import Spec


def _text(value: Any) -> str:
    return value if isinstance(value, str) else json.dumps(value) if isinstance(value, (dict, list)) else str(value)


def _from_record(record: Any, fail: Callable[[str], Exception]) -> Example:
    if not isinstance(record, dict):
        raise fail("an item must be a mapping with id, input and target")
    for key in ("id", "input", "target"):
        if key not in record or record[key] is None:
            raise fail(f"item is missing {key!r}")
    metadata = record.get("metadata") or {k: v for k, v in record.items() if k not in ("id", "input", "target", "subtask")}
    subtask = record.get("subtask")
    return Example(_text(record["id"]), _text(record["input"]), _text(record["target"]),
                   str(subtask) if subtask is not None else None, dict(metadata) if metadata else NO_METADATA)


def inline(spec: Spec) -> list[Example]:
    items = spec.dataset.get("items")
    if not isinstance(items, list) or not items:
        raise spec.error("inline loader needs a non-empty 'items' list", "dataset", "items")
    examples = []
    for i, rec in enumerate(items):
        def fail(message: str, i: int = i) -> Exception:
            return spec.error(message, "dataset", "items", i)
        examples.append(_from_record(rec, fail))
    return examples


def dataset_path(spec: Spec) -> Path:
    raw = spec.dataset.get("path")
    if not isinstance(raw, str) or not raw:
        raise spec.error("this loader needs a 'path'", "dataset", "path")
    path = Path(raw).expanduser()
    if not path.is_absolute():
        path = spec.path.parent / path  # relative to the spec, so a sweep runs from any directory
    if not path.exists():
        if spec.dataset.get("optional") is True:
            # An example spec shipped for data the user may not have: skip it, do not fail the run.
            raise UnavailableError(f"dataset not found: {path} ({spec.path.name} marks it optional; "
                                   "set the path to run this benchmark)")
        raise spec.error(f"dataset not found: {path}", "dataset", "path")
    return path


def jsonl(spec: Spec) -> list[Example]:
    path = dataset_path(spec)
    examples: list[Example] = []
    with open(path, "rb") as f:  # decoded per line, so a stray byte is reported with its line
        for lineno, raw in enumerate(f, 1):
            def fail(m: str, lineno: int = lineno) -> Exception:
                return spec.error(f"{path}:{lineno}: {m}", "dataset", "path")
            try:
                line = raw.decode("utf-8")
            except UnicodeDecodeError as exc:
                raise fail(f"not UTF-8: byte 0x{raw[exc.start]:02x} at column {exc.start + 1}") from exc
            if not line.strip():
                continue
            try:
                record = json.loads(line)
            except json.JSONDecodeError as exc:
                raise fail(f"not valid JSON ({exc.msg})") from exc
            examples.append(_from_record(record, fail))
    if not examples:
        raise spec.error(f"dataset {path} has no items", "dataset", "path")
    return slice_examples(spec, examples)


def slice_examples(spec: Spec, examples: list[Example]) -> list[Example]:
    start = spec.dataset.get("start", 0)
    limit = spec.dataset.get("limit", spec.dataset.get("n_per_subtask"))
    for key, value in (("start", start), ("limit", limit)):
        if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 0):
            raise spec.error(f"must be a whole number >= 0, got {value!r}", "dataset", key)
    end = None if limit is None else start + limit
    return examples[start:end]
