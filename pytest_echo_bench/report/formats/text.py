"""Renderings of a report: an aligned terminal table, markdown and JSON (``report.formats`` names
every format; CSV and HTML have modules of their own)."""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from dataclasses import asdict
from typing import Any

from pytest_echo_bench.analysis.gates import Intervals
from pytest_echo_bench.analysis.stats import newcombe_paired, t_quantile, z_for
from pytest_echo_bench.report import decision
from pytest_echo_bench.report.figures import ArmStats, Pair, Report
from pytest_echo_bench.report.formats.judging import judging_json, judging_tables
from pytest_echo_bench.report.formats.tables import Table, tables
from pytest_echo_bench.report.formats.token_classes import class_json, class_tables
from pytest_echo_bench.shards.coverage import Coverage
from pytest_echo_bench.store import safe_text


def report_json(report: Report) -> dict[str, Any]:
    """The report as plain JSON data; arms are keyed ``arm``, or ``benchmark/arm`` when there are
    several benchmarks."""
    label = _labeller(report)
    return {
        "benchmarks": {b.name: {"arms": list(b.arms), "tasks": b.tasks} for b in report.benchmarks},
        "arms": {label(s.benchmark, s.arm): _stats_json(s) for s in report.arms},
        "subtasks": _subtasks_json(report, label),
        "oracle": {o.benchmark: {**asdict(o), "arms": list(o.arms), "ci95": list(o.ci95)}
                   for o in report.oracles},
        "pairs": [_pair_json(p, decision.not_valid_for(report.sequential)) for p in report.pairs],
        "complementarity": {c.benchmark: {"n": c.n, "alone": dict(c.alone)}
                            for c in report.complementarity},
        "frontier": {f.benchmark: {"basis": f.basis, "arms": list(f.arms),
                                   "points": [{"arm": a, "cost_per_item": c, "pass_rate": r}
                                              for a, c, r in f.points]}
                     for f in report.frontiers},
        "disagreements": {bench: {"count": count, "shown": [asdict(d) for d in shown]}
                          for bench, (count, shown) in report.disagreements.items()},
        "duplicates": report.duplicates,
        **_coverage_json(report.coverage),
        "unknown_figures": report.unknown_figures,
        "random_guesses": report.random_guesses,
        "budgets": [asdict(b) for b in report.budgets],
        "conflicts": _conflicts_json(report),
        **({"conflicts_unlisted": report.unlisted_conflicts} if report.unlisted_conflicts else {}),
        **({"sequential": decision.to_json(report.sequential)}
           if report.sequential is not None else {}),
        **({"judging": judging_json(report.judging)} if report.judging is not None else {}),
        **({"token_classes": class_json(report.token_classes, label)}
           if report.token_classes else {}),
    }


def _subtasks_json(report: Report, label: Callable[[str, str], str]) -> dict[str, dict[str, Any]]:
    subtasks: dict[str, dict[str, Any]] = {}
    for s in report.subtasks:
        subtasks.setdefault(label(s.benchmark, s.arm), {})[str(s.subtask)] = _stats_json(s)
    return subtasks


def _coverage_json(cover: Coverage) -> dict[str, Any]:
    """Which shards of the sweep the files hold, and how each shard file ended."""
    return {"complete": cover.complete, "shards": cover.shards, "missing_shards": cover.missing,
            "unfinished_shards": cover.unfinished, "parts": [e.to_json() for e in cover.ends]}


def _conflicts_json(report: Report) -> list[dict[str, Any]]:
    return [{"benchmark": c.key[0], "task_id": c.key[1], "arm": c.key[2],
             **({"epoch": c.key[3]} if c.key[3] > 1 else {}), "first": c.first, "second": c.second}
            for c in report.conflicts]


def _labeller(report: Report) -> Callable[[str, str], str]:
    if len(report.benchmarks) == 1:
        return lambda bench, arm: arm
    return lambda bench, arm: f"{bench}/{arm}"


EPOCH_FIELDS = ("samples", "epochs", "reduce", "pass_at", "score", "correct_samples")


