"""Several calls in flight: a pool of daemon threads and the prefetcher that feeds it.

The ``Prefetcher`` starts the calls of the items this process will run next, up to
``--bench-concurrency`` at once; pytest then reports each item in order.
"""

from __future__ import annotations

import queue
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import Future
from concurrent.futures import TimeoutError as FuturesTimeout

from pytest_echo_bench.engine.outcome import ABORTED, Job, Outcome
from pytest_echo_bench.engine.runner import Runner


class DaemonPool:
    """A fixed pool of daemon threads, started on first use.

    Unlike ThreadPoolExecutor (whose threads the interpreter joins at exit), a stopping run
    need not wait out a hung call: what is still in flight after the grace period is simply
    not recorded, and resume runs it again.
    """

    def __init__(self, size: int) -> None:
        self.size = size
        self._queue: queue.SimpleQueue[tuple[Future[Outcome], Callable[[], Outcome]] | None] = (
            queue.SimpleQueue()
        )
        self._threads: list[threading.Thread] = []

    def submit(self, fn: Callable[[], Outcome]) -> Future[Outcome]:
        future: Future[Outcome] = Future()
        self._queue.put((future, fn))
        if len(self._threads) < self.size:
            thread = threading.Thread(
                target=self._work, name=f"echo-bench-{len(self._threads)}", daemon=True
            )
            thread.start()
            self._threads.append(thread)
        return future

    def _work(self) -> None:
        while (task := self._queue.get()) is not None:
            future, fn = task
            if not future.set_running_or_notify_cancel():
                continue
            try:
                future.set_result(fn())
            except BaseException as exc:  # delivered to the item that waits on it
                future.set_exception(exc)

    def shutdown(self, grace: float | None) -> None:
        """Cancel what has not started; wait for calls in flight (at most ``grace`` seconds)."""
        while True:
            try:
                task = self._queue.get_nowait()
            except queue.Empty:
                break
            if task is not None:
                task[0].cancel()
        for _ in self._threads:
            self._queue.put(None)
        deadline = None if grace is None else time.monotonic() + grace
        for thread in self._threads:
            thread.join(None if deadline is None else max(0.0, deadline - time.monotonic()))


class Prefetcher:
    """Keeps up to ``concurrency`` item calls in flight, in the order this process runs items."""

    def __init__(self, runner: Runner, concurrency: int, grace: float) -> None:
        self.runner = runner
        self.concurrency = concurrency
        self.grace = grace
        self._stopped_at: float | None = None  # when an item first saw the run stopping
        self._pool = DaemonPool(concurrency)
        self._futures: dict[str, Future[Outcome]] = {}
        self._instants: dict[tuple[int, str], bool] = {}  # per (spec, arm): run on pytest's thread
        self._frontier: Job | None = None  # the last item the previous look-ahead window ended with

    def outcome(self, item: Job, upcoming: Sequence[Job]) -> Outcome:
        batching = self.runner.batching
        if batching is not None and batching.takes(item):
            # Its batch's answer, recorded by the submitter's thread as the batch is read.
            return self._await(batching.wait(item))
        if self.concurrency == 1:
            return self._run(item)  # no threads: the simplest path stays the simplest
        inline = self._instant(item)
        if not inline:
            self._submit(item)
        self._look_ahead(upcoming[: self.lookahead])
        if inline:
            return self._run(item)
        return self._await(self._futures.pop(item.nodeid))

    def _look_ahead(self, window: Sequence[Job]) -> None:
        """Start the calls of the items in ``window`` not started yet.

        The window slides by one item per item run, so only its newest items are new: they are
        the ones after the last item the previous window ended with. Looking at all of them
        again cost about 1 ms per item at 256 in flight (512 look-ups), as much as pytest's own
        work for the item; a window that no longer holds that item is looked at whole.
        """
        frontier, start = self._frontier, 0
        if frontier is not None:
            for back in range(len(window) - 1, -1, -1):
                if window[back] is frontier:
                    start = back + 1
                    break
        batching = self.runner.batching
        for nxt in window[start:]:
            if batching is not None and batching.takes(nxt):
                batching.future(nxt)  # gathers for a batch: no thread waits for it
            elif not self._instant(nxt):
                self._submit(nxt)
        if window:
            self._frontier = window[-1]

    def _instant(self, item: Job) -> bool:
        key = (id(item.spec), item.arm)
        instant = self._instants.get(key)
        if instant is None:
            instant = self._instants[key] = self.runner.arm(item.spec, item.arm).instant
        return instant

    def _await(self, future: Future[Outcome]) -> Outcome:
        """The item's outcome; once the run stops, wait at most the grace period for it."""
        stopped_at = self._stopped_at
        while True:
            try:
                return future.result(timeout=0.25)
            except FuturesTimeout:
                pass
            if stopped_at is None and self.runner.stop.is_set():
                stopped_at = self._stopped_at = time.monotonic()
            if stopped_at is not None and time.monotonic() - stopped_at > self.grace:
                return Outcome(
                    ABORTED, message="the run stopped while this call was in flight; not recorded"
                )

    @property
    def lookahead(self) -> int:
        # Twice the pool size: a thread that finishes picks up the next queued item at once,
        # instead of waiting until pytest has reported (in order) the items before it.
        return 2 * self.concurrency

    def _submit(self, item: Job) -> None:
        if item.nodeid not in self._futures:
            self._futures[item.nodeid] = self._pool.submit(lambda: self._run(item))

    def _run(self, item: Job) -> Outcome:
        """The item's outcome, with its endpoint's limit and the 429s it
        met (on the thread that ran it)."""
        outcome = self.runner.run(item)
        outcome.throttled = self.runner.limits.take_throttled()
        outcome.limit = self.runner.limits.current(item.spec.arms[item.arm])
        outcome.pace = self.runner.limits.pace(item.spec.arms[item.arm])
        outcome.decisions = tuple(self.runner.limits.take_decisions())
        return outcome

    def close(self, stopping: bool) -> list[str]:
        """Drop calls not yet started; when stopping, give those in flight the grace period.
        The batches left open on the provider, by id.

        One grace period in all: what an item already waited since the stop counts against it.
        """
        batching = self.runner.batching
        left = batching.close(stopping, self.grace) if batching is not None else []
        if not stopping:
            self._pool.shutdown(None)
            return left
        # a signal reached pytest's thread before any item saw the stop
        if self._stopped_at is None:
            self._stopped_at = time.monotonic()
        # Called again at unconfigure: the grace has been given, once (a second full grace here
        # made Ctrl-C take 11 s with 64 calls held open, past a container's 10 s).
        self._pool.shutdown(max(0.0, self.grace - (time.monotonic() - self._stopped_at)))
        return left
