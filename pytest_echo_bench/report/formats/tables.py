"""The report as tables (a title, a header, rows and a note), which the terminal and markdown
formats draw: the tables in their order, their columns and their notes."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from pytest_echo_bench.analysis.decide.monitor import Sequential
from pytest_echo_bench.budget.money import usd
from pytest_echo_bench.budget.spend import spend_text
from pytest_echo_bench.report import decision
from pytest_echo_bench.report.figures import P_HINT, ArmStats, Disagreement, Pair, Report
from pytest_echo_bench.shards.coverage import Coverage


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
    ("cluster 95% CI", "cluster",
     lambda s: "-" if s.cluster_ci95 is None else _ci_text(s.cluster_ci95)),
    ("unparseable", "", lambda s: str(s.unparseable)),
    ("errors", "", lambda s: str(s.errors)),
    ("unjudged", "unjudged", lambda s: str(s.unjudged)),
    ("not completed", "", lambda s: str(s.not_completed)),
    ("samples", "epochs", lambda s: _opt(s.samples, "d")),
    ("correct samples", "epochs", lambda s: _opt(s.correct_samples, "d")),
    ("reduce", "epochs", lambda s: s.reduce or "-"),
    ("pass@k", "epochs",
     lambda s: " ".join(f"{k}:{v:.3f}" for k, v in (s.pass_at or {}).items()) or "-"),
    ("wall mean", "", lambda s: _opt(s.wall_mean, ".3f")),
    ("wall p50", "", lambda s: _opt(s.wall_p50, ".3f")),
    ("wall p95", "", lambda s: _opt(s.wall_p95, ".3f")),
    ("sub_calls mean", "", lambda s: _opt(s.sub_calls_mean, ".2f")),
    ("escalation", "escalation", lambda s: _opt(s.escalation_rate, ".3f")),
    ("prompt tokens", "tokens", lambda s: _opt(s.prompt_tokens, "d")),
    ("completion tokens", "tokens", lambda s: _opt(s.completion_tokens, "d")),
    ("cost usd", "cost", lambda s: "-" if s.cost_usd is None else usd(s.cost_usd)),
    ("usd per correct", "cost",
     lambda s: "-" if s.cost_per_correct is None else usd(s.cost_per_correct)),
    ("cost units", "units", lambda s: _opt(s.cost_units, ".2f")),
    ("units per correct", "units", lambda s: _opt(s.cost_units_per_correct, ".4f")),
    ("spend usd", "spend", lambda s: spend_text(s.spend_usd, s.spend_unknown)),
]


def _stats_table(title: str, stats: list[ArmStats], with_subtask: bool) -> Table:
    groups = _groups(stats)
    columns = [c for c in STATS_COLUMNS if groups[c[1]]]
    keys = ["benchmark", "arm"] + (["subtask"] if with_subtask else [])
    rows = [[s.benchmark, s.arm] + ([str(s.subtask)] if with_subtask else [])
            + [cell(s) for _, _, cell in columns] for s in stats]
    return Table(title, keys + [c[0] for c in columns], rows, len(keys))


def _groups(stats: list[ArmStats]) -> dict[str, bool]:
    """Which groups of ``STATS_COLUMNS`` the table shows: those some line has a figure of."""
    return {"": True, "escalation": any(s.escalation_rate is not None for s in stats),
              "tokens": any(s.prompt_tokens is not None for s in stats),
              "cost": any(s.cost_usd is not None for s in stats),
              "units": any(s.cost_units is not None for s in stats),
              "cluster": any(s.clusters is not None for s in stats),
              "epochs": any(s.epochs is not None for s in stats),
              # only where a judge left rows without a grade: a sweep without one never has
              "unjudged": any(s.unjudged for s in stats),
              "spend": any(s.spend_usd is not None for s in stats)}


def tables(report: Report) -> list[Table]:
    """The report's tables, in the order the terminal and markdown formats draw them."""
    return [table for section in SECTIONS for table in section(report)]


def _pass_rates(report: Report) -> list[Table]:
    return [_stats_table("pass rates", report.arms, False)]


