"""The live progress page: one self-contained HTML file built from a results file, rewritten as a run goes."""

from __future__ import annotations

import html
import json
import math
import os
import tempfile
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from .errors import StoreError
from .records import row_key
from .stats import wilson
from .store import read_records

RECENT = 10  # wrong/unparseable rows listed on the page
TAIL = 200  # characters of raw output shown for each of them
MAX_POINTS = 150  # per arm in the chart: a long run must not make a heavy page
COLORS = ("#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b", "#e377c2", "#17becf")


@dataclass
class LiveCounters:
    """What the running plugin knows beyond the results file (all optional)."""

    expected: dict[str, int] = field(default_factory=dict)  # arm key -> items to run in this session
    retries: int = 0
    incomplete: int = 0
    aborted: int = 0
    started_at: float | None = None  # time.time() when this session started
    stopped: str = ""  # why the run stopped early, if it did


@dataclass
class ArmProgress:
    """One arm's tally so far."""

    key: str
    expected: int | None = None
    done: int = 0
    correct: int = 0
    unparseable: int = 0
    errors: int = 0
    finished: list[float] = field(default_factory=list)  # finish times, for the chart

    @property
    def interval(self) -> tuple[float, float]:
        """95% Wilson interval of the pass rate so far."""
        return wilson(self.correct, self.done)


@dataclass
class Failure:
    """A wrong or unparseable row, as shown in the list of recent failures (raw, unescaped)."""

    task_id: str
    arm: str
    status: str
    target: str
    answer: str
    tail: str


@dataclass
class ProgressState:
    """Everything the page shows; ``progress_state`` builds it, ``render_progress`` draws it."""

    benchmark: str
    now: float
    arms: dict[str, ArmProgress] = field(default_factory=dict)
    retries: int = 0
    errors: int = 0
    incomplete: int = 0
    aborted: int = 0
    prompt_tokens: int | None = None
    completion_tokens: int | None = None
    cost_usd: float | None = None
    window: tuple[float, float] | None = None  # (start, end) of the current session
    session_done: int = 0  # rows finished in that window: the throughput's numerator
    stopped: str = ""
    recent: list[Failure] = field(default_factory=list)  # newest first

    @property
    def done(self) -> int:
        return sum(a.done for a in self.arms.values())

    @property
    def expected(self) -> int | None:
        if all(a.expected is None for a in self.arms.values()):
            return None
        return sum(a.done if a.expected is None else max(a.expected, a.done) for a in self.arms.values())

    @property
    def complete(self) -> bool:
        expected = self.expected
        return bool(expected) and all(a.expected is not None for a in self.arms.values()) and self.done >= (expected or 0)

    @property
    def throughput(self) -> float | None:
        """Items per minute over the current session."""
        if self.window is None or self.window[1] <= self.window[0]:
            return None
        return self.session_done * 60 / (self.window[1] - self.window[0])

    @property
    def eta_s(self) -> float | None:
        expected, rate = self.expected, self.throughput
        if expected is None or not rate or self.stopped or self.complete:
            return None
        return (expected - self.done) * 60 / rate


@dataclass
class _Item:
    key: str
    row: dict[str, Any]
    started: float | None
    finished: float | None


def read_rows(results: Path) -> tuple[dict[str, Any] | None, list[dict[str, Any]]]:
    """(meta, rows); best effort: a page must never break a run, so bad lines are skipped."""
    try:
        meta, records = read_records(results, strict=False)
    except StoreError:
        return None, []  # not written yet: an empty page, not a crash
    return meta, [r.data for r in records]


def read_stop(results: Path) -> str:
    """The reason in ``RESULTS.stop.json``, or "" when the run has not stopped early."""
    marker = Path(str(results) + ".stop.json")
    if not marker.exists():
        return ""
    try:
        data = json.loads(marker.read_text(encoding="utf-8"))
        return f"{data.get('reason', 'stopped')}: {data.get('message', '')}".strip().rstrip(":")
    except (OSError, ValueError, RecursionError, AttributeError):
        return f"stopped (see {marker.name})"  # unreadable or damaged, but a stop all the same


