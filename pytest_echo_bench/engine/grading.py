"""Grading an obtained completion and recording its row, however the completion was obtained.

The row is appended the moment its item is graded, from whichever thread obtained it, so a crash
loses at most the items still in flight. A scorer that grades with judges is handed this item's
(``engine.judging``); a judge's failure decides the item as a call's failure would.
"""

from __future__ import annotations

import shlex
import time
from collections.abc import Callable
from typing import Any, cast

from pytest_echo_bench.budget.hold import Budget
from pytest_echo_bench.engine.arms import ArmRuntime
from pytest_echo_bench.engine.failures import Failures
from pytest_echo_bench.engine.fingerprint import item_digest
from pytest_echo_bench.engine.judging import ItemJudges
from pytest_echo_bench.engine.obtain import Obtained
from pytest_echo_bench.engine.outcome import ABORTED, ROW, UNAVAILABLE, Job, Outcome, utcnow
from pytest_echo_bench.engine.scope import LOCAL_HINT, described, local_cause
from pytest_echo_bench.errors import (
    AbortedError,
    ExhaustedError,
    LocalError,
    StoreError,
    UnavailableError,
)
from pytest_echo_bench.providers.answer import finite_cost
from pytest_echo_bench.scoring.judging import JudgedScorer
from pytest_echo_bench.scoring.judgment import judge_cost
from pytest_echo_bench.scoring.registry import get_scorer, takes_judges
from pytest_echo_bench.scoring.verdict import UNJUDGED, Verdict, failed, unjudged
from pytest_echo_bench.spec.load import Spec
from pytest_echo_bench.store.records import Row
from pytest_echo_bench.store.writer import ResultsWriter

Graded = Verdict | Outcome  # a verdict to record, or what the item came to without one


