"""Comparing arms: paired differences with intervals, tests and
power; cost frontier; disagreements."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Protocol

from pytest_echo_bench.analysis.power import mde, n_for_power
from pytest_echo_bench.analysis.stats import holm, mcnemar_exact, newcombe_paired, paired_t
from pytest_echo_bench.analysis.verdicts import Bits, Table
from pytest_echo_bench.results.read import Item

# an arm's items answered and those it got right
Answered = tuple[set[str], set[str]] | tuple[Bits, Bits]
# The report lists this many disagreements per benchmark (and counts them all): a page or a JSON
# file of a million-row sweep must stay readable.
DISAGREEMENTS_SHOWN = 100


@dataclass(frozen=True)
class Pair:
    """Arm ``a`` against arm ``b`` on the task ids both answered."""

    benchmark: str
    a: str
    b: str
    n: int
    a_only: int
    b_only: int
    both: int
    neither: int
    p_value: float
    a_rate: float | None
    b_rate: float | None
    diff: float | None = None  # a_rate - b_rate on the shared items
    # Newcombe's hybrid score interval (1998, method 10)
    diff_ci95: tuple[float, float] | None = None
    p_holm: float | None = None  # Holm step-down over the pairs of this benchmark
    # items for 80% power at this difference and discordance (Connor 1987)
    n_for_80: int | None = None
    mde80: float | None = None  # smallest |diff| this n detects with 80% power
    # "mcnemar": binary items, diff_ci95 Newcombe's, p exact McNemar; "paired-t": per-item mean
    # scores of repeats, diff_ci95 and p from Student's t on the per-item differences (then
    # diff_se is its standard error).
    diff_method: str = "mcnemar"
    diff_se: float | None = None


@dataclass(frozen=True)
class Frontier:
    """Accuracy against cost per item: ``points`` (arm, cost per item, pass rate) and
    the arms no other beats on both."""

    benchmark: str
    basis: str  # cost_usd or cost_units
    points: tuple[tuple[str, float, float], ...]
    arms: tuple[str, ...]


@dataclass(frozen=True)
class Disagreement:
    """An item that some arms get right and others wrong, with each arm's verdict and answer."""

    benchmark: str
    task_id: str
    subtask: str | None
    verdicts: dict[str, bool]
    answers: dict[str, str | None]


class Priced(Protocol):
    """What the frontier reads of an arm's totals (``report.ArmStats``)."""

    @property
    def arm(self) -> str: ...
    @property
    def n(self) -> int: ...
    @property
    def pass_rate(self) -> float | None: ...  # None at n = 0, which the frontier leaves out
    @property
    def cost_usd(self) -> float | None: ...
    @property
    def cost_units(self) -> float | None: ...


def pair(
    bench: str, a: str, b: str, sets_a: Answered, sets_b: Answered
) -> Pair:
    """The paired comparison of ``a`` and ``b`` from each arm's items answered and right (sets,
    or ``verdicts.Bits``: set algebra in C; a dict lookup per item and pair was the largest part
    of building a large report)."""
    shared = sets_a[0] & sets_b[0]
    right_a = sets_a[1] & shared
    right_b = sets_b[1] & shared
    both = len(right_a & right_b)
    a_only, b_only, n = len(right_a) - both, len(right_b) - both, len(shared)
    neither = n - a_only - b_only - both
    diff = (a_only - b_only) / n if n else None
    psi = (a_only + b_only) / n if n else 0.0
    return Pair(
        bench,
        a,
        b,
        n,
        a_only,
        b_only,
        both,
        neither,
        mcnemar_exact(a_only, b_only),
        _rate(a_only + both, n),
        _rate(b_only + both, n),
        diff,
        newcombe_paired(both, a_only, b_only, neither),
        None,
        n_for_power(diff or 0.0, psi),
        mde(n, psi),
    )


def scored_pair(base: Pair, a: dict[str, float], b: dict[str, float]) -> Pair:
    """``base`` (its 2x2 table of majority verdicts kept) with the difference of per-item
    scores in [0, 1]: a paired t interval and test on the differences, when any score is
    fractional; else ``base`` itself."""
    shared = [t for t in a if t in b]
    if all(a[t] in (0.0, 1.0) and b[t] in (0.0, 1.0) for t in shared):
        return base  # binary scores: McNemar and Newcombe are exact for them
    mean, se, ci, p = paired_t([a[t] - b[t] for t in shared])
    n = len(shared)
    return replace(
        base,
        diff=mean,
        diff_ci95=ci,
        p_value=p,
        a_rate=_mean([a[t] for t in shared]),
        b_rate=_mean([b[t] for t in shared]),
        n_for_80=None,
        mde80=None,
        diff_method="paired-t",
        diff_se=se if n >= 2 else None,
    )


def _mean(values: list[float]) -> float | None:
    return sum(values) / len(values) if values else None


def with_holm(pairs: list[Pair]) -> list[Pair]:
    """The pairs with their Holm-adjusted p-values (the family: all pairs of one benchmark)."""
    adjusted = holm([p.p_value for p in pairs])
    return [replace(p, p_holm=q) for p, q in zip(pairs, adjusted, strict=True)]


def _rate(correct: int, n: int) -> float | None:
    return correct / n if n else None


def frontier(bench: str, arms: Sequence[Priced]) -> Frontier | None:
    """The Pareto frontier of pass rate against cost per item, in USD when
    any arm is priced so, else units."""
    for basis in ("cost_usd", "cost_units"):
        points = tuple(
            (s.arm, cost / s.n, s.pass_rate)
            for s in arms
            if s.n and s.pass_rate is not None and (cost := getattr(s, basis)) is not None
        )
        if points:
            return Frontier(bench, basis, points, _pareto(points))
    return None


def _pareto(points: Sequence[tuple[str, float, float]]) -> tuple[str, ...]:
    """Arms for which no other is at most as costly and at least as accurate, and better in one."""
    best: list[str] = []
    top = -1.0
    # cheapest first, the better of a tie first
    for arm, _, rate in sorted(points, key=lambda p: (p[1], -p[2])):
        if rate > top:
            best.append(arm)
            top = rate
    return tuple(best)


def disagreements(
    bench: str, by_arm: dict[str, list[Item]], table: Table
) -> tuple[int, list[Disagreement]]:
    """How many items the arms disagree on (among those every arm
    answered), and the first few of them."""
    count, split = table.split(DISAGREEMENTS_SHOWN)
    shown = set(split)
    answers: dict[str, dict[str, str | None]] = {t: {} for t in shown}
    subtasks: dict[str, str | None] = {}
    for arm, items in by_arm.items():
        for item in items:
            if item.task_id in shown:
                answers[item.task_id][arm] = item.answer
                subtasks[item.task_id] = item.subtask
    listed = [
        Disagreement(
            bench, t, subtasks.get(t), {arm: table.verdict(arm, t) for arm in table.right},
            answers[t],
        )
        for t in split
    ]
    return count, listed
