"""Running items: provider calls with retries, grading, recording, and several calls in flight.

Each process owns one ``Runner``. A row is appended the moment its item is graded (from
whichever thread made the call), so a crash loses at most the calls still in flight. The
``Prefetcher`` starts the calls of the items this process will run next, up to
``--bench-concurrency`` at once; pytest then reports each item in order.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import json
import os
import queue
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import Future
from concurrent.futures import TimeoutError as FuturesTimeout
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .cache import CACHEABLE, ResponseCache, cache_key
from .calls import Classifier, call_with_retries
from .errors import (
    AbortedError,
    ExhaustedError,
    IncompleteError,
    PermanentError,
    StoreError,
    UnavailableError,
)
from .fingerprint import arm_descriptor
from .providers import PROVIDERS, Completion, Provider, Request
from .records import Row
from .scoring import IN_PROCESS, Verdict, get_scorer
from .store import ResultsWriter

if TYPE_CHECKING:
    from .collect import BenchItem
    from .spec import Spec

# What an item came to: "row" (graded and recorded) or one of the unrecorded kinds.
ROW, INCOMPLETE, ABORTED, UNAVAILABLE = "row", "incomplete", "aborted", "unavailable"


@dataclass
class Outcome:
    kind: str
    row: Row | None = None
    message: str = ""
    retries: int = 0


def utcnow() -> str:
    return datetime.now(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


@dataclass
class StopSignal:
    """The run-wide stop: an in-process event plus a marker file every process can see."""

    marker: Path
    event: threading.Event = field(default_factory=threading.Event)

    def is_set(self) -> bool:
        if not self.event.is_set() and self.marker.exists():
            self.event.set()  # another worker hit exhaustion: start no new call here either
        return self.event.is_set()

    def wait(self, seconds: float) -> bool:
        """Sleep up to ``seconds``; True as soon as the run stops (here or in another process)."""
        deadline = time.monotonic() + seconds
        while (left := deadline - time.monotonic()) > 0:
            if self.event.wait(min(left, 0.25)) or self.is_set():
                return True
        return self.is_set()

    def trigger(self, record: dict[str, Any]) -> None:
        self.event.set()
        write_marker(self.marker, record)


def write_marker(marker: Path, record: dict[str, Any]) -> None:
    """Write the stop marker atomically; the first reason wins."""
    if marker.exists():
        return
    tmp = marker.with_name(f"{marker.name}.{os.getpid()}.{threading.get_ident()}.tmp")
    try:
        tmp.write_text(json.dumps(record, indent=1) + "\n", encoding="utf-8")
        os.link(tmp, marker)  # fails if another process got there first
    except FileExistsError:
        pass
    except OSError:
        pass  # the directory itself is unwritable: the exit status and message still say why
    finally:
        with contextlib.suppress(OSError):
            tmp.unlink(missing_ok=True)


class ArmRuntime:
    """Per (spec, arm): the provider (built once, lazily) and its concurrency limit."""

    def __init__(self, runner: Runner, spec: Spec, arm: str) -> None:
        self.runner, self.spec, self.arm = runner, spec, arm
        limit = spec.arms[arm].concurrency
        self.slots = threading.BoundedSemaphore(limit) if limit else None
        self.classifier = Classifier(spec.exhaustion_patterns, spec.transient_patterns)
        cacheable = runner.cache is not None and spec.arms[arm].provider in CACHEABLE
        self.descriptor = arm_descriptor(spec, arm) if cacheable else None
        self._provider: Provider | None = None
        self._unavailable: UnavailableError | None = None
        self._lock = threading.Lock()

    def cache_key(self, request: Request) -> str | None:
        return cache_key(self.descriptor, request.prompt, request.sample) if self.descriptor is not None else None

    @contextlib.contextmanager
    def slot(self) -> Iterator[None]:
        """One of the arm's ``concurrency:`` slots (no limit when unset)."""
        if self.slots is None:
            yield
            return
        with self.slots:
            yield

    @functools.cached_property
    def instant(self) -> bool:
        """Nothing to wait for: the provider answers at once and grading is a text check.

        Such items run on pytest's own thread; a pool thread would add only hand-offs (about
        0.7 ms of CPU per item, more than pytest spends on the item itself).
        """
        if self.spec.scorer not in IN_PROCESS:  # a sandbox run or a user's scorer may take time
            return False
        try:
            return bool(getattr(self.provider(), "instant", False))
        except UnavailableError:
            return True  # it fails at once, with its reason

    def provider(self) -> Provider:
        with self._lock:
            if self._unavailable:
                raise self._unavailable
            if self._provider is None:
                factory = PROVIDERS[self.spec.arms[self.arm].provider]
                try:
                    self._provider = factory(self.spec.arms[self.arm], self.spec, self.runner.caller_for(self.spec))
                except UnavailableError as exc:
                    self._unavailable = exc
                    raise
            return self._provider


