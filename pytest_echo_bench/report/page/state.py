"""What the progress page shows, fed incrementally from a results file.

``PageFeed.update`` reads only the bytes appended since its last call (decoded by ``keyscan``,
the resume reader), so a page rewritten every 5 s costs the same at row 100 and at row 1,000,000;
``PageFeed.state`` then builds the ``ProgressState`` that ``html`` draws. A page must never break
a run: a missing file is an empty page, a line that is not a row is skipped.
"""

from __future__ import annotations

import json
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from pytest_echo_bench.analysis.decide.monitor import Sequential
from pytest_echo_bench.analysis.stats import wilson
from pytest_echo_bench.errors import StoreError
from pytest_echo_bench.report.page.meta import DecideFeed, meta_expected, typed
from pytest_echo_bench.shards.coverage import gap
from pytest_echo_bench.spec.pricing import CLASS_KEYS
from pytest_echo_bench.store.checks import count, figure
from pytest_echo_bench.store.files import STATUSES, UNJUDGED, legacy_status, read_stop
from pytest_echo_bench.store.keyscan import RowScan
from pytest_echo_bench.store.reader import parse_line
from pytest_echo_bench.store.records import Meta, scan_epoch
from pytest_echo_bench.store.rows import fields_of, view

RECENT = 10  # wrong/unparseable rows listed on the page
TAIL = 200  # characters of raw output shown for each of them

ArmId = tuple[str, str]  # (benchmark, arm)


@dataclass
class LiveCounters:
    """What the running plugin knows beyond the results file (all optional)."""

    # arm key -> items to run in this session
    expected: dict[str, int] = field(default_factory=dict)
    retries: int = 0
    incomplete: int = 0
    aborted: int = 0
    started_at: float | None = None  # time.time() when this session started
    stopped: str = ""  # why the run stopped early, if it did
    # arm key -> of expected, items the file already has a row for
    rerun: dict[str, int] = field(default_factory=dict)
    # arm key -> its endpoint's concurrency limit now
    limits: dict[str, int] = field(default_factory=dict)
    throttled: int = 0  # calls answered 429 (rate limited) in this session
    budget: str = ""  # spend against the budget ("spent $0.0100 of $0.5000"), when the run has one
    # the controller's decide figures (the page's own replay when None)
    decide: Sequential | None = None


@dataclass
class ArmProgress:
    """One arm's tally so far."""

    key: str
    expected: int | None = None
    done: int = 0
    correct: int = 0
    unparseable: int = 0
    errors: int = 0
    unjudged: int = 0  # rows a judge gave no grade: out of the pass rate
    finished: list[float] = field(default_factory=list)  # finish times, for the chart

    @property
    def graded(self) -> int:
        """The rows the pass rate is of: every row done but the unjudged ones."""
        return self.done - self.unjudged

    @property
    def interval(self) -> tuple[float, float]:
        """95% Wilson interval of the pass rate so far."""
        return wilson(self.correct, self.graded)


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
    """Everything the page shows; ``PageFeed.state`` builds it,
    ``html.render_progress`` draws it."""

    benchmark: str
    now: float
    arms: dict[str, ArmProgress] = field(default_factory=dict)
    retries: int = 0
    throttled: int = 0  # calls answered 429 in this session (live only)
    # arm key -> its endpoint's concurrency limit (live only)
    limits: dict[str, int] = field(default_factory=dict)
    errors: int = 0
    unjudged: int = 0
    incomplete: int = 0
    aborted: int = 0
    prompt_tokens: int | None = None
    completion_tokens: int | None = None
    # the billed classes' tokens (``spec.pricing.CLASS_KEYS``), of the rows that report them
    token_classes: dict[str, int] = field(default_factory=dict)
    cost_usd: float | None = None
    window: tuple[float, float] | None = None  # (start, end) of the current session
    session_done: int = 0  # rows finished in that window: the throughput's numerator
    stopped: str = ""
    budget: str = ""  # spend against the budget (live only)
    # a decide plan's figures: the run's, else replayed from the file
    decide: Sequential | None = None
    # a file of part of a sweep (an incomplete merge, a shard): the shards held and missing
    shards: str = ""
    recent: list[Failure] = field(default_factory=list)  # newest first

    @property
    def done(self) -> int:
        return sum(a.done for a in self.arms.values())

    @property
    def expected(self) -> int | None:
        if all(a.expected is None for a in self.arms.values()):
            return None
        return sum(
            a.done if a.expected is None else max(a.expected, a.done) for a in self.arms.values()
        )

    @property
    def complete(self) -> bool:
        expected = self.expected
        return (
            bool(expected)
            and all(a.expected is not None for a in self.arms.values())
            and self.done >= (expected or 0)
        )

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


