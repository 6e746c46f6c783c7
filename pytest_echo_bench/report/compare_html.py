"""``echo-bench compare --format html``: one self-contained page (inline CSS and SVG, no script),
per arm a plot of its two pass rates with their Wilson intervals and of the paired difference with
its interval, then its figures side by side, what was not paired, and the first flips."""

from __future__ import annotations

from typing import Any

from pytest_echo_bench.report.compare import (
    FLIPS_SHOWN,
    headline,
    one_line,
    side_by_side,
    unpaired_lines,
)
from pytest_echo_bench.report.formats.html import _CSP, _CSS
from pytest_echo_bench.report.formats.svg import e

LABEL_W, AXIS_W, ROW_H = 120, 420, 28
COLORS = {"BASE": "#7f8c8d", "CAND": "#1f77b4"}


def _x(value: float, low: float, high: float) -> float:
    return LABEL_W + (value - low) / (high - low) * AXIS_W


def _whisker(ci: list[float] | None, y: float, low: float, high: float) -> str:
    if ci is None:
        return ""
    lo, hi = _x(max(low, ci[0]), low, high), _x(min(high, ci[1]), low, high)
    return (f'<line class="ci" x1="{lo:.1f}" x2="{hi:.1f}" y1="{y:.1f}" y2="{y:.1f}" '
            'stroke="#222" stroke-width="1.6"/>'
            f'<line x1="{lo:.1f}" x2="{lo:.1f}" y1="{y - 5:.1f}" y2="{y + 5:.1f}" stroke="#222"/>'
            f'<line x1="{hi:.1f}" x2="{hi:.1f}" y1="{y - 5:.1f}" y2="{y + 5:.1f}" stroke="#222"/>')


def _axis(top: float, y: float, low: float, high: float, ticks: tuple[float, ...]) -> str:
    """Grid lines from ``top`` to ``y`` and their labels below; signed on a difference's axis."""
    parts = []
    for t in ticks:
        x = _x(t, low, high)
        label = f"{t:+.2f}" if low < 0 else f"{t:.2f}"
        parts.append(f'<line x1="{x:.1f}" x2="{x:.1f}" y1="{top:.1f}" y2="{y:.1f}" '
                     f'stroke="#eee"/><text x="{x:.1f}" y="{y + 12:.1f}" '
                     f'text-anchor="middle">{label}</text>')
    return "".join(parts)


def arm_plot(arm: dict[str, Any]) -> str:
    """The arm's two rates (bars with Wilson whiskers on [0, 1]) and CAND - BASE (a dot and its
    paired interval on [-1, 1], 0 marked)."""
    parts = [f'<svg class="compare-plot" width="{LABEL_W + AXIS_W + 190}" height="{5 * ROW_H + 30}"'
             f' role="img" aria-label="pass rates of BASE and CAND and their difference">']
    parts.append(_axis(4, 2 * ROW_H + 6, 0.0, 1.0, (0, 0.25, 0.5, 0.75, 1.0)))
    for row, side in enumerate(("BASE", "CAND")):
        rate, ci = arm[f"{side.lower()}_rate"], arm[f"{side.lower()}_ci95"]
        y, mid = row * ROW_H + 4, row * ROW_H + 4 + ROW_H / 2 - 3
        shown = "n/a" if rate is None else f"{rate:.3f}"
        parts.append(
            f'<g class="rate-bar" data-side="{side}"><text x="{LABEL_W - 8}" y="{mid + 4:.1f}" '
            f'text-anchor="end">{side}</text><rect x="{LABEL_W}" y="{y}" '
            f'width="{(rate or 0.0) * AXIS_W:.1f}" height="{ROW_H - 8}" fill="{COLORS[side]}" '
            f'opacity="0.8"/>{_whisker(ci, mid, 0.0, 1.0)}<text x="{LABEL_W + AXIS_W + 8}" '
            f'y="{mid + 4:.1f}">{shown}</text></g>')
    y = 4 * ROW_H
    diff = arm["diff"]
    low, high = _span(arm) if arm["method"] == "paired-t" else (-1.0, 1.0)
    parts.append(_axis(y - 14, y + 14, low, high, (low, low / 2, 0.0, high / 2, high)))
    parts.append(f'<line x1="{_x(0.0, low, high):.1f}" x2="{_x(0.0, low, high):.1f}" '
                 f'y1="{y - 12:.1f}" y2="{y + 10:.1f}" stroke="#b3261e"/>')
    if diff is not None:
        parts.append(
            f'<g class="diff"><text x="{LABEL_W - 8}" y="{y + 4:.1f}" text-anchor="end">'
            f'CAND - BASE</text>{_whisker(arm["diff_ci95"], y, low, high)}<circle '
            f'cx="{_x(max(low, min(high, diff)), low, high):.1f}" cy="{y:.1f}" r="4" '
            f'fill="{COLORS["CAND"]}"/><text x="{LABEL_W + AXIS_W + 8}" y="{y + 4:.1f}">'
            f'{diff:+.3f}</text></g>')
    parts.append("</svg>")
    return "".join(parts)


