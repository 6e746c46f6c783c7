"""A judge measured: its agreement with human labels (accuracy, kappa, the confusion matrix, the
mean bias) and pairwise judging's position consistency and win rates, each share with its Wilson
interval. Pure functions of plain ratings, built on ``analysis.agreement``; never a NaN: an
undefined figure is None with a reason, bad input a ``ValueError``.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

from pytest_echo_bench.analysis.agreement import (
    NO_PAIRS,
    Estimate,
    Rating,
    Weights,
    categories,
    cohen_kappa,
    is_number,
    rated_pairs,
)
from pytest_echo_bench.analysis.stats import wilson

Outcome = Literal["win", "tie", "loss"]
OUTCOMES: tuple[Outcome, ...] = ("win", "tie", "loss")
TOO_LARGE = "the grades are too large to subtract in floating point"


@dataclass(frozen=True)
class WinRates:
    """Pairwise outcomes of an arm against its opponent, each share with its Wilson interval."""

    win: Rate
    tie: Rate
    loss: Rate


@dataclass(frozen=True)
class HumanAgreement:
    """One judge against human labels, over the ``n`` items both labelled and graded.

    ``confusion[i][j]`` counts items people labelled ``categories[i]`` and the judge graded
    ``categories[j]``.
    """

    n: int
    accuracy: Rate
    kappa: Estimate
    categories: tuple[Rating, ...]
    confusion: tuple[tuple[int, ...], ...]
    mean_bias: Estimate


@dataclass(frozen=True)
class Rate:
    """``count`` of ``n`` with its Wilson interval; all None (with ``reason``) when n is 0."""

    count: int
    n: int
    rate: float | None
    lo: float | None
    hi: float | None
    reason: str | None = None


def rate(count: int, n: int) -> Rate:
    """``count`` of ``n`` as a share with its 95% Wilson interval (``stats.wilson``)."""
    if n == 0:
        return Rate(0, 0, None, None, None, "no items")
    lo, hi = wilson(count, n)
    return Rate(count, n, count / n, lo, hi)


def _mean_bias(rated: Sequence[tuple[Rating, Rating]]) -> Estimate:
    """mean(judge - human) over items whose two ratings are both numbers."""
    if not rated:
        return Estimate(None, 0, NO_PAIRS)
    if not all(is_number(h) and is_number(j) for h, j in rated):
        return Estimate(None, len(rated), "the grades are labels, not numbers")
    n = len(rated)
    diffs = [j - h for h, j in rated]  # type: ignore[operator]
    if not all(math.isfinite(d) for d in diffs):
        return Estimate(None, n, TOO_LARGE)
    try:
        return Estimate(math.fsum(diffs) / n, n)
    except OverflowError:  # the sum leaves the float range though the mean cannot
        return Estimate(math.fsum(d / n for d in diffs), n)


def agree_with_humans(
    pairs: Sequence[Sequence[Rating | None]],
    ordinal: bool = False,
    scale: Sequence[Rating] | None = None,
) -> HumanAgreement:
    """One judge against people, one (human label, judge grade) pair per item.

    accuracy: the share of items where the judge's grade equals the label, with its Wilson
    interval. kappa: Cohen's kappa (quadratic-weighted when ``ordinal``), so agreement by chance
    is discounted. The confusion matrix: labels (rows) x judge grades (columns). Mean bias:
    mean(judge - human) when both are numbers (True/False count as 1/0: the judge's pass rate
    minus people's); positive is a lenient judge. Items missing either are left out.
    """
    weights: Weights = "quadratic" if ordinal else "none"
    rated = rated_pairs(pairs)
    cats = categories([v for pair in rated for v in pair], scale, ordered=ordinal)
    position = {c: i for i, c in enumerate(cats)}
    table = Counter((position[h], position[j]) for h, j in rated)
    confusion = tuple(tuple(table[i, j] for j in range(len(cats))) for i in range(len(cats)))
    agreed = sum(table[i, i] for i in range(len(cats)))
    return HumanAgreement(
        n=len(rated),
        accuracy=rate(agreed, len(rated)),
        kappa=cohen_kappa(rated, weights, cats),
        categories=tuple(cats),
        confusion=confusion,
        mean_bias=_mean_bias(rated),
    )


def _check_outcome(value: object, where: str) -> None:
    if value is not None and value not in OUTCOMES:
        raise ValueError(f"{where}: {value!r} is not one of {', '.join(OUTCOMES)} (or None)")


def position_consistency(verdicts: Sequence[Sequence[Outcome | None]]) -> Rate:
    """The share of items whose verdict does not change when the two answers swap places.

    One (verdict with the arm's answer shown first, verdict with it shown second) pair per item,
    each from the arm's side: win, tie or loss. Consistent when the two are equal (Zheng et al.
    2023, "Judging LLM-as-a-Judge with MT-Bench and Chatbot Arena", section 3.3, Table 2); items
    missing either verdict are left out. With its Wilson interval.
    """
    consistent = n = 0
    for i, pair in enumerate(verdicts):
        if isinstance(pair, (str, bytes)) or not isinstance(pair, Sequence) or len(pair) != 2:
            raise ValueError(f"item {i}: a pair of two verdicts is needed, got {pair!r}")
        _check_outcome(pair[0], f"item {i}, first order")
        _check_outcome(pair[1], f"item {i}, second order")
        if pair[0] is not None and pair[1] is not None:
            n += 1
            consistent += pair[0] == pair[1]
    return rate(consistent, n)


def win_rates(outcomes: Sequence[Outcome | None]) -> WinRates:
    """The shares of wins, ties and losses among the judged items (None: not judged, left out),
    each with its Wilson interval."""
    for i, outcome in enumerate(outcomes):
        _check_outcome(outcome, f"item {i}")
    counts = Counter(o for o in outcomes if o is not None)
    n = sum(counts.values())
    return WinRates(rate(counts["win"], n), rate(counts["tie"], n), rate(counts["loss"], n))
