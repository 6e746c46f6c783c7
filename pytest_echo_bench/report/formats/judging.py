"""How every format shows what the judges did (``report.judged``): the tables the terminal,
markdown and HTML draw, the JSON object and the CSV lines. A report without judged rows has none
of them, so its output is what it was before judges."""

from __future__ import annotations

import html
from collections.abc import Callable
from dataclasses import asdict
from typing import Any

from pytest_echo_bench.analysis.agreement import Estimate, Interval
from pytest_echo_bench.analysis.judges import Rate
from pytest_echo_bench.budget.money import usd
from pytest_echo_bench.report.formats.tables import Table
from pytest_echo_bench.report.judged import Judging
from pytest_echo_bench.store import safe_text

SPEND_NOTE = ("arm usd: what the arm's own calls spent; judge usd: what its judges spent grading "
              "it (the rows' judge_cost_usd: a judgment the cache answered counts 0); N unknown: "
              "rows whose cost is not known, left out of the sum")
GRADE_NOTE = ("mean grade: over the graded rows (unjudged rows have none), on the judges' scale, "
              "with Student's t 95% interval; the pass rate above counts pass_at")
AGREE_NOTE = ("kappa: Cohen's (quadratic-weighted on number grades) for two judges; alpha: "
              "Krippendorff's (interval on numbers, nominal on labels) for more; 95% CI: "
              "percentile bootstrap over items")
PAIRWISE_NOTE = ("consistent: items whose verdict is the same with the answers in either order; "
                 "win/tie/loss: the rows' verdicts (a flip is a tie), each with its Wilson 95% CI")


def _g(value: float | None) -> str:
    return "-" if value is None else f"{value:.6g}"


def _ci(ci: tuple[float | None, float | None] | None) -> str:
    if ci is None or ci[0] is None or ci[1] is None:
        return "-"
    return f"[{ci[0]:.4g}, {ci[1]:.4g}]"


def _money(value: float | None, unknown: int) -> str:
    if value is None:
        return f"{unknown} unknown" if unknown else "-"
    return usd(value) + (f" + {unknown} unknown" if unknown else "")


def _rate(r: Rate) -> list[str]:
    return ["-" if r.rate is None else f"{r.rate:.3f}", _ci((r.lo, r.hi))]


def _estimate(est: Estimate, interval: Interval) -> list[str]:
    return [_g(est.value), str(est.n), _ci((interval.lo, interval.hi)), str(interval.resamples)]


def judging_tables(judging: Judging | None) -> list[Table]:
    """The judging tables, in the order every drawn format shows them (none: no judging)."""
    if judging is None:
        return []
    return [t for section in _SECTIONS for t in section(judging)]


def _spend(j: Judging) -> list[Table]:
    rows = [[s.benchmark, s.arm, _money(s.arm_usd, s.arm_unknown),
             _money(s.judge_usd, s.judge_unknown), _sum(s.arm_usd, s.judge_usd)] for s in j.spend]
    arms, judges = j.total()
    rows.append(["total", "", _money(arms, 0), _money(judges, 0), _sum(arms, judges)])
    return [Table("spend: each arm's own, apart from its judges'",
                  ["benchmark", "arm", "arm usd", "judge usd", "total usd"], rows, 2, SPEND_NOTE)]


def _sum(a: float | None, b: float | None) -> str:
    return "-" if a is None and b is None else usd((a or 0.0) + (b or 0.0))


def _grades(j: Judging) -> list[Table]:
    if not j.grades:
        return []
    rows = [[g.benchmark, g.arm, str(g.n), _g(g.mean), _ci(g.ci95)] for g in j.grades]
    found = [Table("grades: each arm's mean grade", ["benchmark", "arm", "graded", "mean grade",
                                                      "95% CI"], rows, 2, GRADE_NOTE)]
    if j.grade_pairs:
        pairs = [[p.benchmark, p.a, p.b, str(p.n), _g(p.diff), _ci(p.ci95),
                  "-" if p.p_value is None else f"{p.p_value:#.4g}"] for p in j.grade_pairs]
        found.append(Table("grades compared: paired t on the items both arms' grades cover",
                           ["benchmark", "a", "b", "n", "diff", "95% CI", "p-value"], pairs, 3,
                           "diff: a's mean grade - b's, each item's epochs averaged"))
    return found


