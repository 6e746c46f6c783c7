"""What the batch submitter keeps of its items and batches (``engine.batching``), the custom id of
a request, and the ``Obtain`` that hands an item its batch's answer.

An item's request is in one place at a time: waiting (in no batch), or a member of one open
batch. Only the submitter's thread moves it, so no request is ever in two live batches.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable
from concurrent.futures import Future
from dataclasses import dataclass, field

from pytest_echo_bench.engine.arms import ArmRuntime
from pytest_echo_bench.engine.obtain import Obtain, Obtained
from pytest_echo_bench.engine.outcome import ABORTED, Job, Outcome
from pytest_echo_bench.providers.base import Request
from pytest_echo_bench.providers.batch import BatchAPI, BatchStatus
from pytest_echo_bench.spec.batching import BatchSpec

FIRST_POLL_S = 0.5  # a batch is polled this soon at first, then twice as late each time


def custom_id(benchmark: str, task_id: str, arm: str, epoch: int, sample: int = 0) -> str:
    """A request's stable id in every batch: the first 32 hex digits of the SHA-256 of its key as
    canonical JSON (within OpenAI's 64 characters and Anthropic's ``[a-zA-Z0-9_-]``)."""
    key = json.dumps([benchmark, task_id, arm, epoch, sample], ensure_ascii=True,
                     separators=(",", ":"))
    return hashlib.sha256(key.encode("ascii")).hexdigest()[:32]


@dataclass(eq=False)
class Pending:
    """One item's request until its answer is recorded (or it ends without one)."""

    item: Job
    cid: str
    request: Request
    future: Future[Outcome]
    started: str = ""  # when it was first sent (the row's ``started_at``)
    t0: float = 0.0  # ``time.perf_counter()`` then
    tries: int = 0  # batches it was sent in
    retries: list[str] = field(default_factory=list)  # its transient errors
    unrun: int = 0  # batches that ended without running it (expired, cancelled)


@dataclass(eq=False)
class OpenBatch:
    """A batch submitted and not yet collected: this process's own, or a journal's (``own``
    False: an earlier run's, adopted by the items of this one it holds)."""

    local: str  # the journal's name for it
    tag: str
    since: float  # when it was submitted (epoch seconds)
    members: dict[str, Pending]
    own: bool
    # the provider's ids (None: the submission's outcome is unknown until ``find``)
    batch_ids: list[str] | None = None
    status: dict[str, BatchStatus] = field(default_factory=dict)
    next_poll: float = 0.0  # monotonic
    interval: float = FIRST_POLL_S
    errors: int = 0  # failed polls in a row
    kept: bool = False  # a result of it was read but not recorded (the run stopping): read again
    opened: float = 0.0  # monotonic, when this process took it on
    told: bool = False  # a status word not documented was said of it (once a batch)

    def ended(self) -> bool:
        return self.batch_ids is not None and all(
            bid in self.status and self.status[bid].state in ("ended", "failed")
            for bid in self.batch_ids)


@dataclass(eq=False)
class Group:
    """One batched arm of one spec: its requests waiting and its open batches."""

    runtime: ArmRuntime
    conf: BatchSpec
    api: BatchAPI
    waiting: dict[str, Pending] = field(default_factory=dict)
    open: list[OpenBatch] = field(default_factory=list)
    urgent: bool = False  # the run waits on a batched item: send what has gathered

    @property
    def size(self) -> int:
        return max(1, min(self.conf.size, self.api.max_requests))


class BatchObtain:
    """The ``Obtain`` of a batched item: the answer its batch brought, handed over by the
    submitter as it records the item (``Runner.run(item, arrived=...)``)."""

    def __init__(self, arrived: Callable[[Job], Obtained | None]) -> None:
        self.arrived = arrived

    def obtain(self, item: Job) -> Obtained | Outcome:
        got = self.arrived(item)
        if got is None:  # only the submitter records a batched item, once its answer is here
            return Outcome(ABORTED, message="no batch answered this item; not recorded")
        return got


class ByArm:
    """The live call for most arms, the batch's answer for the batched ones."""

    def __init__(self, live: Obtain, batch: Obtain, batched: Callable[[Job], bool]) -> None:
        self.live, self.batch, self.batched = live, batch, batched

    def obtain(self, item: Job) -> Obtained | Outcome:
        return (self.batch if self.batched(item) else self.live).obtain(item)
