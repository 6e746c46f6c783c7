"""The progress page: one self-contained HTML file (no script, nothing loaded from elsewhere) drawn
from a ``ProgressState``, written atomically, and rewritten by ``watch`` until the run ends."""

from __future__ import annotations

import html
import math
import time
from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from pathlib import Path

from pytest_echo_bench.report import decision
from pytest_echo_bench.report.colors import palette
from pytest_echo_bench.report.page.state import (
    RECENT,
    TAIL,
    ArmProgress,
    LiveCounters,
    PageFeed,
    ProgressState,
)
from pytest_echo_bench.store.batchlog import BatchState, read_states
from pytest_echo_bench.store.files import write_atomic

MAX_POINTS = 150  # per arm in the chart: a long run must not make a heavy page
_CSS = """
body{font:14px/1.45 system-ui,sans-serif;margin:1.5em auto;padding:0 1em;color:#222;
max-width:1150px}
h1{font-size:1.4em;margin:0 0 .2em}h2{font-size:1.1em;margin:1.4em 0 .3em}
.muted{color:#666}
.stopped{background:#fdecea;border:1px solid #d62728;padding:.5em .8em;border-radius:4px}
progress{width:100%;height:1.1em}#overall-progress{height:1.7em}
table{border-collapse:collapse;width:100%}
th,td{border-bottom:1px solid #ddd;padding:.25em .5em;text-align:right;vertical-align:top}
th:first-child,td:first-child,#recent td,#recent th{text-align:left}td.bar{width:22%}
.facts{display:flex;flex-wrap:wrap;gap:.3em 1.8em;padding:0;list-style:none}
.swatch{display:inline-block;width:.8em;height:.8em;border-radius:2px;margin-right:.35em}
pre{white-space:pre-wrap;word-break:break-all;margin:0;font-size:12px}
svg text{font-size:11px;fill:#555}
"""
# The page runs no script and loads nothing: even a payload that
# slipped past escaping could not act.
_CSP = "default-src 'none'; style-src 'unsafe-inline'"
_W, _H, _PAD = 640, 190, 34


def _e(value: object) -> str:
    return html.escape(str(value), quote=True)


def _utc(t: float) -> str:
    return datetime.fromtimestamp(t, UTC).strftime("%Y-%m-%d %H:%M:%S UTC")


def _duration(seconds: float) -> str:
    s = int(round(seconds))
    if s >= 3600:
        return f"{s // 3600}h {s % 3600 // 60:02d}m"
    return f"{s // 60}m {s % 60:02d}s" if s >= 60 else f"{s}s"


def _pct(part: int, whole: int | None) -> str:
    return f"{100 * min(part, whole) / whole:.1f}%" if whole else "–"


def _bar(done: int, expected: int | None, attrs: str) -> str:
    if expected is None:
        return f"<progress {attrs}></progress>"  # indeterminate: the total is not known
    return f'<progress {attrs} value="{min(done, expected)}" max="{max(expected, 1)}"></progress>'


def _overall(state: ProgressState) -> str:
    done, expected = state.done, state.expected
    label = (
        f"{done} / {expected} items ({_pct(done, expected)})"
        if expected is not None
        else f"{done} items (total not known)"
    )
    status = "complete" if state.complete else "stopped" if state.stopped else "running"
    bar = _bar(done, expected, 'id="overall-progress"')
    # A merge missing shards reads like a finished sweep otherwise: its figures are of part of it.
    part = (
        (
            '<p id="incomplete-sweep"><strong>Incomplete sweep:</strong> '
            f"{_e(state.shards)}; these figures are "
            "of part of the sweep</p>"
        )
        if state.shards
        else ""
    )
    return (
        f'<section id="overall">{bar}<p><strong>{label}</strong> · <span '
        f'id="run-status">{status}</span></p>'
        f"{part}</section>"
    )


