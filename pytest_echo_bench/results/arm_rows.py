"""One run's rows grouped by (benchmark, arm) and read as the columns ``results.across`` pairs them
on, with the figures of each arm's calls (verdict kinds, cost, time, served models) summed as they
come.

The rows are visited in their own order, a chunk at a time, and each field of a chunk's items is
read by one ``map`` (in C) while the chunk is still in the processor's cache: a million items read
an arm at a time, strided over all of memory, cost three times as much. Sums add the rows in their
order, as an item-by-item loop does, so every figure is the same to the last bit.
"""

from __future__ import annotations

from collections import Counter
from functools import partial, reduce
from itertools import compress
from operator import add, attrgetter, eq, gt, is_, is_not
from typing import Any

from pytest_echo_bench.results.read import Item
from pytest_echo_bench.store.files import UNJUDGED

CHUNK = 4096  # rows read together: their items and fields fit in a core's cache
IS_NONE = partial(is_, None)
NOT_NONE = partial(is_not, None)
IS_UNJUDGED = partial(eq, UNJUDGED)
NAMED = attrgetter("task_id", "epoch")  # an item's (task id, epoch), as the lists of items say
_TASK, _DIGEST, _PASSED = attrgetter("task_id"), attrgetter("item_sha256"), attrgetter("passed")
_STATUS, _COST, _WALL = attrgetter("status"), attrgetter("cost_usd"), attrgetter("wall_seconds")
_SERVED, _GRADE, _EPOCH = attrgetter("served_model"), attrgetter("grade"), attrgetter("epoch")


class ArmRows:
    """One arm's rows of one run: its items, the columns pairing reads of every item, and what its
    calls did. A column needed only by some arms (epochs, grades, unjudged rows) is read when
    asked for (``column``)."""

    def __init__(self) -> None:
        self.items: list[Item] = []
        self.tasks: list[str] = []
        self.digests: list[str | None] = []
        self.passed = bytearray()  # a byte a verdict, 1 right: an eighth of a list's memory
        self.statuses: Counter[str] = Counter()
        self.cost_usd: float | None = None
        self.wall_total = 0.0
        self.walls = 0
        self.served: Counter[str] = Counter()
        self.epochs = False  # an item of an epoch beyond the first
        self.grades = False  # a row with a judged grade
        self.ungraded = False  # a row with a verdict but no grade
        self._columns: dict[str, list[Any]] = {}

    def extend(self, items: list[Item]) -> None:
        """The arm's next rows, in the file's order."""
        self.items += items
        self.tasks += map(_TASK, items)
        self.digests += map(_DIGEST, items)
        self.passed.extend(map(_PASSED, items))
        statuses = list(map(_STATUS, items))
        self.statuses.update(statuses)
        costs, walls = _known(list(map(_COST, items))), _known(list(map(_WALL, items)))
        if costs:  # as ``(cost or 0.0) + row`` row by row: the same additions in the same order
            self.cost_usd = reduce(add, costs, self.cost_usd or 0.0)
        self.wall_total = reduce(add, walls, self.wall_total)
        self.walls += len(walls)
        self.served.update(_known(list(map(_SERVED, items))))
        epochs = list(map(_EPOCH, items))
        self.epochs = self.epochs or epochs.count(1) != len(epochs)
        grades = list(map(_GRADE, items))
        if grades.count(None) != len(grades):
            self.grades = True
        if None in grades and not self.ungraded:
            self.ungraded = any(map(gt, map(IS_NONE, grades), map(IS_UNJUDGED, statuses)))

    @property
    def graded(self) -> bool:
        """Every verdict of the arm is a judged grade: its differences are of grades."""
        return self.grades and not self.ungraded

    def column(self, name: str) -> list[Any]:
        """One field of every item, read once."""
        found = self._columns.get(name)
        if found is None:
            found = self._columns[name] = list(map(attrgetter(name), self.items))
        return found

    def named(self, picked: bytes) -> list[tuple[str, int]]:
        """(task id, epoch) of the items ``picked`` marks (a byte per item), in order."""
        return list(map(NAMED, compress(self.items, picked)))


def _known(values: list[Any]) -> list[Any]:
    return list(filter(NOT_NONE, values)) if None in values else values


def group_rows(rows: list[Item]) -> dict[tuple[str, str], ArmRows]:
    """Each (benchmark, arm)'s rows, in the order of their first row."""
    arms: dict[tuple[str, str], ArmRows] = {}
    for start in range(0, len(rows), CHUNK):
        for key, items in _chunk(rows[start:start + CHUNK]).items():
            arm = arms.get(key)
            if arm is None:
                arm = arms[key] = ArmRows()
            arm.extend(items)
    return arms


def _chunk(rows: list[Item]) -> dict[tuple[str, str], list[Item]]:
    benchmarks = list(map(attrgetter("benchmark"), rows))
    names = list(map(attrgetter("arm"), rows))
    groups: dict[Any, list[Item]] = {}
    if benchmarks.count(benchmarks[0]) != len(benchmarks):
        for item, key in zip(rows, zip(benchmarks, names, strict=True), strict=True):
            groups.setdefault(key, []).append(item)
        return groups
    # one benchmark (the usual case): grouped by the arm's name alone, no key tuple per row
    for item, name in zip(rows, names, strict=True):
        groups.setdefault(name, []).append(item)
    return {(benchmarks[0], name): items for name, items in groups.items()}
