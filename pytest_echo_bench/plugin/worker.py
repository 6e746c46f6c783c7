"""The worker plugin: where items are collected and run (an xdist worker, or a serial run).

It collects the spec files, deselects what a shard or a resume leaves out, runs each item through
the engine (several calls in flight), hands each report a plain-JSON payload for the controller,
and closes the results file at the end.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from types import MappingProxyType
from typing import Any

import pytest

from pytest_echo_bench.budget.hold import Budget
from pytest_echo_bench.budget.ledger import Ledger
from pytest_echo_bench.datasets.registry import load_benchmark
from pytest_echo_bench.engine.limiter import Limits
from pytest_echo_bench.engine.outcome import ROW, Outcome
from pytest_echo_bench.engine.pool import Prefetcher
from pytest_echo_bench.engine.runner import Runner
from pytest_echo_bench.engine.stop import StopSignal
from pytest_echo_bench.plugin.collect import OUTCOME, RUN, BenchItem, SpecFile
from pytest_echo_bench.plugin.context import RECORDED, SPEC_CACHE, RunContext
from pytest_echo_bench.plugin.options import BenchOptions
from pytest_echo_bench.plugin.order import RANDOM, ordered
from pytest_echo_bench.plugin.payload import Payload
from pytest_echo_bench.plugin.shard import parse_shard
from pytest_echo_bench.plugin.signals import StopSignals
from pytest_echo_bench.plugin.xdist_state import WorkerQueue, worker_count, worker_id
from pytest_echo_bench.store.cache import ResponseCache
from pytest_echo_bench.store.reader import read_index
from pytest_echo_bench.store.records import Key, KeySet
from pytest_echo_bench.store.runrows import RunRows
from pytest_echo_bench.store.safe_text import shown, shown_json
from pytest_echo_bench.store.writer import ResultsWriter
from pytest_echo_bench.suites import isolation

# how long a stopping run waits for calls in flight before leaving them to resume
STOP_GRACE_S = 1.5


class WorkerPlugin:
    """Registered as "echo-bench-worker" in every process that runs benchmark items.

    ``remote`` is True in an xdist worker: its reports are sent on to the controller, so once
    sent it drops what nothing reads any more; in a serial run the controller plugin does that.
    """

    def __init__(
        self, config: pytest.Config, opts: BenchOptions, ctx: RunContext, remote: bool
    ) -> None:
        self.config, self.opts, self.ctx, self.remote = config, opts, ctx, remote
        isolation.require(opts.require_isolation)
        self.spec_paths = {Path(p) for p in ctx.specs}
        # an xdist worker's collection and ordering parse each spec once
        config.stash.setdefault(SPEC_CACHE, {})
        self.writer = ResultsWriter(
            Path(ctx.results), opts.fsync, meta=ctx.meta.to_json(), identity=ctx.results_id
        )
        self.stop = StopSignal(Path(ctx.results))
        cache = ResponseCache(Path(ctx.cache)) if ctx.cache else None
        recorded = RunRows(Path(ctx.results), ctx.run_start, ctx.meta.benchmark)
        self.budget = Budget(Ledger(ctx.results, ctx.budget_limits)) if ctx.budget else None
        # No endpoint's adaptive limit goes above the pool; an arm's
        # rate_limit is split among the workers.
        limits = Limits(self.stop, ceiling=opts.concurrency, processes=worker_count(config))
        self.runner = Runner(
            self.writer,
            self.stop,
            ctx.run_id,
            worker_id(config) or "main",
            self._request_stop,
            cache,
            recorded,
            self.budget,
            limits,
        )
        self.prefetcher = Prefetcher(self.runner, opts.concurrency, STOP_GRACE_S)
        self.queue = WorkerQueue(config) if remote else None
        self.shard = parse_shard(ctx.shard or None)  # the controller's resolved K/N, or none
        self.session: pytest.Session | None = None
        # a benchmark item's setup/teardown report, until logged
        self._quiet: pytest.TestReport | None = None
        self._reporter: Any = None  # the terminal reporter, found on first use (False: none)
        # serial: session.items' benchmark items, in order
        self._bench: list[BenchItem] | None = None
        self._pos = 0  # serial: where in them the next item to run should be
        config.stash[RUN] = self.outcome
        self.signals = StopSignals()
        # a SIGTERM to the whole process group stops a worker as Ctrl-C does, not mid-row
        if remote:
            self.signals.install()

    # -- collection --------------------------------------------------------------------------
    def pytest_collect_file(self, file_path: Path, parent: pytest.Collector) -> SpecFile | None:
        if file_path in self.spec_paths:
            return SpecFile.from_parent(parent, path=file_path)
        return None

    def pytest_sessionstart(self, session: pytest.Session) -> None:
        self.session = session

    @pytest.hookimpl(trylast=True)  # after -k/-m deselection, so "to run" counts what will run
    def pytest_collection_modifyitems(
        self, config: pytest.Config, items: list[pytest.Item]
    ) -> None:
        if self.ctx.order.get("order") == RANDOM:
            self._order(config, items)
        shard = self.shard
        if shard is not None:
            _deselect(config, items, lambda i: isinstance(i, BenchItem) and not shard.owns(i.key))
        if self.ctx.resume_upto is not None:
            recorded = self._recorded()
            _deselect(
                config, items, lambda i: isinstance(i, BenchItem) and is_recorded(recorded, i.key)
            )
        # the arms each item runs: every process collects the same, so all agree
        if self.budget is not None:
            for item in items:
                if isinstance(item, BenchItem):
                    pair = (item.spec.benchmark, item.example.id, item.epoch)
                    self.budget.plan[pair] = (*self.budget.plan.get(pair, ()), item.arm)

    def _order(self, config: pytest.Config, items: list[pytest.Item]) -> None:
        """The benchmark items in the sweep's order, placed by each spec's whole dataset: a
        shard or a resume then leaves out some of one order, and every xdist worker
        computes it alike (plugin.order)."""
        slots = [i for i, item in enumerate(items) if isinstance(item, BenchItem)]
        bench: list[BenchItem] = [items[i] for i in slots]  # type: ignore[misc]
        universe = {
            spec.benchmark: examples
            for spec, examples in (
                load_benchmark(p, config.stash.get(SPEC_CACHE, None))
                for p in {i.spec.path for i in bench}
            )
        }
        for slot, item in zip(slots, ordered(bench, self.ctx.order, universe), strict=True):
            items[slot] = item

    def _recorded(self) -> KeySet:
        # Every process reads the same prefix of the file (up to the controller's offset), so all
        # xdist workers deselect identically even while others append; the controller read it.
        recorded = self.config.stash.get(RECORDED, None)
        if recorded is not None:
            return recorded
        return read_index(Path(self.ctx.results), self.ctx.resume_upto, self.ctx.retry_errors).keys

    # -- running -----------------------------------------------------------------------------
    def outcome(self, item: BenchItem) -> Outcome:
        return self.prefetcher.outcome(item, self._upcoming(item))

    def _upcoming(self, item: BenchItem) -> list[BenchItem]:
        """The items this process will run next, so their calls can start now."""
        if self.opts.concurrency == 1 or self.session is None:
            return []
        if self.queue is not None:
            items = self.session.items
            window = [items[i] for i in self.queue.upcoming(self.prefetcher.lookahead)]
            return [it for it in window if isinstance(it, BenchItem)]
        if self._bench is None:  # the items are final once they run: list the benchmark ones once
            self._bench = [it for it in self.session.items if isinstance(it, BenchItem)]
        start = self._position(self._bench, item) + 1
        # A slice of a list made once: at 256 in flight the window is 512 items, for every item.
        return self._bench[start : start + self.prefetcher.lookahead]

    def _position(self, items: list[BenchItem], item: BenchItem) -> int:
        """Serial runs go through the items in order: follow along instead of indexing them all."""
        pos = self._pos  # the item after the last one seen; or the same one again (a rerun)
        if not (pos < len(items) and items[pos] is item):
            pos = next(
                (
                    n
                    for n in (pos - 1, *range(len(items)))
                    if 0 <= n < len(items) and items[n] is item
                ),
                len(items),
            )
        self._pos = pos + 1
        return pos

    def _request_stop(self, message: str) -> None:
        if self.session is not None and not self.session.shouldstop:
            # a worker passes this to the controller (xdist >= 3.6.1)
            self.session.shouldstop = message

    @pytest.hookimpl(wrapper=True)
    def pytest_runtest_makereport(self, item: pytest.Item, call: pytest.CallInfo[None]) -> Any:
        report = yield
        if isinstance(item, BenchItem) and call.when == "call":
            outcome = item.stash.get(OUTCOME, None)
            if outcome is not None:
                # plain JSON: it travels to the controller
                report.bench = Payload.of_item(item, outcome).to_wire()
        elif isinstance(item, BenchItem) and call.when == "teardown" and OUTCOME in item.stash:
            # the row (with the whole output) is on disk: keep no copy per item
            del item.stash[OUTCOME]
        if isinstance(item, BenchItem) and call.when != "call":
            self._quiet = report
        return report

    @pytest.hookimpl(trylast=True)  # xdist has sent the report on by now
    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        """In an xdist worker, drop what nothing reads any more (in a
        serial run the controller does)."""
        if not self.remote:
            return
        if report is self._quiet and report.passed and not report.sections:
            # The worker's terminal reporter prints nothing, but at the end it scans every kept
            # setup/teardown report for each failed test, as the controller's would (see unfile).
            if self._reporter is None:
                self._reporter = self.config.pluginmanager.get_plugin("terminalreporter") or False
            unfile(self._reporter, report)
        self._quiet = None
        spend(report)

    @pytest.hookimpl(optionalhook=True)
    def pytest_json_runtest_metadata(
        self, item: pytest.Item, call: pytest.CallInfo[None]
    ) -> dict[str, Any] | None:
        """pytest-json-report: each benchmark test's entry carries its result row.

        Shown as the terminal shows it (controls and bidi characters escaped): a report is read
        in terminals and pages too; the results file keeps the exact text.
        """
        outcome = (
            item.stash.get(OUTCOME, None)
            if isinstance(item, BenchItem) and call.when == "call"
            else None
        )
        if outcome is None:
            return None
        if outcome.row is None:
            return {"echo_bench": {"kind": outcome.kind, "message": shown(outcome.message)}}
        return {"echo_bench": shown_json(dataclasses.asdict(outcome.row))}

    # -- the end -----------------------------------------------------------------------------
    @pytest.hookimpl(tryfirst=True)  # before the terminal reporter formats the traceback
    def pytest_keyboard_interrupt(self, excinfo: pytest.ExceptionInfo[BaseException]) -> None:
        """Ctrl-C or SIGTERM, in every process that runs items: keep only the frame pytest shows.

        pytest prints the last frame (without --full-trace) but formats every frame first,
        reading and parsing each one's source file: about a second of a stop, in each process.
        """
        if not self.config.option.fulltrace:
            excinfo.traceback = excinfo.traceback[-1:]

    @pytest.hookimpl(wrapper=True, tryfirst=True)  # before anyone (the controller) reads the file
    def pytest_sessionfinish(self, session: pytest.Session, exitstatus: int) -> Iterator[None]:
        stopping = (
            self.stop.is_set()
            or bool(session.shouldstop)
            or exitstatus == pytest.ExitCode.INTERRUPTED
        )
        # A stopping run gives calls in flight a few seconds to land,
        # then leaves: resume redoes them.
        self.prefetcher.close(stopping)
        self._close_files()
        self.stop.persist()
        return (yield)

    def _close_files(self) -> None:
        """The results file and its lock, the ledger, the providers' and the cache's
        connections, once the calls are done."""
        self.writer.close()
        if self.budget is not None:
            self.budget.ledger.close()
        self.runner.close()

    def close(self) -> None:
        """Unconfigure: idempotent; a session that never ran still
        releases the file and the lock."""
        self.prefetcher.close(True)
        self._close_files()
        isolation.require(False)
        self.signals.restore()
        if RUN in self.config.stash:
            del self.config.stash[RUN]


def _deselect(
    config: pytest.Config, items: list[pytest.Item], drop: Callable[[pytest.Item], bool]
) -> None:
    """Remove items the way --lf does: edit the list in place and tell the deselected hook."""
    dropped = [i for i in items if drop(i)]
    if dropped:
        items[:] = [i for i in items if not drop(i)]
        config.hook.pytest_deselected(items=dropped)


def is_recorded(recorded: KeySet, key: Key) -> bool:
    # Rows of the older format name no benchmark (and may have no meta line): match on
    # (task_id, arm) alone for those.
    return key in recorded or ("", key[1], key[2], key[3]) in recorded


_NO_KEYWORDS: Mapping[str, Any] = MappingProxyType({})
_NO_SECTIONS: Any = ()  # for the lists: immutable and shared, like the keywords


def unfile(reporter: Any, report: pytest.TestReport) -> None:
    """Drop a passed, silent setup/teardown report of a benchmark item from the terminal reporter.

    pytest keeps every such report and, for each failed test, scans them all for teardown output
    (``TerminalReporter._get_teardown_reports``): with 10,000 items and 3,000 wrong answers that
    took longer than the sweep. These reports carry no output, so nothing printed changes. Called
    right after the reporter filed ``report``, so it is the last one in the list.
    """
    filed = reporter.stats.get("") if reporter else None
    if filed and filed[-1] is report:
        filed.pop()


def spend(report: pytest.TestReport) -> None:
    """Drop what every hook has now read from a benchmark item's call report.

    pytest keeps every report to the end (the terminal reporter's counts and failure lists),
    with a dict of the item's keywords, two lists and our payload each: about 500 bytes an
    item that nothing reads after this hook. Unrecorded kinds keep their payload: the short
    summary asks ``pytest_report_teststatus`` again for their word. A report with captured
    output keeps its sections.
    """
    bench = Payload.of(report)
    if bench is None:
        return
    if bench.kind == ROW:
        del report.bench
    report.keywords = _NO_KEYWORDS  # read-only: a late writer fails loudly instead of sharing
    if not report.sections:
        report.sections = _NO_SECTIONS
    if not report.user_properties:
        report.user_properties = _NO_SECTIONS
