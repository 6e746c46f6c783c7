"""Renderings of a report: an aligned terminal table, markdown and JSON (CSV and
HTML have modules of their own)."""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from typing import Any

from pytest_echo_bench.analysis.decide.monitor import Sequential
from pytest_echo_bench.analysis.gates import Intervals
from pytest_echo_bench.analysis.stats import newcombe_paired, t_quantile, z_for
from pytest_echo_bench.budget.money import usd
from pytest_echo_bench.budget.spend import spend_text
from pytest_echo_bench.report import decision
from pytest_echo_bench.report.figures import P_HINT, ArmStats, Disagreement, Pair, Report
from pytest_echo_bench.report.formats.csv import render_csv
from pytest_echo_bench.shards.coverage import Coverage
from pytest_echo_bench.store import safe_text

FORMATS = ("table", "markdown", "json", "csv", "html")


def report_json(report: Report) -> dict[str, Any]:
    """The report as plain JSON data; arms are keyed ``arm``, or ``benchmark/arm``
    when there are several benchmarks."""
    label = _labeller(report)
    subtasks: dict[str, dict[str, Any]] = {}
    for s in report.subtasks:
        subtasks.setdefault(label(s.benchmark, s.arm), {})[str(s.subtask)] = _stats_json(s)
    return {
        "benchmarks": {b.name: {"arms": list(b.arms), "tasks": b.tasks} for b in report.benchmarks},
        "arms": {label(s.benchmark, s.arm): _stats_json(s) for s in report.arms},
        "subtasks": subtasks,
        "oracle": {
            o.benchmark: {**asdict(o), "arms": list(o.arms), "ci95": list(o.ci95)}
            for o in report.oracles
        },
        "pairs": [_pair_json(p, decision.not_valid_for(report.sequential)) for p in report.pairs],
        "complementarity": {
            c.benchmark: {"n": c.n, "alone": dict(c.alone)} for c in report.complementarity
        },
        "frontier": {
            f.benchmark: {
                "basis": f.basis,
                "arms": list(f.arms),
                "points": [{"arm": a, "cost_per_item": c, "pass_rate": r} for a, c, r in f.points],
            }
            for f in report.frontiers
        },
        "disagreements": {
            bench: {"count": count, "shown": [asdict(d) for d in shown]}
            for bench, (count, shown) in report.disagreements.items()
        },
        "duplicates": report.duplicates,
        "complete": report.coverage.complete,
        "shards": report.coverage.shards,
        "missing_shards": report.coverage.missing,
        "unfinished_shards": report.coverage.unfinished,
        "parts": [e.to_json() for e in report.coverage.ends],
        "unknown_figures": report.unknown_figures,
        "random_guesses": report.random_guesses,
        "budgets": [asdict(b) for b in report.budgets],
        "conflicts": [
            {
                "benchmark": c.key[0],
                "task_id": c.key[1],
                "arm": c.key[2],
                **({"epoch": c.key[3]} if c.key[3] > 1 else {}),
                "first": c.first,
                "second": c.second,
            }
            for c in report.conflicts
        ],
        **({"conflicts_unlisted": report.unlisted_conflicts} if report.unlisted_conflicts else {}),
        **(
            {"sequential": decision.to_json(report.sequential)}
            if report.sequential is not None
            else {}
        ),
    }


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
    # the sweep stopped on this pair's decision: McNemar's p is not valid
    if (p.benchmark, p.a, p.b) in not_valid:
        data["fixed_n_valid"] = False
    return data


# --- text and markdown -------------------------------------------------------------------------


@dataclass
class Table:
    title: str
    header: list[str]
    rows: list[list[str]]
    left: int  # leading text columns, left-aligned; the rest are numbers
    note: str = ""


Column = tuple[str, str, Callable[[ArmStats], str]]  # (header, optional group, cell)


def _ci_text(ci: tuple[float, float]) -> str:
    return f"[{ci[0]:.3f}, {ci[1]:.3f}]"


def _opt(value: float | None, spec: str) -> str:
    return "-" if value is None else format(value, spec)


