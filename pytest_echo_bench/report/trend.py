"""The figures of ``echo-bench trend``: each arm's pass rate per run with its Wilson interval, and
each run tested against the run before it (exact McNemar on the items both graded, Holm across the
arms of that step).

A run's pass rate is the report's: with repeats (``epochs``) an item's score is the share of its
samples right, and the interval is Wilson's over items. The paired test pairs samples as
``echo-bench compare`` does (``results.across.pair_runs``): by (benchmark, task_id, epoch) within
an arm of the same name, an unjudged row left out, and an item whose recorded digest differs
between the runs not paired (it asked something else) but counted as changed.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass

from pytest_echo_bench.analysis.names import ArmNames
from pytest_echo_bench.analysis.stats import holm, mcnemar_exact, wilson
from pytest_echo_bench.results.across import ArmPairing, Sweep, pair_runs
from pytest_echo_bench.results.runs import Run

ALPHA = 0.05  # a step is marked when its Holm-adjusted p is below this


@dataclass(frozen=True)
class RunInfo:
    """One run as the trend names it."""

    run_id: str
    created_at: str
    files: tuple[str, ...]
    partial: str | None  # the shards it lacks (``results.runs.Run.partial``)


@dataclass(frozen=True)
class Point:
    """An arm's figures in one run: graded items, their score and the pass rate's interval."""

    n: int
    score: float
    rate: float
    ci95: tuple[float, float]


@dataclass(frozen=True)
class Step:
    """An arm's run against the run before it on the items both graded; no p when no item was
    paired (every item changed, or only one run has it): the step still counts what it saw."""

    pairs: ArmPairing
    p_value: float | None
    p_holm: float | None

    @property
    def changed(self) -> bool:
        return self.p_holm is not None and self.p_holm < ALPHA

    @property
    def direction(self) -> str:
        """``down`` (more items went right to wrong), ``up``, or ``same``."""
        if self.pairs.regressed == self.pairs.fixed:
            return "same"
        return "down" if self.pairs.regressed > self.pairs.fixed else "up"


@dataclass(frozen=True)
class ArmTrend:
    """One arm over the runs: a point per run (None: not graded in it), and a step per run after
    the first (None: the arm is not in both runs)."""

    benchmark: str
    arm: str
    label: str
    points: tuple[Point | None, ...]
    steps: tuple[Step | None, ...]


@dataclass(frozen=True)
class Trend:
    """The runs, oldest first, and every arm any of them names."""

    runs: tuple[RunInfo, ...]
    arms: tuple[ArmTrend, ...]


def build_trend(runs: Sequence[Run]) -> Trend:
    """Every figure of the trend over ``runs`` (oldest first)."""
    graded = [run.verdicts for run in runs]
    names = ArmNames(_arm_order(runs))
    points = {ref: tuple(_point(g.get(ref)) for g in graded) for ref in names.pairs}
    steps = _steps(names.pairs, [run.sweep for run in runs])
    arms = tuple(ArmTrend(b, a, names.label((b, a)), points[(b, a)], steps[(b, a)])
                 for b, a in names.pairs)
    info = tuple(RunInfo(r.run_id, r.created_at, tuple(map(str, r.files)), r.partial)
                 for r in runs)
    return Trend(info, arms)


def _arm_order(runs: Sequence[Run]) -> dict[str, list[str]]:
    """Benchmarks and arms in the order the runs list them (``results.runs.Run.arms``), the
    oldest run's first."""
    order: dict[str, list[str]] = {}
    for run in runs:
        for bench, arms in run.arms.items():
            known = order.setdefault(bench, [])
            known += [arm for arm in arms if arm not in known]
    return order


def _point(items: dict[tuple[str, str, int], bool] | None) -> Point | None:
    """The arm's rate in one run: each item's score the share of its samples right."""
    if not items:
        return None
    samples: dict[tuple[str, str], list[bool]] = defaultdict(list)
    for (bench, task, _), passed in items.items():
        samples[(bench, task)].append(passed)
    score = math.fsum(sum(s) / len(s) for s in samples.values())
    n = len(samples)
    return Point(n, score, score / n, wilson(score, n))


def _steps(refs: list[tuple[str, str]], sweeps: list[Sweep]
           ) -> dict[tuple[str, str], tuple[Step | None, ...]]:
    """Each arm's steps; the p-values of one step (one pair of runs) Holm-adjusted together.

    An arm both runs have is a step even with no item paired (every item's digest changed): its
    ``item_changed`` count is the news. Only the arms with a paired item are tested, and Holm's
    family is theirs alone (an untested arm would only widen the others' adjustment)."""
    found: dict[tuple[str, str], list[Step | None]] = {ref: [] for ref in refs}
    for before, after in zip(sweeps, sweeps[1:], strict=False):
        met = {(a.benchmark, a.base_arm): a for a in pair_runs(before, after).arms}
        tested = {ref: mcnemar_exact(a.regressed, a.fixed) for ref, a in met.items() if a.n}
        adjusted = dict(zip(tested, holm(list(tested.values())), strict=True))
        for ref in refs:
            one = met.get(ref)
            found[ref].append(None if one is None else Step(one, tested.get(ref),
                                                            adjusted.get(ref)))
    return {ref: tuple(steps) for ref, steps in found.items()}
