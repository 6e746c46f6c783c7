"""A judging pass (``echo-bench judge``): the stored outputs of a sweep graded with the spec's
judged scorer and judges, no arm called.

The judges are called as a sweep calls them (``engine.runner``'s runtimes: their limiter, slots,
retries and classifier, the response cache, the budget, the run-wide stop), and each output is
graded as a sweep grades it (``engine.grading``). Each row is appended to the output the moment
its item is graded, under the output's ownership lock, so a pass killed loses at most the items
in flight; run again, it skips what the output holds and the response cache answers the judge
calls already made, so each (key, judge) is judged once.
"""

from __future__ import annotations

import math
import threading
from collections.abc import Callable, Mapping
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pytest_echo_bench.budget.hold import Budget
from pytest_echo_bench.budget.ledger import Ledger, lost_in
from pytest_echo_bench.datasets.example import Example, Loaded
from pytest_echo_bench.datasets.prompts import Prompter
from pytest_echo_bench.engine.declared import declared
from pytest_echo_bench.engine.grading import Grading, judge_fields
from pytest_echo_bench.engine.judging import ItemJudges
from pytest_echo_bench.engine.limiter import Limits
from pytest_echo_bench.engine.outcome import ABORTED, UNAVAILABLE, Job, Outcome, utcnow
from pytest_echo_bench.engine.runner import Runner
from pytest_echo_bench.engine.stop import StopSignal
from pytest_echo_bench.errors import BudgetError, StoreError
from pytest_echo_bench.results.ending import collection
from pytest_echo_bench.results.judge_source import Pair, Sources, Stored
from pytest_echo_bench.results.judged import Held, read_output
from pytest_echo_bench.results.regrade import regraded
from pytest_echo_bench.scoring.judgment import judge_cost
from pytest_echo_bench.scoring.verdict import ERROR, UNJUDGED, Verdict
from pytest_echo_bench.spec.load import Spec
from pytest_echo_bench.store.cache import ResponseCache
from pytest_echo_bench.store.files import StopReason, encode_line, end_line, stop_path
from pytest_echo_bench.store.owner import Ownership
from pytest_echo_bench.store.writer import ResultsWriter

WORKER = "judge"  # what the engine's messages call this process
DEFAULT_CONCURRENCY = 8  # items in flight when no judge sets a ``concurrency:`` (the sweep's)


@dataclass(frozen=True)
class JudgeOptions:
    """How a pass runs: where it writes, its response cache (None: off), the items it keeps in
    flight (None: the judges' ``concurrency``), its budget, and whether rows it left without a
    grade are judged again."""

    output: Path
    cache: Path | None
    concurrency: int | None = None
    budget_usd: float | None = None
    retry: bool = False


@dataclass
class Tally:
    """What a pass did: rows written (graded, unjudged, scorer failures, carried over), keys
    skipped as already judged or carried over, keys whose source changed, items left for a
    re-run, and the judges' spend."""

    total: int = 0
    judged: int = 0
    unjudged: int = 0
    failed: int = 0
    carried: int = 0
    skipped: int = 0
    kept: int = 0  # error rows an earlier pass carried over, their source rows unchanged
    changed: int = 0  # keys judged again: their source rows changed since (a resumed sweep)
    left: int = 0
    spent: float = 0.0
    # why it stopped early (None: it did not), and what the engine said of it
    stop: StopReason | None = None
    messages: list[str] = field(default_factory=list)
    budget: Spent | None = None  # under a budget: the ledger's figures at the end

    @property
    def written(self) -> int:
        return self.judged + self.unjudged + self.failed + self.carried


@dataclass(frozen=True)
class Spent:
    """The budget's figures at the end: spent (what the output's rows spent before included),
    the limit, the judge calls refused and the worst case they need."""

    spent: float
    limit: float
    refused: int
    needed: float

    def suggested(self) -> float:
        """A budget to run the rest with: what is spent and what the refused calls may need, up
        to the cent (as a sweep's budget stop suggests)."""
        return math.ceil((self.spent + self.needed) * 100 - 1e-7) / 100


@dataclass
class JudgeJob:
    """One stored output to grade, as the engine takes an item (``engine.outcome.Job``)."""

    spec: Spec
    example: Example
    arm: str
    epoch: int
    stored: Stored
    prompters: Mapping[str, Prompter] = field(default_factory=dict)
    asked: StoredJudges | None = None  # the judges its scorer was handed

    @property
    def nodeid(self) -> str:
        epoch = "" if self.epoch == 1 else f"-e{self.epoch}"
        return f"{self.spec.path.name}::{self.example.id}[{self.arm}{epoch}]"


class StoredJudges(ItemJudges):
    """A sweep's judges, and the stored outputs of the item's other arms (``answer_of``), which a
    pairwise scorer compares against."""

    def __init__(self, made: ItemJudges, answers: Mapping[str, str]) -> None:
        super().__init__(made.item, made.runtimes, made.calls, made.failures)
        self._answers = answers

    def answer_of(self, arm: str) -> str | None:
        return self._answers.get(arm)


