"""The controller plugin: what the user sees and the exit status (the xdist controller, or a
serial run).

It announces the results file and the resume, counts every item's outcome from the report
payloads workers send, keeps the live progress line, summary and page, decides the exit status
(0 complete, 2 stopped and resumable) and prints the end-of-run table and the resume command.
"""

from __future__ import annotations

import contextlib
import shlex
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest

from pytest_echo_bench.analysis.gates import Gate, bind_gates
from pytest_echo_bench.engine.outcome import ABORTED, INCOMPLETE, utcnow
from pytest_echo_bench.errors import StoreError
from pytest_echo_bench.plugin import budget
from pytest_echo_bench.plugin.collect import BenchItem, split_name
from pytest_echo_bench.plugin.context import COUNTED, SPEC_CACHE, RunContext
from pytest_echo_bench.plugin.counts import Counts
from pytest_echo_bench.plugin.deciding import deciding
from pytest_echo_bench.plugin.ending import record_end
from pytest_echo_bench.plugin.filing import Filing, spend
from pytest_echo_bench.plugin.finish import Finish
from pytest_echo_bench.plugin.live import LiveRun
from pytest_echo_bench.plugin.options import BenchOptions
from pytest_echo_bench.plugin.payload import Payload
from pytest_echo_bench.plugin.signals import StopSignals
from pytest_echo_bench.plugin.summary import write_summary
from pytest_echo_bench.providers import cli_isolation
from pytest_echo_bench.scoring.registry import takes_judges
from pytest_echo_bench.spec.load import Spec
from pytest_echo_bench.store.files import StopReason, lock_path, lost_path, write_atomic, write_stop
from pytest_echo_bench.store.safe_text import shown, shown_json, unescape_id
from pytest_echo_bench.store.tally import FileTally
from pytest_echo_bench.suites import isolation

NOT_RECORDED = {INCOMPLETE: ("incomplete", "I", "INCOMPLETE"), ABORTED: ("aborted", "A", "ABORTED")}


