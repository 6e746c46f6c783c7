"""The controller plugin: what the user sees and the exit status (the
xdist controller, or a serial run).

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
from pytest_echo_bench.engine.outcome import ABORTED, INCOMPLETE, ROW, UNAVAILABLE, utcnow
from pytest_echo_bench.errors import StoreError
from pytest_echo_bench.plugin import budget
from pytest_echo_bench.plugin.collect import BenchItem, split_name
from pytest_echo_bench.plugin.context import COUNTED, SPEC_CACHE, RunContext
from pytest_echo_bench.plugin.deciding import deciding
from pytest_echo_bench.plugin.ending import record_end
from pytest_echo_bench.plugin.exit_status import Outcomes, Stops, decide
from pytest_echo_bench.plugin.live import LiveRun, end_table
from pytest_echo_bench.plugin.options import BenchOptions
from pytest_echo_bench.plugin.payload import Payload
from pytest_echo_bench.plugin.recorded import resume_flags
from pytest_echo_bench.plugin.signals import StopSignals
from pytest_echo_bench.plugin.worker import spend, unfile
from pytest_echo_bench.providers import cli_isolation
from pytest_echo_bench.store.files import (
    NEEDS_FIXING,
    StopReason,
    lock_path,
    lost_path,
    read_stop,
    write_atomic,
    write_stop,
)
from pytest_echo_bench.store.safe_text import shown, shown_json, unescape_id
from pytest_echo_bench.store.tally import FileTally
from pytest_echo_bench.suites import isolation

NOT_RECORDED = {INCOMPLETE: ("incomplete", "I", "INCOMPLETE"), ABORTED: ("aborted", "A", "ABORTED")}


class ControllerPlugin:
    """Registered as "echo-bench-controller" in the one process that reports."""

    def __init__(self, config: pytest.Config, opts: BenchOptions, ctx: RunContext) -> None:
        self.config, self.opts, self.ctx = config, opts, ctx
        self.to_run = 0
        self.counts: dict[str, int] = {}
        self.not_completed: dict[tuple[str, str], int] = {}
        self.unfinished: list[tuple[str, str]] = []
        self.unavailable: dict[tuple[str, str], int] = {}  # (arm, reason) -> items skipped
        # "<benchmark>/<arm>" not marked optional -> why it could not run
        self.required: dict[str, str] = {}
        self.other_failures = 0
        self.collect_errors = 0
        self._collected = False  # xdist: every worker reports the same ids; the first is taken
        self.lost: list[str] = []  # xdist workers lost during the run
        # the run's own stop, as the item that caused it said
        self.stop_reason: StopReason | None = None
        self.stopped = ""  # why the run stopped early, once decided
        # with a budget: spent against it, and the items complete for all arms
        self.budget_line = ""
        # after the budget's stop: the budget the resume command suggests
        self.next_budget: float | None = None
        self.over_said = 0  # replies over their bound already said on the terminal
        self._reporter: Any = None  # the terminal reporter (False: none), looked up once
        self._prefixes: tuple[str, ...] = ()  # "<spec>::": node ids of benchmark items
        self.live: LiveRun | None = None
        self.gate_lines: list[str] = []
        self.final: dict[str, Any] | None = None  # the end-of-run summary, once decided
        self.signals = StopSignals(config)  # a SIGTERM is passed on to its xdist workers
        self.signals.install()
        # collecting only reads: no summary, page or marker
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
        clis = cli_isolation.start_line(
            spec for spec, _ in (self.config.stash.get(SPEC_CACHE, None) or {}).values()
        )
        if clis is not None:
            self._write(clis)
        self._write_order()
        self.live = LiveRun(
            Path(self.ctx.results),
            self.ctx.run_id,
            list(self.ctx.meta.benchmarks),
            Path(self.opts.html) if self.opts.html else None,
            self.opts.progress_every,
            self._write,
            self._gates(),
            counted=self.config.stash.get(COUNTED, None) or FileTally(),
            epochs=self._epochs(),
            budget=self.ctx.budget,
        )
        # the summary and the page show the controller's own figures, while running too
        if self.deciding is not None:
            self.live.decide = lambda stop, running: self.deciding.sequential(
                stop or self._stop_reason(), running
            )
        self.live.start()

    def _gates(self) -> list[Gate]:
        """The gates with their arms named as the tallies key them (checked
        by ``build_context`` already)."""
        arms = self.ctx.meta.arms
        return list(bind_gates(self.opts.gates, arms)) if arms else list(self.opts.gates)

    def _write_order(self) -> None:
        order = self.ctx.order
        if order.get("order") == "random":
            self._write(
                f"echo-bench: items in a stratified random order (seed {order.get('seed')}; "
                "--bench-order file for file order)"
            )
        if self.deciding is not None:
            self.deciding.start(Path(self.ctx.results), self.ctx.resume_upto is not None)
            # both named alike
            pairs = ", ".join(f"{b}/{x} vs {b}/{y}" for b, x, y in self.deciding.monitor.plan.pairs)
            self._write(
                self.deciding.note
                or f"echo-bench: stops when decided: {pairs} (anytime-valid, "
                f"alpha {self.deciding.monitor.plan.alpha:g})"
            )

    def _scores_code(self) -> bool:
        """Whether a spec of this run has its answers' code executed
        (the sandbox's isolation matters)."""
        loaded = self.config.stash.get(SPEC_CACHE, None) or {}
        return any(spec.scorer in isolation.CODE_SCORERS for spec, _ in loaded.values())

    def pytest_collection_finish(self, session: pytest.Session) -> None:
        """Serial: this process collected (xdist: see ``pytest_xdist_node_collection_finished``)."""
        ids = [i.nodeid for i in session.items if isinstance(i, BenchItem)]
        self.to_run = len(ids)
        if self.live is not None:
            self.live.expect(ids, self._spec_of())

    def pytest_report_collectionfinish(
        self, config: pytest.Config, items: Sequence[pytest.Item]
    ) -> str | None:
        if self.ctx.resume_upto is None:
            return None
        return self._resume_line(sum(isinstance(i, BenchItem) for i in items))

    @pytest.hookimpl(optionalhook=True)
    def pytest_xdist_node_collection_finished(self, node: Any, ids: Sequence[str]) -> None:
        if self._collected:
            return
        self._collected = True
        self.to_run = len(ids)
        if self.live is not None:
            self.live.expect(ids, self._spec_of())
        if self.ctx.resume_upto is not None:
            self._write(self._resume_line(len(ids)))

    def _resume_line(self, to_run: int) -> str:
        return (
            f"echo-bench: resuming {self.ctx.results}: {self.ctx.resume_recorded} recorded, "
            f"{to_run} to run"
        )

    def _spec_of(self) -> dict[str, str]:
        return {str(info["spec"]): name for name, info in self.ctx.meta.benchmarks.items()}

    # -- reports -----------------------------------------------------------------------------
    def pytest_report_teststatus(self, report: pytest.TestReport) -> tuple[str, str, str] | None:
        bench = Payload.of(report)
        if bench and report.when == "call" and bench.kind in NOT_RECORDED:
            return NOT_RECORDED[bench.kind]
        return None

    @pytest.hookimpl(trylast=True)  # after the terminal reporter has filed the report
    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        if report.when != "call" and report.passed and not report.sections:
            self._unfile(report)
        bench = Payload.of(report)
        if bench is None:
            if report.failed:
                self.other_failures += 1
            return
        if report.when == "call":
            self._count(report.nodeid, bench)
        spend(report)

    def _count(self, nodeid: str, bench: Payload) -> None:
        self.counts[bench.kind] = self.counts.get(bench.kind, 0) + 1
        if bench.stop is not None and self.stop_reason is None:
            self.stop_reason = bench.stop_reason
        # The monitor first: the summary and page the live record may
        # write then show this row's look.
        if self.deciding is not None and self.deciding.record(bench):
            stop = self.deciding.stop(self.config, self.session, self.ctx.results)
            self.stop_reason = self.stop_reason or stop
            self._write(f"echo-bench: stopping: {stop}")
        if self.live is not None:
            self.live.record(bench)
        if bench.kind != ROW:
            key = (bench.benchmark, bench.arm)
            self.not_completed[key] = self.not_completed.get(key, 0) + 1
            if bench.kind == UNAVAILABLE:  # one reason per arm, not one line per item
                self._unavailable(bench)
            else:
                self.unfinished.append((nodeid, bench.message))
        if bench.retries:
            self._write(f"echo-bench: {nodeid} took {bench.retries} retries")
        if self.ctx.budget:  # a reply over its bound: said as soon as its item reports
            for note in budget.over_notes(self.ctx.results, self.over_said):
                self.over_said += 1
                self._write(f"echo-bench: warning: {note}")

    def _unavailable(self, bench: Payload) -> None:
        reason = (bench.arm, bench.message)
        # said at once: a user watching a long run can fix it now
        if reason not in self.unavailable:
            self._write(f"echo-bench: arm {bench.arm} stopped: {bench.message}")
        self.unavailable[reason] = self.unavailable.get(reason, 0) + 1
        if not bench.optional:
            self.required.setdefault(f"{bench.benchmark}/{bench.arm}", bench.message)

    def _unfile(self, report: pytest.TestReport) -> None:
        """A benchmark item's silent setup/teardown report leaves the
        terminal reporter's list (``unfile``)."""
        if self._reporter is None:
            self._reporter = self.config.pluginmanager.get_plugin("terminalreporter") or False
            self._prefixes = tuple(f"{spec}::" for spec in self._spec_of())
        if report.nodeid.startswith(self._prefixes):
            unfile(self._reporter, report)

    @pytest.hookimpl(optionalhook=True)
    def pytest_testnodedown(self, node: Any, error: object | None) -> None:
        """xdist lost a worker: from now on every worker checks the file before it calls for an item
        (xdist hands the lost worker's queue on, and the lost worker
        may have recorded some of it)."""
        if error is None:
            return  # an orderly shutdown
        worker = str(getattr(getattr(node, "gateway", None), "id", "?"))
        self.lost.append(worker)
        with contextlib.suppress(OSError):
            write_atomic(lost_path(self.ctx.results), f"{worker} {utcnow()}\n".encode())

    @pytest.hookimpl(optionalhook=True)
    def pytest_handlecrashitem(self, crashitem: str, report: pytest.TestReport, sched: Any) -> None:
        """The item a lost worker was running is not a failed test but
        an unrecorded one: incomplete."""
        key = self._key_of(crashitem)
        if key is None:
            return
        worker = str(getattr(getattr(getattr(report, "node", None), "gateway", None), "id", "?"))
        message = (
            f"worker {worker} was lost while running this item; resume runs it unless it was "
            "recorded"
        )
        report.outcome, report.when = "skipped", "call"
        report.longrepr = (crashitem.split("::", 1)[0], 0, f"incomplete: {message}")
        # as a worker sends it
        report.bench = Payload.lost(key, message).to_wire()  # type: ignore[attr-defined]

    def _key_of(self, nodeid: str) -> tuple[str, str, str, int] | None:
        """(benchmark, task_id, arm, epoch) of a benchmark item's node
        id ``<spec>::<task_id>[<arm>]``.

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
        return {
            name: int(info.get("epochs") or 1) for name, info in self.ctx.meta.benchmarks.items()
        }

    # before the terminal reporter spends time formatting the traceback
    @pytest.hookimpl(tryfirst=True)
    def pytest_keyboard_interrupt(self, excinfo: pytest.ExceptionInfo[BaseException]) -> None:
        """Ctrl-C or SIGTERM: record the stop first, then let pytest wind down
        (shielded from a second Ctrl-C)."""
        if isinstance(excinfo.value, pytest.Session.Interrupted):
            # pytest's own stop (a collection error, -x, our
            # shouldstop), not a signal: the end decides
            return
        self.signals.shield()
        stop = StopReason("interrupted", self.signals.reason)
        write_stop(self.ctx.results, stop, at=utcnow(), results=self.ctx.results)
        if self.live is not None:
            self.live.write_files(
                partial=True, status=int(pytest.ExitCode.INTERRUPTED), stopped=str(stop)
            )

    def pytest_collectreport(self, report: pytest.CollectReport) -> None:
        if report.failed:
            self.collect_errors += 1

    @pytest.hookimpl(optionalhook=True)
    def pytest_json_modifyreport(self, json_report: dict[str, Any]) -> None:
        """pytest-json-report: the report's root carries the per-arm summary."""
        if self.final is not None:
            json_report["echo_bench"] = shown_json(self.final)  # a stop message may quote a server

    def pytest_internalerror(
        self, excrepr: object, excinfo: pytest.ExceptionInfo[BaseException]
    ) -> bool | None:
        if isinstance(excinfo.value, StoreError):
            # A full disk or read-only directory: say so plainly; the
            # rows already written are intact.
            print(f"echo-bench: {excinfo.value}")
        return None

    def _write(self, line: str) -> None:
        reporter = self.config.pluginmanager.get_plugin("terminalreporter")
        if reporter is not None:
            # xdist's progress characters leave a line open that write_line
            # does not close (no path began it)
            opened = reporter.currentfspath is None and getattr(
                reporter._tw, "width_of_current_line", 0
            )
            reporter.write_line(("\n" if opened else "") + shown(line))

    # -- the end -----------------------------------------------------------------------------
    @pytest.hookimpl(tryfirst=True)
    def pytest_sessionfinish(self, session: pytest.Session, exitstatus: int) -> None:
        # collecting only: the file, its marker, summary and lock may belong to a live run
        if not self.writes:
            if (
                exitstatus == pytest.ExitCode.NO_TESTS_COLLECTED
                and self.ctx.resume_upto is not None
            ):
                # nothing left to collect: the sweep is complete
                session.exitstatus = pytest.ExitCode.OK
            return
        passed = True
        if self.live is not None and self.live.gates:
            passed, self.gate_lines = self.live.check_gates()
        status = self.final_status(int(exitstatus), passed)
        refused = record_end(
            self.ctx, self.stopped, session.shouldfail or session.shouldstop, self.to_run
        )
        if refused:
            self._write(f"echo-bench: {refused}")
        if self.live is not None:
            partial = bool(self.stopped) or status not in (
                pytest.ExitCode.OK,
                pytest.ExitCode.TESTS_FAILED,
            )
            self.final = self.live.summary(partial, int(status), self.stopped, self.gate_lines)
            self.live.write_files(partial, int(status), self.stopped, self.gate_lines)
        session.exitstatus = status
        with contextlib.suppress(OSError):
            lock_path(self.ctx.results).unlink(missing_ok=True)  # every worker has finished by now

    def final_status(self, status: int, gates_passed: bool = True) -> int:
        """Decided by ``exit_status.decide``; this only gathers what it
        needs and writes what it decided."""
        left = self.counts.get(INCOMPLETE, 0) + self.counts.get(ABORTED, 0)
        stop, details = self._budget_stop()
        outcomes = Outcomes(
            status,
            left,
            tuple(self.lost),
            dict(self.required),
            self.collect_errors,
            self.other_failures,
            self.ctx.resume_upto is not None,
            self.opts.strict,
            self._has_rows(),
            gates_passed,
            stop,
            details,
        )
        decided = decide(outcomes, Stops(read_stop(self.ctx.results), self.stop_reason))
        if decided.write and decided.stop is not None:
            write_stop(
                self.ctx.results,
                decided.stop,
                at=utcnow(),
                results=self.ctx.results,
                **decided.details,
            )
        self.stopped = str(decided.stop) if decided.stop is not None else ""
        return decided.status

    def _budget_stop(self) -> tuple[StopReason | None, dict[str, Any]]:
        """The budget's stop when it refused a call: spent, what the
        rest needs, the pairs complete."""
        damaged = (
            budget.settle_lost(self.ctx.results, self.ctx.budget_limits)[1]
            if self.ctx.budget
            else ""
        )
        # every worker has exited: a hold left is a lost one's
        self.budget_line = f"echo-bench: {damaged}" if damaged else ""
        spend = (
            budget.read(self.ctx.results, self.ctx.budget_limits)
            if self.ctx.budget and not damaged
            else None
        )
        if spend is None:
            return None, {}
        counted = self.live.counted if self.live is not None else FileTally()
        # read on from where it was: the end table reads on from here
        counted.update(Path(self.ctx.results))
        complete = budget.complete_items(
            counted, self.ctx.meta.arms, self.live.items if self.live is not None else ()
        )
        self.budget_line = f"echo-bench: budget: {spend.text()}; {budget.items_text(complete)}"
        if not spend.refused:
            return None, {}
        # a spec's own limit: raise it there
        self.next_budget = spend.suggested() if spend.run_binds else None
        return budget.stop_of(spend, complete)

    def _stop_reason(self) -> str | None:
        """The stop marker's reason, else pytest's own stop (``--maxfail``,
        ``-x``): not "ran to the end"."""
        stop, session = read_stop(self.ctx.results), self.session
        why = session is not None and (session.shouldfail or session.shouldstop)
        return stop.reason if stop is not None else f"pytest: {why}" if why else None

    def _has_rows(self) -> bool:
        path = Path(self.ctx.results)
        return path.exists() and path.stat().st_size > 0

    def resume_command(self) -> str:
        cmd = ["pytest", "--bench-resume", self.ctx.results]
        workers = self.config.getoption("numprocesses", None)
        if workers:
            cmd += ["-n", str(workers)]
        # what a plain resume would not take itself
        cmd += resume_flags(self.config, self.opts, self.ctx.options)
        # the budget's stop suggests more; any other keeps the ceiling
        usd = self.next_budget or self.opts.budget_usd
        if usd is not None:
            # the shortest text that reads back as the same amount
            cmd += ["--bench-budget-usd", str(usd)]
        # The rootdir, named: pasted in any directory, the resume finds the specs the
        # meta line names there, and only there (a results file's own paths never leave
        # the rootdir: context._inside).
        return shlex.join([*cmd, "--rootdir", str(self.config.rootpath)])

    @pytest.hookimpl(wrapper=True, tryfirst=True)
    def pytest_terminal_summary(self, terminalreporter: Any, exitstatus: int) -> Iterator[None]:
        # The outermost wrapper: the table comes after pytest's failure lists, where it is seen.
        yield
        if not self.writes:
            return
        tr = terminalreporter
        tr.section("echo-bench summary")
        # Names in the table come from specs, reasons and messages from providers: shown escaped.
        for line in end_table(
            Path(self.ctx.results), self.not_completed, self.live.counted if self.live else None
        ):
            tr.write_line(shown(line))
        for (arm, reason), count in sorted(self.unavailable.items()):
            tr.write_line(shown(f"not run: {count} items of arm {arm}: {reason}"))
        for nodeid, message in self.unfinished[:5]:
            tr.write_line(shown(f"not completed: {nodeid}: {message}"))
        if len(self.unfinished) > 5:
            tr.write_line(f"... and {len(self.unfinished) - 5} more not completed")
        if self.ctx.resume_upto is not None and self.to_run == 0 and not self.stopped:
            tr.write_line(
                f"echo-bench: sweep complete: every selected item is recorded in {self.ctx.results}"
            )
        for line in self.gate_lines:
            tr.write_line(line, red="FAILED" in line, green="FAILED" not in line)
        if self.budget_line:
            tr.write_line(self.budget_line)
        for line in self.deciding.lines(self._stop_reason()) if self.deciding is not None else ():
            tr.write_line(shown(line))
        if self.config.get_verbosity() > 0 and self.live is not None and self.live.decisions:
            tr.write_line(
                f"limiter decisions (the last {len(self.live.decisions)}, all processes):"
            )
            # Each process's arrive in turn with its items' reports: their UTC stamps put
            # them in time order (a stable sort on the stamp alone: a process's own order
            # stands within one millisecond).
            for line in sorted(self.live.decisions, key=lambda line: line.partition(" ")[0]):
                tr.write_line(f"  {line}")  # escaped by the worker that sent it (plugin.payload)
        tr.write_line(f"results: {self.ctx.results}")
        if self._scores_code() and isolation.machine().missing():
            tr.write_line(isolation.summary_line(), yellow=True)
        if self.stopped:
            then = (
                "fix that, then resume with"
                if self.stopped.split(":", 1)[0] in NEEDS_FIXING
                else "resume with"
            )
            tr.write_line(
                shown(f"echo-bench: stopped early ({self.stopped}); {then}:", newlines=False),
                bold=True,
                red=True,
            )
            tr.write_line(f"  {self.resume_command()}", bold=True)

    def close(self) -> None:
        """Unconfigure: the summary made true to the file after a stop;
        the signal handlers as they were."""
        self.signals.restore()
        if (
            self.live is not None
            and self.final is not None
            and self.stopped
            and self.live.reconcile(self.ctx.run_start)
        ):
            # xdist's workers are gone by now (it shuts them down after our
            # sessionfinish): the file is final.
            self.live.write_files(True, self.final["status"], self.stopped, self.gate_lines)
