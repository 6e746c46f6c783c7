"""The controller's watch for a decided comparison: every graded row goes to the monitor, and once
every planned pair is decided the run stops as the other stops do (the marker, then pytest's own
stop flag, or xdist's), with reason ``decided`` and exit 0.

The controller sees every row (the report payloads, one at a time, in one thread), so the
decision is made there, serially, never in the workers.
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from pytest_echo_bench.analysis.decide.feed import FileFeed
from pytest_echo_bench.analysis.decide.monitor import (
    Monitor,
    PairFigures,
    Plan,
    Sequential,
    sequential,
)
from pytest_echo_bench.engine.outcome import ROW, utcnow
from pytest_echo_bench.plugin.payload import Payload
from pytest_echo_bench.plugin.xdist_state import stop_scheduling
from pytest_echo_bench.report import decision
from pytest_echo_bench.results.ending import one
from pytest_echo_bench.store.files import DECIDED, StopReason, write_stop
from pytest_echo_bench.store.records import Meta

LIVE_SHARE = 20  # a running sweep's figures take at most about 1/20 of the controller's time


class Deciding:
    """Holds the monitor of a run with a decide plan (``RunContext.decide``)."""

    def __init__(self, plan: Plan, epochs: dict[str, int]) -> None:
        self.monitor = Monitor(plan, epochs)
        # False once the run stopped on its decision, or a resume began decided
        self.watching = True
        self.note = ""
        # where an earlier run of the file stopped when decided (``Sequential.earlier``)
        self.earlier = ""
        self.feed: FileFeed | None = None
        self._figures: tuple[tuple[int, ...], list[PairFigures]] | None = None
        # monotonic time before which a running sweep's figures are not computed again
        self._next = 0.0

    def start(self, results: Path, resumed: bool) -> None:
        """Read what the file holds already (a resume's rows), in file order, as the report does."""
        self.feed = FileFeed(results, self.monitor)
        self.feed.update()
        # A resume of a file that once stopped when decided: its fixed-n figures stay
        # not valid, however this run ends.
        self.earlier = one(results).decided_text if resumed else ""
        if resumed and self.monitor.all_decided():
            # Resuming a decided sweep asks for more items than the decision
            # needed: run on, do not stop again.
            self.watching = False
            self.note = (
                "echo-bench: the comparison was decided before this resume; it runs on without "
                "stopping on it"
            )

    def record(self, bench: Payload) -> bool:
        """One report; True when the rows it let the monitor read decided the last undecided pair.

        The monitor reads the rows from the file, in the order they were appended, not the
        reports in the order they arrive: under xdist the two differ, and the report (which can
        only read the file) must see what the decision saw. Rows after a stop still count for the
        figures: they are rows of the file."""
        if bench.kind != ROW or self.feed is None:
            return False
        fed = self.feed.update()
        return fed and self.watching and self.monitor.all_decided()

    def stop(
        self, config: pytest.Config, session: pytest.Session | None, results: str
    ) -> StopReason:
        """Stop the run: the marker first (workers stop calling at once), then the scheduler."""
        self.watching = False
        stop = StopReason(DECIDED, self.message())
        write_stop(
            results, stop, at=utcnow(), results=results, pairs=[f.to_json() for f in self.figures()]
        )
        if session is not None and not session.shouldstop:
            session.shouldstop = f"echo-bench: {stop}"
        stop_scheduling(config, f"echo-bench: {stop}")
        return stop

    def figures(self, fresh: bool = True) -> list[PairFigures]:
        """The monitor's figures, computed once per state (each interval replays the pair's items).

        While the sweep runs (``fresh`` False: the summary and page, every few seconds) they are
        computed again only after LIVE_SHARE times what the last computation took: at 20,000 items
        an interval costs over a second, and the controller must not spend its time redrawing it.
        Each figure says the items it is at, so one a little behind is still true. Fresh ones read
        the file on first: after a stop, calls in flight land rows whose reports never arrive."""
        if fresh and self.feed is not None:
            self.feed.update()
        state = tuple(s.test.n for s in self.monitor.pairs)
        if self._figures is not None and (
            self._figures[0] == state or (not fresh and time.monotonic() < self._next)
        ):
            return self._figures[1]
        began = time.monotonic()
        self._figures = (state, self.monitor.figures())
        self._next = time.monotonic() + LIVE_SHARE * (time.monotonic() - began)
        return self._figures[1]

    def sequential(self, stop_reason: str | None, running: bool) -> Sequential:
        """The figures with how the sweep was collected: what the summary and the
        page show, as the report does."""
        return sequential(
            self.monitor,
            stop_reason,
            running,
            self.figures(fresh=not running),
            earlier=self.earlier,
        )

    def message(self) -> str:
        """One line: each pair's verdict, at how many items, with its anytime-valid interval."""
        parts = []
        for f in self.figures():
            at = f" at {f.decided_at} items" if f.decided_at is not None else f" after {f.n} items"
            parts.append(
                f"{f.verdict}{at} (anytime-valid p {f.p_anytime:.3g}, Holm {f.p_holm:.3g}; "
                f"{f.level:.0%} interval of {f.a} - {f.b}: {decision.interval_text(f)})"
            )
        return "; ".join(parts)

    def lines(self, stop_reason: str | None) -> list[str]:
        """The end-of-run lines: each pair's anytime-valid figures, decided or not, and what the
        fixed-n figures are worth after a sweep that ended so."""
        return [decision.sentence(f) for f in self.figures()] + [
            decision.note(self.sequential(stop_reason, False))
        ]


def deciding(plan: Plan | None, meta: Meta) -> Deciding | None:
    if plan is None:
        return None
    return Deciding(plan, {name: entry.samples for name, entry in meta.benchmarks.items()})