class Runner:
    def __init__(self, writer: ResultsWriter, stop: StopSignal, run_id: str, worker: str,
                 on_stop: Callable[[str], None], cache: ResponseCache | None = None) -> None:
        self.writer, self.stop, self.run_id, self.worker = writer, stop, run_id, worker
        self.on_stop, self.cache = on_stop, cache
        self._arms: dict[tuple[str, str], ArmRuntime] = {}
        self._lock = threading.Lock()

    def arm(self, spec: Spec, name: str) -> ArmRuntime:
        with self._lock:
            key = (str(spec.path), name)
            if key not in self._arms:
                self._arms[key] = ArmRuntime(self, spec, name)
            return self._arms[key]

    def caller_for(self, spec: Spec) -> Callable[[str, Request], Completion]:
        """How a composite arm calls a sibling arm: the same slots, retries and classification."""

        def call(arm_name: str, request: Request) -> Completion:
            if arm_name not in spec.arms:
                raise PermanentError(f"arm {arm_name!r} is not in {spec.path.name}; known: {', '.join(spec.arms)}")
            with self.arm(spec, arm_name).slot():
                return self._call(spec, arm_name, dataclasses.replace(request, timeout_s=spec.timeout_s))[0]

        return call

    def _call(self, spec: Spec, arm: str, request: Request) -> tuple[Completion, int, int]:
        """(completion, attempts, retries); a cache hit makes no attempt at all."""
        runtime = self.arm(spec, arm)
        key = runtime.cache_key(request)
        hit = self.cache.get(key) if self.cache is not None and key else None
        if hit is not None:
            completion, attempts, retries = hit, 0, 0
        else:
            done = call_with_retries(runtime.provider(), request, spec.retries, runtime.classifier, self.stop)
            completion, attempts, retries = done.completion, done.attempts, len(done.retries)
            if self.cache is not None and key:
                self.cache.put(key, completion)
        if completion.cost_usd is None:
            # List price, cached or not: an arm's cost must not depend on what ran before it.
            completion.cost_usd = spec.cost(arm, completion.usage)
        return completion, attempts, retries

    def run(self, item: BenchItem) -> Outcome:
        """Call, grade and record one item; never raises for provider trouble."""
        if self.stop.is_set():
            return Outcome(ABORTED, message="the run is stopping (see the stop marker); not attempted")
        request = Request(item.example, item.arm, item.example.input, timeout_s=item.spec.timeout_s)
        with self.arm(item.spec, item.arm).slot():
            # Timed from the moment the arm's slot is ours: waiting for a slot is not the model's time.
            started, t0 = utcnow(), time.perf_counter()
            try:
                completion, attempts, retries = self._call(item.spec, item.arm, request)
            except UnavailableError as exc:
                return Outcome(UNAVAILABLE, message=str(exc))
            except AbortedError as exc:
                return Outcome(ABORTED, message=str(exc))
            except IncompleteError as exc:
                return Outcome(INCOMPLETE, message=f"not completed after {exc.attempts} attempts: {exc}")
            except ExhaustedError as exc:
                self._exhausted(item, exc)
                return Outcome(ABORTED, message=f"provider exhausted: {exc}")
            except PermanentError as exc:
                verdict = Verdict("error", None, f"error: {exc}")
                return self._record(item, Completion(""), verdict, started, t0, 1, 0)
        verdict = self._grade(item, completion.text)
        return self._record(item, completion, verdict, started, t0, attempts, retries)

    def _grade(self, item: BenchItem, output: str) -> Verdict:
        scorer = get_scorer(item.spec.scorer)
        assert scorer is not None  # checked at collection
        try:
            return scorer(output, item.example, item.spec.scorer_options)
        except Exception as exc:  # a scorer crash is this item's failure, not the run's
            return Verdict("error", None, f"error: scorer {item.spec.scorer} crashed: {type(exc).__name__}: {exc}")

    def _record(self, item: BenchItem, done: Completion, verdict: Verdict, started: str, t0: float,
                attempts: int, retries: int) -> Outcome:
        row = Row(
            task_id=item.example.id, arm=item.arm, passed=verdict.passed, detail=verdict.detail,
            wall_seconds=round(time.perf_counter() - t0, 4), sub_calls=done.sub_calls,
            benchmark=item.spec.benchmark, status=verdict.status, output=done.text, answer=verdict.answer,
            target=item.example.target, attempts=attempts, started_at=started, finished_at=utcnow(),
            worker=self.worker, run_id=self.run_id, subtask=item.example.subtask, usage=done.usage,
            retries=retries, extra={**done.extra, **verdict.extra}, cost_usd=done.cost_usd,
            cost_units=_units(done.cost_usd, item.spec.cost_unit_usd), cache_hits=done.cache_hits,
        )
        try:
            self.writer.append(row.to_line())
        except AbortedError as exc:
            return Outcome(ABORTED, message=str(exc))
        except StoreError as exc:
            # Disk full, read-only directory...: stop the run; the rows already written stay intact.
            self.stop.trigger({"reason": "store-error", "message": str(exc), "at": utcnow(),
                               "results": str(self.writer.path)})
            self.on_stop(f"echo-bench: {exc}")
            return Outcome(ABORTED, message=f"not recorded: {exc}")
        return Outcome(ROW, row, retries=retries)

    def _exhausted(self, item: BenchItem, exc: ExhaustedError) -> None:
        self.stop.trigger({
            "reason": "exhausted", "message": str(exc), "benchmark": item.spec.benchmark,
            "task_id": item.example.id, "arm": item.arm, "worker": self.worker, "at": utcnow(),
            "results": str(self.writer.path),
        })
        self.on_stop(f"echo-bench: provider exhausted on {item.nodeid}: {exc}")


