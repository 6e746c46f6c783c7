"""What the judges did, as the report shows it: their spend apart from the arms', the grades per
arm and between arms, a panel's agreement, each judge's mean grade, and pairwise judging's
position consistency and win rates (``report.judge_checks``: human labels, self-preference).

Read from the rows each key once (``results.read``); unjudged rows have no grade and count in no
figure. Every figure is a finite number or None with a reason: a hostile file's grades (any
finite number) are scaled before they are summed, so no mean, interval or difference is NaN.
"""

from __future__ import annotations

import math
from collections import Counter, defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from fractions import Fraction
from itertools import combinations, repeat
from operator import attrgetter, is_, sub, truediv

from pytest_echo_bench.analysis.agreement import (
    Estimate,
    Interval,
    alpha_interval,
    cohen_kappa,
    kappa_interval,
    krippendorff_alpha,
)
from pytest_echo_bench.analysis.judges import HumanAgreement, Rate, WinRates, position_consistency
from pytest_echo_bench.analysis.judges import win_rates as _win_rates
from pytest_echo_bench.analysis.stats import paired_t, t_quantile
from pytest_echo_bench.budget import money
from pytest_echo_bench.budget.spend import ArmSpend
from pytest_echo_bench.results.read import Item, Judged, Results

OUTCOME = {1.0: "win", 0.5: "tie", 0.0: "loss"}  # a pairwise grade, from the arm's side
Rating = float | str


@dataclass(frozen=True)
class JudgeSpend:
    """One arm's spend beside its judges': each None when no row's cost is known."""

    benchmark: str
    arm: str
    arm_usd: float | None
    arm_unknown: int
    judge_usd: float | None
    judge_unknown: int


@dataclass(frozen=True)
class Grades:
    """An arm's mean grade over its ``n`` graded rows, with Student's t 95% interval."""

    benchmark: str
    arm: str
    n: int
    mean: float | None
    ci95: tuple[float, float] | None


@dataclass(frozen=True)
class GradePair:
    """mean(grade a - grade b) on the ``n`` items both arms' grades cover (each item's grades
    averaged over its epochs), with the paired t interval and p."""

    benchmark: str
    a: str
    b: str
    n: int
    diff: float | None
    ci95: tuple[float, float] | None
    p_value: float | None


@dataclass(frozen=True)
class PanelAgreement:
    """How far a panel's judges agree, over the items two or more of them graded."""

    benchmark: str
    judges: tuple[str, ...]
    statistic: str  # "kappa", "weighted kappa" (quadratic), "alpha (interval)", "alpha (nominal)"
    estimate: Estimate
    interval: Interval


@dataclass(frozen=True)
class JudgeGrades:
    """One judge's grades: the mean of those it gave, and the judgments with none."""

    benchmark: str
    judge: str
    models: tuple[str, ...]  # the models that served it, as its replies said
    n: int
    mean: float | None
    ungraded: int


@dataclass(frozen=True)
class Pairwise:
    """An arm judged against another, in both orders."""

    benchmark: str
    arm: str
    consistency: Rate  # items whose verdict is the same in both orders
    wins: WinRates  # the rows' verdicts (a flip is a tie)


@dataclass(frozen=True)
class HumanFigures:
    benchmark: str
    judge: str
    agreement: HumanAgreement


@dataclass(frozen=True)
class LabelsRead:
    """Labels given: how many matched a row, and those that did not (the first few named)."""

    path: str
    matched: int
    unmatched: int
    named: tuple[str, ...]


@dataclass
class Judging:
    """Everything the report shows of its judges (``Report.judging``; None: no judged row)."""

    spend: list[JudgeSpend] = field(default_factory=list)
    grades: list[Grades] = field(default_factory=list)
    grade_pairs: list[GradePair] = field(default_factory=list)
    agreement: list[PanelAgreement] = field(default_factory=list)
    judges: list[JudgeGrades] = field(default_factory=list)
    pairwise: list[Pairwise] = field(default_factory=list)
    humans: list[HumanFigures] = field(default_factory=list)
    labels: LabelsRead | None = None
    warnings: list[str] = field(default_factory=list)

    def total(self) -> tuple[float | None, float | None]:
        """(the arms' spend, the judges'): each None when no row's cost is known."""
        arms = [s.arm_usd for s in self.spend if s.arm_usd is not None]
        judges = [s.judge_usd for s in self.spend if s.judge_usd is not None]
        return (money.figure(math.fsum(arms)) if arms else None,
                money.figure(math.fsum(judges)) if judges else None)