def _agreement(j: Judging) -> list[Table]:
    found = []
    if j.agreement:
        rows = [[a.benchmark, ",".join(a.judges), a.statistic,
                 *_estimate(a.estimate, a.interval)] for a in j.agreement]
        reasons = [r for a in j.agreement for r in (a.estimate.reason, a.interval.reason) if r]
        note = AGREE_NOTE + "".join(f"\n-: {r}" for r in dict.fromkeys(reasons))
        found.append(Table("judges' agreement", ["benchmark", "judges", "statistic", "value", "n",
                                                  "95% CI", "resamples"], rows, 3, note))
    if j.judges:
        rows = [[g.benchmark, g.judge, ",".join(g.models), str(g.n), _g(g.mean), str(g.ungraded)]
                for g in j.judges]
        found.append(Table("judges' grades", ["benchmark", "judge", "models", "graded",
                                              "mean grade", "no grade"], rows, 3))
    return found


def _humans(j: Judging) -> list[Table]:
    if j.labels is None:
        return []
    lab = j.labels
    named = f": {', '.join(lab.named)}" + (" ..." if lab.unmatched > len(lab.named) else "")
    found = [Table(f"labels {lab.path}: {lab.matched} matched a row"
                   + (f", {lab.unmatched} name no row of the files{named}" if lab.unmatched
                      else ""), [], [], 0)]
    if j.humans:
        rows = [[h.benchmark, h.judge, str(h.agreement.n), *_rate(h.agreement.accuracy),
                 _g(h.agreement.kappa.value), _g(h.agreement.mean_bias.value)] for h in j.humans]
        found.append(Table("judges against people's labels",
                           ["benchmark", "judge", "n", "accuracy", "95% CI", "kappa",
                            "mean bias"], rows, 2,
                           "kappa: Cohen's (quadratic-weighted when both are numbers); mean "
                           "bias: mean(judge - people) when both are numbers (> 0: lenient)"))
    found += [_confusion(h.benchmark, h.judge, h.agreement.categories, h.agreement.confusion)
              for h in j.humans]
    return found


def _confusion(bench: str, judge: str, cats: tuple[object, ...],
               table: tuple[tuple[int, ...], ...]) -> Table:
    names = [_cat(c) for c in cats]
    rows = [[name, *map(str, counts)] for name, counts in zip(names, table, strict=True)]
    return Table(f"confusion ({bench}, {judge}): people's labels (rows) by the judge's (columns)",
                 ["people \\ judge", *names], rows, 1)


def _cat(value: object) -> str:
    return f"{value:g}" if isinstance(value, float) else str(value)


def _pairwise(j: Judging) -> list[Table]:
    if not j.pairwise:
        return []
    rows = [[p.benchmark, p.arm, str(p.consistency.n), *_rate(p.consistency),
             str(p.wins.win.n), *_rate(p.wins.win), *_rate(p.wins.tie), *_rate(p.wins.loss)]
            for p in j.pairwise]
    return [Table("pairwise judging", ["benchmark", "arm", "both orders", "consistent", "95% CI",
                                       "judged", "win", "95% CI", "tie", "95% CI", "loss",
                                       "95% CI"], rows, 2, PAIRWISE_NOTE)]


def _warnings(j: Judging) -> list[Table]:
    return [Table(f"warning: {w}", [], [], 0) for w in j.warnings]


_SECTIONS: tuple[Callable[[Judging], list[Table]], ...] = (
    _spend, _grades, _agreement, _humans, _pairwise, _warnings)


def judging_json(judging: Judging) -> dict[str, Any]:
    """The judging figures as plain JSON data (tuples as lists, None as null)."""
    arms, judges = judging.total()
    data = asdict(judging)
    data["total"] = {"arm_usd": arms, "judge_usd": judges}
    for human in data["humans"]:
        agreement = human["agreement"]
        agreement["categories"] = [_plain(c) for c in agreement["categories"]]
    return data


def _plain(value: object) -> object:
    return value if isinstance(value, (str, int, float)) else str(value)


