"""A provider's batch API, as the engine sees it: many requests sent as one batch, answered later.

A provider that has one (OpenAI's Batch API, Anthropic's Message Batches) gives its provider
object a ``batch_api()`` returning a ``BatchAPI``. The engine keys every request by a
``custom_id`` (a stable digest of the item's key), records what it submits before and after each
call here, and grades each ``BatchResult`` as it grades a live call's completion.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Protocol

from pytest_echo_bench.errors import ProviderError
from pytest_echo_bench.providers.base import Completion, Request

# A batch's state, the same words for every provider (each maps its own onto these).
VALIDATING = "validating"
IN_PROGRESS = "in_progress"
FINALIZING = "finalizing"
ENDED = "ended"  # its results can be read (some may be errors, expired or cancelled)
FAILED = "failed"  # the whole batch was refused (its validation failed): no result to read
CANCELLING = "cancelling"
# a word the provider's documentation does not have (a new state): not an end, polled again
UNKNOWN = "unknown"
STATES = (VALIDATING, IN_PROGRESS, FINALIZING, ENDED, FAILED, CANCELLING, UNKNOWN)


@dataclass(frozen=True, slots=True)
class BatchStatus:
    """What the provider says of one batch now."""

    batch_id: str
    state: str  # one of STATES
    total: int  # requests in the batch
    done: int  # requests answered so far (succeeded or errored)
    failed: int  # of those, the ones that errored
    raw: str  # the provider's own word for the state, as it sent it
    error: str | None = None  # why the whole batch failed, when state is FAILED


@dataclass(frozen=True, slots=True)
class BatchResult:
    """One request's outcome in an ended batch: exactly one of ``completion`` and ``error``,
    or neither when the request expired or was cancelled before it ran (send it again)."""

    custom_id: str
    completion: Completion | None = None
    # the exception a live call would have raised for the same error (ExhaustedError,
    # TransientError, PermanentError...), so the one classifier scopes it
    error: ProviderError | None = None

    @property
    def unrun(self) -> bool:
        """Expired or cancelled before it ran: no answer and no error of its own."""
        return self.completion is None and self.error is None


class BatchAPI(Protocol):
    """One arm's batch endpoint. Every method makes its HTTP calls at once and raises the live
    path's ``ProviderError`` kinds on failure (a 429 or 5xx: ``TransientError``; a quota:
    ``ExhaustedError``; a refused request: ``PermanentError``)."""

    max_requests: int  # the provider's documented limit of requests in one batch

    def submit(self, requests: Sequence[tuple[str, Request]], tag: str) -> str:
        """Send ``(custom_id, request)`` pairs as one batch labelled with the run's ``tag``;
        return its batch id once the provider has accepted it."""
        ...

    def status(self, batch_id: str) -> BatchStatus: ...

    def results(self, batch_id: str) -> Iterator[BatchResult]:
        """An ended batch's results, streamed (every request once: answered, errored or unrun)."""
        ...

    def cancel(self, batch_id: str) -> None: ...

    def find(self, tag: str, custom_ids: frozenset[str], since: float) -> list[str]:
        """The ids of batches the provider holds that may carry any of ``custom_ids``: those
        labelled ``tag`` (OpenAI's metadata), or, where a batch has no label (Anthropic), every
        batch created since ``since`` (epoch seconds) that is still running or whose results
        hold one of ``custom_ids`` (a running one is a candidate: the engine waits for it to end
        and reads its results). Used when a submission's outcome is unknown, before anything is
        sent again."""
        ...

    def close(self) -> None: ...
