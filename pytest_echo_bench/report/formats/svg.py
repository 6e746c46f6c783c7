"""Drawing for the HTML report: escaping and the two inline SVG charts."""

from __future__ import annotations

import html
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from pytest_echo_bench.analysis.compare import Frontier
from pytest_echo_bench.budget.money import usd
from pytest_echo_bench.report.figures import ArmStats

LABEL_CHARS = 28  # longer arm names are cut in the charts (the tables show them whole)
ROW_H, LABEL_W, BAR_W = 26, 190, 460
PLOT_W, PLOT_H, PAD = 640, 300, 48
DASHED = ' stroke-dasharray="3 2"'
# a label character's width and a line's height at the page's font size (14px)
CHAR_W, LINE_H = 7.0, 14.0


def e(value: object) -> str:
    """Escaped for text and attribute values, as the progress page escapes."""
    return html.escape(str(value), quote=True)


def _short(name: str) -> str:
    return name if len(name) <= LABEL_CHARS else name[: LABEL_CHARS - 1] + "…"


def _x(rate: float) -> float:
    return LABEL_W + rate * BAR_W


def rate_bars(arms: Sequence[ArmStats], colors: dict[str, str]) -> str:
    """Pass rate per arm as a bar with its Wilson 95% whisker (and
    the cluster-robust one, dashed)."""
    height = ROW_H * len(arms) + 30
    parts = [
        f'<svg class="rate-chart" width="{LABEL_W + BAR_W + 170}" height="{height}" role="img" '
        'aria-label="pass rate per arm with 95% intervals">'
    ]
    for tick in (0, 0.25, 0.5, 0.75, 1.0):
        parts.append(
            f'<line x1="{_x(tick):.1f}" x2="{_x(tick):.1f}" y1="0" y2="{height - 18}" '
            'stroke="#eee"/>'
            f'<text x="{_x(tick):.1f}" y="{height - 4}" text-anchor="middle">{tick:.2f}</text>'
        )
    for row, s in enumerate(arms):
        y = row * ROW_H + 4
        mid = y + ROW_H / 2 - 3
        label = f"<title>{e(s.arm)}</title>{e(_short(s.arm))}"
        # n/a: an arm with no graded row
        rate = "n/a" if s.pass_rate is None else f"{s.pass_rate:.3f}"
        parts.append(
            f'<g class="rate-bar" data-arm="{e(s.arm)}"><text x="{LABEL_W - 8}" '
            f'y="{mid + 4:.1f}" text-anchor="end">{label}</text>'
            f'<rect x="{LABEL_W}" y="{y}" width="{(s.pass_rate or 0.0) * BAR_W:.1f}" '
            f'height="{ROW_H - 8}" fill="{colors[s.arm]}" opacity="0.8"/>'
            f"{_whisker(s.ci95, mid, '#222', '')}"
            f"{_whisker(s.cluster_ci95, mid + 5, '#555', DASHED)}"
            f'<text x="{LABEL_W + BAR_W + 8}" y="{mid + 4:.1f}">{rate} [{s.ci95[0]:.3f}, '
            f"{s.ci95[1]:.3f}] n={s.n}</text></g>"
        )
    parts.append("</svg>")
    return "".join(parts)


def _whisker(ci: tuple[float, float] | None, y: float, color: str, extra: str) -> str:
    if ci is None:
        return ""
    lo, hi = _x(ci[0]), _x(ci[1])
    return (
        f'<line class="ci" x1="{lo:.1f}" x2="{hi:.1f}" y1="{y:.1f}" y2="{y:.1f}" '
        f'stroke="{color}" stroke-width="1.6"{extra}/>'
        f'<line x1="{lo:.1f}" x2="{lo:.1f}" y1="{y - 4:.1f}" y2="{y + 4:.1f}" stroke="{color}"/>'
        f'<line x1="{hi:.1f}" x2="{hi:.1f}" y1="{y - 4:.1f}" y2="{y + 4:.1f}" stroke="{color}"/>'
    )


