"""The numbers behind ``echo-bench report``: per-arm rates, intervals, oracle, paired tests."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from itertools import combinations
from pathlib import Path
from typing import Any

from pytest_echo_bench.ops.stats import mcnemar_exact, percentile, wilson
from pytest_echo_bench.store.files import row_status
from pytest_echo_bench.store.reader import read_records
from pytest_echo_bench.store.records import Key, row_key

P_HINT = "p: exact McNemar test on the items both arms answered; p >= 0.05 means the difference is not significant"


@dataclass(frozen=True)
class Item:
    """One graded row, normalised so that older six-field rows read like current ones."""

    benchmark: str
    task_id: str
    arm: str
    passed: bool
    status: str
    subtask: str | None
    wall_seconds: float | None
    sub_calls: float | None
    escalated: bool | None  # None when the row does not say
    usage: tuple[int, int] | None  # (prompt_tokens, completion_tokens)
    cost_usd: float | None


@dataclass(frozen=True)
class Conflict:
    """A repeated (benchmark, task_id, arm) whose verdict differs from the first one kept."""

    key: Key
    first: bool
    second: bool


@dataclass
class Results:
    """Rows of one or more results files, each key once (first occurrence wins)."""

    rows: list[Item] = field(default_factory=list)
    metas: list[dict[str, Any]] = field(default_factory=list)
    duplicates: int = 0
    conflicts: list[Conflict] = field(default_factory=list)


@dataclass(frozen=True)
class ArmStats:
    """The totals of one arm of one benchmark, or of one subtask of it."""

    benchmark: str
    arm: str
    subtask: str | None
    n: int
    correct: int
    pass_rate: float
    ci95: tuple[float, float]
    unparseable: int
    errors: int
    not_completed: int
    wall_mean: float | None
    wall_p50: float | None
    wall_p95: float | None
    sub_calls_mean: float | None
    escalation_rate: float | None
    prompt_tokens: int | None
    completion_tokens: int | None
    cost_usd: float | None


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
    duplicates: int = 0
    conflicts: list[Conflict] = field(default_factory=list)


# --- loading -----------------------------------------------------------------------------------


def load_results(paths: Sequence[Path]) -> Results:
    """Combine results files in order; a repeated key is counted once, and noted if its verdict differs."""
    results = Results()
    seen: dict[Key, Item] = {}
    for path in paths:
        meta, records = read_records(path)
        if meta is not None:
            results.metas.append(meta)
        default = str(meta.get("benchmark") or "") if meta else ""
        for record in records:
            _add(results, seen, _item(record.data, default))
    return results


def _add(results: Results, seen: dict[Key, Item], item: Item) -> None:
    key = (item.benchmark, item.task_id, item.arm)
    first = seen.get(key)
    if first is None:
        seen[key] = item
        results.rows.append(item)
        return
    results.duplicates += 1
    if first.passed != item.passed:
        results.conflicts.append(Conflict(key, first.passed, item.passed))


def _item(record: dict[str, Any], default_benchmark: str) -> Item:
    benchmark, task_id, arm = row_key(record, default_benchmark)
    extra = record.get("extra")
    escalated = extra.get("escalated") if isinstance(extra, dict) else None
    return Item(benchmark, task_id, arm, bool(record.get("passed")), row_status(record), _subtask(record, task_id),
                _number(record.get("wall_seconds")), _number(record.get("sub_calls")),
                None if escalated is None else bool(escalated), _usage(record.get("usage")), _number(record.get("cost_usd")))


def _subtask(record: dict[str, Any], task_id: str) -> str | None:
    subtask = record.get("subtask")
    if isinstance(subtask, str) and subtask:
        return subtask
    parts = task_id.split("/")
    return parts[1] if len(parts) == 3 and parts[0] == "bbh" else None


def _number(value: Any) -> float | None:
    return float(value) if isinstance(value, int | float) and not isinstance(value, bool) else None


def _usage(value: Any) -> tuple[int, int] | None:
    if not isinstance(value, dict):
        return None
    return (int(value.get("prompt_tokens") or 0), int(value.get("completion_tokens") or 0))


# --- computing ---------------------------------------------------------------------------------

Verdicts = dict[str, bool]  # task_id -> passed


def build_report(results: Results, oracle_arms: Sequence[str] | None = None) -> Report:
    """Compute every number of the report; ``oracle_arms`` picks the oracle's arms (default: all)."""
    order = _arm_order(results)
    known = {arm for arms in order.values() for arm in arms}
    unknown = sorted(set(oracle_arms or ()) - known)
    if unknown:
        raise ValueError(f"unknown oracle arm(s): {', '.join(unknown)}; the results hold: {', '.join(sorted(known))}")
    grouped: dict[tuple[str, str], list[Item]] = defaultdict(list)
    for item in results.rows:
        grouped[(item.benchmark, item.arm)].append(item)
    report = Report(duplicates=results.duplicates, conflicts=list(results.conflicts))
    for bench, arms in order.items():
        _add_benchmark(report, bench, {arm: grouped[(bench, arm)] for arm in arms}, oracle_arms)
    return report


