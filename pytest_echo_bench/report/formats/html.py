"""``echo-bench report --format html``: the report as one self-contained page
(inline CSS and SVG, no script)."""

from __future__ import annotations

from pytest_echo_bench.analysis.compare import Disagreement, Frontier, Pair
from pytest_echo_bench.budget.spend import spend_text
from pytest_echo_bench.report import decision
from pytest_echo_bench.report.colors import palette
from pytest_echo_bench.report.figures import ArmStats, Benchmark, Report
from pytest_echo_bench.report.formats.judging import judging_html
from pytest_echo_bench.report.formats.svg import cost_plot, e, heat_color, rate_bars
from pytest_echo_bench.report.formats.token_classes import class_html

ALPHA = 0.05
_CSS = """
body{font:14px/1.45 system-ui,sans-serif;margin:1.5em auto;padding:0 1em;color:#222;
max-width:1250px}
h1{font-size:1.4em;margin:0 0 .2em}
h2{font-size:1.2em;margin:1.6em 0 .3em;border-bottom:2px solid #ccc}
h3{font-size:1.02em;margin:1.2em 0 .3em}.muted{color:#666}
table{border-collapse:collapse}
th,td{border:1px solid #ddd;padding:.25em .45em;text-align:right;vertical-align:top}
th:first-child,td:first-child,.text{text-align:left}
td.heat,td.pair{text-align:center;font-size:12px;min-width:6.5em}
td.sig-pos{background:#c7e9c0}td.invalid{background:#fff4ce;font-size:11px}
td.sig-neg{background:#fcbba1}td.ns{background:#f2f2f2}td.self{background:#fff}
.legend span{display:inline-block;padding:0 .5em;margin-right:.6em;border:1px solid #ddd}
.answer{font-family:ui-monospace,monospace;font-size:12px;white-space:pre-wrap;
overflow-wrap:anywhere;max-width:22em}
table.disagreements td{max-width:24em;overflow-wrap:anywhere}
.scroll{overflow-x:auto;max-width:100%}th{max-width:14em;overflow-wrap:anywhere}
.incomplete{background:#fdecea;border:1px solid #b3261e;padding:.4em .6em}.right{color:#176d1c}
.wrong{color:#b3261e}svg text{font-size:11px;fill:#333}
"""
# Like the progress page: no script runs and nothing loads, so a payload that slipped past
# escaping could not act, and the page works offline.
_CSP = "default-src 'none'; style-src 'unsafe-inline'"


def render_html(report: Report) -> str:
    """The whole report page; every name, id, subtask and answer
    from the results file is escaped."""
    body = [
        "<h1>echo-bench report</h1>",
        _sources(report),
        _summary(report),
        _incomplete(report),
        _parts(report),
        _sequential(report),
    ]
    for bench in report.benchmarks:
        body.append(_benchmark(report, bench))
    if report.token_classes:
        body.append(class_html(report.token_classes))
    if report.judging is not None:
        body.append(judging_html(report.judging))
    return (
        f'<!DOCTYPE html>\n<html lang="en">\n<head>\n<meta charset="utf-8">\n'
        f'<meta http-equiv="Content-Security-Policy" content="{_CSP}">\n'
        f"<title>echo-bench report · {e(', '.join(b.name or '-' for b in report.benchmarks))}"
        "</title>\n"
        f"<style>{_CSS}</style>\n</head>\n<body>\n" + "\n".join(body) + "\n</body>\n</html>\n"
    )


def _sources(report: Report) -> str:
    """What the page is of: each file read, its run id and when that run started."""
    lines = "".join(
        f'<li><span class="file">{e(path)}</span> · run {e(run or "-")} · started '
        f"{e(created or '-')}</li>"
        for path, run, created in report.sources
    )
    return f'<ul class="muted" id="sources">{lines}</ul>' if lines else ""


def _summary(report: Report) -> str:
    facts = [
        f"{len(report.benchmarks)} benchmark(s)",
        f"{sum(b.tasks for b in report.benchmarks)} task id(s)",
        _graded(report.arms),
        f"{report.duplicates} duplicate(s)",
        f"{len(report.conflicts) + report.unlisted_conflicts} conflicting verdict(s)",
    ]
    if report.unknown_figures:
        facts.append(f"{report.unknown_figures} row(s) with unknown figures (left out)")
    if report.random_guesses:
        facts.append(f"{report.random_guesses} row(s) graded by a seeded random guess")
    unjudged = sum(s.unjudged for s in report.arms)
    if unjudged:
        facts.append(f"{unjudged} unjudged row(s) (no grade from the judge: left out of the "
                     "pass rates)")
    budgets = "".join(f'<p class="budget">Budget: {e(b.text())}</p>' for b in report.budgets)
    return f'<p class="muted" id="summary">{" · ".join(facts)}</p>' + budgets


