"""Two runs of one benchmark paired item by item: what ``echo-bench compare`` (and the trend over
nights) measures, before any statistic.

Each side is read as ``echo-bench report`` reads several files of one sweep (``results.read``:
shards merged, the newest row of a key kept). Each BASE arm meets CAND's arm of the same name, or
the one ``pairs`` names; within an arm, items meet on (benchmark, task_id, epoch). An item only one
side has is counted and listed, never paired; an item whose recorded digest differs between the
sides asked something else, and is counted apart as changed.
"""

from __future__ import annotations

from array import array
from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from pytest_echo_bench.engine.fingerprint import ARM, changed_parts
from pytest_echo_bench.results.read import Item, Results
from pytest_echo_bench.store.files import UNJUDGED

# One side of a comparison: the rows of one or more files of one sweep, as ``load_results`` reads.
Sweep = Results
# An item within an arm: its task id alone at epoch 1 (the row's own interned string, so a million
# keys cost no tuple each), else (task id, epoch).
ItemKey = str | tuple[str, int]


@dataclass(frozen=True, slots=True)
class Flip:
    """An item one run got right and the other wrong, with both answers (as read: cut)."""

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

    def add(self, item: Item) -> None:
        self.rows += 1
        self.errors += item.status == "error"
        self.unparseable += item.status == "unparseable"
        self.unjudged += item.status == UNJUDGED
        if item.cost_usd is not None:
            self.cost_usd = (self.cost_usd or 0.0) + item.cost_usd
        if item.wall_seconds is not None:
            self.wall_total += item.wall_seconds
            self.walls += 1
        if item.served_model is not None:
            self.served[item.served_model] += 1

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

    def count(self, base: bool, cand: bool) -> None:
        """One paired item's verdicts in the 2x2 table."""
        if base and cand:
            self.both += 1
        elif base:
            self.regressed += 1
        elif cand:
            self.fixed += 1
        else:
            self.neither += 1

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


def pair_runs(base: Sweep, cand: Sweep, pairs: Mapping[str, str] | None = None) -> Paired:
    """BASE's and CAND's arms paired item by item.

    ``pairs`` maps a BASE arm's name to the CAND arm it meets (every other arm meets CAND's arm of
    its own name, in every benchmark both runs have). Items meet on (benchmark, task_id, epoch).
    An unjudged row (no verdict) is left unpaired and counted; an item whose ``item_sha256``
    differs between the runs is not paired and is counted as changed; one without a digest on
    either side is paired and counted as unknown. Pure: the caller reads the files.
    """
    pairs = dict(pairs or {})
    base_arms, cand_arms = _by_arm(base.rows), _by_arm(cand.rows)
    arms: list[ArmPairing] = []
    matched: set[tuple[str, str]] = set()
    for (bench, arm), items in base_arms.items():
        other = (bench, pairs.get(arm, arm))
        if other not in cand_arms:
            continue
        matched.add(other)
        found = _pair_arm(bench, arm, other[1], items, cand_arms[other])
        found.arm_changes = arm_changes(base, cand, bench, arm, other[1])
        arms.append(found)
    only_base = [k for k in base_arms if (k[0], pairs.get(k[1], k[1])) not in cand_arms]
    only_cand = [k for k in cand_arms if k not in matched]
    return Paired(arms, only_base, only_cand, base.sources, cand.sources)


def _by_arm(rows: Iterable[Item]) -> dict[tuple[str, str], list[Item]]:
    arms: dict[tuple[str, str], list[Item]] = {}
    for item in rows:
        arms.setdefault((item.benchmark, item.arm), []).append(item)
    return arms


def _key(item: Item) -> ItemKey:
    return item.task_id if item.epoch == 1 else (item.task_id, item.epoch)


def _pair_arm(bench: str, base_arm: str, cand_arm: str, base_items: list[Item],
              cand_items: list[Item]) -> ArmPairing:
    found = ArmPairing(bench, base_arm, cand_arm)
    index: dict[ItemKey, Item] = {}
    for item in cand_items:
        index[_key(item)] = item
        found.cand.add(item)
    graded = _all_graded(base_items) and _all_graded(cand_items)
    found.graded = graded
    for item in base_items:
        found.base.add(item)
        other = index.pop(_key(item), None)
        if other is None:
            found.only_base.append((item.task_id, item.epoch))
        else:
            _meet(found, item, other, graded)
    found.only_cand = [(i.task_id, i.epoch) for i in index.values()]
    return found


def _all_graded(items: list[Item]) -> bool:
    """Every verdict of the arm is a judged grade: the difference is of grades, by a paired t."""
    return any(i.grade is not None for i in items) and all(
        i.grade is not None for i in items if i.status != UNJUDGED)


def _meet(found: ArmPairing, base: Item, cand: Item, graded: bool) -> None:
    """One item both runs have: paired, or counted apart (changed, unjudged)."""
    if base.item_sha256 is None or cand.item_sha256 is None:
        found.unknown += 1
    elif base.item_sha256 != cand.item_sha256:
        found.changed.append((base.task_id, base.epoch))
        return
    if base.status == UNJUDGED or cand.status == UNJUDGED:
        found.unjudged += 1
        return
    found.count(base.passed, cand.passed)
    if base.passed != cand.passed:
        found.flips.append(Flip(base.benchmark, base.task_id, base.epoch, base.passed,
                                base.answer, cand.answer))
    if graded and base.grade is not None and cand.grade is not None:
        found.diffs.append(cand.grade - base.grade)
    elif not graded:
        found.diffs.append(float(cand.passed) - float(base.passed))


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
