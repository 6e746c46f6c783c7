"""The controller's watch for a decided comparison: every graded row goes to the monitor, and once
every planned pair is decided the run stops as the other stops do (the marker, then pytest's own
stop flag, or xdist's), with reason ``decided`` and exit 0.

The controller sees every row (the report payloads, one at a time, in one thread), so the
decision is made there, serially, never in the workers.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from pytest_echo_bench.engine.outcome import ROW, utcnow
from pytest_echo_bench.ops.decide import Monitor, Plan, score_of
from pytest_echo_bench.ops.results import load_results
from pytest_echo_bench.plugin.payload import Payload
from pytest_echo_bench.plugin.xdist_state import stop_scheduling
from pytest_echo_bench.store.files import DECIDED, StopReason, write_stop


class Deciding:
    """Holds the monitor of a run with a decide plan (``RunContext.decide``)."""

    def __init__(self, plan: Plan, epochs: dict[str, int]) -> None:
        self.monitor = Monitor(plan, epochs)
        self.watching = True  # False once the run stopped on its decision, or a resume began decided
        self.note = ""
        self._figures: tuple[tuple[int, ...], list[dict[str, Any]]] | None = None

    def start(self, results: Path, resumed: bool) -> None:
        """A resume first replays the rows the file holds, in file order, as the report does."""
        if resumed and results.is_file():
            for item in load_results([results]).rows:
                self.monitor.add(item.benchmark, item.task_id, item.arm, item.epoch, score_of(item.status, item.passed))
        if self.monitor.all_decided():
            # Resuming a decided sweep asks for more items than the decision needed: run on, do not stop again.
            self.watching = False
            self.note = "echo-bench: the comparison was decided before this resume; it runs on without stopping on it"

    def record(self, bench: Payload) -> bool:
        """One report; True when this row decided the last undecided pair (rows after a stop still count
        for the figures: they are rows of the file)."""
        if bench.kind != ROW:
            return False
        score = score_of(bench.status, bench.status == "correct")  # an error row is not graded: it does not count
        fed = self.monitor.add(bench.benchmark, bench.key[1], bench.arm, bench.epoch, score)
        return fed and self.watching and self.monitor.all_decided()

    def stop(self, config: pytest.Config, session: pytest.Session | None, results: str) -> StopReason:
        """Stop the run: the marker first (workers stop calling at once), then the scheduler."""
        self.watching = False
        stop = StopReason(DECIDED, self.message())
        write_stop(results, stop, at=utcnow(), results=results, pairs=self.figures())
        if session is not None and not session.shouldstop:
            session.shouldstop = f"echo-bench: {stop}"
        stop_scheduling(config, f"echo-bench: {stop}")
        return stop

    def figures(self) -> list[dict[str, Any]]:
        """The monitor's figures, computed once per state (each interval replays the pair's items)."""
        state = tuple(s.test.n for s in self.monitor.pairs)
        if self._figures is None or self._figures[0] != state:
            self._figures = (state, self.monitor.figures())
        return self._figures[1]

    def message(self) -> str:
        """One line: each pair's verdict, at how many items, with its anytime-valid interval."""
        parts = []
        for f in self.figures():
            at = f" at {f['decided_at']} items" if f["decided_at"] is not None else f" after {f['n']} items"
            parts.append(f"{f['verdict']}{at} (anytime-valid p {f['p_anytime']:.3g}, Holm {f['p_holm']:.3g}; "
                         f"{f['level']:.0%} interval of {f['a']} - {f['b']}: [{f['ci'][0]:+.3f}, {f['ci'][1]:+.3f}])")
        return "; ".join(parts)

    def lines(self) -> list[str]:
        """The end-of-run lines: each pair's anytime-valid figures, decided or not."""
        out = []
        for f in self.figures():
            at = f", decided at {f['decided_at']} items" if f["decided_at"] is not None else ""
            out.append(f"decide {f['a']} vs {f['b']}: {f['verdict']}{at}; at {f['n']} items anytime-valid p {f['p_anytime']:.3g} "
                       f"(Holm {f['p_holm']:.3g}), {f['level']:.0%} interval of the difference "
                       f"[{f['ci'][0]:+.3f}, {f['ci'][1]:+.3f}]")
        return out


def deciding(ctx_decide: dict[str, Any], meta: dict[str, Any]) -> Deciding | None:
    plan = Plan.from_json(ctx_decide) if ctx_decide else None
    if plan is None:
        return None
    epochs = {name: int(info.get("epochs") or 1) for name, info in meta.get("benchmarks", {}).items()}
    return Deciding(plan, epochs)
