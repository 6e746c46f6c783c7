"""The versioned records of a results file: one meta line, then one row per graded item."""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field, fields
from typing import Any

SCHEMA = 1

Key = tuple[str, str, str]  # (benchmark, task_id, arm)


@dataclass
class Meta:
    """First line of a results file: what produced it and what determines its answers."""

    benchmark: str
    benchmarks: dict[str, dict[str, Any]]  # name -> {spec, fingerprint, items}
    spec_files: list[str]
    fingerprint: str
    arms: dict[str, list[str]]  # benchmark -> arm names
    selection: dict[str, Any]  # args, -k, -m: what `--bench-resume PATH` alone re-runs
    run_id: str
    plugin_version: str
    created_at: str
    fsync: str = "end"
    schema: int = SCHEMA

    def to_json(self) -> dict[str, Any]:
        return {"_meta": True, **asdict(self)}


@dataclass
class Row:
    """One completed, graded item. The first six fields keep older readers working."""

    task_id: str
    arm: str
    passed: bool
    detail: str
    wall_seconds: float
    sub_calls: int
    benchmark: str
    status: str  # correct | wrong | unparseable | error
    output: str
    answer: str | None
    target: str
    attempts: int
    started_at: str
    finished_at: str
    worker: str
    run_id: str
    subtask: str | None = None
    usage: dict[str, int] | None = None
    retries: int = 0
    cost_usd: float | None = None
    cost_units: float | None = None  # cost relative to the spec's pricing.unit reference call
    cache_hits: int = 0
    extra: dict[str, Any] = field(default_factory=dict)
    schema: int = SCHEMA

    def to_line(self) -> bytes:
        # A shallow dict in field order: asdict() deep-copies every value, which cost more per
        # row than the append itself. Nested values (usage, extra) are plain JSON already.
        data = {name: getattr(self, name) for name in _ROW_FIELDS}
        if not data["extra"]:
            del data["extra"]
        # ensure_ascii keeps every line pure ASCII: no encoding surprises for odd model output.
        return (json.dumps(data, ensure_ascii=True, separators=(",", ":")) + "\n").encode("ascii")


_ROW_FIELDS = tuple(f.name for f in fields(Row))


def row_key(row: dict[str, Any], default_benchmark: str) -> Key:
    return (str(row.get("benchmark") or default_benchmark), str(row["task_id"]), str(row["arm"]))