def _incomplete(report: Report) -> str:
    """A merge missing shards of its sweep, said above every figure: they are of part of it."""
    cover = report.coverage
    if cover.complete:
        return ""
    return (
        '<p class="incomplete" id="incomplete"><strong>Incomplete:</strong> '
        f"{e(cover.describe())}; these figures "
        "are of part of the sweep, and a gate on them fails unless --allow-partial</p>"
    )


def _parts(report: Report) -> str:
    """How each shard file ended, with its items against those its shard selects."""
    ends = report.coverage.ends
    if not ends:
        return ""
    rows = "".join(
        f'<tr><td class="text">{e(p.shard)}</td><td class="text">{e(p.file)}</td><td class="text">'
        f"{e(p.ended())}</td><td>{p.held}</td><td>{'-' if p.expected is None else p.expected}"
        "</td></tr>"
        for p in ends
    )
    return (
        '<section id="parts"><h2>Shard files: how each '
        "ended</h2><table><tr><th>shard</th><th>file</th>"
        f"<th>ended</th><th>items</th><th>of</th></tr>{rows}</table></section>"
    )


def _sequential(report: Report) -> str:
    """A sweep with a decide plan: its anytime-valid figures, and which
    figures are valid for how it ended."""
    seq = report.sequential
    if seq is None:
        return ""
    rows = "".join(
        "<tr>"
        + "".join(
            f'<td class="text">{e(c)}</td>' if i in decision.TEXT_CELLS else f"<td>{e(c)}</td>"
            for i, c in enumerate(cells)
        )
        + "</tr>"
        for cells in map(decision.cells, seq.pairs)
    )
    head = "".join(f"<th>{e(h)}</th>" for h in decision.header(seq))
    table = f"<table><tr>{head}</tr>{rows}</table>" if rows else ""
    return (
        f'<section id="sequential" data-collection="{e(seq.collection)}"><h2>Anytime-valid '
        "comparison</h2>"
        f'<p>{e(decision.note(seq))}</p><p class="muted">{e(decision.HINT)}</p>{table}</section>'
    )


def _graded(arms: list[ArmStats]) -> str:
    """Graded rows; with repeats an arm's n counts items, each reduced from its
    sample rows, so both are named."""
    items = sum(s.n for s in arms)
    if all(s.samples is None for s in arms):
        return f"{items} graded row(s)"
    return f"{items} graded item(s) from {sum(s.samples or s.n for s in arms)} sample row(s)"


def _benchmark(report: Report, bench: Benchmark) -> str:
    arms = [s for s in report.arms if s.benchmark == bench.name]
    colors = dict(zip((s.arm for s in arms), palette(len(arms)), strict=True))
    count, shown = report.disagreements.get(bench.name, (0, []))
    graded = [s.arm for s in arms if s.n]  # an arm with no graded row has no verdict to compare
    parts = [
        f'<section class="benchmark"><h2>{e(bench.name or "(no benchmark name)")}</h2>',
        f'<p class="muted">{bench.tasks} task id(s), {len(arms)} arm(s)</p>',
        '<h3>Pass rate per arm</h3><p class="muted">bar: pass rate; solid whisker: Wilson 95% '
        "interval; dashed: cluster-robust 95% interval over subtasks (when the arm spans "
        "several)</p>",
        rate_bars(arms, colors),
        _unjudged(arms),
        _pass_at(arms),
        _heatmap([s for s in report.subtasks if s.benchmark == bench.name], [s.arm for s in arms]),
        _pairs(report, bench.name, graded),
        _cost(next((f for f in report.frontiers if f.benchmark == bench.name), None), colors),
        _spend(arms),
        _disagreements(count, shown, graded),
        "</section>",
    ]
    return "\n".join(p for p in parts if p)


def _unjudged(arms: list[ArmStats]) -> str:
    """Each arm's unjudged rows, counted apart from the rates (none: nothing)."""
    counts = " · ".join(f"{e(s.arm)} {s.unjudged}" for s in arms if s.unjudged)
    if not counts:
        return ""
    return (f'<p class="muted unjudged">unjudged rows (no grade from the judge; left out of the '
            f"pass rates): {counts}</p>")


def _pairs(report: Report, bench: str, graded: list[str]) -> str:
    """The benchmark's pair matrix; a pair a sweep stopped on when
    decided has no valid fixed-n p."""
    pairs = [p for p in report.pairs if p.benchmark == bench]
    not_valid = {(a, b) for bn, a, b in decision.not_valid_for(report.sequential) if bn == bench}
    return _pair_matrix(graded, pairs, not_valid)


