"""What runs a process's calls for the worker plugin: the engine's parts built from the run's
context (``Calling``), and the items this process runs next, whose calls start early
(``Upcoming``)."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path

import pytest

from pytest_echo_bench.budget.hold import Budget
from pytest_echo_bench.budget.ledger import Ledger
from pytest_echo_bench.engine.batch_ports import BatchRun
from pytest_echo_bench.engine.limiter import Limits
from pytest_echo_bench.engine.pool import Prefetcher
from pytest_echo_bench.engine.runner import Runner
from pytest_echo_bench.engine.stop import StopSignal
from pytest_echo_bench.plugin.collect import BenchItem
from pytest_echo_bench.plugin.context import RunContext
from pytest_echo_bench.plugin.options import BenchOptions
from pytest_echo_bench.plugin.xdist_state import WorkerQueue, worker_count, worker_id
from pytest_echo_bench.store.cache import ResponseCache
from pytest_echo_bench.store.runrows import RunRows
from pytest_echo_bench.store.writer import ResultsWriter

# How long a stopping run waits for calls in flight before leaving them to resume.
STOP_GRACE_S = 1.5
FEED_MAX = 100_000  # items of an xdist worker's queue a batch may gather at once


class Calling:
    """The results writer, the run-wide stop, the budget, the runner and the prefetcher that keeps
    calls in flight: made once per process, closed once its calls are done."""

    def __init__(self, config: pytest.Config, opts: BenchOptions, ctx: RunContext,
                 request_stop: Callable[[str], None]) -> None:
        self.writer = ResultsWriter(Path(ctx.results), opts.fsync, meta=ctx.meta.to_json(),
                                    identity=ctx.results_id)
        self.stop = StopSignal(Path(ctx.results))
        cache = ResponseCache(Path(ctx.cache)) if ctx.cache else None
        # Only an xdist worker can be handed the items of a lost one: a serial run has none to look
        # up, and skips the look for the controller's mark (a stat per item).
        remote = hasattr(config, "workerinput")
        recorded = RunRows(Path(ctx.results), ctx.run_start, ctx.meta.benchmark) if remote else None
        self.budget = Budget(Ledger(ctx.results, ctx.budget_limits)) if ctx.budget else None
        # No endpoint's adaptive limit goes above the pool; an arm's rate_limit is split among the
        # workers.
        limits = Limits(self.stop, ceiling=opts.concurrency, processes=worker_count(config))
        self.runner = Runner(self.writer, self.stop, ctx.run_id, worker_id(config) or "main",
                             request_stop, cache, recorded, self.budget, limits,
                             judge_later=opts.judge == "later",
                             batch=BatchRun(opts.batch, opts.batch_cancel, ctx.run_id))
        self.prefetcher = Prefetcher(self.runner, opts.concurrency, STOP_GRACE_S)

    def close(self, stopping: bool) -> None:
        """A stopping run gives calls in flight a few seconds to land, then leaves (resume redoes
        them; the batches still open are left running, or cancelled, for the resume to collect);
        then the results file and its lock, the ledger, the providers' and the cache's
        connections. Idempotent."""
        self.prefetcher.close(stopping)
        self.writer.close()
        if self.budget is not None:
            self.budget.ledger.close()
        self.runner.close()


class Upcoming:
    """The items this process will run next, so their calls can start now: from xdist's queue on
    a worker (``queue``), else from ``session.items`` in order."""

    def __init__(self, queue: WorkerQueue | None, lookahead: int) -> None:
        self.queue, self.lookahead = queue, lookahead
        self._bench: list[BenchItem] | None = None  # serial: session.items' benchmark items
        self._pos = 0  # serial: where in them the next item to run should be
        self._fed_at: float | None = None  # when the batches were last fed the items ahead

    def ahead(self, items: list[pytest.Item]) -> list[BenchItem]:
        """The items a batch may gather: serially every benchmark item, once; on an xdist worker
        its whole queue, at most once a second (a batch waits for its items to gather)."""
        now = time.monotonic()
        if self.queue is None:
            if self._fed_at is not None:
                return []
            self._fed_at = now
            return [it for it in items if isinstance(it, BenchItem)]
        if self._fed_at is not None and now - self._fed_at < 1.0:
            return []
        self._fed_at = now
        return [it for it in (items[i] for i in self.queue.upcoming(FEED_MAX))
                if isinstance(it, BenchItem)]

    def after(self, items: list[pytest.Item], item: BenchItem) -> list[BenchItem]:
        if self.queue is not None:
            window = [items[i] for i in self.queue.upcoming(self.lookahead)]
            return [it for it in window if isinstance(it, BenchItem)]
        if self._bench is None:  # the items are final once they run: list the benchmark ones once
            self._bench = [it for it in items if isinstance(it, BenchItem)]
        start = self._position(self._bench, item) + 1
        # A slice of a list made once: at 256 in flight the window is 512 items, for every item.
        return self._bench[start : start + self.lookahead]

    def _position(self, items: list[BenchItem], item: BenchItem) -> int:
        """Serial runs go through the items in order: follow along instead of indexing them all."""
        pos = self._pos  # the item after the last one seen; or the same one again (a rerun)
        if not (pos < len(items) and items[pos] is item):
            candidates = (pos - 1, *range(len(items)))
            found = (n for n in candidates if 0 <= n < len(items) and items[n] is item)
            pos = next(found, len(items))
        self._pos = pos + 1
        return pos
