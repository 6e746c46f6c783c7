"""One arm's figures in the report (``ArmStats``), from its graded rows: rates, intervals, the
calls' time, tokens and cost, the cluster-robust interval over subtasks, the figures of repeats."""

from __future__ import annotations

import math
from array import array
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass
from functools import partial
from operator import attrgetter, itemgetter
from typing import Any, TypedDict

from pytest_echo_bench.analysis.epochs import Sampled, pass_at
from pytest_echo_bench.analysis.stats import cluster_interval, percentile, wilson
from pytest_echo_bench.budget import money
from pytest_echo_bench.results.read import Item
from pytest_echo_bench.store.files import UNJUDGED


@dataclass(frozen=True)
class ArmStats:
    """The totals of one arm of one benchmark, or of one subtask of it."""

    benchmark: str
    arm: str
    subtask: str | None
    # graded items (with repeats: items, each reduced from its samples); unjudged ones left out
    n: int
    # Items graded correct; None under ``--reduce mean``, which grades no item right or wrong.
    correct: int | None
    # None: no graded row (an arm the spec names whose items all went unrecorded).
    pass_rate: float | None
    ci95: tuple[float, float]
    unparseable: int
    errors: int
    # rows a judge gave no grade (with repeats: sample rows): counted apart, out of n
    unjudged: int
    not_completed: int
    wall_mean: float | None
    wall_p50: float | None
    wall_p95: float | None
    sub_calls_mean: float | None
    escalation_rate: float | None
    prompt_tokens: int | None
    completion_tokens: int | None
    cost_usd: float | None
    cost_units: float | None = None
    cost_per_correct: float | None = None  # USD per correct item
    cost_units_per_correct: float | None = None
    clusters: int | None = None  # subtasks of the overall rate, when it has two or more
    cluster_se: float | None = None  # cluster-robust (CR1) standard error, clusters = subtasks
    cluster_ci95: tuple[float, float] | None = None
    # With repeats (``epochs: K``) only: rows counted, the most samples of an item, the reduction,
    # pass@k, the sum of the items' scores (at most n; pass_rate = score / n) and the correct
    # sample rows (at most samples).
    samples: int | None = None
    epochs: int | None = None
    reduce: str | None = None
    pass_at: dict[str, float] | None = None
    score: float | None = None
    correct_samples: int | None = None
    # What the arm's rows spent (``budget.spend``: every row, cached ones 0), and how many rows'
    # cost
    # is unknown; per arm only (None on a subtask's line).
    spend_usd: float | None = None
    spend_unknown: int | None = None


# An arm's (or subtask's) sample rows, per-item samples, reduction.
Samples = tuple[list[Item], list[Sampled], str]


def score(item: Item) -> float:
    return float(item.passed) if item.score is None else item.score


class Columns:
    """Items read as columns, each column once, when first asked for (``cols("passed")``).

    The figures read a column at a time: ``attrgetter`` over a list runs in C, where a Python
    expression per row and figure was most of a million-row report's time. A subset (a subtask's
    items, the graded ones) reads its columns from its parent's by position, never from the items
    again: that is a list lookup, where each item read is a cache miss."""

    def __init__(self, items: list[Item],
                 parent: tuple[Columns, Sequence[int]] | None = None) -> None:
        self.items, self._parent = items, parent
        self._read: dict[str, list[Any]] = {}

    def __call__(self, name: str) -> list[Any]:
        column = self._read.get(name)
        if column is None:
            if self._parent is None:
                column = list(map(attrgetter(name), self.items))
            else:
                whole, at = self._parent
                column = list(map(whole(name).__getitem__, at))
            self._read[name] = column
        return column

    def __len__(self) -> int:
        return len(self.items)

    def forget(self) -> None:
        """Let go of the columns read (a million rows' columns are 8 MB each)."""
        self._read.clear()

    def subset(self, at: Sequence[int]) -> Columns:
        """The items at positions ``at`` (in that order)."""
        return Columns(list(map(self.items.__getitem__, at)), (self, at))

    def groups(self, name: str) -> dict[Any, Columns]:
        """The items by their value of ``name``, in order of first appearance, each group in the
        items' order."""
        # positions as machine words: a million int objects held by lists were 36 MB
        at: dict[Any, array[int]] = defaultdict(partial(array, "q"))
        for position, value in enumerate(self(name)):
            at[value].append(position)
        return {value: self.subset(where) for value, where in at.items()}


def arm_stats(bench: str, arm: str, subtask: str | None, items: Columns, universe: set[str],
              by_subtask: dict[str | None, Columns] | None = None,
              samples: Samples | None = None) -> ArmStats:
    """One arm's figures. With repeats (``samples``) the rate and its interval come from the items'
    scores, and what each call costs (time, tokens, cost, errors) from every sample row.

    An unjudged item (no grade: the judge failed or gave none) is recorded, so it is not among
    those not completed, but it is not one of the n the rate is of: counting it there would grade
    it wrong."""
    graded = _graded(items)
    n = len(graded)
    rows = items if samples is None else Columns(samples[0])
    passed = sum(graded("passed"))
    # fsum: the exact sum of fractional scores (3/3 + 2/3 + 1/3 + 0 is 2, not 1.9999999999999998),
    # so a rate of 6 of 12 samples is 0.5 and a gate at 0.5 holds.
    total: float = passed if samples is None else _score_sum(graded)
    # ``mean`` has no verdict per item, so no ``correct``: counting correct samples there read as
    # more correct items than n. What a correct result costs then divides by the correct samples.
    mean = samples is not None and samples[2] == "mean"
    correct = None if mean else passed
    correct_samples = passed if rows is graded else sum(rows("passed"))
    cost, units = _total(rows("cost_usd")), _total(rows("cost_units"))
    divisor = correct_samples if mean else correct
    return ArmStats(
        bench, arm, subtask, n, correct, rate(total, n), wilson(total, n),
        not_completed=len(universe.difference(items("task_id"))),
        cost_usd=money.figure(cost), cost_units=units,
        cost_per_correct=money.figure(_per(cost, divisor)),
        cost_units_per_correct=_per(units, divisor),
        **_call_figures(rows), **_cluster_figures(by_subtask),
        **_epoch_figures(samples, total, correct_samples),
    )