def _stats_json(s: ArmStats) -> dict[str, Any]:
    data = asdict(s)
    data["ci95"] = list(s.ci95)
    data["cluster_ci95"] = None if s.cluster_ci95 is None else list(s.cluster_ci95)
    if s.subtask is None:
        del data["subtask"]
    else:  # spend is counted per arm
        del data["spend_usd"], data["spend_unknown"]
    if s.epochs is None:  # no repeats: the arm's JSON is what it was before epochs
        for name in EPOCH_FIELDS:
            del data[name]
    return data


def _pair_json(p: Pair, not_valid: set[tuple[str, str, str]]) -> dict[str, Any]:
    data = asdict(p)
    data["diff_ci95"] = None if p.diff_ci95 is None else list(p.diff_ci95)
    # The sweep stopped on this pair's decision: McNemar's p is not valid.
    if (p.benchmark, p.a, p.b) in not_valid:
        data["fixed_n_valid"] = False
    return data


def _one_line(cells: Sequence[str]) -> list[str]:
    # A cell is one line whatever a task id or subtask holds: a line feed in one would draw a
    # row (or a fake "===== 2 passed =====") of its own, and the widths are those of what shows.
    return [safe_text.shown(c, newlines=False) for c in cells]


def _text(table: Table) -> str:
    lines = [safe_text.shown(table.title, newlines=False)]
    if table.header:
        grid = [_one_line(r) for r in (table.header, *table.rows)]
        widths = [max(len(r[i]) for r in grid) for i in range(len(table.header))]
        lines += ["  ".join(c.ljust(w) if i < table.left else c.rjust(w)
                            for i, (c, w) in enumerate(zip(r, widths, strict=True))).rstrip()
                  for r in grid]
    return "\n".join(lines + ([table.note] if table.note else []))


def _markdown(table: Table) -> str:
    lines = [f"### {safe_text.shown(table.title, newlines=False)}", ""]
    if table.header:
        rule = [":--" if i < table.left else "--:" for i in range(len(table.header))]
        lines += [_md_row(r) for r in (table.header, rule, *table.rows)]
    return "\n".join(lines + (["", table.note] if table.note else []))


def _md_row(cells: Sequence[str]) -> str:
    return "| " + " | ".join(c.replace("|", "\\|") for c in _one_line(cells)) + " |"


def render_table(report: Report) -> str:
    """The report as aligned tables for a terminal."""
    return "\n\n".join(_text(t) for t in _all(report)) + "\n"


def render_markdown(report: Report) -> str:
    """The report as markdown tables."""
    return "\n\n".join(_markdown(t) for t in _all(report)) + "\n"


def _all(report: Report) -> list[Table]:
    """The report's tables, then its judges' (none without a judged row)."""
    return tables(report) + class_tables(report.token_classes) + judging_tables(report.judging)


def render_json(report: Report) -> str:
    """The report as indented JSON (``report_json``)."""
    return json.dumps(report_json(report), indent=2)


def paired_intervals(report: Report) -> Intervals:
    """For interval gates: the interval of rate(a) - rate(b) (Newcombe's, or the paired t one for
    mean scores of repeats), arms named as ``report_json`` keys them."""
    label = _labeller(report)
    tables: dict[tuple[str, str], tuple[int, int, int, int]] = {}
    # (diff, standard error, n) of paired-t pairs
    scored: dict[tuple[str, str], tuple[float, float, int]] = {}
    for p in report.pairs:
        a, b = label(p.benchmark, p.a), label(p.benchmark, p.b)
        if p.diff_method == "paired-t":
            scored[(a, b)] = (p.diff or 0.0, p.diff_se or 0.0, p.n)
            scored[(b, a)] = (-(p.diff or 0.0), p.diff_se or 0.0, p.n)
            continue
        tables[(a, b)] = (p.both, p.a_only, p.b_only, p.neither)
        tables[(b, a)] = (p.both, p.b_only, p.a_only, p.neither)

    def interval(a: str, b: str, level: float) -> tuple[float, float] | None:
        if (a, b) in scored:
            diff, se, n = scored[(a, b)]
            if n < 2:
                return None
            half = t_quantile(level, n - 1) * se
            return (max(-1.0, diff - half), min(1.0, diff + half))
        table = tables.get((a, b))
        return None if table is None else newcombe_paired(*table, z=z_for(level))

    return interval