def _pass_at(arms: list[ArmStats]) -> str:
    """With repeats only: each arm's samples, reduction and pass@k."""
    sampled = [s for s in arms if s.epochs is not None]
    if not sampled:
        return ""
    ks = sorted({int(k) for s in sampled for k in (s.pass_at or {})})
    head = "".join(f"<th>pass@{k}</th>" for k in ks)
    rows = "".join(
        f'<tr><td class="text">{e(s.arm)}</td><td>{s.n}</td><td>{_opt(s.score)}</td><td>'
        f"{s.samples}</td>"
        f'<td>{s.correct_samples}</td><td>{s.epochs}</td><td class="text">'
        f"{e(s.reduce or '')}</td>"
        + "".join(f"<td>{(s.pass_at or {}).get(str(k), float('nan')):.3f}</td>" for k in ks)
        + "</tr>"
        for s in sampled
    )
    return (
        '<h3>Repeats: pass@k</h3><p class="muted">unbiased estimator of Chen et al. (2021); '
        "an item counts for the k "
        "its own number of samples reaches; score: the sum of the items' scores (pass rate = "
        "score / items)</p>"
        '<table class="pass-at"><tr><th '
        'class="text">arm</th><th>items</th><th>score</th><th>samples</th><th>correct '
        "samples</th>"
        f'<th>epochs</th><th class="text">reduce</th>{head}</tr>{rows}</table>'
    )


def _opt(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}"


def _heatmap(subtasks: list[ArmStats], arms: list[str]) -> str:
    if not subtasks:
        return ""
    cells = {(s.subtask, s.arm): s for s in subtasks}
    names = sorted({str(s.subtask) for s in subtasks})
    head = "".join(f'<th class="text">{e(a)}</th>' for a in arms)
    rows = []
    for sub in names:
        tds = "".join(_heat_cell(cells.get((sub, a))) for a in arms)
        rows.append(f'<tr><td class="text">{e(sub)}</td>{tds}</tr>')
    return (
        '<h3>Pass rate per subtask</h3><div class="scroll"><table class="heatmap"><tr><th '
        'class="text">subtask</th>'
        f"{head}</tr>{''.join(rows)}</table></div>"
    )


def _heat_cell(s: ArmStats | None) -> str:
    if s is None or s.pass_rate is None:
        return '<td class="heat">-</td>'
    ink = "#fff" if s.pass_rate > 0.55 else "#222"  # keep the text readable on the darker blues
    return (f'<td class="heat" style="background:{heat_color(s.pass_rate)};color:{ink}" '
            f'title="{_of_n(s)}">{s.pass_rate:.2f}<br>n={s.n}</td>')


def _of_n(s: ArmStats) -> str:
    """What the rate is of: correct items of n, or with repeats the
    sum of the items' scores of n; the unjudged rows beside, left out of n."""
    of = (
        f"{s.correct}/{s.n}"
        if s.score is None
        else f"score {s.score:.2f}/{s.n} items, {s.correct_samples}/{s.samples} samples"
    )
    return of + (f", {s.unjudged} unjudged" if s.unjudged else "")


def _pair_matrix(
    arms: list[str], pairs: list[Pair], not_valid: set[tuple[str, str]] | None = None
) -> str:
    """``not_valid``: the (row, column) pairs the sweep stopped on once decided, whose
    fixed-n figures are not valid."""
    if not pairs:
        return ""
    by = {(p.a, p.b): p for p in pairs}
    head = "".join(f'<th class="text">{e(a)}</th>' for a in arms)
    rows = []
    for row in arms:
        tds = "".join(
            _invalid(row, col) if (row, col) in (not_valid or ()) else _pair_cell(row, col, by)
            for col in arms
        )
        rows.append(f'<tr><th class="text">{e(row)}</th>{tds}</tr>')
    legend = (
        '<p class="legend"><span class="sig-pos" style="background:#c7e9c0">row better (Holm '
        "p &lt; 0.05)</span>"
        '<span style="background:#fcbba1">row worse (Holm p &lt; 0.05)</span>'
        '<span style="background:#f2f2f2">not significant</span></p>'
    )
    return (
        f'<h3>Paired comparisons (row − column)</h3><p class="muted">{_method(pairs)}</p>'
        f"{legend}{_invalid_note(not_valid)}"
        '<div class="scroll"><table class="pair-matrix"><tr><th class="text">row − '
        f"column</th>{head}</tr>"
        f"{''.join(rows)}</table></div>"
    )


MCNEMAR = (
    "diff of pass rates on the items both answered, Newcombe's paired 95% interval, exact "
    "McNemar p "
    "adjusted by Holm over the benchmark's pairs"
)
PAIRED_T = (
    "diff of mean scores of repeats on the items both answered: Student's paired t on the per-item "
    "differences, its 95% interval and p adjusted by Holm over the benchmark's pairs"
)


