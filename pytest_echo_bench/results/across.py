"""Two runs of one benchmark paired item by item: what ``echo-bench compare`` (and the trend over
nights) measures, before any statistic.

Each side is read as ``echo-bench report`` reads several files of one sweep (``results.read``:
shards merged, the newest row of a key kept). Each BASE arm meets CAND's arm of the same name, or
the one ``pairs`` names; within an arm, items meet on (benchmark, task_id, epoch). An item only one
side has is counted and listed, never paired; an item whose recorded digest differs between the
sides asked something else, and is counted apart as changed.

The pairing works on columns (``results.arm_rows``), combined by ``map``, ``compress`` and ints
of marks, which run in C, not item by item; every figure is the one an item-by-item loop gives.
"""

from __future__ import annotations

from array import array
from collections import Counter, deque
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from itertools import compress, repeat
from operator import and_, attrgetter, ne, not_, or_, sub
from typing import Any

import msgspec

from pytest_echo_bench.engine.fingerprint import ARM, changed_parts
from pytest_echo_bench.results.arm_rows import (
    IS_NONE,
    IS_UNJUDGED,
    NAMED,
    NOT_NONE,
    ArmRows,
    group_rows,
)
from pytest_echo_bench.results.read import Item, Results
from pytest_echo_bench.store.files import UNJUDGED

# One side of a comparison: the rows of one or more files of one sweep, as ``load_results`` reads.
Sweep = Results
# An item within an arm: its task id alone (the row's own interned string, so a million keys cost
# no tuple each), or (task id, epoch) when either run's arm has epochs.
ItemKey = str | tuple[str, int]


class Flip(msgspec.Struct, frozen=True, gc=False):
    """An item one run got right and the other wrong, with both answers (as read: cut).

    A Struct, built in C: two runs of a million rows can hold a hundred thousand flips."""

    benchmark: str
    task_id: str
    epoch: int
    base_passed: bool
    base_answer: str | None
    cand_answer: str | None

    @property
    def regressed(self) -> bool:
        """Right in BASE, wrong in CAND."""
        return self.base_passed


@dataclass
class Side:
    """What one run's rows of an arm did, paired or not: its calls' verdicts, cost and time."""

    rows: int = 0
    errors: int = 0
    unparseable: int = 0
    unjudged: int = 0
    cost_usd: float | None = None
    wall_total: float = 0.0
    walls: int = 0
    served: Counter[str] = field(default_factory=Counter)

    def rate(self, count: int) -> float | None:
        return count / self.rows if self.rows else None

    @property
    def wall_mean(self) -> float | None:
        return self.wall_total / self.walls if self.walls else None


@dataclass
class ArmPairing:
    """One BASE arm against its CAND arm: the paired 2x2 table, each paired item's difference,
    what could not be paired and why, and whether the two arms were the same arm."""

    benchmark: str
    base_arm: str
    cand_arm: str
    both: int = 0  # right in both runs
    regressed: int = 0  # b: right in BASE, wrong in CAND
    fixed: int = 0  # c: wrong in BASE, right in CAND
    neither: int = 0
    # CAND's score - BASE's per paired item, in BASE's order: 0/1 verdicts, or both rows' grades
    diffs: array[float] = field(default_factory=lambda: array("d"))
    graded: bool = False  # the differences are of judged grades (rows with ``score``)
    only_base: list[tuple[str, int]] = field(default_factory=list)
    only_cand: list[tuple[str, int]] = field(default_factory=list)
    changed: list[tuple[str, int]] = field(default_factory=list)  # the item's digest differs
    unknown: int = 0  # paired without a digest on one side (an older file): said so
    unjudged: int = 0  # left unpaired: a side has no verdict for it
    flips: list[Flip] = field(default_factory=list)
    base: Side = field(default_factory=Side)
    cand: Side = field(default_factory=Side)
    arm_changes: list[str] = field(default_factory=list)  # ``changed_parts``' words

    @property
    def n(self) -> int:
        return self.both + self.regressed + self.fixed + self.neither

    @property
    def served_changed(self) -> bool:
        """Both runs say what served the arm, and they say different things."""
        return bool(self.base.served and self.cand.served) and set(self.base.served) != set(
            self.cand.served)


@dataclass
class Paired:
    """Two runs paired: each arm pairing, and the arms only one run has."""

    arms: list[ArmPairing]
    only_base_arms: list[tuple[str, str]]  # (benchmark, arm)
    only_cand_arms: list[tuple[str, str]]
    base_sources: list[tuple[str, str, str]]  # (path, run id, created_at) per file
    cand_sources: list[tuple[str, str, str]]


# BASE's arm -> the CAND arm it meets: a bare arm name (in every benchmark), or (benchmark, arm)
Pairs = Mapping[str | tuple[str, str], str]


