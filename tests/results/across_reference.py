"""The pairing of two runs item by item, as ``results.across`` did it before it worked on columns:
the reference its output is tested against (every figure and every format equal)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from pytest_echo_bench.results.across import (
    ArmPairing,
    Flip,
    ItemKey,
    Paired,
    Side,
    Sweep,
    arm_changes,
)
from pytest_echo_bench.results.read import Item
from pytest_echo_bench.store.files import UNJUDGED


def _add(side: Side, item: Item) -> None:
    side.rows += 1
    side.errors += item.status == "error"
    side.unparseable += item.status == "unparseable"
    side.unjudged += item.status == UNJUDGED
    if item.cost_usd is not None:
        side.cost_usd = (side.cost_usd or 0.0) + item.cost_usd
    if item.wall_seconds is not None:
        side.wall_total += item.wall_seconds
        side.walls += 1
    if item.served_model is not None:
        side.served[item.served_model] += 1


def _count(found: ArmPairing, base: bool, cand: bool) -> None:
    if base and cand:
        found.both += 1
    elif base:
        found.regressed += 1
    elif cand:
        found.fixed += 1
    else:
        found.neither += 1


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
        _add(found.cand, item)
    graded = _all_graded(base_items) and _all_graded(cand_items)
    found.graded = graded
    for item in base_items:
        _add(found.base, item)
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
    _count(found, base.passed, cand.passed)
    if base.passed != cand.passed:
        found.flips.append(Flip(benchmark=base.benchmark, task_id=base.task_id, epoch=base.epoch,
                                base_passed=base.passed, base_answer=base.answer,
                                cand_answer=cand.answer))
    if graded and base.grade is not None and cand.grade is not None:
        found.diffs.append(cand.grade - base.grade)
    elif not graded:
        found.diffs.append(float(cand.passed) - float(base.passed))