def _facts(state: ProgressState) -> str:
    rate, eta = state.throughput, state.eta_s
    facts = [("Throughput", f"{rate:.1f} items/min" if rate is not None else "–"),
             ("ETA", "done" if state.complete else _duration(eta) if eta is not None else "–"),
             ("Retries", str(state.retries)), ("Errors", str(state.errors)), *_not_graded(state)]
    if state.limits:  # the adaptive limit: below --bench-concurrency once the provider rate-limits
        facts.append(
            (
                "Concurrency limit",
                ", ".join(f"{_e(k)} {v}" for k, v in sorted(state.limits.items())),
            )
        )
    if state.throttled:
        facts.append(("Rate-limited (429)", str(state.throttled)))
    if state.budget:
        facts.append(("Budget", _e(state.budget)))
    if state.prompt_tokens is not None:
        facts.append(
            (
                "Tokens",
                f"{state.prompt_tokens:,} prompt + {state.completion_tokens or 0:,} completion",
            )
        )
    if state.token_classes:
        facts.append(("Of which", ", ".join(f"{count:,} {key[:-7].replace('_', ' ')}"
                                            for key, count in state.token_classes.items())))
    if state.cost_usd is not None:
        facts.append(("Cost", f"${state.cost_usd:,.4f}"))
    if state.window is not None:
        facts.append(("Session started", _utc(state.window[0])))
    items = "".join(f"<li><strong>{name}:</strong> {value}</li>" for name, value in facts)
    return f'<ul class="facts" id="facts">{items}</ul>'


def _not_graded(state: ProgressState) -> list[tuple[str, str]]:
    """The facts of items with no grade, when there are any: unjudged rows (a judge gave none:
    out of the pass rates, run again on retry), items incomplete or aborted."""
    facts = [("Unjudged", str(state.unjudged))] if state.unjudged else []
    if state.incomplete or state.aborted:
        facts += [("Incomplete", str(state.incomplete)), ("Aborted", str(state.aborted))]
    return facts


def _arm_row(i: int, arm: ArmProgress, color: str, judged: bool) -> str:
    lo, hi = arm.interval
    rate = f"{arm.correct / arm.graded:.3f}" if arm.graded else "–"
    interval = f"[{lo:.3f}, {hi:.3f}]" if arm.graded else "–"
    name = f'<span class="swatch" style="background:{color}"></span>{_e(arm.key)}'
    bar = _bar(
        arm.done,
        arm.expected,
        f'class="arm-progress" id="arm-progress-{i}" data-arm="{_e(arm.key)}"',
    )
    cells = [
        str(arm.done),
        "–" if arm.expected is None else str(arm.expected),
        _pct(arm.done, arm.expected),
        str(arm.correct),
        rate,
        interval,
        str(arm.unparseable),
        str(arm.errors),
    ] + ([str(arm.unjudged)] if judged else [])
    return (
        f'<tr><td>{name}</td><td class="bar">{bar}</td>'
        + "".join(f"<td>{c}</td>" for c in cells)
        + "</tr>"
    )


def _arm_table(state: ProgressState) -> str:
    head: tuple[str, ...] = (
        "arm",
        "progress",
        "done",
        "expected",
        "%",
        "correct",
        "pass rate",
        "95% CI",
        "unparseable",
        "errors",
    )
    # the unjudged column only where a judge left rows ungraded: a sweep without one never has
    judged = any(arm.unjudged for arm in state.arms.values())
    head += ("unjudged",) if judged else ()
    colors = palette(len(state.arms))
    rows = "".join(
        _arm_row(i, arm, colors[i], judged) for i, arm in enumerate(state.arms.values())
    )
    return (
        f'<h2>Arms</h2><table id="arms"><thead><tr>{"".join(f"<th>{h}</th>" for h in head)}</'
        "tr></thead>"
        f"<tbody>{rows}</tbody></table>"
    )


