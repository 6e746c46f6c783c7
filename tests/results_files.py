"""Results files for tests: rows and meta lines with sensible defaults, and files made of them.

``row`` lays a row out as the writer does (``Row``'s field order), so a test's file reads like a
sweep's; keyword overrides replace a field in place or add one at the end, and ``ABSENT`` leaves
one out (a row of an older writer, a row with no benchmark). ``write`` writes what ``json.dumps``
gives (``", "`` and ``": "``, as a hand-made or older file has); ``row_line`` and ``write_lines``
give the writer's own compact bytes, for tests that compare or cut exact bytes.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from pytest_echo_bench.store.files import encode_line

ABSENT: Any = object()  # an override that leaves the field out of the row

# The fields every reader needs, since the first writer: older files have only these six.
OLDEST_FIELDS = ("task_id", "arm", "passed", "detail", "wall_seconds", "sub_calls")
# The six, and what names the row's benchmark and verdict: the least a current reader reads.
BRIEF_FIELDS = (*OLDEST_FIELDS, "benchmark", "status")


def row(task_id: str = "t0", arm: str = "a", passed: bool | None = None, *,
        status: str | None = None, **fields: Any) -> dict[str, Any]:
    """A current-format row. Give ``passed`` or ``status`` (the other follows: a row passes when it
    is correct); neither is a correct row. ``fields`` override the defaults or add fields."""
    if passed is None:
        passed = status in (None, "correct")
    status = status or ("correct" if passed else "wrong")
    base = {"task_id": task_id, "arm": arm, "passed": passed,
            "detail": "passed" if passed else "expected B got C", "wall_seconds": 1.0,
            "sub_calls": 1, "benchmark": "demo", "status": status, "output": "", "answer": None,
            "target": "B", "attempts": 1, "started_at": "2024-01-01T00:00:00Z",
            "finished_at": "2024-01-01T00:00:01Z", "worker": "main", "run_id": "r1",
            "subtask": None, "usage": None, "retries": 0, "schema": 1}
    return {name: value for name, value in {**base, **fields}.items() if value is not ABSENT}


def brief_row(task_id: str = "t0", arm: str = "a", passed: bool | None = None, *,
              status: str | None = None, **fields: Any) -> dict[str, Any]:
    """A row of only ``BRIEF_FIELDS`` (and ``fields``): what a hand-made file or an older writer
    has."""
    full = row(task_id, arm, passed, status=status, **fields)
    return {name: value for name, value in full.items() if name in BRIEF_FIELDS or name in fields}


def meta(benchmark: str = "demo", arms: Iterable[str] = ("a", "b"), items: int | None = None,
         epochs: int | None = None, **fields: Any) -> dict[str, Any]:
    """A meta line naming one benchmark (its spec, fingerprint ``f1`` and, given, its items and
    epochs) and its arms; ``fields`` add to it or override it."""
    entry: dict[str, Any] = {"spec": f"{benchmark}.yaml", "fingerprint": "f1"}
    if items is not None:
        entry["items"] = items
    if epochs is not None:
        entry["epochs"] = epochs
    return {"_meta": True, "benchmark": benchmark, "benchmarks": {benchmark: entry},
            "arms": {benchmark: list(arms)}, **fields}


def write(path: Path, records: Iterable[Mapping[str, Any]], tail: str | bytes = "", *,
          meta: Mapping[str, Any] | None = None) -> Path:
    """A results file of ``records`` (after ``meta``, when given), one ``json.dumps`` a line, then
    ``tail`` as it is (a torn line, a blank line, bytes that are not text)."""
    lines = [meta, *records] if meta is not None else list(records)
    text = "".join(json.dumps(record) + "\n" for record in lines).encode()
    path.write_bytes(text + (tail if isinstance(tail, bytes) else tail.encode()))
    return path


def row_line(task_id: str = "t0", arm: str = "a", passed: bool | None = None, *,
             status: str | None = None, **fields: Any) -> bytes:
    """``row``'s row as the writer's bytes: compact, ASCII, one newline."""
    return encode_line(row(task_id, arm, passed, status=status, **fields))


def write_lines(path: Path, lines: Iterable[bytes], tail: bytes = b"") -> Path:
    """A results file of exact ``lines`` (each ending in its newline), then ``tail``."""
    path.write_bytes(b"".join(lines) + tail)
    return path
