"""Conflicting verdicts: a key recorded twice, the newer row saying otherwise. Found by the report
and the merge; a merged file keeps the merge's in its meta line, where its rows (each key once, the
newest) could no longer show them.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from pytest_echo_bench.errors import StoreError
from pytest_echo_bench.store.records import Key, Meta

FIELD = "merge_conflicts"  # the merged meta line's record: {"count": N, "keys": [...]}
LISTED = 100  # the keys a meta line lists at most (the count is whole): the line stays small


@dataclass(frozen=True)
class Conflict:
    """A repeated (benchmark, task_id, arm, epoch) whose newer row (``second``, kept) says otherwise
    than an older one (``first``) that was not an error: a retried
    error row is expected to change."""

    key: Key
    first: bool
    second: bool

    def to_json(self) -> dict[str, Any]:
        epoch = {"epoch": self.key[3]} if self.key[3] > 1 else {}
        return {"benchmark": self.key[0], "task_id": self.key[1], "arm": self.key[2], **epoch,
                "first": self.first, "kept": self.second}


def record(found: list[Conflict], unlisted: int) -> dict[str, Any]:
    """What a merged meta line records: the count, and the first ``LISTED`` keys."""
    return {"count": len(found) + unlisted, "keys": [c.to_json() for c in found[:LISTED]]}


def recorded(meta: Meta | None, where: str) -> tuple[list[Conflict], int]:
    """The conflicts an earlier merge recorded in ``meta``: (those listed, how many
    more it counted). The line is read from a file: anything but the shape
    ``record`` writes is refused, naming it."""
    value = meta.extra.get(FIELD) if meta is not None else None
    if value is None:
        return [], 0
    keys = value.get("keys") if isinstance(value, dict) else None
    count = value.get("count") if isinstance(value, dict) else None
    if not (
        isinstance(keys, list) and type(count) is int and len(keys) <= LISTED and len(keys) <= count
    ):
        raise StoreError(
            f'{where}: \'{FIELD}\' must be {{"count": N, "keys": [...]}} with at most '
            f"{LISTED} keys, "
            "no more than N"
        )
    listed = [_conflict(entry, where) for entry in keys]
    return listed, count - len(listed)


def _conflict(entry: Any, where: str) -> Conflict:
    ok = (
        isinstance(entry, dict)
        and all(isinstance(entry.get(k), str) for k in ("benchmark", "task_id", "arm"))
        and type(entry.get("epoch", 1)) is int
        and entry.get("epoch", 1) >= 1
        and type(entry.get("first")) is bool
        and type(entry.get("kept")) is bool
    )
    if not ok:
        raise StoreError(
            f"{where}: '{FIELD}' lists a key that is not {{benchmark, task_id, arm, [epoch], "
            "first, kept}"
        )
    return Conflict(
        (entry["benchmark"], entry["task_id"], entry["arm"], entry.get("epoch", 1)),
        entry["first"],
        entry["kept"],
    )