def _polyline(times: list[float], color: str, t0: float, span: float, top: int) -> str:
    step = max(1, math.ceil(len(times) / MAX_POINTS))
    picks = sorted({*range(0, len(times), step), len(times) - 1})
    points = [(times[0], 0)] + [(times[k], k + 1) for k in picks]
    xy = " ".join(
        f"{_PAD + (t - t0) / span * (_W - 2 * _PAD):.1f},"
        f"{_H - _PAD - n / top * (_H - 2 * _PAD):.1f}"
        for t, n in points
    )
    return f'<polyline fill="none" stroke="{color}" stroke-width="1.6" points="{xy}"/>'


def _chart(state: ProgressState) -> str:
    """Cumulative items completed over time, one line per arm (colours match the table)."""
    colors = palette(len(state.arms))
    series = [
        (colors[i], sorted(a.finished)) for i, a in enumerate(state.arms.values()) if a.finished
    ]
    if not series:
        return ""
    t0, t1 = min(s[0] for _, s in series), max(s[-1] for _, s in series)
    span = t1 - t0 if t1 > t0 else 1.0
    top = max(max(a.done, a.expected or 0) for a in state.arms.values())
    lines = "".join(_polyline(times, color, t0, span, top) for color, times in series)
    low, right = _H - _PAD, _W - _PAD
    return (
        '<h2>Items completed over time</h2><svg id="chart" '
        f'xmlns="http://www.w3.org/2000/svg" width="{_W}" height="{_H}" '
        f'viewBox="0 0 {_W} {_H}" role="img" aria-label="cumulative items completed per arm">'
        f'<rect x="{_PAD}" y="{_PAD}" width="{_W - 2 * _PAD}" height="{_H - 2 * _PAD}" '
        'fill="none" stroke="#ccc"/>'
        f'<text x="4" y="{_PAD + 4}">{top}</text><text x="4" y="{low}">0</text>'
        f'<text x="{_PAD}" y="{low + 16}">{_utc(t0)[11:19]}</text>'
        f'<text x="{right}" y="{low + 16}" text-anchor="end">{_utc(t1)[11:19]} '
        f"UTC</text>{lines}</svg>"
    )


def _decide(state: ProgressState) -> str:
    """A decide plan's figures, the cells and note every format shows (``report.decision``)."""
    seq = state.decide
    if seq is None:
        return ""
    head = "".join(f"<th>{_e(h)}</th>" for h in decision.header(seq))
    rows = "".join(
        "<tr>" + "".join(f"<td>{_e(c)}</td>" for c in decision.cells(f)) + "</tr>"
        for f in seq.pairs
    )
    table = (
        f'<table id="decide"><thead><tr>{head}</tr></thead><tbody>{rows}</tbody></table>'
        if rows
        else ""
    )
    return (
        f'<h2>{_e(decision.title(seq).capitalize())}</h2><section id="decide-figures" '
        'data-collection="'
        f'{_e(seq.collection)}"><p id="decide-note">{_e(decision.note(seq))}</p>{table}</section>'
    )


def _recent(state: ProgressState) -> str:
    title = f"<h2>Last {RECENT} wrong or unparseable answers</h2>"
    if not state.recent:
        return title + '<p class="muted" id="recent">None so far.</p>'
    head = "".join(
        f"<th>{h}</th>"
        for h in ("task", "arm", "status", "target", "answer", f"output (last {TAIL} chars)")
    )
    rows = "".join(
        f"<tr><td>{_e(f.task_id)}</td><td>{_e(f.arm)}</td><td>{_e(f.status)}</td><td>"
        f"{_e(f.target)}</td>"
        f"<td>{_e(f.answer)}</td><td><pre>{_e(f.tail)}</pre></td></tr>"
        for f in state.recent
    )
    return f'{title}<table id="recent"><thead><tr>{head}</tr></thead><tbody>{rows}</tbody></table>'