class PageRow(view("_Page", "passed", "status", "detail", "retries", "usage", "cost_usd",
                   "started_at", "finished_at", "run_id", "target", "answer", "output", loose=True),
              gc=False):  # type: ignore[misc]
    """The fields the page reads, taken loosely: a page shows odd values rather than refuse them."""


@dataclass
class _Session:
    """Rows of one session: per-arm counts and the span of their times."""

    per_arm: dict[ArmId, int] = field(default_factory=dict)
    first: float | None = None  # earliest start (or finish, for rows without a start)
    last: float | None = None  # latest finish

    # of those, rows that replaced an item's older row
    replaced: dict[ArmId, int] = field(default_factory=dict)

    def add(
        self, arm: ArmId, started: float | None, finished: float | None, replaced: bool = False
    ) -> None:
        self.per_arm[arm] = self.per_arm.get(arm, 0) + 1
        if replaced:
            self.replaced[arm] = self.replaced.get(arm, 0) + 1
        begin = started if started is not None else finished
        if begin is not None:
            self.first = begin if self.first is None else min(self.first, begin)
        if finished is not None:
            self.last = finished if self.last is None else max(self.last, finished)

    @property
    def done(self) -> int:
        return sum(self.per_arm.values())


@dataclass
class _Arm:
    done: int = 0
    correct: int = 0
    unparseable: int = 0
    errors: int = 0
    unjudged: int = 0
    finished: list[float] = field(default_factory=list)


