"""The numbers behind ``echo-bench report``: per-arm rates, intervals, oracle, paired tests."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from itertools import combinations, compress
from operator import attrgetter

from pytest_echo_bench.analysis.compare import (
    Disagreement,
    Frontier,
    Pair,
    disagreements,
    frontier,
    pair,
    scored_pair,
    with_holm,
)
from pytest_echo_bench.analysis.decide.feed import replay
from pytest_echo_bench.analysis.decide.monitor import Sequential
from pytest_echo_bench.analysis.epochs import Reduced, has_epochs, reduce_items
from pytest_echo_bench.analysis.names import ArmNames, ArmRef
from pytest_echo_bench.analysis.stats import wilson
from pytest_echo_bench.analysis.verdicts import Table, table
from pytest_echo_bench.budget import money
from pytest_echo_bench.budget.spend import ArmSpend, RunBudget
from pytest_echo_bench.report.arm_figures import (
    ArmStats,
    Columns,
    Samples,
    arm_stats,
    rate,
    score,
)
from pytest_echo_bench.report.judge_checks import add_humans, add_warnings
from pytest_echo_bench.report.judged import Judging, build_judging, judged
from pytest_echo_bench.report.labels import HumanLabel
from pytest_echo_bench.report.token_classes import ClassSpend, class_spend
from pytest_echo_bench.results.conflicts import Conflict
from pytest_echo_bench.results.ending import Collection
from pytest_echo_bench.results.read import Item, Results, by_arm, load_results
from pytest_echo_bench.shards.coverage import Coverage, coverage
from pytest_echo_bench.shards.parts import held_by_shard
from pytest_echo_bench.store.files import UNJUDGED

__all__ = [
    "ArmStats",
    "Benchmark",
    "Complement",
    "Conflict",
    "Disagreement",
    "Frontier",
    "Item",
    "Oracle",
    "P_HINT",
    "Pair",
    "Report",
    "Results",
    "build_report",
    "load_results",
]

P_HINT = (
    "p: exact McNemar test on the items both arms answered (p_holm: Holm-adjusted over the "
    "benchmark's pairs); "
    "p >= 0.05 means the difference is not significant"
)


@dataclass(frozen=True)
class Oracle:
    """Correct when any of ``arms`` is, on the task ids that every one of them answered."""

    benchmark: str
    arms: tuple[str, ...]
    n: int
    correct: int
    pass_rate: float | None
    ci95: tuple[float, float]


@dataclass(frozen=True)
class Complement:
    """Per arm, the items only that arm gets right, among the ``n`` that every arm answered."""

    benchmark: str
    n: int
    alone: dict[str, int]


@dataclass(frozen=True)
class Benchmark:
    name: str
    arms: tuple[str, ...]
    tasks: int  # distinct task ids recorded under any arm


@dataclass
class Report:
    """Everything the renderings show; built by ``build_report``."""

    benchmarks: list[Benchmark] = field(default_factory=list)
    arms: list[ArmStats] = field(default_factory=list)
    subtasks: list[ArmStats] = field(default_factory=list)
    oracles: list[Oracle] = field(default_factory=list)
    pairs: list[Pair] = field(default_factory=list)
    complementarity: list[Complement] = field(default_factory=list)
    frontiers: list[Frontier] = field(default_factory=list)
    # bench -> (count, shown)
    disagreements: dict[str, tuple[int, list[Disagreement]]] = field(default_factory=dict)
    duplicates: int = 0
    conflicts: list[Conflict] = field(default_factory=list)
    unlisted_conflicts: int = 0  # counted by a merge beyond the keys its meta line lists
    # rows with a time, token or cost figure that is not a finite number >= 0 (left out)
    unknown_figures: int = 0
    # the shards the files hold
    coverage: Coverage = field(default_factory=lambda: Coverage(True, [], []))
    # rows graded by a seeded random guess where the scorer extracted nothing
    random_guesses: int = 0
    sequential: Sequential | None = None  # a sweep with a decide plan: its anytime-valid figures
    # budgeted runs' budget and spend, as recorded
    budgets: list[RunBudget] = field(default_factory=list)
    # the files read: (path, run id, created_at)
    sources: list[tuple[str, str, str]] = field(default_factory=list)
    judging: Judging | None = None  # what the judges did (None: no judged row, no labels)
    # each arm's spend per billed token class (none: no row keeps a class apart)
    token_classes: list[ClassSpend] = field(default_factory=list)


# --- computing ---------------------------------------------------------------------------------

def build_report(results: Results, oracle_arms: Sequence[str] | None = None, reduce: str = "mean",
                 ended: Collection | None = None, budgets: Sequence[RunBudget] = (),
                 labels: tuple[str, Sequence[HumanLabel]] | None = None) -> Report:
    """Compute every number of the report; ``oracle_arms`` picks the oracle's arms (default: all);
    ``reduce`` how the samples of an item recorded with epochs become its score
    (``analysis.epochs``); ``ended``: how the sweep ended, as its files record it
    (``results.ending.collection``; None: to its end); ``budgets``: the budget figures recorded
    beside the files (``budget.spend.run_budget``); ``labels``: people's labels (their file's
    name and the labels) the judges are measured against."""
    order = _arm_order(results)
    oracle = None if oracle_arms is None else _oracle_pairs(ArmNames(order), oracle_arms)
    reduced = reduce_items(results.rows, reduce) if has_epochs(results.rows) else None
    grouped = by_arm(results.rows if reduced is None else reduced.items)
    report = Report(
        duplicates=results.duplicates,
        conflicts=list(results.conflicts),
        sources=list(results.sources),
        unlisted_conflicts=results.unlisted_conflicts,
        unknown_figures=results.unknown_figures,
        random_guesses=results.random_guesses,
        coverage=_coverage(results),
        sequential=replay(results, ended),
        budgets=list(budgets),
    )
    for bench, arms in order.items():
        _add_benchmark(report, bench, {arm: grouped[(bench, arm)] for arm in arms}, oracle,
                       None if reduced is None else (reduced, reduce))
    report.arms = [
        _with_spend(s, results.spend.get((s.benchmark, s.arm), ArmSpend())) for s in report.arms
    ]
    if labels is not None or judged(results):
        report.judging = _judging(results, order, labels)
    report.token_classes = class_spend(results, order,
                                       grouped if reduced is None else by_arm(results.rows))
    return report


def _judging(results: Results, order: dict[str, list[str]],
             labels: tuple[str, Sequence[HumanLabel]] | None) -> Judging:
    found = build_judging(results, order)
    if labels is not None:
        add_humans(found, results, labels[1], labels[0])
    add_warnings(found, results)
    return found


def _coverage(results: Results) -> Coverage:
    """The shards the files hold, each whole when its rows (each key once,
    in every file) reach its items."""
    totals = {part.total for part in results.parts if part.total}
    return coverage(
        results.parts, held_by_shard(((i.benchmark, i.task_id) for i in results.rows), totals)
    )


def _with_spend(stats: ArmStats, spend: ArmSpend) -> ArmStats:
    return replace(
        stats,
        spend_usd=money.figure(spend.usd) if spend.known else None,
        spend_unknown=spend.unknown,
    )


def _oracle_pairs(names: ArmNames, given: Sequence[str]) -> set[ArmRef]:
    """The (benchmark, arm) pairs ``--oracle`` names; ValueError listing every unknown name, and for
    arms of several benchmarks or fewer than two: the oracle row would be dropped without a word."""
    found = {name: names.find(name) for name in given}  # an ambiguous name raises, with the choices
    unknown = [name for name, pair in found.items() if pair is None]
    if unknown:
        raise ValueError(
            f"unknown oracle arm(s): {', '.join(unknown)}; the results hold: "
            f"{', '.join(names.labels())}"
        )
    pairs = {pair for pair in found.values() if pair is not None}
    benchmarks = sorted({bench for bench, _ in pairs})
    if len(benchmarks) > 1:  # as decide's pairs: an item is one task id of one benchmark
        raise ValueError(
            f"--oracle {','.join(given)}: the arms are of benchmarks "
            f"{', '.join(benchmarks)}; an oracle "
            "row takes arms of one benchmark (items pair up by task id)"
        )
    if len(pairs) < 2:
        raise ValueError(
            f"--oracle {','.join(given)}: an oracle row needs two arms or more (of one arm it only "
            "restates that arm)"
        )
    return pairs


def _arm_order(results: Results) -> dict[str, list[str]]:
    """Benchmarks and arms in spec order (from the meta lines), then in order of first appearance.

    An arm a meta line names stays listed though it has no graded row (all its items incomplete or
    unavailable): a report that drops it reads as if the arm was never run."""
    listed = [(b, a) for meta in results.metas for b, arms in meta.arms.items() for a in arms]
    order: dict[str, list[str]] = {}
    # each (benchmark, arm) of the rows once, in order of first appearance
    for bench, arm in listed + list(dict.fromkeys(map(attrgetter("benchmark", "arm"),
                                                      results.rows))):
        if arm not in order.setdefault(bench, []):
            order[bench].append(arm)
    return order


def _add_benchmark(
    report: Report,
    bench: str,
    by_arm: dict[str, list[Item]],
    oracle: set[ArmRef] | None,
    reduced: tuple[Reduced, str] | None = None,
) -> None:
    columns = {arm: Columns(items) for arm, items in by_arm.items()}
    universe = set().union(*(cols("task_id") for cols in columns.values()))
    report.benchmarks.append(Benchmark(bench, tuple(by_arm), len(universe)))
    _add_arms(report, bench, columns, universe, reduced)
    # An arm with no graded row has nothing to compare: with it the oracle and pairs would shrink
    # to 0 items. An unjudged row has no verdict: it is left out as an item the arm did not answer.
    judged = {arm: _judged(cols) for arm, cols in columns.items()}
    graded = {arm: items for arm, items in judged.items() if items}
    _add_comparisons(report, bench, graded, oracle, reduced)
    found = frontier(bench, [s for s in report.arms if s.benchmark == bench])
    if found is not None:
        report.frontiers.append(found)


def _judged(cols: Columns) -> list[Item]:
    """The items that have a verdict: all but the unjudged ones."""
    statuses = cols("status")
    if UNJUDGED not in statuses:
        return cols.items
    return list(compress(cols.items, map(UNJUDGED.__ne__, statuses)))


def _add_arms(report: Report, bench: str, columns: dict[str, Columns], universe: set[str],
              reduced: tuple[Reduced, str] | None) -> None:
    """Each arm's figures, overall and per subtask (of the task ids any arm recorded under it)."""
    subtask_ids: dict[str, set[str]] = defaultdict(set)
    # each (subtask, task id) once, whichever arms have it: a step per item, not per row
    for sub, task in set().union(*(zip(cols("subtask"), cols("task_id"), strict=True)
                                   for cols in columns.values())):
        if sub is not None:
            subtask_ids[sub].add(task)
    for arm, cols in columns.items():
        by_subtask = cols.groups("subtask")  # one arm's groups at a time
        samples = _samples(reduced, bench, arm)
        report.arms.append(arm_stats(bench, arm, None, cols, universe, by_subtask, samples))
        report.subtasks.extend(arm_stats(bench, arm, sub, by_subtask[sub], subtask_ids[sub],
                                          samples=_samples(reduced, bench, arm, sub))
                               for sub in sorted(subtask_ids) if sub in by_subtask)
        cols.forget()