def _batches(batches: Sequence[BatchState], now: float) -> str:
    """The open batches' states, as their processes last saw them (none: no section)."""
    if not batches:
        return ""
    rows = "".join(f"<li>{_e(b.line(now))}</li>" for b in batches[:50])
    return f'<h2>Open batches</h2><ul id="batches">{rows}</ul>'


def render_progress(state: ProgressState, refresh_s: int = 5,
                    batches: Sequence[BatchState] = ()) -> str:
    """The whole page: one HTML document with inline CSS and SVG, no script,
    nothing loaded from elsewhere.

    Everything that comes from the results file (ids, arms, outputs, the stop message) is escaped.
    """
    expected = "?" if state.expected is None else str(state.expected)
    stopped = (
        f'<p class="stopped" id="stopped"><strong>Stopped early:</strong> {_e(state.stopped)}</p>'
        if state.stopped
        else ""
    )
    body = [
        f"<h1>echo-bench progress: {_e(state.benchmark)}</h1>",
        f'<p class="muted" id="updated">Last update: {_utc(state.now)}</p>',
        stopped,
        _overall(state),
        _facts(state),
        _arm_table(state),
        _decide(state),
        _batches(batches, state.now),
        _chart(state),
        _recent(state),
    ]
    return (
        f'<!DOCTYPE html>\n<html lang="en">\n<head>\n<meta charset="utf-8">\n'
        f'<meta http-equiv="refresh" content="{int(refresh_s)}">\n<meta '
        f'http-equiv="Content-Security-Policy" content="{_CSP}">\n'
        f"<title>{_e(state.benchmark)} · {state.done}/{expected} · "
        f"echo-bench</title>\n<style>{_CSS}</style>\n</head>\n<body>\n"
        + "\n".join(part for part in body if part)
        + "\n</body>\n</html>\n"
    )


def write_progress(results: Path, out: Path, live: LiveCounters | None = None, refresh_s: int = 5,
                   feed: PageFeed | None = None) -> None:
    """Render the page of ``results`` and write it atomically to ``out`` (OSError if it cannot).

    A ``feed`` kept between calls reads only what was appended since the last page.
    """
    feed = feed or PageFeed(results, live.started_at if live is not None else None)
    _updated(feed, live is None)
    _write_page(out, render_progress(feed.state(live), refresh_s, read_states(results)))


def _updated(feed: PageFeed, strict: bool) -> None:
    """Read on; ``strict`` (``echo-bench progress``): a file holding another
    sweep's meta line is refused, naming it. A live run's page never fails its run:
    it shows the rows before that line."""
    feed.update()
    if strict and feed.refused is not None:
        raise feed.refused


def watch(
    results: Path, out: Path, interval_s: float = 5.0, stop: Callable[[], bool] = lambda: False
) -> None:
    """Rewrite ``out`` every ``interval_s`` seconds until ``stop()``, the
    run's stop marker, or completion."""
    refresh = max(1, round(interval_s))
    feed = PageFeed(results)
    while True:
        _updated(feed, True)
        state = feed.state()
        _write_page(out, render_progress(state, refresh))
        if state.stopped or state.complete:
            # Rows written just before the marker may have missed the read above: once more.
            _updated(feed, True)
            _write_page(out, render_progress(feed.state(), refresh))
            return
        if _wait(interval_s, stop):
            return


def _write_page(out: Path, text: str) -> None:
    # Model output may hold lone surrogates (valid JSON escapes, not
    # encodable): replace, never fail.
    write_atomic(out, text.encode("utf-8", errors="replace"))


def _wait(seconds: float, stop: Callable[[], bool]) -> bool:
    """Sleep up to ``seconds`` in short steps; True as soon as ``stop()`` says so."""
    deadline = time.monotonic() + seconds
    while not stop():
        left = deadline - time.monotonic()
        if left <= 0:
            return False
        time.sleep(min(left, 0.2))
    return True
