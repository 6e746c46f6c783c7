"""How a run finishes, as the controller sees it: the stop an item reported, the exit status
``exit_status.decide`` gives and the stop marker it says to write, the budget's end, the gates'
lines, the final summary, and the command that resumes the run."""

from __future__ import annotations

import shlex
from pathlib import Path
from typing import Any

import pytest

from pytest_echo_bench.engine.outcome import utcnow
from pytest_echo_bench.plugin import budget
from pytest_echo_bench.plugin.context import RunContext
from pytest_echo_bench.plugin.counts import Counts
from pytest_echo_bench.plugin.exit_status import Outcomes, Stops, decide
from pytest_echo_bench.plugin.live import LiveRun
from pytest_echo_bench.plugin.options import BenchOptions
from pytest_echo_bench.plugin.recorded import resume_flags
from pytest_echo_bench.store.files import StopReason, read_stop, write_stop
from pytest_echo_bench.store.tally import FileTally


class Finish:
    """The controller's end of the run: what stopped it, and what the end says and writes."""

    def __init__(self, config: pytest.Config, opts: BenchOptions, ctx: RunContext) -> None:
        self.config, self.opts, self.ctx = config, opts, ctx
        self.reported: StopReason | None = None  # the run's own stop, as the item that made it said
        self.stopped = ""  # why the run stopped early, once decided
        self.budget = budget.BudgetEnd()  # with a budget: spent against it, and the items complete
        self.gate_lines: list[str] = []
        self.final: dict[str, Any] | None = None  # the end-of-run summary, once decided

    def report(self, stop: StopReason | None) -> None:
        """An item (or the controller's decide watch) stopped the run: the first stop stands."""
        if self.reported is None:
            self.reported = stop

    def record_exit(self, status: int, counts: Counts, live: LiveRun | None,
                    gates_passed: bool = True) -> int:
        """Settle the budget, decide the exit status (``exit_status.decide``: this only gathers what
        it needs) and write the stop marker it says to write; keeps why the run stopped early."""
        self.budget = self._settle_budget(live)
        resumed = self.ctx.resume_upto is not None
        outcomes = Outcomes(status, counts.left, tuple(counts.lost), dict(counts.required),
                            counts.collect_errors, counts.other_failures, resumed, self.opts.strict,
                            self._has_rows(), gates_passed, self.budget.stop, self.budget.details)
        decided = decide(outcomes, Stops(read_stop(self.ctx.results), self.reported))
        if decided.write and decided.stop is not None:
            write_stop(self.ctx.results, decided.stop, at=utcnow(), results=self.ctx.results,
                       **decided.details)
        self.stopped = str(decided.stop) if decided.stop is not None else ""
        return decided.status

    def _settle_budget(self, live: LiveRun | None) -> budget.BudgetEnd:
        if not self.ctx.budget:
            return budget.BudgetEnd()
        counted = live.counted if live is not None else FileTally()
        selected = live.items if live is not None else ()
        ctx = self.ctx
        return budget.settle_end(ctx.results, ctx.budget_limits, ctx.meta.arms, counted, selected)

    def _has_rows(self) -> bool:
        path = Path(self.ctx.results)
        return path.exists() and path.stat().st_size > 0

    def stop_reason(self, session: pytest.Session | None) -> str | None:
        """The stop marker's reason, else pytest's own stop (``--maxfail``, ``-x``): not "ran to
        the end"."""
        stop = read_stop(self.ctx.results)
        why = session is not None and (session.shouldfail or session.shouldstop)
        return stop.reason if stop is not None else f"pytest: {why}" if why else None

    def resume_command(self) -> str:
        cmd = ["pytest", "--bench-resume", self.ctx.results]
        workers = self.config.getoption("numprocesses", None)
        if workers:
            cmd += ["-n", str(workers)]
        # What a plain resume would not take itself.
        cmd += resume_flags(self.config, self.opts, self.ctx.options)
        # The budget's stop suggests more; any other keeps the ceiling.
        usd = self.budget.next_usd or self.opts.budget_usd
        if usd is not None:
            # The shortest text that reads back as the same amount.
            cmd += ["--bench-budget-usd", str(usd)]
        # The rootdir, named: pasted in any directory, the resume finds the specs the meta line
        # names there, and only there (a results file's own paths never leave the rootdir:
        # context._inside).
        return shlex.join([*cmd, "--rootdir", str(self.config.rootpath)])