class ControllerPlugin:
    """Registered as "echo-bench-controller" in the one process that reports.

    It routes: ``counts`` holds what the reports said, ``live`` the progress line, summary and page,
    ``deciding`` the decide watch, ``finish`` how the run ends (plugin.finish); ``write_summary``
    (plugin.summary) draws the end-of-run section from them.
    """

    def __init__(self, config: pytest.Config, opts: BenchOptions, ctx: RunContext) -> None:
        self.config, self.opts, self.ctx = config, opts, ctx
        self.counts = Counts()
        self.finish = Finish(config, opts, ctx)
        self.live: LiveRun | None = None
        self.filing = Filing(config, tuple(f"{spec}::" for spec in self._spec_of()))
        self.signals = StopSignals(config)  # a SIGTERM is passed on to its xdist workers
        self.signals.install()
        # Collecting only reads: no summary, page or marker.
        self.writes = not config.option.collectonly
        self.deciding = deciding(ctx.decide, ctx.meta) if self.writes else None
        self.session: pytest.Session | None = None

    # -- start -------------------------------------------------------------------------------
    @pytest.hookimpl(wrapper=True)
    def pytest_sessionstart(self, session: pytest.Session) -> Iterator[None]:
        yield  # after the terminal reporter's header
        self.session = session
        if not self.writes:
            return
        self._write(f"echo-bench: results -> {self.ctx.results} (run {self.ctx.run_id})")
        for note in self.ctx.notes:
            self._write(note)
        if self._scores_code():
            self._write(isolation.summary_line())
        specs = (self.config.stash.get(SPEC_CACHE, None) or {}).values()
        if self.opts.judge == "later":
            self._write(deferred_line(self.ctx.results, [spec for spec, _ in specs]))
        clis = cli_isolation.start_line(spec for spec, _ in specs)
        if clis is not None:
            self._write(clis)
        self._write_order()
        self.live = self._live()
        self.live.start()

    def _live(self) -> LiveRun:
        ctx, opts = self.ctx, self.opts
        counted = self.config.stash.get(COUNTED, None) or FileTally()
        live = LiveRun(Path(ctx.results), ctx.run_id, list(ctx.meta.benchmarks),
                       Path(opts.html) if opts.html else None, opts.progress_every, self._write,
                       self._gates(), counted=counted, epochs=self._epochs(), budget=ctx.budget)
        watch = self.deciding
        if watch is not None:
            # The summary and the page show the controller's own figures, while running too.
            live.decide = lambda stop, running: watch.sequential(stop or self._stop_reason(),
                                                                 running)
        return live

    def _gates(self) -> list[Gate]:
        """The gates with their arms named as the tallies key them (``build_context`` checked
        them)."""
        arms = self.ctx.meta.arms
        return list(bind_gates(self.opts.gates, arms)) if arms else list(self.opts.gates)

    def _write_order(self) -> None:
        order = self.ctx.meta.order
        if order is not None and order.random:
            self._write(f"echo-bench: items in a stratified random order (seed {order.seed};"
                        " --bench-order file for file order)")
        if self.deciding is not None:
            self.deciding.start(Path(self.ctx.results), self.ctx.resume_upto is not None)
            plan = self.deciding.monitor.plan
            pairs = ", ".join(f"{b}/{x} vs {b}/{y}" for b, x, y in plan.pairs)  # both named alike
            self._write(self.deciding.note or f"echo-bench: stops when decided: {pairs} "
                        f"(anytime-valid, alpha {plan.alpha:g})")

    def _scores_code(self) -> bool:
        """Whether a spec of this run has its answers' code executed (the sandbox's isolation
        matters)."""
        loaded = self.config.stash.get(SPEC_CACHE, None) or {}
        return any(spec.scorer in isolation.CODE_SCORERS for spec, _ in loaded.values())

    def pytest_collection_finish(self, session: pytest.Session) -> None:
        """Serial: this process collected (xdist: see ``pytest_xdist_node_collection_finished``)."""
        ids = [i.nodeid for i in session.items if isinstance(i, BenchItem)]
        self.counts.to_run = len(ids)
        if self.live is not None:
            self.live.expect(ids, self._spec_of())

    def pytest_report_collectionfinish(self, config: pytest.Config,
                                       items: Sequence[pytest.Item]) -> str | None:
        if self.ctx.resume_upto is None:
            return None
        return self._resume_line(sum(isinstance(i, BenchItem) for i in items))

    @pytest.hookimpl(optionalhook=True)
    def pytest_xdist_node_collection_finished(self, node: Any, ids: Sequence[str]) -> None:
        if self.counts.collected:
            return
        self.counts.collected = True
        self.counts.to_run = len(ids)
        if self.live is not None:
            self.live.expect(ids, self._spec_of())
        if self.ctx.resume_upto is not None:
            self._write(self._resume_line(len(ids)))

    def _resume_line(self, to_run: int) -> str:
        ctx = self.ctx
        return (f"echo-bench: resuming {ctx.results}: {ctx.resume_recorded} recorded, {to_run} "
                "to run")

    def _spec_of(self) -> dict[str, str]:
        return {str(entry.spec): name for name, entry in self.ctx.meta.benchmarks.items()}

    # -- reports -----------------------------------------------------------------------------
    def pytest_report_teststatus(self, report: pytest.TestReport) -> tuple[str, str, str] | None:
        bench = Payload.of(report)
        if bench and report.when == "call" and bench.kind in NOT_RECORDED:
            return NOT_RECORDED[bench.kind]
        return None

    @pytest.hookimpl(trylast=True)  # after the terminal reporter has filed the report
    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        if report.when != "call" and report.passed and not report.sections:
            self.filing.unfile(report)
        bench = Payload.of(report)
        if bench is None:
            if report.failed:
                self.counts.other_failures += 1
            return
        if report.when == "call":
            self._count(report.nodeid, bench)
        spend(report)

    def _count(self, nodeid: str, bench: Payload) -> None:
        if bench.stop is not None:
            self.finish.report(bench.stop_reason)
        # The monitor first: the summary and page the live record may write then show this row's
        # look.
        if self.deciding is not None and self.deciding.record(bench):
            stop = self.deciding.stop(self.config, self.session, self.ctx.results)
            self.finish.report(stop)
            self._write(f"echo-bench: stopping: {stop}")
        if self.live is not None:
            self.live.record(bench)
        said = self.counts.add(nodeid, bench)
        if said is not None:
            self._write(said)
        if bench.retries:
            self._write(f"echo-bench: {nodeid} took {bench.retries} retries")
        if self.ctx.budget:  # a reply over its bound: said as soon as its item reports
            for note in budget.over_notes(self.ctx.results, self.counts.over_said):
                self.counts.over_said += 1
                self._write(f"echo-bench: warning: {note}")

    @pytest.hookimpl(optionalhook=True)
    def pytest_testnodedown(self, node: Any, error: object | None) -> None:
        """xdist lost a worker: from now on every worker checks the file before it calls for an
        item (xdist hands the lost worker's queue on, and the lost worker may have recorded some of
        it)."""
        if error is None:
            return  # an orderly shutdown
        worker = str(getattr(getattr(node, "gateway", None), "id", "?"))
        self.counts.lost.append(worker)
        with contextlib.suppress(OSError):
            write_atomic(lost_path(self.ctx.results), f"{worker} {utcnow()}\n".encode())

    @pytest.hookimpl(optionalhook=True)
    def pytest_handlecrashitem(self, crashitem: str, report: pytest.TestReport, sched: Any) -> None:
        """The item a lost worker was running is not a failed test but an unrecorded one:
        incomplete."""
        key = self._key_of(crashitem)
        if key is None:
            return
        worker = str(getattr(getattr(getattr(report, "node", None), "gateway", None), "id", "?"))
        message = (f"worker {worker} was lost while running this item; resume runs it unless it "
                   "was recorded")
        report.outcome, report.when = "skipped", "call"
        report.longrepr = (crashitem.split("::", 1)[0], 0, f"incomplete: {message}")
        # As a worker sends it.
        report.bench = Payload.lost(key, message).to_wire()  # type: ignore[attr-defined]

    def _key_of(self, nodeid: str) -> tuple[str, str, str, int] | None:
        """(benchmark, task_id, arm, epoch) of a benchmark item's node id
        ``<spec>::<task_id>[<arm>]``.

        The node name holds the task id escaped (``escape_id``); arm names never hold "[", so
        the last "[" starts the arm whatever the id holds (and its epoch: ``collect.item_name``).
        """
        spec, _, name = nodeid.partition("::")
        benchmark = self._spec_of().get(spec)
        if benchmark is None or not name.endswith("]") or "[" not in name:
            return None
        cut = name.rindex("[")
        arm, epoch = split_name(name[cut + 1 : -1], self._epochs().get(benchmark, 1))
        return benchmark, unescape_id(name[:cut]), arm, epoch

    def _epochs(self) -> dict[str, int]:
        return {name: entry.samples for name, entry in self.ctx.meta.benchmarks.items()}

    @pytest.hookimpl(tryfirst=True)  # before the terminal reporter formats the traceback
    def pytest_keyboard_interrupt(self, excinfo: pytest.ExceptionInfo[BaseException]) -> None:
        """Ctrl-C or SIGTERM: record the stop first, then let pytest wind down (shielded from a
        second Ctrl-C)."""
        if isinstance(excinfo.value, pytest.Session.Interrupted):
            # pytest's own stop (a collection error, -x, our shouldstop), not a signal: the end
            # decides.
            return
        self.signals.shield()
        stop = StopReason("interrupted", self.signals.reason)
        write_stop(self.ctx.results, stop, at=utcnow(), results=self.ctx.results)
        if self.live is not None:
            status = int(pytest.ExitCode.INTERRUPTED)
            self.live.write_files(partial=True, status=status, stopped=str(stop))

    def pytest_collectreport(self, report: pytest.CollectReport) -> None:
        if report.failed:
            self.counts.collect_errors += 1

    @pytest.hookimpl(optionalhook=True)
    def pytest_json_modifyreport(self, json_report: dict[str, Any]) -> None:
        """pytest-json-report: the report's root carries the per-arm summary."""
        if self.finish.final is not None:
            # A stop message may quote a server.
            json_report["echo_bench"] = shown_json(self.finish.final)

    def pytest_internalerror(self, excrepr: object,
                             excinfo: pytest.ExceptionInfo[BaseException]) -> bool | None:
        if isinstance(excinfo.value, StoreError):
            # A full disk or read-only directory: say so plainly; the rows already written are
            # intact.
            print(f"echo-bench: {excinfo.value}")
        return None

    def _write(self, line: str) -> None:
        reporter = self.config.pluginmanager.get_plugin("terminalreporter")
        if reporter is not None:
            # xdist's progress characters leave a line open that write_line does not close (no path
            # began it).
            tw = reporter._tw
            opened = reporter.currentfspath is None and getattr(tw, "width_of_current_line", 0)
            reporter.write_line(("\n" if opened else "") + shown(line))

    # -- the end -----------------------------------------------------------------------------
    @pytest.hookimpl(tryfirst=True)
    def pytest_sessionfinish(self, session: pytest.Session, exitstatus: int) -> None:
        if not self.writes:
            # Collecting only: the file, its marker, summary and lock may belong to a live run.
            resumed = self.ctx.resume_upto is not None
            if exitstatus == pytest.ExitCode.NO_TESTS_COLLECTED and resumed:
                session.exitstatus = pytest.ExitCode.OK  # nothing left to collect: it is complete
            return
        finish, live = self.finish, self.live
        passed = True
        if live is not None and live.gates:
            passed, finish.gate_lines = live.check_gates()
        status = finish.record_exit(int(exitstatus), self.counts, live, passed)
        pytest_stop = session.shouldfail or session.shouldstop
        refused = record_end(self.ctx, finish.stopped, pytest_stop, self.counts.to_run)
        if refused:
            self._write(f"echo-bench: {refused}")
        if live is not None:
            ran = status in (pytest.ExitCode.OK, pytest.ExitCode.TESTS_FAILED)
            partial = bool(finish.stopped) or not ran
            finish.final = live.summary(partial, int(status), finish.stopped, finish.gate_lines)
            live.write_files(partial, int(status), finish.stopped, finish.gate_lines)
        session.exitstatus = status
        with contextlib.suppress(OSError):
            lock_path(self.ctx.results).unlink(missing_ok=True)  # every worker has finished by now

    def _stop_reason(self) -> str | None:
        return self.finish.stop_reason(self.session)

    @pytest.hookimpl(wrapper=True, tryfirst=True)
    def pytest_terminal_summary(self, terminalreporter: Any, exitstatus: int) -> Iterator[None]:
        # The outermost wrapper: the table comes after pytest's failure lists, where it is seen.
        yield
        if not self.writes:
            return
        watch = self.deciding
        decided = (lambda: watch.lines(self._stop_reason())) if watch is not None else list
        write_summary(terminalreporter, self.finish, self.counts, self.live, decided,
                      self._scores_code())

    def close(self) -> None:
        """Unconfigure: the summary made true to the file after a stop; the signal handlers as they
        were."""
        self.signals.restore()
        finish, live = self.finish, self.live
        if live is None or finish.final is None or not finish.stopped:
            return
        if live.reconcile(self.ctx.run_start):
            # xdist's workers are gone by now (it shuts them down after our sessionfinish): the
            # file is final.
            live.write_files(True, finish.final["status"], finish.stopped, finish.gate_lines)


def deferred_line(results: str, specs: Sequence[Spec]) -> str:
    """What the start of a ``--bench-judge later`` run says: which specs' judges wait, and how."""
    judged = [str(spec.path) for spec in specs if takes_judges(spec.scorer)]
    if not judged:
        return "echo-bench: --bench-judge later: no scorer of this run asks a judge"
    command = shlex.join(["echo-bench", "judge", results,
                          *(word for path in judged for word in ("--spec", path))])
    return (f"echo-bench: judging deferred (--bench-judge later): outputs are recorded unjudged; "
            f"grade them with: {command}")