@dataclass(frozen=True)
class _Axes:
    """Where the cost plot puts a cost and a rate: the ranges its axes span, cost on a log scale
    when the costs span orders of magnitude."""

    c_lo: float
    c_hi: float
    r_lo: float
    r_hi: float
    log: bool

    def at(self, cost: float, rate: float) -> tuple[float, float]:
        scale: Callable[[float], float] = math.log10 if self.log else float
        lo, hi = scale(self.c_lo), scale(self.c_hi)
        x = PAD + (scale(cost) - lo) / (hi - lo) * (PLOT_W - 2 * PAD) if hi > lo else PLOT_W / 2
        y = PLOT_H - PAD - (rate - self.r_lo) / ((self.r_hi - self.r_lo) or 1) * (PLOT_H - 2 * PAD)
        return x, y


def _axes(frontier: Frontier) -> _Axes:
    costs = [c for _, c, _ in frontier.points]
    rates = [r for _, _, r in frontier.points]
    c_lo, c_hi = min(costs), max(costs)
    # Costs of models often span orders of magnitude: a log axis then keeps the cheap arms apart.
    log = c_lo > 0 and c_hi / c_lo > 20
    return _Axes(c_lo, c_hi, max(0.0, min(rates) - 0.05), min(1.0, max(rates) + 0.05), log)


Dot = tuple[str, float, float, str]  # (arm, x, y, label)


def cost_plot(frontier: Frontier, colors: dict[str, str]) -> str:
    """Pass rate against cost per item, one dot per arm, the Pareto frontier as a line through its
    arms; both axes marked, amounts in fixed point (``budget.money``), and no label drawn over
    another."""
    axes = _axes(frontier)
    on = sorted((p for p in frontier.points if p[0] in frontier.arms), key=lambda p: p[1])
    line = " ".join(f"{x:.1f},{y:.1f}" for x, y in (axes.at(c, r) for _, c, r in on))
    dots: list[Dot] = sorted(((arm, *axes.at(cost, rate), _dot_label(arm, cost, rate))
                              for arm, cost, rate in frontier.points), key=lambda d: (d[2], d[1]))
    labels = _label_places([(x, y, text) for _, x, y, text in dots])
    width = max([PLOT_W + 160] + [round(x1) + 10 for x1, _ in labels])
    height = max([PLOT_H] + [round(y) + 8 for _, y in labels])
    parts = [f'<svg class="cost-chart" width="{width}" height="{height}" role="img" '
             'aria-label="pass rate against cost">', *_frame(axes, frontier.basis),
             f'<polyline class="frontier" points="{line}" fill="none" stroke="#222" '
             'stroke-width="1.5" stroke-dasharray="5 3"/>']
    parts += [_point(dot, label_y, dot[0] in frontier.arms, colors)
              for dot, (_, label_y) in zip(dots, labels, strict=True)]
    parts.append("</svg>")
    return "".join(parts)


def _dot_label(arm: str, cost: float, rate: float) -> str:
    return f"{_short(arm)} ({rate:.3f}, {usd(cost)})"


