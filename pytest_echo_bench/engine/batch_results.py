"""One request's result from an ended batch, taken as a live call's would be.

A completion is cached, priced and handed to grading and recording; an error goes through the
arm's classifier (transient: into a later batch while the item has attempts left; quota: the run
stops; permanent: the item's error row); a request that expired or was cancelled unrun goes into
a later batch. What ``settle`` returns says whether the request is done with this batch.
"""

from __future__ import annotations

from typing import Protocol

from pytest_echo_bench.engine.arms import ArmRuntime
from pytest_echo_bench.engine.batch_items import Pending
from pytest_echo_bench.engine.calling import CallPath, priced
from pytest_echo_bench.engine.failures import Failures
from pytest_echo_bench.engine.obtain import Obtained
from pytest_echo_bench.engine.outcome import ABORTED, INCOMPLETE, ROW, Job, Outcome
from pytest_echo_bench.errors import (
    ArmError,
    IncompleteError,
    PermanentError,
    ProviderError,
    TransientError,
)
from pytest_echo_bench.providers.answer import checked
from pytest_echo_bench.providers.base import Completion
from pytest_echo_bench.providers.batch import BatchResult

MAX_UNRUN = 10  # batches that may end without running a request before its item gives up
# What ``settle`` did with a request: recorded or ended (done with the batch), sent again
# (done too: a later batch holds it), or left for a resume to read the batch again.
DONE, AGAIN, KEEP = "done", "again", "keep"


class Recorder(Protocol):
    """How an arrived answer becomes its item's row: the runner's ``run`` of a batched item."""

    def __call__(self, item: Job, obtained: Obtained) -> Outcome: ...


def settle(p: Pending, result: BatchResult, batch_id: str, runtime: ArmRuntime, calls: CallPath,
           failures: Failures, record: Recorder) -> str:
    """Take ``result`` (of ``p``'s request, in batch ``batch_id``) as its item's answer."""
    if result.completion is not None:
        completion = checked(result.completion)
        calls.keep(runtime, p.request, completion)
        priced(runtime, completion, batch=True)
        return _recorded(p, record(p.item, _obtained(p, completion, batch_id)))
    if result.error is not None:
        return _errored(p, result.error, batch_id, runtime, failures, record)
    p.unrun += 1
    if p.unrun > MAX_UNRUN:
        said = f"expired or cancelled unrun in {p.unrun} batches; left for a resume"
        return _ended(p, Outcome(INCOMPLETE, message=said))
    return AGAIN


def _errored(p: Pending, exc: ProviderError, batch_id: str, runtime: ArmRuntime,
             failures: Failures, record: Recorder) -> str:
    error = runtime.classifier.classify(exc)
    if isinstance(error, ArmError):  # a batch answers every request alike: not an arm's end
        error = error.fallback or PermanentError(str(error), status=error.status)
    if isinstance(error, TransientError):
        p.retries.append(str(error))
        if len(p.retries) < runtime.spec.retries.attempts:
            return AGAIN
        error = IncompleteError(f"{len(p.retries)} transient errors; last: {error}",
                                attempts=p.tries)
    ended = failures.outcome(p.item, error)
    if isinstance(ended, Outcome):
        return _ended(p, ended)
    obtained = _obtained(p, Completion(""), batch_id)
    obtained.failed = ended
    return _recorded(p, record(p.item, obtained))


def _obtained(p: Pending, completion: Completion, batch_id: str) -> Obtained:
    return Obtained(completion, p.started, p.t0, p.tries, len(p.retries) + p.unrun,
                    batch_id=batch_id)


def _recorded(p: Pending, outcome: Outcome) -> str:
    p.future.set_result(outcome)
    # Not recorded (the run stopping under it): a resume reads the batch again, never resends.
    return DONE if outcome.kind == ROW else KEEP


def _ended(p: Pending, outcome: Outcome) -> str:
    p.future.set_result(outcome)
    return DONE if outcome.kind != ABORTED or outcome.stop is not None else KEEP


def give_up(p: Pending, message: str, kind: str = ABORTED) -> None:
    """End ``p``'s item without an answer (the run stopped, or its batch is left for a resume)."""
    if not p.future.done():
        p.future.set_result(Outcome(kind, message=message))