def judged(results: Results) -> bool:
    """Whether any row of ``results`` was judged (its grade or judgments recorded)."""
    rows = results.rows
    return any(map(attrgetter("judged"), rows)) or not all(
        map(is_, map(attrgetter("grade"), rows), repeat(None))) or any(
        s.judged or s.judge_unknown for s in results.spend.values())


def build_judging(results: Results, order: dict[str, list[str]]) -> Judging:
    """The judging figures of ``results``, arms in ``order`` (benchmark -> arms)."""
    by_arm: dict[tuple[str, str], list[Item]] = defaultdict(list)
    for item in results.rows:
        if item.grade is not None or item.judged:
            by_arm[(item.benchmark, item.arm)].append(item)
    found = Judging(spend=[_spend(b, a, results.spend.get((b, a), ArmSpend()))
                           for b, arms in order.items() for a in arms])
    for bench, arms in order.items():
        graded = {a: by_arm[(bench, a)] for a in arms if by_arm.get((bench, a))}
        _add_benchmark(found, bench, graded)
    return found


def _add_benchmark(found: Judging, bench: str, graded: dict[str, list[Item]]) -> None:
    """One benchmark's grades, grade pairs, judges' figures and pairwise figures."""
    grades = [_grades(bench, a, items) for a, items in graded.items()
              if any(i.grade is not None for i in items)]
    found.grades += grades
    halves = {g.arm: _halves(_per_item(graded[g.arm])) for g in grades}
    found.grade_pairs += [_grade_pair(bench, a, b, halves[a], halves[b])
                          for a, b in combinations(halves, 2)]
    kinds = Counter(i.judged for items in graded.values() for i in items if i.judged)
    found.judges += _judge_grades(bench, kinds)
    found.agreement += _agreement(bench, kinds)
    found.pairwise += [p for a, items in graded.items()
                       if (p := _pairwise(bench, a, items)) is not None]


def _spend(bench: str, arm: str, spend: ArmSpend) -> JudgeSpend:
    return JudgeSpend(bench, arm, money.figure(spend.usd) if spend.known else None, spend.unknown,
                      money.figure(spend.judge_usd) if spend.judged else None,
                      spend.judge_unknown)


def t_mean(values: Sequence[float]) -> tuple[float | None, tuple[float, float] | None,
                                               float | None]:
    """(mean, Student's t 95% interval, two-sided p of mean 0) of ``values``, any finite numbers:
    scaled by the largest magnitude first, so no sum overflows (None: not defined)."""
    n = len(values)
    if not n:
        return None, None, None
    scale = max(map(abs, values)) or 1.0
    mean, se, _, p = paired_t(list(map(truediv, values, repeat(scale))))
    if n < 2 or not math.isfinite(se):
        return _finite(mean * scale), None, p
    half = t_quantile(0.95, n - 1) * se
    lo, hi = _finite((mean - half) * scale), _finite((mean + half) * scale)
    return _finite(mean * scale), None if lo is None or hi is None else (lo, hi), p


def _finite(value: float) -> float | None:
    return value if math.isfinite(value) else None


def _grades(bench: str, arm: str, items: list[Item]) -> Grades:
    values = [i.grade for i in items if i.grade is not None]
    mean, ci, _ = t_mean(values)
    return Grades(bench, arm, len(values), mean, ci)


def _per_item(items: Iterable[Item]) -> dict[str, float]:
    """Each item's grade, its epochs' grades averaged (scaled: any finite grades)."""
    graded = [i for i in items if i.grade is not None]
    tasks = list(map(attrgetter("task_id"), graded))
    if len(set(tasks)) == len(tasks):  # a grade an item (no epochs): no list of one per item
        return dict(zip(tasks, map(attrgetter("grade"), graded), strict=True))
    grades: dict[str, list[float]] = defaultdict(list)
    for i in graded:
        grades[i.task_id].append(i.grade)  # type: ignore[arg-type]
    return {t: g[0] if len(g) == 1 else math.fsum(x / len(g) for x in g)
            for t, g in grades.items()}


def _halves(grades: dict[str, float]) -> dict[str, float]:
    """An arm's items' grades halved (a difference of two finite halves stays finite): an arm is
    paired with every other one, so each is halved once."""
    return dict(zip(grades, map(truediv, grades.values(), repeat(2)), strict=True))