def _arm_order(results: Results) -> dict[str, list[str]]:
    """Benchmarks and arms in spec order (from the meta lines), then in order of first appearance."""
    present = {(r.benchmark, r.arm) for r in results.rows}
    listed = [(b, a) for meta in results.metas for b, arms in _meta_arms(meta) for a in arms]
    order: dict[str, list[str]] = {}
    for bench, arm in listed + [(r.benchmark, r.arm) for r in results.rows]:
        if (bench, arm) in present and arm not in order.setdefault(bench, []):
            order[bench].append(arm)
    return order


def _meta_arms(meta: dict[str, Any]) -> list[tuple[str, list[str]]]:
    arms = meta.get("arms")
    if not isinstance(arms, dict):
        return []
    return [(str(b), [str(a) for a in names]) for b, names in arms.items() if isinstance(names, list)]


def _add_benchmark(report: Report, bench: str, by_arm: dict[str, list[Item]], oracle_arms: Sequence[str] | None) -> None:
    universe = {i.task_id for items in by_arm.values() for i in items}
    report.benchmarks.append(Benchmark(bench, tuple(by_arm), len(universe)))
    subtask_ids: dict[str, set[str]] = defaultdict(set)
    for item in (i for items in by_arm.values() for i in items if i.subtask is not None):
        subtask_ids[str(item.subtask)].add(item.task_id)
    for arm, items in by_arm.items():
        report.arms.append(_arm_stats(bench, arm, None, items, universe))
        for sub in sorted(subtask_ids):
            chosen = [i for i in items if i.subtask == sub]
            if chosen:
                report.subtasks.append(_arm_stats(bench, arm, sub, chosen, subtask_ids[sub]))
    verdicts = {arm: {i.task_id: i.passed for i in items} for arm, items in by_arm.items()}
    chosen_arms = [a for a in by_arm if oracle_arms is None or a in oracle_arms]
    # With one arm the oracle and complementarity only restate that arm, so they are left out.
    if len(chosen_arms) >= 2:
        report.oracles.append(_oracle(bench, chosen_arms, verdicts))
    if len(by_arm) >= 2:
        report.complementarity.append(_complement(bench, verdicts))
    report.pairs.extend(_pair(bench, a, b, verdicts[a], verdicts[b]) for a, b in combinations(by_arm, 2))


def _arm_stats(bench: str, arm: str, subtask: str | None, items: list[Item], universe: set[str]) -> ArmStats:
    n, correct = len(items), sum(i.passed for i in items)
    walls = [i.wall_seconds for i in items if i.wall_seconds is not None]
    calls = [i.sub_calls for i in items if i.sub_calls is not None]
    flags = [float(i.escalated) for i in items if i.escalated is not None]
    usage = [i.usage for i in items if i.usage is not None]
    costs = [i.cost_usd for i in items if i.cost_usd is not None]
    return ArmStats(
        bench, arm, subtask, n, correct, correct / n, wilson(correct, n),
        unparseable=sum(i.status == "unparseable" for i in items),
        errors=sum(i.status == "error" for i in items),
        not_completed=len(universe - {i.task_id for i in items}),
        wall_mean=_mean(walls),
        wall_p50=percentile(walls, 50) if walls else None,
        wall_p95=percentile(walls, 95) if walls else None,
        sub_calls_mean=_mean(calls),
        escalation_rate=_mean(flags),
        prompt_tokens=sum(u[0] for u in usage) if usage else None,
        completion_tokens=sum(u[1] for u in usage) if usage else None,
        cost_usd=sum(costs) if costs else None,
    )


def _mean(values: list[float]) -> float | None:
    return sum(values) / len(values) if values else None


def _rate(correct: int, n: int) -> float | None:
    return correct / n if n else None


def _shared(verdicts: Iterable[Verdicts]) -> set[str]:
    return set.intersection(*(set(v) for v in verdicts))


def _oracle(bench: str, arms: list[str], verdicts: dict[str, Verdicts]) -> Oracle:
    shared = _shared(verdicts[a] for a in arms)
    correct = sum(any(verdicts[a][t] for a in arms) for t in shared)
    return Oracle(bench, tuple(arms), len(shared), correct, _rate(correct, len(shared)), wilson(correct, len(shared)))


def _pair(bench: str, a: str, b: str, va: Verdicts, vb: Verdicts) -> Pair:
    shared = va.keys() & vb.keys()
    a_only = sum(va[t] and not vb[t] for t in shared)
    b_only = sum(vb[t] and not va[t] for t in shared)
    both = sum(va[t] and vb[t] for t in shared)
    n = len(shared)
    return Pair(bench, a, b, n, a_only, b_only, both, n - a_only - b_only - both, mcnemar_exact(a_only, b_only),
                _rate(a_only + both, n), _rate(b_only + both, n))


def _complement(bench: str, verdicts: dict[str, Verdicts]) -> Complement:
    shared = _shared(verdicts.values())
    alone = dict.fromkeys(verdicts, 0)
    for task in shared:
        right = [arm for arm, v in verdicts.items() if v[task]]
        if len(right) == 1:
            alone[right[0]] += 1
    return Complement(bench, len(shared), alone)