def _known(values: list[Any]) -> list[Any]:
    """``values`` without its Nones (the list itself when it has none, the common case)."""
    return values if None not in values else [v for v in values if v is not None]


def _graded(items: Columns) -> Columns:
    """The items a rate is of: all but the unjudged ones."""
    statuses = items("status")
    if UNJUDGED not in statuses:
        return items
    return items.subset([p for p, status in enumerate(statuses) if status != UNJUDGED])


class _Calls(TypedDict):
    unparseable: int
    errors: int
    unjudged: int
    wall_mean: float | None
    wall_p50: float | None
    wall_p95: float | None
    sub_calls_mean: float | None
    escalation_rate: float | None
    prompt_tokens: int | None
    completion_tokens: int | None


def _call_figures(rows: Columns) -> _Calls:
    """``ArmStats``'s figures of the calls behind ``rows``: verdicts, times, sub-calls, tokens."""
    statuses = rows("status")
    walls = _known(rows("wall_seconds"))
    ordered = sorted(walls)  # once: ``percentile`` sorts a sorted list in one pass
    escalated = rows("escalated")
    # the mean of 1.0 per escalated row and 0.0 per other one that says: their count's ratio
    told = len(escalated) - escalated.count(None)
    prompt_tokens, completion_tokens = _tokens(rows)
    return _Calls(unparseable=statuses.count("unparseable"), errors=statuses.count("error"),
                  unjudged=statuses.count(UNJUDGED),
                  wall_mean=_mean(walls), wall_p50=_percentile(ordered, 50),
                  wall_p95=_percentile(ordered, 95),
                  sub_calls_mean=_mean(_known(rows("sub_calls"))),
                  escalation_rate=escalated.count(True) / told if told else None,
                  prompt_tokens=prompt_tokens, completion_tokens=completion_tokens)


class _Clusters(TypedDict):
    clusters: int | None
    cluster_se: float | None
    cluster_ci95: tuple[float, float] | None


class _Epochs(TypedDict):
    samples: int | None
    epochs: int | None
    reduce: str | None
    pass_at: dict[str, float] | None
    score: float | None
    correct_samples: int | None


def _cluster_figures(by_subtask: dict[str | None, Columns] | None) -> _Clusters:
    """``ArmStats``'s cluster-robust figures: none unless the graded items span two subtasks or
    more."""
    if by_subtask is not None:  # of the graded items only, as the rate
        by_subtask = {sub: kept for sub, group in by_subtask.items() if len(kept := _graded(group))}
    clustered = _clustered(by_subtask)
    if clustered is None:
        return _Clusters(clusters=None, cluster_se=None, cluster_ci95=None)
    return _Clusters(clusters=len(by_subtask or {}), cluster_se=clustered[0],
                     cluster_ci95=clustered[1:])


def _epoch_figures(samples: Samples | None, score: float, correct_samples: int) -> _Epochs:
    """``ArmStats``'s figures of repeats (``epochs: K``): none without them."""
    if samples is None:
        return _Epochs(samples=None, epochs=None, reduce=None, pass_at=None, score=None,
                       correct_samples=None)
    rows, sampled, how = samples
    return _Epochs(samples=len(rows), epochs=max((s.n for s in sampled), default=0), reduce=how,
                   pass_at=pass_at(sampled), score=score, correct_samples=correct_samples)


def _tokens(rows: Columns) -> tuple[int | None, int | None]:
    """The prompt and completion tokens of the rows whose usage is known (None: of none)."""
    usage = _known(rows("usage"))
    if not usage:
        return None, None
    return sum(map(itemgetter(0), usage)), sum(map(itemgetter(1), usage))


def _percentile(values: list[float], q: float) -> float | None:
    return percentile(values, q) if values else None


def _clustered(by_subtask: dict[str | None, Columns] | None,
               ) -> tuple[float, float, float] | None:
    """The cluster-robust interval of an overall rate whose items span two or more subtasks.

    Items without a subtask form one cluster of their own; with no subtask at all there is nothing
    to cluster on and the Wilson interval stands alone.
    """
    if not by_subtask or set(by_subtask) == {None}:
        return None
    return cluster_interval([(_score_sum(group), len(group)) for group in by_subtask.values()])


def _score_sum(items: Columns) -> float:
    """``fsum`` of the items' scores: the count of passes, exactly, when none has a score."""
    scores = items("score")
    if scores.count(None) == len(scores):
        return float(sum(items("passed")))
    return math.fsum(map(_scored, items("passed"), scores))


def _scored(passed: bool, value: float | None) -> float:
    """``score`` of an item from its columns."""
    return float(passed) if value is None else value


def _total(values: list[float | None]) -> float | None:
    known = _known(values)
    return sum(known) if known else None


def _per(total: float | None, correct: int | None) -> float | None:
    return total / correct if total is not None and correct else None


def _mean(values: list[float]) -> float | None:
    return sum(values) / len(values) if values else None


def rate(correct: float, n: int) -> float | None:
    return correct / n if n else None