def _frame(axes: _Axes, basis: str) -> list[str]:
    """The two axes, their titles and their ticks."""
    unit = "USD" if basis == "cost_usd" else "cost units"
    parts = [f'<line x1="{PAD}" y1="{PLOT_H - PAD}" x2="{PLOT_W - PAD}" y2="{PLOT_H - PAD}" '
             'stroke="#999"/>',
             f'<line x1="{PAD}" y1="{PAD / 2}" x2="{PAD}" y2="{PLOT_H - PAD}" stroke="#999"/>',
             f'<text x="{PLOT_W / 2}" y="{PLOT_H - 6}" text-anchor="middle">{e(unit)} per item'
             f'{", log scale" if axes.log else ""}</text>',
             f'<text x="4" y="{PAD / 2 - 6}">pass rate</text>']
    for cost in _ticks(axes.c_lo, axes.c_hi, axes.log):
        x = axes.at(cost, axes.r_lo)[0]
        parts.append(f'<g class="tick x"><line x1="{x:.1f}" x2="{x:.1f}" y1="{PLOT_H - PAD}" '
                     f'y2="{PLOT_H - PAD + 5}" stroke="#999"/><text x="{x:.1f}" '
                     f'y="{PLOT_H - PAD + 17}" text-anchor="middle">{usd(cost)}</text></g>')
    for rate in (axes.r_lo + (axes.r_hi - axes.r_lo) * i / 4 for i in range(5)):
        y = axes.at(axes.c_lo, rate)[1]
        parts.append(f'<g class="tick y"><line x1="{PAD - 5}" x2="{PAD}" y1="{y:.1f}" y2="{y:.1f}" '
                     f'stroke="#999"/><text x="{PAD - 7}" y="{y + 4:.1f}" text-anchor="end">'
                     f'{rate:.2f}</text></g>')
    return parts


def _point(dot: Dot, label_y: float, on_frontier: bool, colors: dict[str, str]) -> str:
    """An arm's dot (ringed on the frontier) and its label, with a leader line to a moved label."""
    arm, x, y, text = dot
    ring = ' stroke="#000" stroke-width="2"' if on_frontier else ""
    leader = (f'<line x1="{x:.1f}" y1="{y:.1f}" x2="{x + 9:.1f}" y2="{label_y - 4:.1f}" '
              'stroke="#bbb"/>' if label_y != y + 4 else "")
    return (f'<g class="cost-point" data-arm="{e(arm)}"><circle cx="{x:.1f}" cy="{y:.1f}" r="6" '
            f'fill="{colors.get(arm, "#777")}"{ring}/>{leader}<text x="{x + 9:.1f}" '
            f'y="{label_y:.1f}"><title>{e(arm)}</title>{e(text)}</text></g>')


def _ticks(lo: float, hi: float, log: bool) -> list[float]:
    """Where the cost axis is marked: the powers of ten within it on a
    log scale, else five even steps."""
    if hi <= lo:
        return [lo]
    if log:
        inside = [
            10.0**k
            for k in range(math.ceil(math.log10(lo) - 1e-9), math.floor(math.log10(hi) + 1e-9) + 1)
        ]
        return inside if len(inside) >= 2 else sorted({lo, *inside, hi})
    return [lo + (hi - lo) * i / 4 for i in range(5)]


def label_box(x: float, y: float, text: str) -> tuple[float, float, float, float]:
    """The box a label drawn at (x + 9, baseline y) takes: (left, right, top, bottom)."""
    return x + 9, x + 9 + CHAR_W * len(text), y - LINE_H + 3, y + 3


def _label_places(dots: list[tuple[float, float, str]]) -> list[tuple[float, float]]:
    """Each label's (right end, baseline): beside its dot, moved down a line at a time
    until it clears every label placed before it (arms of near cost and rate drew
    their labels over each other)."""
    placed: list[tuple[float, float, float, float]] = []
    found: list[tuple[float, float]] = []
    for x, y, text in dots:
        baseline = y + 4
        while any(_overlap(label_box(x, baseline, text), box) for box in placed):
            baseline += LINE_H
        placed.append(label_box(x, baseline, text))
        found.append((placed[-1][1], baseline))
    return found


def _overlap(a: tuple[float, float, float, float], b: tuple[float, float, float, float]) -> bool:
    return a[0] < b[1] and b[0] < a[1] and a[2] < b[3] and b[2] < a[3]


def heat_color(rate: float) -> str:
    """A light-to-dark blue for a pass rate in [0, 1] (darker is higher)."""
    light, dark = (247, 251, 255), (8, 69, 148)
    mix = [round(lo + (hi - lo) * rate) for lo, hi in zip(light, dark, strict=True)]
    return "#" + "".join(f"{c:02x}" for c in mix)
