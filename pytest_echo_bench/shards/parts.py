"""How each shard's file ended, and how many of its shard's items it holds: what a merge records of
each part (``shard_parts`` in its meta line) and what every report format and ``merge`` show.

A shard's meta line records ``shard_items``, the items its selection holds (every arm and epoch of
each task the shard owns). A file ended one of four ways: it ran to the end; it stopped (an end
line, or a stop marker beside it, gives the reason); it was killed (no end line, and fewer rows than
its shard selects: a run still going reads so too); or it is empty (no row: killed before its
first). Whether a shard is whole is then a matter of counts: the rows of that shard held by all the
files given, each key once, against the items it selects; only a file written before
``shard_items`` existed falls back to how its files ended, and says so.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from operator import itemgetter
from typing import Any

from pytest_echo_bench.errors import StoreError
from pytest_echo_bench.shards.env import k_of_n
from pytest_echo_bench.shards.partition import shard_of
from pytest_echo_bench.store import meta as shard_meta
from pytest_echo_bench.store.meta import ShardFields

RAN, STOPPED, KILLED, EMPTY = "ran-to-end", "stopped", "killed", "empty"
HOWS = (RAN, STOPPED, KILLED, EMPTY)
# A shard file's meta line: the items its shard selects; a merged file's: how each part ended.
ITEMS, FIELD = shard_meta.ITEMS, shard_meta.PARTS
UNFINISHED = "unfinished_shards"  # a merged file's meta line: the shards held but not whole

ShardKey = tuple[int, int]  # (K, N)


@dataclass(frozen=True)
class PartEnd:
    """One shard file: which shard, how it ended, the items it holds
    and the items its shard selects."""

    shard: str  # "K/N"
    file: str
    how: str  # one of HOWS
    reason: str = ""  # a stop's reason, as its end line records it
    held: int = 0  # the file's rows of its shard, each key once
    expected: int | None = None  # None: its meta line does not say (written by an earlier version)

    def ended(self) -> str:
        """How it ended, in words."""
        return {
            RAN: "ran to the end",
            STOPPED: f"stopped: {self.reason or 'stopped'}",
            KILLED: "killed (or still running): no end line, and fewer rows than its shard selects",
            EMPTY: "empty: no row (killed before its first)",
        }[self.how]

    def text(self) -> str:
        """One line, as every format shows it: the shard, the file, how it ended and its items."""
        how = self.ended()
        items = (
            f"{self.held} of {self.expected} items"
            if self.expected is not None
            else f"{self.held} items (how many its shard selects is not recorded: written by an "
            "earlier version)"
        )
        return f"shard {self.shard} ({self.file}): {how}; {items}"

    def to_json(self) -> dict[str, Any]:
        return {
            "shard": self.shard,
            "file": self.file,
            "ended": self.how,
            "reason": self.reason,
            "held": self.held,
            "expected": self.expected,
        }

    @classmethod
    def from_json(cls, data: object, where: str) -> PartEnd:
        """A part as a merged meta line records it; StoreError
        naming ``where`` for anything else."""
        ok = (
            isinstance(data, dict)
            and isinstance(data.get("shard"), str)
            and isinstance(data.get("file"), str)
            and data.get("ended") in HOWS
            and isinstance(data.get("reason", ""), str)
            and _count(data.get("held"))
            and (data.get("expected") is None or _count(data.get("expected")))
        )
        shard = k_of_n(data["shard"]) if ok and isinstance(data, dict) else None
        if shard is None:
            raise StoreError(
                f"{where}: its meta line field {FIELD!r} must be a list of parts, each with "
                "shard, file, "
                f"ended ({', '.join(HOWS)}), reason, held and expected (whole numbers), got "
                f"{data!r:.200}"
            )
        assert isinstance(data, dict)
        return cls(
            f"{shard[0]}/{shard[1]}",
            data["file"],
            data["ended"],
            data.get("reason", ""),
            data["held"],
            data.get("expected"),
        )


def _count(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def recorded_parts(fields: ShardFields, where: str) -> tuple[PartEnd, ...]:
    """A merged file's ``shard_parts``: () when it records none (a merge by an earlier version)."""
    return tuple(PartEnd.from_json(p, where) for p in fields.parts or ())


def how_ended(stop: str, held: int, expected: int | None) -> str:
    """How a shard file ended, from the stop its end line records ("" for none) and its rows."""
    if stop:
        return STOPPED
    if held == 0 and expected != 0:
        return EMPTY
    return KILLED if expected is not None and held < expected else RAN


def held_by_shard(keys: Iterable[Sequence[Any]], totals: Iterable[int]) -> Counter[ShardKey]:
    """Per (K, N), for each N of ``totals``, how many of ``keys``
    (benchmark, task_id, ...) shard K owns."""
    totals = sorted(set(totals))
    held: Counter[ShardKey] = Counter()
    if not totals:
        return held
    # an item's arms and epochs share its shard: its keys counted (in C), then hashed once
    for (benchmark, task_id), count in Counter(map(itemgetter(0, 1), keys)).items():
        for n in totals:
            held[shard_of((benchmark, task_id, "", 1), n), n] += count
    return held


def shard_whole(ends: Sequence[PartEnd], held: int | None) -> bool:
    """Whether one shard is all here: its rows (``held``: of every file given, each key once; None:
    not counted) against the items it selects. Without that count recorded (an earlier version's
    files) it is whole when a file of it ran to the end; a merge by an earlier version, which
    recorded no part, is taken as it said."""
    expected = max((e.expected for e in ends if e.expected is not None), default=None)
    if expected is not None:
        return (held if held is not None else max(e.held for e in ends)) >= expected
    return not ends or any(e.how == RAN for e in ends)