STATS_COLUMNS: list[Column] = [
    ("n", "", lambda s: str(s.n)),
    ("correct", "", lambda s: _opt(s.correct, "d")),
    ("score", "epochs", lambda s: _opt(s.score, ".2f")),
    ("pass rate", "", lambda s: "n/a" if s.pass_rate is None else f"{s.pass_rate:.3f}"),
    ("95% CI", "", lambda s: _ci_text(s.ci95)),
    ("clusters", "cluster", lambda s: _opt(s.clusters, "d")),
    ("cluster SE", "cluster", lambda s: _opt(s.cluster_se, ".4f")),
    (
        "cluster 95% CI",
        "cluster",
        lambda s: "-" if s.cluster_ci95 is None else _ci_text(s.cluster_ci95),
    ),
    ("unparseable", "", lambda s: str(s.unparseable)),
    ("errors", "", lambda s: str(s.errors)),
    ("not completed", "", lambda s: str(s.not_completed)),
    ("samples", "epochs", lambda s: _opt(s.samples, "d")),
    ("correct samples", "epochs", lambda s: _opt(s.correct_samples, "d")),
    ("reduce", "epochs", lambda s: s.reduce or "-"),
    (
        "pass@k",
        "epochs",
        lambda s: " ".join(f"{k}:{v:.3f}" for k, v in (s.pass_at or {}).items()) or "-",
    ),
    ("wall mean", "", lambda s: _opt(s.wall_mean, ".3f")),
    ("wall p50", "", lambda s: _opt(s.wall_p50, ".3f")),
    ("wall p95", "", lambda s: _opt(s.wall_p95, ".3f")),
    ("sub_calls mean", "", lambda s: _opt(s.sub_calls_mean, ".2f")),
    ("escalation", "escalation", lambda s: _opt(s.escalation_rate, ".3f")),
    ("prompt tokens", "tokens", lambda s: _opt(s.prompt_tokens, "d")),
    ("completion tokens", "tokens", lambda s: _opt(s.completion_tokens, "d")),
    ("cost usd", "cost", lambda s: "-" if s.cost_usd is None else usd(s.cost_usd)),
    (
        "usd per correct",
        "cost",
        lambda s: "-" if s.cost_per_correct is None else usd(s.cost_per_correct),
    ),
    ("cost units", "units", lambda s: _opt(s.cost_units, ".2f")),
    ("units per correct", "units", lambda s: _opt(s.cost_units_per_correct, ".4f")),
    ("spend usd", "spend", lambda s: spend_text(s.spend_usd, s.spend_unknown)),
]


def _stats_table(title: str, stats: list[ArmStats], with_subtask: bool) -> Table:
    groups = {
        "": True,
        "escalation": any(s.escalation_rate is not None for s in stats),
        "tokens": any(s.prompt_tokens is not None for s in stats),
        "cost": any(s.cost_usd is not None for s in stats),
        "units": any(s.cost_units is not None for s in stats),
        "cluster": any(s.clusters is not None for s in stats),
        "epochs": any(s.epochs is not None for s in stats),
        "spend": any(s.spend_usd is not None for s in stats),
    }
    columns = [c for c in STATS_COLUMNS if groups[c[1]]]
    keys = ["benchmark", "arm"] + (["subtask"] if with_subtask else [])
    rows = [
        [s.benchmark, s.arm]
        + ([str(s.subtask)] if with_subtask else [])
        + [cell(s) for _, _, cell in columns]
        for s in stats
    ]
    return Table(title, keys + [c[0] for c in columns], rows, len(keys))