def concurrency(specs: Mapping[str, Loaded], given: int | None) -> int:
    """Items in flight: as given, else the largest ``concurrency`` of a judge."""
    if given is not None:
        return given
    set_ = [conf.concurrency for spec, _ in specs.values() for conf in declared(spec).values()]
    return max((c for c in set_ if c), default=DEFAULT_CONCURRENCY)


class JudgingPass:
    """One pass over ``sources`` into ``opts.output``; ``progress`` is told after each item."""

    def __init__(self, specs: Mapping[str, Loaded], sources: Sources, opts: JudgeOptions,
                 progress: Callable[[Tally], None] = lambda tally: None) -> None:
        self.specs = {str(spec.path): spec for spec, _ in specs.values()}
        self.sources, self.opts, self.progress = sources, opts, progress
        self.workers = concurrency(specs, opts.concurrency)
        self.tally = Tally(total=len(sources.rows))
        self.closed = threading.Event()  # no new item starts: one raised what none explains
        self._lock = threading.Lock()
        assert sources.meta is not None  # read_sources always makes one
        self.meta = sources.meta.to_json()
        self.stop = StopSignal(opts.output)

    def run(self) -> Tally:
        """Judge what the output does not hold yet; the tally of what was done."""
        ownership = Ownership(self.opts.output, rewrite="run echo-bench judge")
        ownership.acquire()
        try:
            held = read_output(self.opts.output, self.meta, self.opts.retry)  # it may refuse
            # A marker an earlier pass left (its quota stop) would stop this one at once.
            stop_path(self.opts.output).unlink(missing_ok=True)
            writer = ResultsWriter(self.opts.output, meta=self.meta, identity=ownership.identity)
            try:
                writer.start()
                self._judge_all(writer, held)
                if self.tally.written or self.tally.stop is not None:
                    writer.append(self._end_line())
            finally:
                writer.close()
        finally:
            ownership.release()
        return self.tally

    def _end_line(self) -> bytes:
        """How the judged rows' sweep ended, for the report: this pass's stop, else the source
        sweep's (a sweep stopped early stays so), with where a run of it stopped when decided."""
        ended = collection(self.sources.files)
        stopped: dict[str, Any] | None = None
        if self.tally.stop is not None:
            stopped = {"reason": self.tally.stop.reason, "message": self.tally.stop.message}
        elif ended.early:
            stopped = {"reason": ended.reason, "message": ended.message,
                       **({"parts_decided": True} if ended.parts_decided else {})}
        return end_line(WORKER, utcnow(), stopped, ended.decided_text)

    def _judge_all(self, writer: ResultsWriter, held: Held) -> None:
        todo = self._todo(held)
        budget = self._budget(held)
        run_id = str(self.meta.get("run_id", ""))
        cache = ResponseCache(self.opts.cache) if self.opts.cache is not None else None
        limits = Limits(self.stop, ceiling=self.workers)
        runner = Runner(writer, self.stop, run_id, WORKER, self._said, cache, None, budget, limits)
        grading = Grading(writer, run_id, WORKER, runner.failures, budget, runner.arm,
                          lambda job: self._judges(runner, job))
        try:
            self._pool(todo, lambda stored: self._one(grading, writer, stored))
        finally:
            runner.close()
            if budget is not None:
                self._budget_end(budget)
                budget.ledger.close()
        self.tally.left = len(todo) - self.tally.written

    def _todo(self, held: Held) -> list[Stored]:
        """The rows to judge: those the output does not hold (or holds without a grade, under
        ``retry``), and those whose source row changed since; the rest are counted as skipped
        (judged before) or kept (error rows carried over before)."""
        todo = []
        for stored in self.sources.rows:
            if held.changed(stored.key, stored.data):
                self.tally.changed += 1
            elif stored.key in held.done or stored.key in held.again:
                if stored.carried:
                    self.tally.kept += 1
                else:
                    self.tally.skipped += 1
                continue
            todo.append(stored)
        return todo

    def _pool(self, todo: list[Stored], one: Callable[[Stored], None]) -> None:
        """Each item on a pool thread, at most ``workers`` in flight (nothing else is queued); none
        starts once the pass stops. An exception no item's handling explains stops new items and
        is raised here once those in flight have ended; so is Ctrl-C, which stops their calls."""
        slots = threading.BoundedSemaphore(self.workers)
        crashed: list[BaseException] = []

        def done(future: Future[None]) -> None:
            exc = future.exception()
            if exc is not None:
                crashed.append(exc)
                self.closed.set()
            slots.release()

        with ThreadPoolExecutor(self.workers, thread_name_prefix="echo-bench-judge") as pool:
            try:
                for stored in todo:
                    slots.acquire()
                    if self.stop.is_set() or self.closed.is_set():
                        slots.release()
                        break
                    pool.submit(one, stored).add_done_callback(done)
            except BaseException:
                self.stop.event.set()  # the calls in flight give up: the re-run asks them again
                raise
        if crashed:
            raise crashed[0]

    def _judges(self, runner: Runner, job: Job) -> ItemJudges:
        assert isinstance(job, JudgeJob)
        pair: Pair = (job.spec.benchmark, job.example.id, job.epoch)
        job.asked = StoredJudges(runner.judges(job), self.sources.answers.get(pair, {}))
        return job.asked

    def _one(self, grading: Grading, writer: ResultsWriter, stored: Stored) -> None:
        if self.stop.is_set() or self.closed.is_set():
            return
        if stored.carried:
            self._append(grading, writer, stored, None)
            return
        spec = self.specs[stored.spec_path]
        key = stored.key
        job = JudgeJob(spec, stored.example, key[2], key[3], stored)
        graded = grading.grade(job, stored.row.output or "")
        if isinstance(graded, Outcome):
            self._ended(job, graded)
            return
        self._append(grading, writer, stored, graded)

    def _append(self, grading: Grading, writer: ResultsWriter, stored: Stored,
                verdict: Verdict | None) -> None:
        """The row of ``stored`` with ``verdict`` (None: carried over as it is)."""
        data = dict(stored.data)
        if verdict is not None:
            data = regraded(data, stored.row, verdict, stored.example)
            data.pop("judge_cost_usd", None)  # the row's judges are this pass's: so is the cost
            data.update(judge_fields(verdict))
            # The row keeps its arm call's run id and times: when it was judged names this
            # judging apart, so a report counts a key judged again (--retry-unjudged) twice and a
            # copy of this row (a merge) once (``results.spent``).
            data["judged_at"] = utcnow()
        try:
            writer.append(encode_line(data))
        except StoreError as exc:
            ended = grading.failures.unrecorded(exc)  # the pass stops; the rows written stand
            self._note(ended.stop or StopReason("store-error", str(exc)), "")
            return
        with self._lock:
            self._count(verdict)
        self.progress(self.tally)

    def _count(self, verdict: Verdict | None) -> None:
        tally = self.tally
        if verdict is None:
            tally.carried += 1
            return
        tally.spent += judge_cost(verdict.judgments) or 0.0
        if verdict.status == UNJUDGED:
            tally.unjudged += 1
        elif verdict.status == ERROR:
            tally.failed += 1
        else:
            tally.judged += 1

    def _ended(self, job: JudgeJob, outcome: Outcome) -> None:
        """An item that ended without a verdict: left for a re-run; what stops the pass stops it."""
        failure = job.asked.failure if job.asked is not None else None
        if outcome.kind == ABORTED and failure is not None and isinstance(failure[1], BudgetError):
            # Nothing more is spent, yet every item left is tried: each refused call counts what
            # it needs, so the budget the end suggests judges them all.
            self._note(StopReason("budget", outcome.message), "")
        elif outcome.kind == UNAVAILABLE:
            who = f"judge {failure[0]!r}" if failure is not None else f"scorer of {job.nodeid}"
            reason = StopReason("arm-unavailable", f"{who} cannot work here: {outcome.message}")
            self.stop.trigger(reason, results=str(self.opts.output))  # at once: no judge to ask
            self._note(reason, f"echo-bench judge: {reason.message}")
        elif outcome.stop is not None:  # exhausted, a local error: the engine has said it
            self._note(outcome.stop, "")

    def _note(self, reason: StopReason, message: str) -> None:
        with self._lock:
            if self.tally.stop is None:  # the first stop names the pass's end
                self.tally.stop = reason
            if message and message not in self.tally.messages:
                self.tally.messages.append(message)

    def _said(self, text: str) -> None:
        """What the engine says as it stops the pass (a judge out of quota, a local error)."""
        with self._lock:
            if text not in self.tally.messages:
                self.tally.messages.append(text)

    def _budget(self, held: Held) -> Budget | None:
        """The pass's budget: a ledger beside the output, charged with what its rows cost and
        what the calls an earlier pass into it lost may have cost (``ledger.lost_in``: a pass
        killed mid-call was billed for calls no row holds, which this pass asks again)."""
        usd = self.opts.budget_usd
        if usd is None:
            return None
        limits = {"run": usd}
        sweep = str(self.meta.get("run_id", ""))
        out = self.opts.output
        # An output made anew (none was there) owes nothing to a ledger an old one left.
        lost = lost_in(out, sweep).get("run", 0.0) if held.resumed else 0.0
        ledger = Ledger(out, limits)
        ledger.create(limits, {"run": held.spent + lost}, lost={"run": lost} if lost else {},
                      sweep=sweep)
        return Budget(ledger)

    def _budget_end(self, budget: Budget) -> None:
        """The judges' spend and, when calls were refused, what they need."""
        state = budget.ledger.read()
        if state is not None and "run" in state.accounts:
            run = state.accounts["run"]
            self.tally.budget = Spent(run.spent, run.limit or 0.0, state.refused, state.needed)