def _add_comparisons(report: Report, bench: str, by_arm: dict[str, list[Item]],
                     oracle: set[ArmRef] | None,
                     reduced: tuple[Reduced, str] | None) -> None:
    """The oracle, complementarity, disagreements and paired tests of the arms with graded rows."""
    verdicts = table(by_arm)
    chosen_arms = [a for a in by_arm if oracle is None or (bench, a) in oracle]
    # With one arm the oracle and complementarity only restate that arm, so they are left out.
    if len(chosen_arms) >= 2:
        report.oracles.append(_oracle(bench, chosen_arms, verdicts))
    if len(by_arm) >= 2:
        report.complementarity.append(Complement(bench, *verdicts.alone()))
        report.disagreements[bench] = disagreements(bench, by_arm, verdicts)
    pairs = [pair(bench, a, b, verdicts.sets(a), verdicts.sets(b))
             for a, b in combinations(by_arm, 2)]
    # fractional scores: a paired t on the per-item differences
    if reduced is not None and reduced[1] == "mean":
        scores = {arm: {i.task_id: score(i) for i in items} for arm, items in by_arm.items()}
        pairs = [scored_pair(p, scores[p.a], scores[p.b]) for p in pairs]
    report.pairs.extend(with_holm(pairs))


def _samples(
    reduced: tuple[Reduced, str] | None, bench: str, arm: str, subtask: str | None = None
) -> Samples | None:
    if reduced is None:
        return None
    data, how = reduced
    rows = data.raw.get((bench, arm), [])
    per_item = data.samples.get((bench, arm), {})
    if subtask is not None:
        rows = [r for r in rows if r.subtask == subtask]
        tasks = dict.fromkeys(r.task_id for r in rows)
        # an item whose every sample is unjudged has no samples to count (``reduce_items``)
        return rows, [per_item[t] for t in tasks if t in per_item], how
    return rows, list(per_item.values()), how


def _oracle(bench: str, arms: list[str], verdicts: Table) -> Oracle:
    n, correct = verdicts.oracle(arms)
    return Oracle(bench, tuple(arms), n, correct, rate(correct, n), wilson(correct, n))