def _oracle(report: Report) -> list[Table]:
    rows = [[o.benchmark, ",".join(o.arms), str(o.n), str(o.correct), _opt(o.pass_rate, ".3f"),
             _ci_text(o.ci95)] for o in report.oracles]
    header = ["benchmark", "arms", "n", "correct", "pass rate", "95% CI"]
    title = "oracle: correct if any of the arms is, on items they all answered"
    return [Table(title, header, rows, 2)] if rows else []


def _pairs(report: Report) -> list[Table]:
    if not report.pairs:
        return []
    t_note = "\n" + T_HINT if any(p.diff_method == "paired-t" for p in report.pairs) else ""
    return [Table("paired comparison", PAIR_HEADER, [_pair_row(p) for p in report.pairs], 3,
                  P_HINT + "\n" + DIFF_HINT + t_note + _early_note(report))]


def _sequential(report: Report) -> list[Table]:
    return [] if report.sequential is None else [_sequential_table(report.sequential)]


def _complementarity(report: Report) -> list[Table]:
    rows = [[c.benchmark, arm, str(c.n), str(k)] for c in report.complementarity
            for arm, k in c.alone.items()]
    return [Table("complementarity: items only this arm gets right",
                  ["benchmark", "arm", "shared items", "only this arm"], rows, 2)
            ] if report.complementarity else []


def _frontier(report: Report) -> list[Table]:
    rows = [[f.benchmark, arm, f.basis, f"{cost:.6g}", f"{rate:.3f}", _on(arm in f.arms)]
            for f in report.frontiers for arm, cost, rate in f.points]
    return [Table("cost frontier: arms no other beats on both pass rate and cost per item",
                  ["benchmark", "arm", "cost basis", "cost per item", "pass rate", "on frontier"],
                  rows, 3)] if report.frontiers else []


def _on(frontier: bool) -> str:
    return "yes" if frontier else ""


def _subtasks(report: Report) -> list[Table]:
    return [_stats_table("per subtask", report.subtasks, True)] if report.subtasks else []


def _disagreements(report: Report) -> list[Table]:
    return [_disagreement_table(bench, count, shown)
            for bench, (count, shown) in report.disagreements.items() if count]


def _duplicates(report: Report) -> list[Table]:
    merged = report.duplicates or report.conflicts or report.unlisted_conflicts  # 0 duplicates left
    return [_duplicates_table(report)] if merged else []


def _notes(report: Report) -> list[Table]:
    """Lines after the tables: budgets, spend and figures not known, an incomplete sweep, how its
    shard files ended, and rows graded by a guess."""
    notes = [f"budget: {b.text()}" for b in report.budgets]
    arms = report.arms
    if any(s.spend_unknown for s in arms) and any(s.spend_usd is not None for s in arms):
        notes.append(SPEND_UNKNOWN)
    if report.unknown_figures:
        notes.append(UNKNOWN_FIGURES.format(report.unknown_figures))
    if any(s.unjudged for s in arms):
        notes.append(UNJUDGED_NOTE)
    if not report.coverage.complete:
        notes.append(f"incomplete: {report.coverage.describe()}; these figures are of part of the "
                     "sweep")
    found = [Table(note, [], [], 0) for note in notes]
    if report.coverage.ends:
        found.append(_parts_table(report.coverage))
    if report.random_guesses:
        found.append(Table(RANDOM_GUESSES.format(report.random_guesses), [], [], 0))
    return found


RANDOM_GUESSES = ("random guesses: {} row(s) had no answer extracted and were graded by a seeded "
                  "random guess (the scorer's random_guess_seed, the convention of a published "
                  "figure); their rates include luck")
UNJUDGED_NOTE = ("unjudged: rows a judge gave no grade (it failed, or its reply held none); left "
                 "out of n, the pass rates and the comparisons, not counted as wrong; "
                 "--bench-retry-errors runs them again")
SPEND_UNKNOWN = ("spend usd: what each arm's rows cost (every row, a retried one too; rows the "
                 "cache answered: 0); N unknown: rows whose cost is not known, left out of the "
                 "sum, not counted as 0")