def _grade_pair(bench: str, a: str, b: str, ga: dict[str, float],
                gb: dict[str, float]) -> GradePair:
    tasks = list(ga)
    if len(ga) == len(gb) and tasks == list(gb):  # the same items in the same order: no lookups
        shared, diffs = tasks, list(map(sub, ga.values(), gb.values()))
    else:
        shared = list(filter(gb.__contains__, ga))
        diffs = list(map(sub, map(ga.__getitem__, shared), map(gb.__getitem__, shared)))
    mean, ci, p = t_mean(diffs)
    if mean is not None:
        mean = _finite(mean * 2)
        ci = None if ci is None else _doubled(ci)
    return GradePair(bench, a, b, len(shared), mean, ci, p if shared else None)


def _doubled(ci: tuple[float, float]) -> tuple[float, float] | None:
    lo, hi = ci[0] * 2, ci[1] * 2
    return (lo, hi) if math.isfinite(lo) and math.isfinite(hi) else None


def _judge_grades(bench: str, kinds: Counter[tuple[Judged, ...]]) -> list[JudgeGrades]:
    grades: dict[str, Counter[float]] = defaultdict(Counter)  # a judge's grades, as counts
    ungraded: Counter[str] = Counter()
    models: dict[str, dict[str, None]] = defaultdict(dict)
    for judgments, times in kinds.items():
        for judge, model, grade, _, _ in judgments:
            models[judge].setdefault(model or "-")
            if grade is None:
                ungraded[judge] += times
            else:
                grades[judge][grade] += times
    return [JudgeGrades(bench, judge, tuple(models[judge]), grades[judge].total(),
                        mean_of_counts(grades[judge]), ungraded[judge]) for judge in models]


def mean_of_counts(counts: Counter[float]) -> float | None:
    """``t_mean``'s mean of the values ``counts`` holds, each as many times as its count, without
    listing them (a panel's million grades are a few distinct ones): the same float, since the
    sum behind it (``math.fsum``) is correctly rounded, and n copies of x sum to exactly n * x
    (taken here as fractions, rounded once)."""
    n = counts.total()
    if not n:
        return None
    scale = max(map(abs, counts)) or 1.0
    total = sum((Fraction(value / scale) * times for value, times in counts.items()), Fraction())
    return _finite(float(total) / n * scale)


def ratings(judgments: Iterable[Judged], words: bool) -> dict[str, Rating]:
    """Each judge's rating of one item (pairwise judgments left out): its label word when the
    grades are labels, else its grade."""
    found: dict[str, Rating] = {}
    for judge, _, grade, label, order in judgments:
        rating = label if words else grade
        if order is None and rating is not None:
            found.setdefault(judge, rating)
    return found


def _agreement(bench: str, kinds: Counter[tuple[Judged, ...]]) -> list[PanelAgreement]:
    """Agreement of the judges that graded this benchmark's items without an order: Cohen's kappa
    of two (quadratic-weighted on number grades), Krippendorff's alpha of more (interval on
    number grades, nominal on labels), bootstrap intervals over items."""
    judges = list(dict.fromkeys(j[0] for k in kinds for j in k if j[4] is None))
    if len(judges) < 2:
        return []
    words = any(j[3] is not None for k in kinds for j in k if j[4] is None)
    units: list[tuple[Rating | None, ...]] = []
    for judgments, times in kinds.items():
        rated = ratings(judgments, words)
        unit = tuple(rated.get(j) for j in judges)
        units.extend([unit] * times)  # one tuple shared by its items: the statistics only read it
    if len(judges) == 2:
        weights = "none" if words else "quadratic"
        pairs = units
        return [PanelAgreement(bench, tuple(judges), "kappa" if words else "weighted kappa",
                               cohen_kappa(pairs, weights), kappa_interval(pairs, weights))]
    metric = "nominal" if words else "interval"
    return [PanelAgreement(bench, tuple(judges), f"alpha ({metric})",
                           krippendorff_alpha(units, metric), alpha_interval(units, metric))]


def _pairwise(bench: str, arm: str, items: list[Item]) -> Pairwise | None:
    """Pairwise figures of an arm whose judgments have an order (None: not judged pairwise)."""
    verdicts = []
    for item in items:
        by_order = {j[4]: OUTCOME.get(j[2]) for j in item.judged if j[2] is not None and j[4]}
        if by_order:
            verdicts.append((by_order.get("ab"), by_order.get("ba")))
    if not verdicts:
        return None
    outcomes = [OUTCOME.get(i.grade) for i in items if i.grade is not None]
    return Pairwise(bench, arm, position_consistency(verdicts), _win_rates(outcomes))