def _timestamp(value: Any) -> float | None:
    if not isinstance(value, str) or not value:
        return None
    try:
        stamp = datetime.fromisoformat(value)
        return (stamp if stamp.tzinfo else stamp.replace(tzinfo=UTC)).timestamp()
    except (ValueError, OverflowError, OSError):
        return None


def _int(value: Any) -> int:
    try:
        return int(value or 0)
    except (TypeError, ValueError, OverflowError):
        return 0


def _text(value: Any) -> str:
    return "" if value is None else value if isinstance(value, str) else json.dumps(value)


def _status(row: dict[str, Any]) -> str:
    if isinstance(row.get("status"), str):
        return str(row["status"])
    # Older rows have no status: the detail said "unparseable" or described the miss.
    return "correct" if row.get("passed") is True else "unparseable" if row.get("detail") == "unparseable" else "wrong"


def _benchmarks(meta: dict[str, Any] | None, rows: list[dict[str, Any]]) -> list[str]:
    default = str(meta.get("benchmark") or "") if meta else ""
    names = dict.fromkeys(meta["benchmarks"]) if meta and isinstance(meta.get("benchmarks"), dict) else {}
    return list(names | dict.fromkeys(row_key(row, default)[0] for row in rows))


def _items(meta: dict[str, Any] | None, rows: list[dict[str, Any]], single: bool) -> list[_Item]:
    """Each (benchmark, task_id, arm) once (its first row), under its arm key."""
    default = str(meta.get("benchmark") or "") if meta else ""
    seen: set[tuple[str, str, str]] = set()
    items = []
    for row in rows:
        key = row_key(row, default)
        if key not in seen:
            seen.add(key)
            arm = key[2] if single else f"{key[0]}/{key[2]}"
            items.append(_Item(arm, row, _timestamp(row.get("started_at")), _timestamp(row.get("finished_at"))))
    return items


def _session(items: list[_Item], live: LiveCounters | None) -> list[_Item]:
    """The rows of the session now running (a resumed file also holds earlier sessions' rows)."""
    if live is not None:
        start = live.started_at
        # Earlier sessions finished before this one started; rows without a time are theirs.
        return items if start is None else [i for i in items if i.finished is not None and i.finished >= start]
    last = items[-1].row.get("run_id") if items else None
    return [i for i in items if i.row.get("run_id") == last]