def meets(pairs: Pairs, bench: str, arm: str) -> str:
    """The CAND arm BASE's ``arm`` of ``bench`` meets: as ``pairs`` names it for that benchmark,
    else for every benchmark, else its own name."""
    return pairs.get((bench, arm), pairs.get(arm, arm))


def pair_runs(base: Sweep, cand: Sweep, pairs: Pairs | None = None) -> Paired:
    """BASE's and CAND's arms paired item by item.

    ``pairs`` maps a BASE arm's name, or its (benchmark, arm), to the CAND arm it meets (every
    other arm meets CAND's arm of its own name, in every benchmark both runs have). Items meet on
    (benchmark, task_id, epoch).
    An unjudged row (no verdict) is left unpaired and counted; an item whose ``item_sha256``
    differs between the runs is not paired and is counted as changed; one without a digest on
    either side is paired and counted as unknown. Pure: the caller reads the files.
    """
    pairs = dict(pairs or {})
    base_arms, cand_arms = group_rows(base.rows), group_rows(cand.rows)
    arms: list[ArmPairing] = []
    matched: set[tuple[str, str]] = set()
    for (bench, arm), items in base_arms.items():
        other = (bench, meets(pairs, bench, arm))
        if other not in cand_arms:
            continue
        matched.add(other)
        found = _pair_arm(bench, arm, other[1], items, cand_arms[other])
        found.arm_changes = arm_changes(base, cand, bench, arm, other[1])
        arms.append(found)
    only_base = [k for k in base_arms if (k[0], meets(pairs, *k)) not in cand_arms]
    only_cand = [k for k in cand_arms if k not in matched]
    return Paired(arms, only_base, only_cand, base.sources, cand.sources)


def _pair_arm(bench: str, base_arm: str, cand_arm: str, base: ArmRows,
              cand: ArmRows) -> ArmPairing:
    found = ArmPairing(bench, base_arm, cand_arm, base=_side(base), cand=_side(cand),
                       graded=base.graded and cand.graded)
    epochs = base.epochs or cand.epochs
    base_keys, cand_keys = _keys(base, epochs), _keys(cand, epochs)
    # each key's CAND item: the last of its key, at the place of the first (as a dict fills)
    index = dict(zip(cand_keys, range(len(cand_keys)), strict=True))
    at = list(map(index.get, base_keys))
    met = list(filter(NOT_NONE, at))
    if len(set(met)) != len(met):  # BASE holds a key twice: it meets CAND's item once
        _first_only(base_keys, at)
        met = list(filter(NOT_NONE, at))
    hit = bytes(map(NOT_NONE, at))
    if len(met) != len(at):
        found.only_base = base.named(bytes(map(not_, hit)))
    if len(met) != len(index):
        deque(map(index.pop, compress(base_keys, hit)), maxlen=0)
        found.only_cand = list(map(NAMED, map(cand.items.__getitem__, index.values())))
    _meet(found, _Met(base, cand, hit, met))
    return found


def _side(arm: ArmRows) -> Side:
    """What the arm's calls did in one run, every row counted (paired or not)."""
    return Side(len(arm.items), arm.statuses["error"], arm.statuses["unparseable"],
                arm.statuses[UNJUDGED], arm.cost_usd, arm.wall_total, arm.walls, arm.served)


def _keys(arm: ArmRows, epochs: bool) -> list[ItemKey]:
    """Each item's key within the arm: its task id, or (task id, epoch) when a run of the two has
    epochs (tuples on both sides, so keys meet as the pair)."""
    if epochs:
        return list(zip(arm.tasks, arm.column("epoch"), strict=True))
    return arm.tasks  # type: ignore[return-value]


def _first_only(keys: list[ItemKey], at: list[int | None]) -> None:
    """A key BASE holds twice meets CAND's item once, at its first row: the others are BASE's
    alone."""
    first = dict(zip(reversed(keys), range(len(keys) - 1, -1, -1), strict=True))
    for n, key in enumerate(keys):
        if first[key] != n:
            at[n] = None


class _Met:
    """The items both runs have, as pairs of columns in BASE's order."""

    def __init__(self, base: ArmRows, cand: ArmRows, hit: bytes, at: list[int]) -> None:
        self.base, self.cand, self.hit, self.at = base, cand, hit, at

    def pair(self, old: Sequence[Any], new: Sequence[Any]) -> tuple[list[Any], list[Any]]:
        """BASE's and CAND's values of one field, paired."""
        return list(compress(old, self.hit)), list(map(new.__getitem__, self.at))

    def __call__(self, name: str) -> tuple[list[Any], list[Any]]:
        return self.pair(self.base.column(name), self.cand.column(name))