def _span(arm: dict[str, Any]) -> tuple[float, float]:
    """A grade difference's axis: symmetric around 0, wide enough for the interval."""
    ci = arm["diff_ci95"] or [arm["diff"] or 0.0] * 2
    reach = max(1.0, abs(ci[0]), abs(ci[1]), abs(arm["diff"] or 0.0))
    return -reach, reach


def _table(head: list[str], rows: list[list[str]]) -> str:
    cells = "".join(f"<th>{e(h)}</th>" for h in head)
    body = "".join("<tr>" + "".join(f"<td>{e(c)}</td>" for c in r) + "</tr>" for r in rows)
    return f"<table><tr>{cells}</tr>{body}</table>"


def _arm(arm: dict[str, Any]) -> str:
    flips = arm["flips"][:FLIPS_SHOWN]
    parts = [f'<section class="arm" data-arm="{e(arm["label"])}"><h2>{e(arm["label"])}</h2>',
             f'<p>{arm["n"]} paired items; comparable: <b>{e(arm["comparable"])}</b>; '
             f'{arm["regressed"]} right then wrong, {arm["fixed"]} wrong then right</p>',
             f'<p class="muted">{e(headline(arm))}</p>', arm_plot(arm)]
    notes = arm["why"] + unpaired_lines(arm)
    if notes:
        parts.append("<ul>" + "".join(f"<li>{e(n)}</li>" for n in notes) + "</ul>")
    parts.append(_table(["figure", "BASE", "CAND"], [list(r) for r in side_by_side(arm)]))
    if flips:
        more = len(arm["flips"]) - len(flips)
        parts.append(f"<h3>Flips{f' (first {len(flips)}; {more} more in json/csv)' if more else ''}"
                     "</h3>")
        parts.append(_table(["item", "flip", "BASE answer", "CAND answer"], [
            [f["task_id"] if f["epoch"] == 1 else f'{f["task_id"]}#{f["epoch"]}', f["direction"],
             f["base_answer"] or "-", f["cand_answer"] or "-"] for f in flips]))
    parts.append("</section>")
    return "\n".join(parts)


def render_html(data: dict[str, Any]) -> str:
    """The whole page; every name, id and answer from the files is escaped."""
    data = one_line(data)
    sources = "".join(
        f"<li>{side.upper()}: " + "; ".join(
            f"{e(f['path'])} (run {e(f['run_id'])}, {e(f['created_at'])})" for f in data[side])
        + "</li>" for side in ("base", "cand"))
    apart = [f"<p>arms only in {side}: {e(', '.join(data[key]))}</p>"
             for side, key in (("BASE", "only_base_arms"), ("CAND", "only_cand_arms"))
             if data[key]]
    body = ["<h1>echo-bench compare</h1>", f"<ul>{sources}</ul>", *apart,
            *(_arm(arm) for arm in data["arms"])]
    return (f'<!DOCTYPE html>\n<html lang="en">\n<head>\n<meta charset="utf-8">\n'
            f'<meta http-equiv="Content-Security-Policy" content="{_CSP}">\n'
            f"<title>echo-bench compare</title>\n<style>{_CSS}</style>\n</head>\n<body>\n"
            + "\n".join(body) + "\n</body>\n</html>\n")