class PageFeed:
    """The running tallies of one results file, each (benchmark, task_id, arm, epoch) once: its
    newest row's verdict counts (retries, tokens and cost count every row: they were spent).

    ``started_at`` (a live run's start) decides which rows are "this session" for the throughput:
    those finished since then. Without it (``echo-bench progress`` on a file), the session is the
    rows of the run that wrote the latest new row.
    """

    def __init__(self, results: Path, started_at: float | None = None) -> None:
        self.results, self.started_at = results, started_at
        # (device, inode) of the file the tallies came from
        self._file: tuple[int, int] | None = None
        self._reset()

    def _reset(self) -> None:
        self.end = (0, 1)  # where the next update starts reading: byte offset, line number
        self.meta: Meta | None = None
        # line 1 as read: later meta lines are checked against it
        self.head: dict[str, Any] | None = None
        # another sweep's meta line: the tallies stop before it
        self.refused: StoreError | None = None
        # -> task id -> (status, passed)
        self.seen: dict[tuple[str, str, int], dict[str, tuple[str, bool]]] = {}
        self.arms: dict[ArmId, _Arm] = {}
        self.benchmarks: dict[str, None] = {}  # in order of first appearance
        self.retries = self.errors = self.unjudged = 0
        self.prompt_tokens: int | None = None
        self.completion_tokens: int | None = None
        self.token_classes: dict[str, int] = {}
        self.cost_usd: float | None = None
        self.recent: deque[tuple[ArmId, PageRow, str]] = deque(maxlen=RECENT)
        self.sessions: dict[str, _Session] = {}  # by run id (or "live")
        self.latest_run = ""
        self.decide = DecideFeed(self.results)

    def update(self) -> None:
        """Read what was appended since the last update (all of it, the first time)."""
        try:
            stat = self.results.stat()
            if (stat.st_dev, stat.st_ino) != self._file or stat.st_size < self.end[0]:
                self._reset()  # another file at the path now (replaced or truncated): start over
                self._file = (stat.st_dev, stat.st_ino)
            scan = RowScan(
                self.results,
                PageRow,
                lambda raw, lineno, strict: parse_line(raw, self.results, lineno, False),
                start=self.end,
                head=self.head,
            )
            try:
                for fast, slow in scan.batches():
                    self.meta = typed(scan.meta) or self.meta
                    for row in fast:
                        self._add(row)
                    for record in slow:
                        self._add(fields_of(PageRow, record, loose=True))
            # the batches counted so far are counted once: the next update reads on after them
            finally:
                self.end, self.head = scan.end, scan.head
            self.decide.update(self.meta)
        except StoreError as exc:
            # ``echo-bench progress`` says so; a live run's page shows what comes before it
            self.refused = exc
        except OSError:
            pass  # not written yet, or unreadable for now: the page shows what it has

    def _add(self, row: PageRow) -> None:
        benchmark = row.benchmark or (self.meta.benchmark if self.meta else "")
        arm_id = (benchmark, row.arm)
        ids = self.seen.setdefault((benchmark, row.arm, scan_epoch(row.epoch)), {})
        self.benchmarks[benchmark] = None
        status = row.status if row.status in STATUSES else legacy_status(row.passed, row.detail)
        arm = self.arms.setdefault(arm_id, _Arm())
        older = ids.get(row.task_id)
        passed = row.passed is True and status != UNJUDGED  # no grade: never a pass
        ids[row.task_id] = (status, passed)
        # a newer row of a recorded item (a retried error): its verdict replaces the old one
        if older is not None:
            self._count(arm, *older, sign=-1)
        else:
            arm.done += 1
        self._count(arm, status, passed)
        self.retries += _int(row.retries)
        started, finished = _timestamp(row.started_at), _timestamp(row.finished_at)
        if finished is not None and older is None:  # the chart counts items done, once each
            arm.finished.append(finished)
        self._add_usage(row)
        if status in ("wrong", "unparseable"):
            self.recent.append((arm_id, row, status))
        self._add_session(arm_id, row, started, finished, older is not None)

    def _count(self, arm: _Arm, status: str, passed: bool, sign: int = 1) -> None:
        arm.correct += sign * passed
        arm.unparseable += sign * (status == "unparseable")
        arm.errors += sign * (status == "error")
        self.errors += sign * (status == "error")
        arm.unjudged += sign * (status == UNJUDGED)
        self.unjudged += sign * (status == UNJUDGED)

    def _add_usage(self, row: PageRow) -> None:
        usage, cost = row.usage, row.cost_usd
        if isinstance(usage, dict):
            self.prompt_tokens = (self.prompt_tokens or 0) + _int(usage.get("prompt_tokens"))
            self.completion_tokens = (self.completion_tokens or 0) + _int(
                usage.get("completion_tokens")
            )
            for key in CLASS_KEYS:
                if key in usage:
                    self.token_classes[key] = self.token_classes.get(key, 0) + _int(usage[key])
        known = figure(cost)  # a NaN, negative or absurd cost is unknown (store.checks)
        if known is not None:
            self.cost_usd = (self.cost_usd or 0.0) + known

    def _add_session(
        self,
        arm_id: ArmId,
        row: PageRow,
        started: float | None,
        finished: float | None,
        replaced: bool,
    ) -> None:
        if self.started_at is not None:
            # Earlier sessions finished before this one started; rows without a time are theirs.
            if finished is not None and finished >= self.started_at:
                self.sessions.setdefault("live", _Session()).add(
                    arm_id, started, finished, replaced
                )
            return
        run = self.latest_run = _text(row.run_id)
        self.sessions.setdefault(run, _Session()).add(arm_id, started, finished, replaced)

    # -- the state ---------------------------------------------------------------------------
    def state(self, live: LiveCounters | None = None, now: float | None = None) -> ProgressState:
        """What the page shows now, from the tallies, the stop marker
        and the plugin's live counters."""
        now = time.time() if now is None else now
        names = self._names()
        single = len(names) <= 1

        def key(arm_id: ArmId) -> str:
            return arm_id[1] if single else f"{arm_id[0]}/{arm_id[1]}"

        title = self.meta.benchmark if self.meta else ""
        state = ProgressState(title or "+".join(n for n in names if n) or self.results.stem, now)
        session = self.sessions.get(
            "live" if self.started_at is not None else self.latest_run, _Session()
        )
        state.arms = {
            k: ArmProgress(k, n) for k, n in self._expected(live, single, key, session).items()
        }
        self._fill_arms(state, key)
        state.retries, state.errors, state.unjudged = self.retries, self.errors, self.unjudged
        state.prompt_tokens, state.completion_tokens, state.cost_usd = (
            self.prompt_tokens,
            self.completion_tokens,
            self.cost_usd,
        )
        state.token_classes = _in_order(self.token_classes)
        state.recent = [
            _failure(key(arm_id), row, status) for arm_id, row, status in reversed(self.recent)
        ]
        state.window, state.session_done = self._window(session, live, now), session.done
        state.shards = gap(self.results, self.meta)
        stop = read_stop(self.results)
        state.stopped = str(stop) if stop else ""
        if live is not None:
            _add_live(state, live)
        state.decide = (live.decide if live is not None else None) or self.decide.sequential(
            stop.reason if stop else None, not state.complete)
        return state

    def _fill_arms(self, state: ProgressState, key: Callable[[ArmId], str]) -> None:
        """Each arm's tallies into its line of ``state`` (arms of several benchmarks by ``key``)."""
        for arm_id, tally in self.arms.items():
            progress = state.arms.setdefault(key(arm_id), ArmProgress(key(arm_id)))
            progress.done += tally.done
            progress.correct += tally.correct
            progress.unparseable += tally.unparseable
            progress.errors += tally.errors
            progress.unjudged += tally.unjudged
            progress.finished.extend(tally.finished)

    def _names(self) -> list[str]:
        names = dict.fromkeys(self.meta.benchmarks) if self.meta else {}
        return list(names | self.benchmarks)

    def _expected(
        self, live: LiveCounters | None, single: bool, key: Any, session: _Session
    ) -> dict[str, int]:
        if live is None or not live.expected:
            return meta_expected(self.meta, single)
        # live.expected counts this session's items only; rows from earlier sessions
        # are done already, but for the items this session runs again (live.rerun:
        # error rows, --bench-retry-errors).
        prior: dict[str, int] = {}
        for arm_id, tally in self.arms.items():
            new = session.per_arm.get(arm_id, 0) - session.replaced.get(arm_id, 0)
            prior[key(arm_id)] = prior.get(key(arm_id), 0) + tally.done - new
        for k, again in live.rerun.items():
            prior[k] = prior.get(k, 0) - again
        return {
            k: prior.get(k, 0) + live.expected.get(k, 0)
            for k in dict.fromkeys([*live.expected, *prior])
        }

    def _window(
        self, session: _Session, live: LiveCounters | None, now: float
    ) -> tuple[float, float] | None:
        start = (
            live.started_at if live is not None and live.started_at is not None else session.first
        )
        if start is None:
            return None
        # A live run is measured up to now (a stall lowers the rate); a
        # file alone up to its last row.
        end = now if live is not None else (session.last if session.last is not None else now)
        return (start, end)


