"""The worker plugin: where items are collected and run (an xdist worker, or a serial run).

It collects the spec files, deselects what a shard or a resume leaves out, runs each item through
the engine (several calls in flight), hands each report a plain-JSON payload for the controller,
and closes the results file at the end.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from pytest_echo_bench.datasets.registry import load_benchmark
from pytest_echo_bench.engine.outcome import Outcome
from pytest_echo_bench.plugin.calling import Calling, Upcoming
from pytest_echo_bench.plugin.collect import OUTCOME, RUN, BenchItem, SpecFile
from pytest_echo_bench.plugin.context import RECORDED, SPEC_CACHE, RunContext
from pytest_echo_bench.plugin.filing import Filing, spend
from pytest_echo_bench.plugin.options import BenchOptions
from pytest_echo_bench.plugin.order import ordered
from pytest_echo_bench.plugin.payload import Payload
from pytest_echo_bench.plugin.shard import parse_shard
from pytest_echo_bench.plugin.signals import StopSignals
from pytest_echo_bench.plugin.xdist_state import WorkerQueue
from pytest_echo_bench.store.reader import read_index
from pytest_echo_bench.store.records import Key, KeySet
from pytest_echo_bench.store.safe_text import shown, shown_json
from pytest_echo_bench.suites import isolation


class WorkerPlugin:
    """Registered as "echo-bench-worker" in every process that runs benchmark items.

    ``remote`` is True in an xdist worker: its reports are sent on to the controller, so once
    sent it drops what nothing reads any more; in a serial run the controller plugin does that.
    ``calling`` holds the engine's parts (plugin.calling).
    """

    def __init__(self, config: pytest.Config, opts: BenchOptions, ctx: RunContext,
                 remote: bool) -> None:
        self.config, self.opts, self.ctx, self.remote = config, opts, ctx, remote
        isolation.require(opts.require_isolation)
        self.spec_paths = {Path(p) for p in ctx.specs}
        # An xdist worker's collection and ordering parse each spec once.
        config.stash.setdefault(SPEC_CACHE, {})
        self.calling = Calling(config, opts, ctx, self._request_stop)
        queue = WorkerQueue(config) if remote else None
        self.upcoming = Upcoming(queue, self.calling.prefetcher.lookahead)
        self.shard = parse_shard(ctx.shard or None)  # the controller's resolved K/N, or none
        self.session: pytest.Session | None = None
        self.filing = Filing(config)
        self._quiet: pytest.TestReport | None = None  # setup/teardown report, until logged
        config.stash[RUN] = self.outcome
        self.signals = StopSignals()
        if remote:  # a SIGTERM to the process group stops a worker as Ctrl-C does, not mid-row
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
        if self.ctx.meta.order is not None and self.ctx.meta.order.random:
            self._order(config, items)
        shard = self.shard
        if shard is not None:
            _deselect(config, items, lambda i: isinstance(i, BenchItem) and not shard.owns(i.key))
        if self.ctx.resume_upto is not None:
            recorded = self._recorded()
            dropped = _deselect(
                config, items, lambda i: isinstance(i, BenchItem) and is_recorded(recorded, i.key)
            )
            if self.calling.runner.batching is not None:  # a batch's rows cut short by a crash
                self.calling.runner.batching.recorded(dropped)
        budget = self.calling.budget
        # The arms each item runs: every process collects the same, so all agree.
        if budget is not None:
            for item in items:
                if isinstance(item, BenchItem):
                    pair = (item.spec.benchmark, item.example.id, item.epoch)
                    budget.plan[pair] = (*budget.plan.get(pair, ()), item.arm)

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
        for slot, item in zip(slots, ordered(bench, self.ctx.meta.order, universe), strict=True):
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
        batching = self.calling.runner.batching
        if batching is not None and self.session is not None and batching.takes(item):
            batching.feed(self.upcoming.ahead(self.session.items))
        return self.calling.prefetcher.outcome(item, self._upcoming(item))

    def _upcoming(self, item: BenchItem) -> list[BenchItem]:
        """The items this process will run next, so their calls can start now."""
        if self.opts.concurrency == 1 or self.session is None:
            return []
        return self.upcoming.after(self.session.items, item)

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
            self.filing.unfile(report)
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
        stop = self.calling.stop
        interrupted = exitstatus == pytest.ExitCode.INTERRUPTED
        stopping = stop.is_set() or bool(session.shouldstop) or interrupted
        # A stopping run gives calls in flight a few seconds to land, then leaves: resume redoes
        # them.
        self.calling.close(stopping)
        stop.persist()
        return (yield)

    def close(self) -> None:
        """Unconfigure: idempotent; a session that never ran still releases the file and the
        lock."""
        self.calling.close(True)
        isolation.require(False)
        self.signals.restore()
        if RUN in self.config.stash:
            del self.config.stash[RUN]


def _deselect(
    config: pytest.Config, items: list[pytest.Item], drop: Callable[[pytest.Item], bool]
) -> list[BenchItem]:
    """Remove items the way --lf does: edit the list in place and tell the deselected hook. The
    benchmark items removed."""
    dropped = [i for i in items if drop(i)]
    if dropped:
        items[:] = [i for i in items if not drop(i)]
        config.hook.pytest_deselected(items=dropped)
    return [i for i in dropped if isinstance(i, BenchItem)]


def is_recorded(recorded: KeySet, key: Key) -> bool:
    # Rows of the older format name no benchmark (and may have no meta line): match on
    # (task_id, arm) alone for those.
    return key in recorded or ("", key[1], key[2], key[3]) in recorded
