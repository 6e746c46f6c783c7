"""Obtaining an item's completion: the step before grading and recording (``engine.grading``).

``Obtain`` is what the runner asks; ``ItemCall`` is today's way, the item's own call in its
slots. Another way (many items' calls sent as one provider batch) is a second ``Obtain`` whose
results are graded and recorded by the same code.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Protocol

from pytest_echo_bench.datasets.prompts import render_for
from pytest_echo_bench.engine.arms import ArmRuntime
from pytest_echo_bench.engine.calling import CallPath
from pytest_echo_bench.engine.failures import CallFailure, Failures
from pytest_echo_bench.engine.outcome import Job, Outcome, utcnow
from pytest_echo_bench.providers import Completion, Request
from pytest_echo_bench.scoring.verdict import Verdict
from pytest_echo_bench.spec.load import Spec


@dataclass(slots=True)
class Obtained:
    """An item's completion and how it was obtained. ``failed``: the call failed for this item
    alone, and this error verdict is its row (it is not graded)."""

    completion: Completion
    started: str  # when its call started (the row's ``started_at``)
    t0: float  # ``time.perf_counter()`` then: the row's ``wall_seconds`` run from it
    attempts: int
    retries: int
    failed: Verdict | None = None
    batch_id: str | None = None  # the provider's batch that answered it (None: a live call)


class Obtain(Protocol):
    """A way to obtain an item's completion; an ``Outcome`` when the item ends without one
    (unavailable, aborted, incomplete, or the run stopped)."""

    def obtain(self, item: Job) -> Obtained | Outcome: ...


class ItemCall:
    """The item's own call, in the spec's and the arm's ``concurrency:`` slots."""

    def __init__(self, arm: Callable[[Spec, str], ArmRuntime], calls: CallPath,
                 failures: Failures) -> None:
        self.arm, self.calls, self.failures = arm, calls, failures
        self._spec_slots: dict[str, threading.BoundedSemaphore] = {}  # spec path -> its slots
        self._lock = threading.Lock()

    def obtain(self, item: Job) -> Obtained | Outcome:
        spec = item.spec
        prompt = render_for(item.prompters, item.arm, item.example)
        request = Request(item.example, item.arm, prompt, timeout_s=spec.timeout_s,
                          epoch=item.epoch)
        runtime = self.arm(spec, item.arm)
        with self.spec_slot(spec), runtime.slot():
            # Timed from the moment the arm's slot is ours: waiting for one is not the model's time.
            started, t0 = utcnow(), time.perf_counter()
            try:
                completion, attempts, retries = self.calls.call(runtime, request)
            except CallFailure as exc:
                ended = self.failures.outcome(item, exc)
                if isinstance(ended, Outcome):
                    return ended
                return Obtained(Completion(""), started, t0, 1, 0, failed=ended)
        return Obtained(completion, started, t0, attempts, retries)

    @contextlib.contextmanager
    def spec_slot(self, spec: Spec) -> Iterator[None]:
        """One of the spec's top-level ``concurrency:`` slots, shared by all its arms (no limit
        when unset).

        Taken only around an item's own call: a composite arm's calls to its siblings run inside
        the composite's slot, since taking a second one could wait on slots the composites hold.
        """
        if spec.concurrency is None:
            yield
            return
        with self._lock:
            slots = self._spec_slots.get(str(spec.path))
            if slots is None:
                slots = threading.BoundedSemaphore(spec.concurrency)
                self._spec_slots[str(spec.path)] = slots
        with slots:
            yield