def _method(pairs: list[Pair]) -> str:
    """The caption names the method the cells use: fractional mean scores are compared by a paired t
    (``--reduce mean`` makes every pair of a benchmark one, so a caption per benchmark is exact)."""
    return PAIRED_T if any(p.diff_method == "paired-t" for p in pairs) else MCNEMAR


def _pair_cell(row: str, col: str, by: dict[tuple[str, str], Pair]) -> str:
    if row == col:
        return '<td class="pair self">·</td>'
    p, sign = (by[(row, col)], 1) if (row, col) in by else (by.get((col, row)), -1)
    if p is None or p.diff is None or p.diff_ci95 is None:
        return '<td class="pair ns">-</td>'
    diff = sign * p.diff
    lo, hi = (p.diff_ci95 if sign == 1 else (-p.diff_ci95[1], -p.diff_ci95[0]))
    holm = p.p_holm if p.p_holm is not None else p.p_value
    kind = "ns" if holm >= ALPHA else ("sig-pos" if diff > 0 else "sig-neg")
    return (f'<td class="pair {kind}" title="n={p.n}, p={p.p_value:.4g}">{_signed(diff)}<br>'
            f"[{_signed(lo)}, {_signed(hi)}]<br>p<sub>holm</sub>={holm:.3g}</td>")


def _signed(value: float) -> str:
    """A difference to three places with its sign; one that rounds
    to zero is 0.000, never -0.000."""
    text = f"{value:+.3f}"
    return "0.000" if float(text) == 0 else text


def _invalid(row: str, col: str) -> str:
    return (
        f'<td class="pair invalid" title="{e(row)} vs {e(col)}: the sweep stopped once this '
        'pair was decided">'
        "not valid: stopped when decided<br>see the anytime-valid comparison</td>"
    )


def _invalid_note(not_valid: set[tuple[str, str]] | None) -> str:
    if not not_valid:
        return ""
    return (
        '<p class="muted" id="fixed-n-not-valid">Cells marked not valid: the sweep stopped '
        "once those pairs were "
        "decided, so their McNemar p-values and Newcombe intervals are not valid (optional "
        "stopping); the "
        "anytime-valid comparison above gives the figures that are.</p>"
    )


def _cost(frontier: Frontier | None, colors: dict[str, str]) -> str:
    if frontier is None:
        return (
            '<h3>Accuracy against cost</h3><p class="muted" id="no-cost">No row records a cost.</p>'
        )
    listed = ", ".join(e(a) for a in frontier.arms)
    return (
        '<h3>Accuracy against cost</h3><p class="muted">cost per item '
        f"({e(frontier.basis)}); ringed and joined: "
        f"the Pareto frontier ({listed})</p>" + cost_plot(frontier, colors)
    )


def _spend(arms: list[ArmStats]) -> str:
    """What each arm's rows spent, when any row says what it cost;
    unknown costs counted, never as 0."""
    if all(s.spend_usd is None for s in arms):
        return ""
    rows = "".join(
        f'<tr><td class="text">{e(s.arm)}</td><td>'
        f"{e(spend_text(s.spend_usd, s.spend_unknown))}</td></tr>"
        for s in arms
    )
    return (
        '<h3>Spend per arm</h3><p class="muted">US dollars: the sum of the rows\' cost_usd '
        "(every row, a retried "
        "one too; rows the cache answered: 0); unknown: rows whose cost is not known, left "
        "out of the sum</p>"
        f'<table class="spend"><tr><th class="text">arm</th><th>spend usd</th></tr>{rows}</table>'
    )


def _disagreements(count: int, shown: list[Disagreement], arms: list[str]) -> str:
    if not count:
        return ""
    head = "".join(f'<th class="text">{e(a)}</th>' for a in arms)
    rows = []
    for d in shown:
        tds = "".join(_answer_cell(d, a) for a in arms)
        rows.append(
            f'<tr><td class="text">{e(d.task_id)}</td><td '
            f'class="text">{e(d.subtask or "")}</td>{tds}</tr>'
        )
    return (
        f'<h3>Items the arms disagree on</h3><p class="muted">{count} item(s) some arms get '
        "right and others wrong; "
        f'the first {len(shown)} by task id</p><div class="scroll"><table '
        'class="disagreements"><tr><th class="text">task id</th>'
        f'<th class="text">subtask</th>{head}</tr>{"".join(rows)}</table></div>'
    )


def _answer_cell(d: Disagreement, arm: str) -> str:
    ok = d.verdicts.get(arm)
    mark = '<span class="right">✓</span>' if ok else '<span class="wrong">✗</span>'
    return f'<td class="text">{mark} <span class="answer">{e(d.answers.get(arm) or "")}</span></td>'