UNKNOWN_FIGURES = ("unknown figures: {} row(s) had a time, token or cost figure that is not a "
                   "finite number of 0 or more; those figures are left out of the sums and means")


PAIR_HEADER = ["benchmark", "a", "b", "n", "a_only", "b_only", "a rate", "b rate", "diff",
               "diff 95% CI", "p-value", "p holm", "n for 80%", "mde 80%"]
DIFF_HINT = ("diff: a rate - b rate on the shared items, with Newcombe's paired score interval; "
             "n for 80%: items for 80% power at this diff (McNemar, two-sided 0.05); mde 80%: the "
             "smallest diff this n detects so")


T_HINT = ("(t): mean scores of repeats; diff, its interval and p from Student's t on the per-item "
          "differences (diff_method paired-t), not McNemar")


def _pair_row(p: Pair) -> list[str]:
    ci = "-" if p.diff_ci95 is None else f"[{p.diff_ci95[0]:+.3f}, {p.diff_ci95[1]:+.3f}]"
    ci += " (t)" if p.diff_method == "paired-t" else ""
    return [p.benchmark, p.a, p.b, str(p.n), str(p.a_only), str(p.b_only), _opt(p.a_rate, ".3f"),
            _opt(p.b_rate, ".3f"), _opt(p.diff, "+.3f"), ci, f"{p.p_value:#.4g}",
            _opt(p.p_holm, "#.4g"), _opt(p.n_for_80, "d"), _opt(p.mde80, ".3f")]


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
    """How each shard file ended, with its items against those its shard selects
    (``shards.parts``)."""
    rows = [[e.shard, e.file, e.ended(), str(e.held),
             "-" if e.expected is None else str(e.expected)] for e in cover.ends]
    return Table("shard files: how each ended", ["shard", "file", "ended", "items", "of"], rows, 3,
                 "items: the file's rows of its shard, each once; of: the items its shard selects "
                 "(-: not recorded, an earlier version's file)")


def _sequential_table(seq: Sequential) -> Table:
    rows = [decision.cells(f) for f in seq.pairs]
    note = decision.note(seq) + ("" if seq.problem else "\n" + decision.HINT)
    header = decision.header(seq) if rows else []
    return Table(decision.title(seq), header, rows, decision.LEFT, note)


def _disagreement_table(bench: str, count: int, shown: list[Disagreement]) -> Table:
    arms = list(shown[0].verdicts) if shown else []
    title = (f"disagreements ({bench}): {count} item(s) some arms get right and others wrong; "
             f"first {len(shown)} shown")
    rows = [[d.task_id, str(d.subtask or "")] + [_verdict_cell(d, a) for a in arms] for d in shown]
    return Table(title, ["task_id", "subtask", *arms], rows, 2 + len(arms))


def _verdict_cell(d: Disagreement, arm: str) -> str:
    # One line, whatever the model wrote.
    answer = " ".join(str(d.answers.get(arm) or "").split())[:40]
    return ("+ " if d.verdicts[arm] else "- ") + answer


def _duplicates_table(report: Report) -> Table:
    title = (f"duplicates: {report.duplicates} repeated row(s) counted once (the newest kept); "
             f"conflicts: {len(report.conflicts) + report.unlisted_conflicts}"
             + (f" ({report.unlisted_conflicts} counted by a merge, not listed)"
                if report.unlisted_conflicts else ""))
    verdict = {True: "passed", False: "failed"}
    rows = [[c.key[0], c.key[1], c.key[2], str(c.key[3]), verdict[c.first], verdict[c.second]]
            for c in report.conflicts]
    header = ["benchmark", "task_id", "arm", "epoch", "first", "later (kept)"] if rows else []
    return Table(title, header, rows, 6)


SECTIONS: tuple[Callable[[Report], list[Table]], ...] = (
    _pass_rates, _oracle, _pairs, _sequential, _complementarity, _frontier, _subtasks,
    _disagreements, _duplicates, _notes)