def _tables(report: Report) -> list[Table]:
    tables = [_stats_table("pass rates", report.arms, False)]
    if report.oracles:
        tables.append(
            Table(
                "oracle: correct if any of the arms is, on items they all answered",
                ["benchmark", "arms", "n", "correct", "pass rate", "95% CI"],
                [
                    [
                        o.benchmark,
                        ",".join(o.arms),
                        str(o.n),
                        str(o.correct),
                        _opt(o.pass_rate, ".3f"),
                        _ci_text(o.ci95),
                    ]
                    for o in report.oracles
                ],
                2,
            )
        )
    if report.pairs:
        t_note = "\n" + T_HINT if any(p.diff_method == "paired-t" for p in report.pairs) else ""
        tables.append(
            Table(
                "paired comparison",
                PAIR_HEADER,
                [_pair_row(p) for p in report.pairs],
                3,
                P_HINT + "\n" + DIFF_HINT + t_note + _early_note(report),
            )
        )
    if report.sequential is not None:
        tables.append(_sequential_table(report.sequential))
    if report.complementarity:
        tables.append(
            Table(
                "complementarity: items only this arm gets right",
                ["benchmark", "arm", "shared items", "only this arm"],
                [
                    [c.benchmark, arm, str(c.n), str(k)]
                    for c in report.complementarity
                    for arm, k in c.alone.items()
                ],
                2,
            )
        )
    if report.frontiers:
        tables.append(
            Table(
                "cost frontier: arms no other beats on both pass rate and cost per item",
                ["benchmark", "arm", "cost basis", "cost per item", "pass rate", "on frontier"],
                [
                    [
                        f.benchmark,
                        arm,
                        f.basis,
                        f"{cost:.6g}",
                        f"{rate:.3f}",
                        "yes" if arm in f.arms else "",
                    ]
                    for f in report.frontiers
                    for arm, cost, rate in f.points
                ],
                3,
            )
        )
    if report.subtasks:
        tables.append(_stats_table("per subtask", report.subtasks, True))
    for bench, (count, shown) in report.disagreements.items():
        if count:
            tables.append(_disagreement_table(bench, count, shown))
    # a merged file: 0 duplicates left
    if report.duplicates or report.conflicts or report.unlisted_conflicts:
        tables.append(_duplicates_table(report))
    tables.extend(Table(f"budget: {b.text()}", [], [], 0) for b in report.budgets)
    if any(s.spend_unknown for s in report.arms) and any(
        s.spend_usd is not None for s in report.arms
    ):
        tables.append(Table(SPEND_UNKNOWN, [], [], 0))
    if report.unknown_figures:
        tables.append(Table(UNKNOWN_FIGURES.format(report.unknown_figures), [], [], 0))
    if not report.coverage.complete:
        tables.append(
            Table(
                f"incomplete: {report.coverage.describe()}; these figures are of part of the sweep",
                [],
                [],
                0,
            )
        )
    if report.coverage.ends:
        tables.append(_parts_table(report.coverage))
    if report.random_guesses:
        tables.append(Table(RANDOM_GUESSES.format(report.random_guesses), [], [], 0))
    return tables


RANDOM_GUESSES = (
    "random guesses: {} row(s) had no answer extracted and were graded by a seeded random guess "
    "(the scorer's random_guess_seed, the convention of a published figure); their rates "
    "include luck"
)
SPEND_UNKNOWN = (
    "spend usd: what each arm's rows cost (every row, a retried one too; rows the cache "
    "answered: 0); "
    "N unknown: rows whose cost is not known, left out of the sum, not counted as 0"
)
UNKNOWN_FIGURES = (
    "unknown figures: {} row(s) had a time, token or cost figure that is not a finite number of 0 "
    "or more; those figures are left out of the sums and means"
)


PAIR_HEADER = [
    "benchmark",
    "a",
    "b",
    "n",
    "a_only",
    "b_only",
    "a rate",
    "b rate",
    "diff",
    "diff 95% CI",
    "p-value",
    "p holm",
    "n for 80%",
    "mde 80%",
]
DIFF_HINT = (
    "diff: a rate - b rate on the shared items, with Newcombe's paired score interval; n for "
    "80%: items for "
    "80% power at this diff (McNemar, two-sided 0.05); mde 80%: the smallest diff this n detects so"
)


T_HINT = (
    "(t): mean scores of repeats; diff, its interval and p from Student's t on the per-item "
    "differences "
    "(diff_method paired-t), not McNemar"
)


def _pair_row(p: Pair) -> list[str]:
    ci = "-" if p.diff_ci95 is None else f"[{p.diff_ci95[0]:+.3f}, {p.diff_ci95[1]:+.3f}]"
    ci += " (t)" if p.diff_method == "paired-t" else ""
    return [
        p.benchmark,
        p.a,
        p.b,
        str(p.n),
        str(p.a_only),
        str(p.b_only),
        _opt(p.a_rate, ".3f"),
        _opt(p.b_rate, ".3f"),
        _opt(p.diff, "+.3f"),
        ci,
        f"{p.p_value:#.4g}",
        _opt(p.p_holm, "#.4g"),
        _opt(p.n_for_80, "d"),
        _opt(p.mde80, ".3f"),
    ]


def _early_note(report: Report) -> str:
    seq = report.sequential
    if seq is None or seq.fixed_n_valid:
        return ""
    pairs = ", ".join(f"{f.a} vs {f.b}" for f in seq.pairs)
    why = ("parts merged into it stopped early when decided" if seq.merged_parts else
           f"the sweep once stopped when they were decided ({seq.earlier})" if seq.earlier else
           "the sweep stopped once they were decided")
    return f"\nnot valid for {pairs}: {why}; read the anytime-valid comparison"