class Grading:
    """Grades and records the items of this process (``run_id``, ``worker``: what its rows say;
    ``arm`` and ``judges``: the runner's runtimes of an item's arm, and its scorer's judges;
    ``judge_later``: a judged scorer is not called, its items recorded unjudged for
    ``echo-bench judge``)."""

    def __init__(self, writer: ResultsWriter, run_id: str, worker: str, failures: Failures,
                 budget: Budget | None, arm: Callable[[Spec, str], ArmRuntime],
                 judges: Callable[[Job], ItemJudges], judge_later: bool = False) -> None:
        self.writer, self.run_id, self.worker = writer, run_id, worker
        self.failures, self.budget, self.arm, self.judges = failures, budget, arm, judges
        self.judge_later = judge_later

    def finish(self, item: Job, obtained: Obtained) -> Outcome:
        """Grade ``obtained`` (unless its call failed: its error verdict stands), record the row."""
        graded = obtained.failed
        if graded is None:
            graded = self.grade(item, obtained.completion.text)
        if isinstance(graded, Outcome):
            return graded
        return self.record(item, obtained, graded)

    def grade(self, item: Job, output: str) -> Graded:
        scorer = get_scorer(item.spec.scorer)
        assert scorer is not None  # checked at collection
        judged = takes_judges(item.spec.scorer)
        if judged and self.judge_later:
            command = shlex.join(["echo-bench", "judge", str(self.writer.path), "--spec",
                                  str(item.spec.path)])
            return unjudged(f"judging deferred: {command}")
        judges = self.judges(item) if judged else None
        options = item.spec.scorer_options
        try:
            if judges is None:
                verdict: Verdict | Exception = scorer(output, item.example, options)
            else:
                verdict = cast(JudgedScorer, scorer)(output, item.example, options, judges=judges)
        except Exception as exc:  # a scorer crash is this item's failure, not the run's
            verdict = exc
        if judges is not None and judges.failure is not None:
            # Whatever the scorer made of it (a wrong answer, a crash): the judge's failure decides.
            return self._judge_failed(item, *judges.failure)
        if isinstance(verdict, Exception):
            return self._crashed(item, verdict)
        if judges is not None:
            _forget_ungraded(judges, verdict)
        return verdict

    def _crashed(self, item: Job, exc: Exception) -> Graded:
        if isinstance(exc, UnavailableError):  # it cannot grade this arm here (isolation required)
            return self._unavailable(item, exc)
        local = local_cause(exc)
        if local is not None:  # ... unless it is our machine's (a full disk under the sandbox)
            cause = LocalError(f"scorer {item.spec.scorer}: {described(local)}; {LOCAL_HINT}")
            return self.failures.local(item, cause)
        text = self.failures.text(item.spec, exc)
        return failed(f"scorer {item.spec.scorer} crashed: {type(exc).__name__}: {text}")

    def _judge_failed(self, item: Job, name: str, exc: BaseException) -> Graded:
        if isinstance(exc, UnavailableError):  # no item of the arm can be graded here
            return self._unavailable(item, exc)
        if isinstance(exc, (ExhaustedError, AbortedError, LocalError)):  # the run stops
            return self.failures.outcome(item, exc)
        # This item's judging failed (its prompt refused, the retries used up): the answer is
        # kept, ungraded, never wrong; ``--bench-retry-errors`` grades it again.
        return unjudged(f"unjudged: judge {name}: {self.failures.text(item.spec, exc)}")

    def _unavailable(self, item: Job, exc: UnavailableError) -> Outcome:
        """The arm stops: its items cannot be graded here."""
        down = self.arm(item.spec, item.arm).breaker.trip(exc)
        text = self.failures.text(item.spec, down)
        return Outcome(UNAVAILABLE, message=text, misconfigured=down.misconfigured)

    def record(self, item: Job, obtained: Obtained, verdict: Verdict) -> Outcome:
        done, spec = obtained.completion, item.spec
        budget = self.budget
        row = Row(
            task_id=item.example.id, arm=item.arm, passed=verdict.passed, detail=verdict.detail,
            wall_seconds=round(time.perf_counter() - obtained.t0, 4), sub_calls=done.sub_calls,
            benchmark=spec.benchmark, status=verdict.status, output=done.text,
            answer=verdict.answer,
            target=item.example.target, attempts=obtained.attempts, started_at=obtained.started,
            finished_at=utcnow(), worker=self.worker, run_id=self.run_id,
            subtask=item.example.subtask, usage=done.usage, retries=obtained.retries,
            extra={**done.extra, **verdict.extra, **_over(budget)}, cost_usd=done.cost_usd,
            cost_units=_units(done.cost_usd, spec.cost_unit_usd), cache_hits=done.cache_hits,
            epoch=item.epoch if spec.epochs > 1 else None,
            charged_usd=budget.charged() if budget is not None else None,
            served_model=done.model, served_fingerprint=done.fingerprint,
            item_sha256=item_digest(item.example), batch_id=obtained.batch_id,
            **judge_fields(verdict),
        )
        try:
            self.writer.append(row.to_line())
        except AbortedError as exc:
            return Outcome(ABORTED, message=str(exc))
        except StoreError as exc:
            return self.failures.unrecorded(exc)
        return Outcome(ROW, row, retries=obtained.retries)


def _forget_ungraded(judges: ItemJudges, verdict: Verdict) -> None:
    """An unjudged verdict's replies that gave no grade (all the item's, when its judgments do
    not say) leave the response cache, so ``--bench-retry-errors`` asks those judges again."""
    if verdict.status == UNJUDGED:
        ungraded = {j.judge for j in verdict.judgments if j.grade is None}
        judges.forget(ungraded or None)


def _over(budget: Budget | None) -> dict[str, float]:
    """The row's note of what its replies reported beyond their worst cases (the budget charged
    it)."""
    over = budget.over() if budget is not None else 0.0
    return {"budget_over_usd": over} if over > 0 else {}


def _units(cost: float | None, unit: float | None) -> float | None:
    # Within the readers' limit (``finite_cost``): a cost over a tiny unit must not be recorded as
    # a figure no reader reads.
    return finite_cost(round(cost / unit, 6)) if cost is not None and unit else None


def judge_fields(verdict: Verdict) -> dict[str, Any]:
    """The row fields of what a verdict's judges did: its score, each judgment and their cost
    (each left out when None or empty: a row without a judge has none of them). A sweep's row and
    a judging pass's (``results.judge``) record them alike."""
    fields = {"score": verdict.score,
              "judgments": [j.to_json() for j in verdict.judgments] or None,
              "judge_cost_usd": judge_cost(verdict.judgments)}
    return {name: value for name, value in fields.items() if value is not None}
