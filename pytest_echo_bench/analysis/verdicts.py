"""The verdicts of a benchmark's arms as bits: per arm, the items it answered and those it got
right, one bit an item (in task-id order) of a Python int.

The pairs' 2x2 tables, the oracle, complementarity and the disagreements are then a few ``&``,
``|`` and bit counts over machine words: a set or a dict lookup per item and pair was most of the
time of a million-row report's comparisons.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from functools import reduce
from itertools import repeat
from operator import and_, attrgetter, or_
from typing import Protocol

ONE, ZERO = ord("1"), ord("0")


class Graded(Protocol):
    """What the table reads of an item (``results.read.Item``)."""

    @property
    def task_id(self) -> str: ...
    @property
    def passed(self) -> bool: ...


class Bits(int):
    """A set of items as the bits of an int: ``&`` and ``len`` as a set's (``compare.pair``)."""

    __slots__ = ()

    def __and__(self, other: int) -> Bits:
        return Bits(int.__and__(self, other))

    def __len__(self) -> int:
        return self.bit_count()


@dataclass(frozen=True)
class Table:
    """Per arm the items answered and right, over ``tasks`` (sorted: item ``p`` is bit
    ``len(tasks) - 1 - p``, so the first task ids are the highest bits)."""

    tasks: list[str]
    index: dict[str, int]  # task id -> its place in ``tasks``
    answered: dict[str, Bits]
    right: dict[str, Bits]

    def sets(self, arm: str) -> tuple[Bits, Bits]:
        return self.answered[arm], self.right[arm]

    def shared(self, arms: Iterable[str]) -> Bits:
        """The items every one of ``arms`` answered."""
        return Bits(reduce(and_, (self.answered[a] for a in arms)))

    def oracle(self, arms: Sequence[str]) -> tuple[int, int]:
        """(items all of ``arms`` answered, those any of them got right)."""
        shared = self.shared(arms)
        return len(shared), (reduce(or_, (self.right[a] for a in arms)) & shared).bit_count()

    def alone(self) -> tuple[int, dict[str, int]]:
        """(items every arm answered, per arm those only it got right among them)."""
        shared = self.shared(self.answered)
        found = {}
        for arm in self.right:
            others = reduce(or_, (r for a, r in self.right.items() if a != arm), 0)
            found[arm] = (self.right[arm] & shared & ~others).bit_count()
        return len(shared), found

    def split(self, shown: int) -> tuple[int, list[str]]:
        """(items every arm answered on which they disagree, the first ``shown`` task ids)."""
        shared = self.shared(self.answered)
        anyone = reduce(or_, self.right.values()) & shared
        everyone = reduce(and_, self.right.values()) & shared
        mask = anyone & ~everyone
        n = len(self.tasks)
        bits = format(mask, f"0{n}b") if n else ""
        first, at = [], bits.find("1")
        while at >= 0 and len(first) < shown:
            first.append(self.tasks[at])
            at = bits.find("1", at + 1)
        return mask.bit_count(), first

    def verdict(self, arm: str, task: str) -> bool:
        """Whether ``arm`` got ``task`` right (an item it answered)."""
        return bool(self.right[arm] >> (len(self.tasks) - 1 - self.index[task]) & 1)


def table(by_arm: dict[str, Sequence[Graded]]) -> Table:
    """The table of ``by_arm``'s items; an item an arm holds twice counts as its last one
    (as a dict of its verdicts would)."""
    ids = {arm: list(map(_TASK, items)) for arm, items in by_arm.items()}
    tasks = sorted(set().union(*ids.values()))
    index = {t: p for p, t in enumerate(tasks)}
    answered, right = {}, {}
    for arm, items in by_arm.items():
        seen, ok = bytearray(b"0" * len(tasks)), bytearray(b"0" * len(tasks))
        # each item's bit set in C (an item's later row sets its bits again, as a dict would)
        at = list(map(index.__getitem__, ids[arm]))
        deque(map(seen.__setitem__, at, repeat(ONE)), maxlen=0)
        deque(map(ok.__setitem__, at, map(_BIT.__getitem__, map(_PASSED, items))), maxlen=0)
        answered[arm] = Bits(int(seen, 2) if tasks else 0)
        right[arm] = Bits(int(ok, 2) if tasks else 0)
    return Table(tasks, index, answered, right)


_TASK, _PASSED = attrgetter("task_id"), attrgetter("passed")
_BIT = {False: ZERO, True: ONE}