def _parts_table(cover: Coverage) -> Table:
    """How each shard file ended, with its items against those its
    shard selects (``shards.parts``)."""
    rows = [[e.shard, e.file, e.ended(), str(e.held),
             "-" if e.expected is None else str(e.expected)] for e in cover.ends]
    return Table("shard files: how each ended", ["shard", "file", "ended", "items", "of"], rows, 3,
                 "items: the file's rows of its shard, each once; of: the items its shard selects "
                 "(-: not recorded, an earlier version's file)")


def _sequential_table(seq: Sequential) -> Table:
    rows = [decision.cells(f) for f in seq.pairs]
    note = decision.note(seq) + ("" if seq.problem else "\n" + decision.HINT)
    return Table(
        decision.title(seq), decision.header(seq) if rows else [], rows, decision.LEFT, note
    )


def _disagreement_table(bench: str, count: int, shown: list[Disagreement]) -> Table:
    arms = list(shown[0].verdicts) if shown else []
    title = (
        f"disagreements ({bench}): {count} item(s) some arms get right and others wrong; first "
        f"{len(shown)} shown"
    )
    rows = [[d.task_id, str(d.subtask or "")] + [_verdict_cell(d, a) for a in arms] for d in shown]
    return Table(title, ["task_id", "subtask", *arms], rows, 2 + len(arms))


def _verdict_cell(d: Disagreement, arm: str) -> str:
    # one line, whatever the model wrote
    answer = " ".join(str(d.answers.get(arm) or "").split())[:40]
    return ("+ " if d.verdicts[arm] else "- ") + answer


def _duplicates_table(report: Report) -> Table:
    title = (
        f"duplicates: {report.duplicates} repeated row(s) counted once (the newest kept); "
        f"conflicts: {len(report.conflicts) + report.unlisted_conflicts}"
        + (
            f" ({report.unlisted_conflicts} counted by a merge, not listed)"
            if report.unlisted_conflicts
            else ""
        )
    )
    verdict = {True: "passed", False: "failed"}
    rows = [
        [c.key[0], c.key[1], c.key[2], str(c.key[3]), verdict[c.first], verdict[c.second]]
        for c in report.conflicts
    ]
    return Table(
        title,
        ["benchmark", "task_id", "arm", "epoch", "first", "later (kept)"] if rows else [],
        rows,
        6,
    )


def _one_line(cells: Sequence[str]) -> list[str]:
    # A cell is one line whatever a task id or subtask holds: a line feed in one would draw a
    # row (or a fake "===== 2 passed =====") of its own, and the widths are those of what shows.
    return [safe_text.shown(c, newlines=False) for c in cells]


def _text(table: Table) -> str:
    lines = [safe_text.shown(table.title, newlines=False)]
    if table.header:
        grid = [_one_line(r) for r in (table.header, *table.rows)]
        widths = [max(len(r[i]) for r in grid) for i in range(len(table.header))]
        lines += [
            "  ".join(
                c.ljust(w) if i < table.left else c.rjust(w)
                for i, (c, w) in enumerate(zip(r, widths, strict=True))
            ).rstrip()
            for r in grid
        ]
    return "\n".join(lines + ([table.note] if table.note else []))


def _markdown(table: Table) -> str:
    lines = [f"### {safe_text.shown(table.title, newlines=False)}", ""]
    if table.header:
        rule = [":--" if i < table.left else "--:" for i in range(len(table.header))]
        lines += [_md_row(r) for r in (table.header, rule, *table.rows)]
    return "\n".join(lines + (["", table.note] if table.note else []))


def _md_row(cells: Sequence[str]) -> str:
    return "| " + " | ".join(c.replace("|", "\\|") for c in _one_line(cells)) + " |"


def render(report: Report, fmt: str = "table") -> str:
    """The report as ``table`` (terminal), ``markdown``, ``json``, ``csv`` or ``html`` text."""
    if fmt == "json":
        return json.dumps(report_json(report), indent=2)
    if fmt == "csv":
        return render_csv(report)
    if fmt == "html":
        from pytest_echo_bench.report.formats.html import render_html

        return render_html(report)
    if fmt == "table":
        return "\n\n".join(_text(t) for t in _tables(report)) + "\n"
    if fmt == "markdown":
        return "\n\n".join(_markdown(t) for t in _tables(report)) + "\n"
    raise ValueError(f"unknown report format {fmt!r}; choose one of: {', '.join(FORMATS)}")


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