CSV_FIELDS = ["judge", "figure", "value", "value_lo", "value_hi"]


def judging_csv_rows(judging: Judging) -> list[dict[str, Any]]:
    """One ``kind=judging`` line per figure: benchmark, arm, judge, the figure's name, its value
    and interval, n."""
    rows: list[dict[str, Any]] = []

    def add(bench: str, arm: str, judge: str, name: str, value: object, n: object = None,
            ci: tuple[float | None, float | None] | None = None) -> None:
        rows.append({"kind": "judging", "benchmark": bench, "arm": arm, "judge": judge,
                     "figure": name, "value": value, "n": n,
                     "value_lo": None if ci is None else ci[0],
                     "value_hi": None if ci is None else ci[1]})

    for s in judging.spend:
        add(s.benchmark, s.arm, "", "arm_usd", s.arm_usd, s.arm_unknown or None)
        add(s.benchmark, s.arm, "", "judge_usd", s.judge_usd, s.judge_unknown or None)
    arms, judges = judging.total()
    add("", "", "", "total_arm_usd", arms)
    add("", "", "", "total_judge_usd", judges)
    for g in judging.grades:
        add(g.benchmark, g.arm, "", "mean_grade", g.mean, g.n, g.ci95)
    for p in judging.grade_pairs:
        add(p.benchmark, f"{p.a} - {p.b}", "", "grade_diff", p.diff, p.n, p.ci95)
        add(p.benchmark, f"{p.a} - {p.b}", "", "grade_diff_p", p.p_value, p.n)
    for a in judging.agreement:
        add(a.benchmark, "", ",".join(a.judges), a.statistic, a.estimate.value, a.estimate.n,
            (a.interval.lo, a.interval.hi))
    for jg in judging.judges:
        add(jg.benchmark, "", jg.judge, "judge_mean_grade", jg.mean, jg.n)
    _human_rows(judging, add)
    for pw in judging.pairwise:
        for name, r in (("consistency", pw.consistency), ("win", pw.wins.win),
                        ("tie", pw.wins.tie), ("loss", pw.wins.loss)):
            add(pw.benchmark, pw.arm, "", name, r.rate, r.n, (r.lo, r.hi))
    return rows


def _human_rows(judging: Judging, add: Callable[..., None]) -> None:
    for h in judging.humans:
        a = h.agreement
        add(h.benchmark, "", h.judge, "human_accuracy", a.accuracy.rate, a.n,
            (a.accuracy.lo, a.accuracy.hi))
        add(h.benchmark, "", h.judge, "human_kappa", a.kappa.value, a.kappa.n)
        add(h.benchmark, "", h.judge, "human_mean_bias", a.mean_bias.value, a.mean_bias.n)
        for i, row in enumerate(a.confusion):
            for k, count in enumerate(row):
                add(h.benchmark, "", h.judge,
                    f"confusion {_cat(a.categories[i])} -> {_cat(a.categories[k])}", count)


def judging_html(judging: Judging | None) -> str:
    """The judging tables as an HTML section, every name and label escaped."""
    tables = judging_tables(judging)
    if not tables:
        return ""
    return '<section id="judging"><h2>Judges</h2>' + "".join(map(_html, tables)) + "</section>"


def _html(table: Table) -> str:
    def cell(tag: str, text: str, i: int) -> str:
        shown = html.escape(safe_text.shown(text, newlines=False))
        attrs = ' class="text"' if i < table.left else ""
        return f"<{tag}{attrs}>{shown}</{tag}>"

    title = html.escape(safe_text.shown(table.title, newlines=False))
    if not table.header:
        return f'<p class="judging">{title}</p>'
    head = "".join(cell("th", h, i) for i, h in enumerate(table.header))
    rows = "".join("<tr>" + "".join(cell("td", c, i) for i, c in enumerate(r)) + "</tr>"
                   for r in table.rows)
    note = "".join(f'<p class="muted">{html.escape(line)}</p>' for line in table.note.split("\n")
                   if line)
    return f'<h3>{title}</h3><div class="scroll"><table>{head and "<tr>" + head + "</tr>"}' \
           f"{rows}</table></div>{note}"
