"""The versioned records of a results file: one meta line, then one row per graded item."""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import asdict, dataclass, field, fields
from typing import Any

from pytest_echo_bench.store.files import encode_line

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
    rootdir: str = ""  # where spec_files and selection.args start: a resume pasted anywhere finds them
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
        return encode_line(data)


_ROW_FIELDS = tuple(f.name for f in fields(Row))


def row_from_json(record: dict[str, Any]) -> Row:
    """A row as our writer wrote it, back as a ``Row`` (fields it does not know are dropped)."""
    return Row(**{name: record[name] for name in _ROW_FIELDS if name in record})


def row_key(row: dict[str, Any], default_benchmark: str) -> Key:
    return (str(row.get("benchmark") or default_benchmark), str(row["task_id"]), str(row["arm"]))


class KeySet:
    """Recorded (benchmark, task_id, arm) keys, held as a set of task ids per (benchmark, arm).

    A resumed file has a million keys but only a few arms and benchmarks: a tuple and three
    strings per key cost about 260 bytes, a task id in its arm's set about 90.
    """

    __slots__ = ("by_arm",)

    def __init__(self, keys: Iterable[Key] = ()) -> None:
        self.by_arm: dict[tuple[str, str], set[str]] = {}
        for key in keys:
            self.add(key)

    def ids(self, benchmark: str, arm: str) -> set[str]:
        """The task ids recorded for an arm: add to it directly when adding many."""
        ids = self.by_arm.get((benchmark, arm))
        if ids is None:
            ids = self.by_arm[benchmark, arm] = set()
        return ids

    def add(self, key: Key) -> None:
        self.ids(key[0], key[2]).add(key[1])

    def add_rows(self, rows: Iterable[Any], default: str) -> None:
        """Add decoded rows (``benchmark``, ``task_id``, ``arm`` attributes): resume's hot loop."""
        by_arm = self.by_arm
        for r in rows:
            arm = (r.benchmark or default, r.arm)
            ids = by_arm.get(arm)
            if ids is None:
                ids = by_arm[arm] = set()
            ids.add(r.task_id)

    def __contains__(self, key: object) -> bool:
        if not isinstance(key, tuple) or len(key) != 3:
            return False
        ids = self.by_arm.get((key[0], key[2]))
        return ids is not None and key[1] in ids

    def __len__(self) -> int:
        return sum(map(len, self.by_arm.values()))

    def __eq__(self, other: object) -> bool:  # as a set of keys
        if isinstance(other, KeySet | set | frozenset):
            return set(self) == set(other)
        return NotImplemented

    __hash__ = None  # type: ignore[assignment]  # mutable, like a set

    def __iter__(self) -> Iterator[Key]:
        for (benchmark, arm), ids in self.by_arm.items():
            for task_id in ids:
                yield (benchmark, task_id, arm)