def _meta_expected(meta: dict[str, Any] | None, single: bool) -> dict[str, int]:
    benchmarks, arms = (meta.get("benchmarks"), meta.get("arms")) if meta else (None, None)
    if not isinstance(benchmarks, dict) or not isinstance(arms, dict):
        return {}
    expected = {}
    for name, info in benchmarks.items():
        names, items = arms.get(name), info.get("items") if isinstance(info, dict) else None
        if isinstance(names, list) and names and isinstance(items, int):
            expected.update({(str(a) if single else f"{name}/{a}"): items // len(names) for a in names})
    return expected


def _expected(meta: dict[str, Any] | None, live: LiveCounters | None, single: bool,
              items: list[_Item], session: list[_Item]) -> dict[str, int]:
    if live is None or not live.expected:
        return _meta_expected(meta, single)
    # live.expected counts this session's items only; rows from earlier sessions are done already.
    prior: dict[str, int] = {}
    for item in items:
        prior[item.key] = prior.get(item.key, 0) + 1
    for item in session:
        prior[item.key] -= 1
    return {k: prior.get(k, 0) + live.expected.get(k, 0) for k in dict.fromkeys([*live.expected, *prior])}


def _window(session: list[_Item], live: LiveCounters | None, now: float) -> tuple[float, float] | None:
    starts = [t for i in session if (t := i.started if i.started is not None else i.finished) is not None]
    start = live.started_at if live is not None and live.started_at is not None else min(starts, default=None)
    if start is None:
        return None
    # A live run is measured up to now (a stall lowers the rate); a file alone up to its last row.
    end = now if live is not None else max((i.finished for i in session if i.finished is not None), default=now)
    return (start, end)


def _add_row(state: ProgressState, item: _Item, recent: deque[Failure]) -> None:
    arm, row, status = state.arms.setdefault(item.key, ArmProgress(item.key)), item.row, _status(item.row)
    arm.done += 1
    arm.correct += row.get("passed") is True
    arm.unparseable += status == "unparseable"
    arm.errors += status == "error"
    state.errors += status == "error"
    state.retries += _int(row.get("retries"))
    if item.finished is not None:
        arm.finished.append(item.finished)
    usage, cost = row.get("usage"), row.get("cost_usd")
    if isinstance(usage, dict):
        state.prompt_tokens = (state.prompt_tokens or 0) + _int(usage.get("prompt_tokens"))
        state.completion_tokens = (state.completion_tokens or 0) + _int(usage.get("completion_tokens"))
    if isinstance(cost, int | float) and not isinstance(cost, bool) and math.isfinite(cost):
        state.cost_usd = (state.cost_usd or 0.0) + float(cost)
    if status in ("wrong", "unparseable"):
        recent.append(Failure(_text(row.get("task_id")), item.key, status, _text(row.get("target")),
                              _text(row.get("answer")), _text(row.get("output"))[-TAIL:]))


def progress_state(results: Path, live: LiveCounters | None = None, now: float | None = None) -> ProgressState:
    """What the page shows, from the results file, its stop marker and the plugin's live counters."""
    now = time.time() if now is None else now
    meta, rows = read_rows(results)
    names = _benchmarks(meta, rows)
    single = len(names) <= 1
    items = _items(meta, rows, single)
    session = _session(items, live)
    title = str(meta.get("benchmark") or "") if meta else ""
    state = ProgressState(title or "+".join(n for n in names if n) or results.stem, now)
    state.arms = {k: ArmProgress(k, n) for k, n in _expected(meta, live, single, items, session).items()}
    recent: deque[Failure] = deque(maxlen=RECENT)
    for item in items:
        _add_row(state, item, recent)
    state.recent = list(reversed(recent))
    state.window, state.session_done = _window(session, live, now), len(session)
    if live is not None:
        state.retries += live.retries
        state.incomplete, state.aborted = live.incomplete, live.aborted
    state.stopped = (live.stopped if live is not None else "") or read_stop(results)
    return state

_CSS = """
body{font:14px/1.45 system-ui,sans-serif;margin:1.5em auto;padding:0 1em;color:#222;max-width:1150px}
h1{font-size:1.4em;margin:0 0 .2em}h2{font-size:1.1em;margin:1.4em 0 .3em}
.muted{color:#666}.stopped{background:#fdecea;border:1px solid #d62728;padding:.5em .8em;border-radius:4px}
progress{width:100%;height:1.1em}#overall-progress{height:1.7em}
table{border-collapse:collapse;width:100%}th,td{border-bottom:1px solid #ddd;padding:.25em .5em;text-align:right;vertical-align:top}
th:first-child,td:first-child,#recent td,#recent th{text-align:left}td.bar{width:22%}
.facts{display:flex;flex-wrap:wrap;gap:.3em 1.8em;padding:0;list-style:none}
.swatch{display:inline-block;width:.8em;height:.8em;border-radius:2px;margin-right:.35em}
pre{white-space:pre-wrap;word-break:break-all;margin:0;font-size:12px}svg text{font-size:11px;fill:#555}
"""
# The page runs no script and loads nothing: even a payload that slipped past escaping could not act.
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
    label = f"{done} / {expected} items ({_pct(done, expected)})" if expected is not None else f"{done} items (total not known)"
    status = "complete" if state.complete else "stopped" if state.stopped else "running"
    bar = _bar(done, expected, 'id="overall-progress"')
    return (f'<section id="overall">{bar}<p><strong>{label}</strong> · <span id="run-status">{status}</span></p></section>')


def _facts(state: ProgressState) -> str:
    rate, eta = state.throughput, state.eta_s
    facts = [("Throughput", f"{rate:.1f} items/min" if rate is not None else "–"),
             ("ETA", "done" if state.complete else _duration(eta) if eta is not None else "–"),
             ("Retries", str(state.retries)), ("Errors", str(state.errors))]
    if state.incomplete or state.aborted:
        facts += [("Incomplete", str(state.incomplete)), ("Aborted", str(state.aborted))]
    if state.prompt_tokens is not None:
        facts.append(("Tokens", f"{state.prompt_tokens:,} prompt + {state.completion_tokens or 0:,} completion"))
    if state.cost_usd is not None:
        facts.append(("Cost", f"${state.cost_usd:,.4f}"))
    if state.window is not None:
        facts.append(("Session started", _utc(state.window[0])))
    items = "".join(f"<li><strong>{name}:</strong> {value}</li>" for name, value in facts)
    return f'<ul class="facts" id="facts">{items}</ul>'


def _arm_row(i: int, arm: ArmProgress) -> str:
    lo, hi = arm.interval
    rate = f"{arm.correct / arm.done:.3f}" if arm.done else "–"
    interval = f"[{lo:.3f}, {hi:.3f}]" if arm.done else "–"
    name = f'<span class="swatch" style="background:{COLORS[i % len(COLORS)]}"></span>{_e(arm.key)}'
    bar = _bar(arm.done, arm.expected, f'class="arm-progress" id="arm-progress-{i}" data-arm="{_e(arm.key)}"')
    cells = [str(arm.done), "–" if arm.expected is None else str(arm.expected), _pct(arm.done, arm.expected),
             str(arm.correct), rate, interval, str(arm.unparseable), str(arm.errors)]
    return f'<tr><td>{name}</td><td class="bar">{bar}</td>' + "".join(f"<td>{c}</td>" for c in cells) + "</tr>"


def _arm_table(state: ProgressState) -> str:
    head = ("arm", "progress", "done", "expected", "%", "correct", "pass rate", "95% CI", "unparseable", "errors")
    rows = "".join(_arm_row(i, arm) for i, arm in enumerate(state.arms.values()))
    return (f'<h2>Arms</h2><table id="arms"><thead><tr>{"".join(f"<th>{h}</th>" for h in head)}</tr></thead>'
            f"<tbody>{rows}</tbody></table>")


def _polyline(times: list[float], color: str, t0: float, span: float, top: int) -> str:
    step = max(1, math.ceil(len(times) / MAX_POINTS))
    picks = sorted({*range(0, len(times), step), len(times) - 1})
    points = [(times[0], 0)] + [(times[k], k + 1) for k in picks]
    xy = " ".join(f"{_PAD + (t - t0) / span * (_W - 2 * _PAD):.1f},{_H - _PAD - n / top * (_H - 2 * _PAD):.1f}" for t, n in points)
    return f'<polyline fill="none" stroke="{color}" stroke-width="1.6" points="{xy}"/>'


def _chart(state: ProgressState) -> str:
    """Cumulative items completed over time, one line per arm (colours match the table)."""
    series = [(COLORS[i % len(COLORS)], sorted(a.finished)) for i, a in enumerate(state.arms.values()) if a.finished]
    if not series:
        return ""
    t0, t1 = min(s[0] for _, s in series), max(s[-1] for _, s in series)
    span = t1 - t0 if t1 > t0 else 1.0
    top = max(max(a.done, a.expected or 0) for a in state.arms.values())
    lines = "".join(_polyline(times, color, t0, span, top) for color, times in series)
    low, right = _H - _PAD, _W - _PAD
    return (f'<h2>Items completed over time</h2><svg id="chart" xmlns="http://www.w3.org/2000/svg" width="{_W}" height="{_H}" '
            f'viewBox="0 0 {_W} {_H}" role="img" aria-label="cumulative items completed per arm">'
            f'<rect x="{_PAD}" y="{_PAD}" width="{_W - 2 * _PAD}" height="{_H - 2 * _PAD}" fill="none" stroke="#ccc"/>'
            f'<text x="4" y="{_PAD + 4}">{top}</text><text x="4" y="{low}">0</text>'
            f'<text x="{_PAD}" y="{low + 16}">{_utc(t0)[11:19]}</text>'
            f'<text x="{right}" y="{low + 16}" text-anchor="end">{_utc(t1)[11:19]} UTC</text>{lines}</svg>')


def _recent(state: ProgressState) -> str:
    title = f"<h2>Last {RECENT} wrong or unparseable answers</h2>"
    if not state.recent:
        return title + '<p class="muted" id="recent">None so far.</p>'
    head = "".join(f"<th>{h}</th>" for h in ("task", "arm", "status", "target", "answer", f"output (last {TAIL} chars)"))
    rows = "".join(
        f"<tr><td>{_e(f.task_id)}</td><td>{_e(f.arm)}</td><td>{_e(f.status)}</td><td>{_e(f.target)}</td>"
        f"<td>{_e(f.answer)}</td><td><pre>{_e(f.tail)}</pre></td></tr>"
        for f in state.recent
    )
    return f'{title}<table id="recent"><thead><tr>{head}</tr></thead><tbody>{rows}</tbody></table>'


def render_progress(state: ProgressState, refresh_s: int = 5) -> str:
    """The whole page: one HTML document with inline CSS and SVG, no script, nothing loaded from elsewhere.

    Everything that comes from the results file (ids, arms, outputs, the stop message) is escaped.
    """
    expected = "?" if state.expected is None else str(state.expected)
    stopped = f'<p class="stopped" id="stopped"><strong>Stopped early:</strong> {_e(state.stopped)}</p>' if state.stopped else ""
    body = [f"<h1>echo-bench progress: {_e(state.benchmark)}</h1>",
            f'<p class="muted" id="updated">Last update: {_utc(state.now)}</p>', stopped,
            _overall(state), _facts(state), _arm_table(state), _chart(state), _recent(state)]
    return (f'<!DOCTYPE html>\n<html lang="en">\n<head>\n<meta charset="utf-8">\n'
            f'<meta http-equiv="refresh" content="{int(refresh_s)}">\n<meta http-equiv="Content-Security-Policy" content="{_CSP}">\n'
            f"<title>{_e(state.benchmark)} · {state.done}/{expected} · echo-bench</title>\n<style>{_CSS}</style>\n</head>\n<body>\n"
            + "\n".join(part for part in body if part) + "\n</body>\n</html>\n")


def write_atomic(path: Path, text: str) -> None:
    """Write a temporary file next to ``path``, then rename it over ``path``: readers never see half a page."""
    path.parent.mkdir(parents=True, exist_ok=True)
    # Model output may hold lone surrogates (valid JSON escapes, not encodable): replace, never fail.
    data = text.encode("utf-8", errors="replace")
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        os.chmod(tmp, 0o644)  # mkstemp creates 0600; the page is meant to be read by others
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def write_progress(results: Path, out: Path, live: LiveCounters | None = None, refresh_s: int = 5) -> None:
    """Read ``results``, render the page and write it atomically to ``out`` (OSError if it cannot)."""
    write_atomic(out, render_progress(progress_state(results, live), refresh_s))


def watch(results: Path, out: Path, interval_s: float = 5.0, stop: Callable[[], bool] = lambda: False) -> None:
    """Rewrite ``out`` every ``interval_s`` seconds until ``stop()``, the run's stop marker, or completion."""
    refresh = max(1, round(interval_s))
    while True:
        state = progress_state(results)
        write_atomic(out, render_progress(state, refresh))
        if state.stopped or state.complete:
            # Rows written just before the marker may have missed the read above: once more.
            write_atomic(out, render_progress(progress_state(results), refresh))
            return
        if _wait(interval_s, stop):
            return


def _wait(seconds: float, stop: Callable[[], bool]) -> bool:
    """Sleep up to ``seconds`` in short steps; True as soon as ``stop()`` says so."""
    deadline = time.monotonic() + seconds
    while not stop():
        left = deadline - time.monotonic()
        if left <= 0:
            return False
        time.sleep(min(left, 0.2))
    return True