def _units(cost: float | None, unit: float | None) -> float | None:
    return round(cost / unit, 6) if cost is not None and unit else None


class DaemonPool:
    """A fixed pool of daemon threads, started on first use.

    Unlike ThreadPoolExecutor (whose threads the interpreter joins at exit), a stopping run
    need not wait out a hung call: what is still in flight after the grace period is simply
    not recorded, and resume runs it again.
    """

    def __init__(self, size: int) -> None:
        self.size = size
        self._queue: queue.SimpleQueue[tuple[Future[Outcome], Callable[[], Outcome]] | None] = queue.SimpleQueue()
        self._threads: list[threading.Thread] = []

    def submit(self, fn: Callable[[], Outcome]) -> Future[Outcome]:
        future: Future[Outcome] = Future()
        self._queue.put((future, fn))
        if len(self._threads) < self.size:
            thread = threading.Thread(target=self._work, name=f"echo-bench-{len(self._threads)}", daemon=True)
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
        self._pool = DaemonPool(concurrency)
        self._futures: dict[str, Future[Outcome]] = {}
        self._instants: dict[tuple[int, str], bool] = {}  # per (spec, arm): run on pytest's thread

    def outcome(self, item: BenchItem, upcoming: Sequence[BenchItem]) -> Outcome:
        if self.concurrency == 1:
            return self.runner.run(item)  # no threads: the simplest path stays the simplest
        inline = self._instant(item)
        if not inline:
            self._submit(item)
        for nxt in upcoming[: self.lookahead]:
            if not self._instant(nxt):
                self._submit(nxt)
        if inline:
            return self.runner.run(item)
        return self._await(self._futures.pop(item.nodeid))

    def _instant(self, item: BenchItem) -> bool:
        key = (id(item.spec), item.arm)
        instant = self._instants.get(key)
        if instant is None:
            instant = self._instants[key] = self.runner.arm(item.spec, item.arm).instant
        return instant

    def _await(self, future: Future[Outcome]) -> Outcome:
        """The item's outcome; once the run stops, wait at most the grace period for it."""
        stopped_at: float | None = None
        while True:
            try:
                return future.result(timeout=0.25)
            except FuturesTimeout:
                pass
            if stopped_at is None and self.runner.stop.is_set():
                stopped_at = time.monotonic()
            if stopped_at is not None and time.monotonic() - stopped_at > self.grace:
                return Outcome(ABORTED, message="the run stopped while this call was in flight; not recorded")

    @property
    def lookahead(self) -> int:
        # Twice the pool size: a thread that finishes picks up the next queued item at once,
        # instead of waiting until pytest has reported (in order) the items before it.
        return 2 * self.concurrency

    def _submit(self, item: BenchItem) -> None:
        if item.nodeid not in self._futures:
            self._futures[item.nodeid] = self._pool.submit(lambda: self.runner.run(item))

    def close(self, stopping: bool) -> None:
        """Drop calls not yet started; when stopping, give those in flight the grace period."""
        self._pool.shutdown(self.grace if stopping else None)
