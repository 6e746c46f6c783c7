"""``echo-bench trend --format html``: one self-contained page (inline CSS and SVG, no script), a
plot per arm: its pass rate per run in time order, the Wilson band around it, and the runs that
differ from the run before on the paired test ringed."""

from __future__ import annotations

from pytest_echo_bench.report.formats.svg import e
from pytest_echo_bench.report.formats.trend import HINT, trend_lines
from pytest_echo_bench.report.trend import ArmTrend, Trend

W, H, PAD, LEFT = 640, 220, 30, 46
# As the report's page: nothing runs and nothing loads.
_CSP = "default-src 'none'; style-src 'unsafe-inline'"
_CSS = """
body{font:14px/1.45 system-ui,sans-serif;margin:1.5em auto;padding:0 1em;color:#222;
max-width:1100px}h1{font-size:1.4em}h2{font-size:1.1em;margin:1.4em 0 .3em;
border-bottom:2px solid #ccc;overflow-wrap:anywhere}.muted{color:#666}
table{border-collapse:collapse;font-size:12px}th,td{border:1px solid #ddd;padding:.2em .4em;
text-align:right}td.text{text-align:left;overflow-wrap:anywhere;max-width:18em}
span.partial{color:#b3261e}
tr.down td{background:#fcbba1}tr.up td{background:#c7e9c0}svg text{font-size:11px;fill:#333}
"""


def _x(index: int, runs: int) -> float:
    return LEFT + (W - LEFT - PAD) * (index / (runs - 1) if runs > 1 else 0.5)


def _y(rate: float) -> float:
    return PAD / 2 + (H - 2 * PAD) * (1 - rate)


def plot(arm: ArmTrend, runs: int) -> str:
    """The arm's plot: the rate line, the band, a dot per run graded (ringed when changed)."""
    drawn = [(i, p) for i, p in enumerate(arm.points) if p is not None]
    parts = [f'<svg class="trend-plot" data-arm="{e(arm.label)}" width="{W}" height="{H}" '
             f'role="img" aria-label="pass rate per run of {e(arm.label)}">']
    for tick in (0.0, 0.25, 0.5, 0.75, 1.0):
        parts.append(f'<line x1="{LEFT}" x2="{W - PAD}" y1="{_y(tick):.1f}" y2="{_y(tick):.1f}" '
                     f'stroke="#eee"/><text x="{LEFT - 6}" y="{_y(tick) + 4:.1f}" '
                     f'text-anchor="end">{tick:.2f}</text>')
    if drawn:
        upper = [f"{_x(i, runs):.1f},{_y(p.ci95[1]):.1f}" for i, p in drawn]
        lower = [f"{_x(i, runs):.1f},{_y(p.ci95[0]):.1f}" for i, p in reversed(drawn)]
        parts.append(f'<polygon class="band" points="{" ".join(upper + lower)}" fill="#9ecae1" '
                     'opacity="0.45"/>')
        line = " ".join(f"{_x(i, runs):.1f},{_y(p.rate):.1f}" for i, p in drawn)
        parts.append(f'<polyline class="rate" points="{line}" fill="none" stroke="#08519c" '
                     'stroke-width="1.8"/>')
    parts += [_dot(arm, i, runs) for i, _ in drawn]
    for i in range(runs):
        parts.append(f'<text x="{_x(i, runs):.1f}" y="{H - 8}" text-anchor="middle">{i + 1}'
                     "</text>")
    parts.append("</svg>")
    return "".join(parts)


def _dot(arm: ArmTrend, i: int, runs: int) -> str:
    """Run ``i``'s dot, ringed red (worse) or green (better) when it differs from the run before."""
    p = arm.points[i]
    assert p is not None  # only graded runs are drawn
    step = arm.steps[i - 1] if i else None
    mark = step.direction if step is not None and step.changed else ""
    ring = {"down": "#b3261e", "up": "#176d1c"}.get(mark)
    stroke = f' stroke="{ring}" stroke-width="3"' if ring else ""
    return (f'<g class="run-point{" changed " + mark if mark else ""}">'
            f'<circle cx="{_x(i, runs):.1f}" cy="{_y(p.rate):.1f}" r="{6 if ring else 4}"'
            f' fill="#08519c"{stroke}><title>run {i + 1}: {p.rate:.3f} '
            f'[{p.ci95[0]:.3f}, {p.ci95[1]:.3f}] n={p.n}</title></circle></g>')


def _p(value: float | None) -> str:
    """A step's p, or "-" when no item was paired (nothing was tested)."""
    return "-" if value is None else f"{value:.3g}"


def _rows(trend: Trend, label: str) -> str:
    out = []
    for line in (x for x in trend_lines(trend) if x["arm"] == label):
        mark = line["changed"] if line["changed"] in ("up", "down") else ""
        rate = "-" if line["pass_rate"] is None else (
            f"{line['pass_rate']:.3f} [{line['ci95_lo']:.3f}, {line['ci95_hi']:.3f}]")
        step = "" if line["paired"] is None else (
            f"<td>{line['paired']}</td><td>{line['right_to_wrong']}</td>"
            f"<td>{line['wrong_to_right']}</td><td>{line['item_changed']}</td>"
            f"<td>{_p(line['p'])}</td>"
            f"<td>{_p(line['p_holm'])}</td><td class=\"text\">{e(line['changed'])}</td>")
        step = step or '<td colspan="7" class="text muted">-</td>'
        out.append(f'<tr class="{mark}"><td>{line["run"]}</td><td class="text">'
                   f'{e(line["run_id"])}</td><td class="text">{e(line["created_at"])}</td>'
                   f"<td>{line['n']}</td><td>{rate}</td>{step}</tr>")
    return "".join(out)


def _arm(trend: Trend, arm: ArmTrend) -> str:
    head = ("<tr><th>run</th><th>run id</th><th>created at</th><th>n</th><th>pass rate [95%]"
            "</th><th>paired</th><th>right&rarr;wrong</th><th>wrong&rarr;right</th>"
            "<th>item changed</th><th>p</th><th>p holm</th><th>changed</th></tr>")
    return (f'<section class="arm"><h2>{e(arm.label)}</h2>{plot(arm, len(trend.runs))}'
            f"<table>{head}{_rows(trend, arm.label)}</table></section>")


def render_html(trend: Trend) -> str:
    runs = "".join(f'<li>run {e(r.run_id)} · started '
                   f"{e(r.created_at)} · {e(', '.join(r.files))}"
                   + (f' · <span class="partial">partial: {e(r.partial)}</span>' if r.partial
                      else "") + "</li>"
                   for r in trend.runs)
    body = [f"<h1>echo-bench trend: {len(trend.runs)} run(s)</h1>",
            f'<ol class="muted" id="runs">{runs}</ol>', f'<p class="muted">{e(HINT)}</p>',
            *(_arm(trend, arm) for arm in trend.arms)]
    return (f'<!DOCTYPE html>\n<html lang="en">\n<head>\n<meta charset="utf-8">\n'
            f'<meta http-equiv="Content-Security-Policy" content="{_CSP}">\n'
            f"<title>echo-bench trend</title>\n<style>{_CSS}</style>\n</head>\n<body>\n"
            + "\n".join(body) + "\n</body>\n</html>\n")