def _meet(found: ArmPairing, met: _Met) -> None:
    """The paired items: in the 2x2 table, or counted apart (changed, unjudged).

    A mark per item is a byte, 0 or 1; a set of marks is the int of those bytes, so an and, an
    or and a count over a hundred thousand items are single operations."""
    apart = _changed(found, met)
    if met.base.statuses[UNJUDGED] or met.cand.statuses[UNJUDGED]:
        old, new = met("status")
        unjudged = _bits(map(or_, map(IS_UNJUDGED, old), map(IS_UNJUDGED, new)))
        found.unjudged = (unjudged & ~apart).bit_count()
        apart |= unjudged
    old, new = met.pair(met.base.passed, met.cand.passed)
    live = None
    if apart:  # the usual case has nothing apart: every paired item is counted as it is
        live = (apart ^ _bits(repeat(1, len(old)))).to_bytes(len(old), "little")
        old, new = list(compress(old, live)), list(compress(new, live))
    right_old, right_new = _bits(old), _bits(new)
    found.both = (right_old & right_new).bit_count()
    found.regressed = right_old.bit_count() - found.both
    found.fixed = right_new.bit_count() - found.both
    found.neither = len(old) - found.both - found.regressed - found.fixed
    found.flips = _flips(found.benchmark, met, live, (right_old ^ right_new).to_bytes(
        len(old), "little"))
    if found.graded:
        old_grades, new_grades = met("grade")
        if live is not None:
            old_grades, new_grades = list(compress(old_grades, live)), list(compress(new_grades,
                                                                                     live))
        found.diffs = _grade_diffs(old_grades, new_grades)
    else:  # CAND's verdict - BASE's, each byte of ``1 + new - old`` (0, 1 or 2) looked up
        steps = _bits(repeat(1, len(old))) + right_new - right_old
        found.diffs = array("d", map(_STEPS.__getitem__, steps.to_bytes(len(old), "little")))


_STEPS = (-1.0, 0.0, 1.0)


def _flips(bench: str, met: _Met, live: bytes | None, flipped: bytes) -> list[Flip]:
    """The counted items whose verdicts differ (``flipped`` marks them among the counted)."""
    base, cand = compress(met.base.items, met.hit), iter(met.at)
    if live is not None:
        base, cand = compress(base, live), compress(cand, live)
    base_items = list(compress(base, flipped))
    cand_items = list(map(met.cand.items.__getitem__, compress(cand, flipped)))
    return list(map(Flip, repeat(bench), *_fields(base_items, "task_id", "epoch", "passed",
                                                  "answer"),
                    map(attrgetter("answer"), cand_items)))


def _bits(marks: Iterable[bool | int]) -> int:
    return int.from_bytes(bytes(marks), "little")


def _fields(items: list[Item], *names: str) -> list[list[Any]]:
    return [list(map(attrgetter(name), items)) for name in names]


def _changed(found: ArmPairing, met: _Met) -> int:
    """The paired items whose digest differs (as marks), named in ``found.changed``; those paired
    without a digest on a side are counted in ``found.unknown``."""
    old, new = met.pair(met.base.digests, met.cand.digests)
    if old == new and None not in old:  # every digest recorded, and the same: the usual case
        return 0
    unknown = 0
    if None in old or None in new:  # paired by key alone: an older file
        unknown = _bits(map(or_, map(IS_NONE, old), map(IS_NONE, new)))
        found.unknown = unknown.bit_count()
    changed = _bits(map(ne, old, new)) & ~unknown
    found.changed = list(map(NAMED, compress(compress(met.base.items, met.hit),
                                             changed.to_bytes(len(old), "little"))))
    return changed


def _grade_diffs(old: list[float | None], new: list[float | None]) -> array[float]:
    """CAND's grade - BASE's per paired item where both rows have one."""
    both = bytes(map(and_, map(NOT_NONE, old), map(NOT_NONE, new)))
    return array("d", map(sub, compress(new, both), compress(old, both)))


def arm_changes(base: Sweep, cand: Sweep, bench: str, base_arm: str, cand_arm: str) -> list[str]:
    """How BASE's arm differs from CAND's as their meta lines record it (``arm/NAME`` parts), in
    ``changed_parts``' words, named by BASE's arm; empty when either run recorded no parts."""
    old, new = _arm_parts(base, bench, base_arm), _arm_parts(cand, bench, cand_arm)
    if not old or not new:
        return []
    if base_arm != cand_arm:  # CAND's arm under BASE's name, so only a real change is named
        new = {f"{ARM}{base_arm}{k[len(ARM) + len(cand_arm):]}": v for k, v in new.items()}
    return changed_parts(old, new)


def _arm_parts(sweep: Sweep, bench: str, arm: str) -> dict[str, str]:
    """The parts recorded for one arm (its digest and each key's), from the first meta line that
    records them."""
    prefix = f"{ARM}{arm}"
    for meta in sweep.metas:
        entry = meta.benchmarks.get(bench)
        if entry is None or not entry.parts:
            continue
        found = {k: v for k, v in entry.parts.items()
                 if k == prefix or k.startswith(prefix + "/")}
        if found:
            return found
    return {}