def _add_live(state: ProgressState, live: LiveCounters) -> None:
    """What the running plugin knows beyond the file: retries, throttling, limits, budget, stop."""
    state.retries += live.retries
    state.incomplete, state.aborted = live.incomplete, live.aborted
    state.throttled, state.limits, state.budget = live.throttled, dict(live.limits), live.budget
    state.stopped = live.stopped or state.stopped


def progress_state(
    results: Path, live: LiveCounters | None = None, now: float | None = None
) -> ProgressState:
    """The page's state from the whole file, read once (for a single
    page; ``PageFeed`` to keep one)."""
    feed = PageFeed(results, live.started_at if live is not None else None)
    feed.update()
    return feed.state(live, now)


def _failure(key: str, row: PageRow, status: str) -> Failure:
    return Failure(
        row.task_id, key, status, _text(row.target), _text(row.answer), _text(row.output)[-TAIL:]
    )


def _timestamp(value: Any) -> float | None:
    if not isinstance(value, str) or not value:
        return None
    try:
        stamp = datetime.fromisoformat(value)
        return (stamp if stamp.tzinfo else stamp.replace(tzinfo=UTC)).timestamp()
    except (ValueError, OverflowError, OSError):
        return None


def _in_order(classes: dict[str, int]) -> dict[str, int]:
    """The classes' tokens in ``CLASS_KEYS`` order, whichever a row reported first."""
    return {key: classes[key] for key in CLASS_KEYS if key in classes}


def _int(value: Any) -> int:
    """A count (retries, tokens) as ``store.checks`` reads one: anything
    but an integer >= 0 adds nothing."""
    return count(value) or 0


def _text(value: Any) -> str:
    # html.py writes any str
    return "" if value is None else value if isinstance(value, str) else json.dumps(value)
