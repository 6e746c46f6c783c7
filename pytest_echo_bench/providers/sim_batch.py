"""The simulator's batch API: the lifecycle of a provider's batches, offline and in this process.

A batch is validated, runs, finalizes and ends over its first four status polls (or at the
first a second after it was sent); an arm with ``latency_s`` has its batches take that long.
Its answers are the simulator's own (``SimProvider.answer``), its faults too: a transient fault
is a request's ``TransientError``, ``exhaustion_after`` a quota's ``ExhaustedError``, and
``expire_rate`` a share of requests that expire unrun (drawn per request and attempt, so a later
batch runs them).
Batches live in a table of this process (a second run in the same process, as a test's resume,
re-attaches to them); ``BILLED`` counts what each ``custom_id`` was billed, as a provider would.
"""

from __future__ import annotations

import hashlib
import itertools
import threading
import time
from collections import Counter
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import Protocol

from pytest_echo_bench.errors import PermanentError, ProviderError
from pytest_echo_bench.providers.base import Completion, Request
from pytest_echo_bench.providers.batch import (
    CANCELLING,
    ENDED,
    FINALIZING,
    IN_PROGRESS,
    VALIDATING,
    BatchResult,
    BatchStatus,
)

MAX_REQUESTS = 100_000  # as Anthropic's limit of requests in one batch
_ENDS_AT_POLL = 4  # validating, in progress, finalizing, then ended
_ENDS_AFTER_S = 1.0  # ... or at the first poll a second after it was sent (an offline demo's)
BILLED: Counter[str] = Counter()  # custom_id -> answers billed
_BATCHES: dict[str, _Batch] = {}
_LOCK = threading.Lock()
_IDS = itertools.count(1)


class Answering(Protocol):
    """What a batch asks of the simulator behind it (``providers.sim.SimProvider``)."""

    def answer(self, request: Request) -> Completion: ...

    def count_call(self) -> None: ...


@dataclass
class _Batch:
    tag: str
    requests: list[tuple[str, Request]]
    created: float
    polls: int = 0
    cancelled: bool = False
    results: list[BatchResult] | None = None  # once ended
    ids: frozenset[str] = field(default_factory=frozenset)


class SimBatchAPI:
    """One sim arm's batch endpoint (``providers.batch.BatchAPI``)."""

    max_requests = MAX_REQUESTS

    def __init__(self, sim: Answering, expire_rate: float = 0.0, latency_s: float = 0.0) -> None:
        self.sim, self.expire_rate, self.latency_s = sim, expire_rate, latency_s

    def submit(self, requests: Sequence[tuple[str, Request]], tag: str) -> str:
        if not requests or len(requests) > self.max_requests:
            raise PermanentError(f"a batch holds 1 to {self.max_requests} requests, "
                                 f"got {len(requests)}", status=400)
        ids = frozenset(cid for cid, _ in requests)
        if len(ids) != len(requests):
            raise PermanentError("custom_id values must be unique within a batch", status=400)
        with _LOCK:
            batch_id = f"simbatch_{next(_IDS)}_{time.time_ns() % 10**9}"
            _BATCHES[batch_id] = _Batch(tag, list(requests), time.time(), ids=ids)
        return batch_id

    def status(self, batch_id: str) -> BatchStatus:
        batch = _find(batch_id)
        with _LOCK:
            batch.polls += 1
            age = time.time() - batch.created
            due = (batch.polls >= _ENDS_AT_POLL and not self.latency_s) or age >= max(
                _ENDS_AFTER_S, self.latency_s)
            if batch.results is None and (batch.cancelled or due):
                batch.results = self._run(batch)
            state = _state(batch)
        total = len(batch.requests)
        done = total if batch.results is not None else (total // 2 if state != VALIDATING else 0)
        failed = sum(r.error is not None for r in batch.results or ())
        return BatchStatus(batch_id, state, total, done, failed, state)

    def results(self, batch_id: str) -> Iterator[BatchResult]:
        batch = _find(batch_id)
        if batch.results is None:
            raise PermanentError(f"batch {batch_id} has not ended", status=400)
        yield from batch.results

    def cancel(self, batch_id: str) -> None:
        batch = _find(batch_id)
        with _LOCK:
            batch.cancelled = batch.results is None or batch.cancelled

    def find(self, tag: str, custom_ids: frozenset[str], since: float) -> list[str]:
        with _LOCK:
            return [bid for bid, b in _BATCHES.items()
                    if b.tag == tag and b.created >= since - 1 and b.ids & custom_ids]

    def close(self) -> None:
        """Nothing held open: the batches stay in this process's table."""

    def _run(self, batch: _Batch) -> list[BatchResult]:
        """Every request's outcome as the batch ends (a cancelled batch runs none)."""
        if batch.cancelled:
            return [BatchResult(cid) for cid, _ in batch.requests]
        return [self._one(cid, request) for cid, request in batch.requests]

    def _one(self, custom_id: str, request: Request) -> BatchResult:
        if self.expire_rate and _draw(custom_id, request.attempt) < self.expire_rate:
            return BatchResult(custom_id)
        try:
            self.sim.count_call()
            completion = self.sim.answer(request)
        except ProviderError as exc:
            return BatchResult(custom_id, error=exc)
        BILLED[custom_id] += 1
        return BatchResult(custom_id, completion=completion)


def _state(batch: _Batch) -> str:
    if batch.results is not None:
        return ENDED
    if batch.cancelled:
        return CANCELLING
    return (VALIDATING, IN_PROGRESS, FINALIZING)[min(batch.polls - 1, 2)]


def _find(batch_id: str) -> _Batch:
    with _LOCK:
        batch = _BATCHES.get(batch_id)
    if batch is None:
        raise PermanentError(f"no batch {batch_id!r}", status=404)
    return batch


def _draw(custom_id: str, attempt: int) -> float:
    digest = hashlib.sha256(f"{custom_id}\x1fexpire{attempt}".encode()).digest()
    return int.from_bytes(digest[:8], "big") / 2**64
