"""Making one call safely: classify every error, retry transient ones with backoff, stop on abort."""

from __future__ import annotations

import dataclasses
import random
from dataclasses import dataclass
from typing import Protocol

from pytest_echo_bench.engine.scope import Classifier
from pytest_echo_bench.errors import (
    AbortedError,
    ArmError,
    IncompleteError,
    LocalError,
    ProviderError,
    TransientError,
    UnavailableError,
)
from pytest_echo_bench.providers.base import Completion, Provider, Request
from pytest_echo_bench.spec.load import RetryPolicy


@dataclass
class Attempted:
    completion: Completion
    attempts: int
    retries: list[str]


# A server's Retry-After is honoured up to this long (or retries.max_backoff_s, if longer); beyond
# it the item is left for a resume (the supervisor's backoff is the tool for long windows).
LONGEST_WAIT_S = 60.0
# A refused connection on an arm's first call is tried this often before the arm is given up:
# a server that is still starting deserves a second look; a wrong port does not deserve ten.
PROBE_TRIES = 3


def _settle(error: ProviderError | LocalError, probing: bool, attempt: int, policy: RetryPolicy) -> ProviderError | LocalError:
    """An arm-scope error with a fallback is the arm's end only while probing, after a few tries."""
    if not isinstance(error, ArmError) or error.fallback is None:
        return error
    if not probing:
        return error.fallback
    if isinstance(error.fallback, TransientError) and attempt < min(PROBE_TRIES, policy.attempts):
        return error.fallback
    return error


def backoff_delay(policy: RetryPolicy, attempt: int, retry_after: float | None, rng: random.Random) -> float:
    """The server's Retry-After when it gives one (above 0), else exponential backoff with jitter.

    The server knows when it admits the next call: a 429 saying "20 ms" waited out for our second
    of backoff stalls every item reported after it. The endpoint's limiter spaces the retries of
    calls refused together (engine.limiter), so honouring it exactly does not make them a burst.
    """
    if retry_after is not None and retry_after > 0:
        return retry_after
    base = min(policy.max_backoff_s, policy.backoff_s * 2 ** (attempt - 1))
    delay: float = base * (0.5 + rng.random() / 2)  # jitter keeps many workers from retrying in lockstep
    return delay


class Stop(Protocol):
    """The run-wide stop: ``threading.Event`` fits, and so does the runner's marker-aware signal."""

    def is_set(self) -> bool: ...

    def wait(self, timeout: float) -> bool: ...


def call_with_retries(
    provider: Provider,
    request: Request,
    policy: RetryPolicy,
    classifier: Classifier,
    stop: Stop,
    rng: random.Random | None = None,
    probing: bool = False,
) -> Attempted:
    """Call until success, a permanent error, exhaustion, abort or the last attempt.

    ``probing``: the arm has not answered yet in this process, so an error that would mean the
    arm is unusable (``ArmError`` with a fallback) is taken as that, after ``PROBE_TRIES``
    attempts where once could be chance; otherwise it is what it would be for an arm that works.
    """
    retries: list[str] = []
    for attempt in range(1, policy.attempts + 1):
        if stop.is_set():
            raise AbortedError("the run is stopping; no call was made")
        req = dataclasses.replace(request, attempt=attempt)
        try:
            return Attempted(provider.complete(req), attempt, retries)
        except (AbortedError, IncompleteError, UnavailableError):
            raise  # a composite arm's sub-call already decided, or a sub-arm cannot run here
        except Exception as exc:  # every error is classified; nothing escapes as a wrong answer
            error = _settle(classifier.classify(exc), probing, attempt, policy)
        if not isinstance(error, TransientError):
            raise error
        retries.append(str(error))
        longest = max(policy.max_backoff_s, LONGEST_WAIT_S)
        if error.retry_after is not None and not error.retry_after <= longest:
            # Held for a ten-minute Retry-After, this call would hold up every item reported after it.
            raise IncompleteError(f"the server asks to wait {error.retry_after:g} s, more than the {longest:g} s "
                                  f"a call waits (retries.max_backoff_s): left for a resume; last: {error}",
                                  attempts=attempt)
        if attempt == policy.attempts:
            break
        rng = rng or random.Random()  # made when first needed: seeding one costs as much as a call's bookkeeping
        delay = backoff_delay(policy, attempt, error.retry_after, rng)
        if stop.wait(delay):  # an abort elsewhere cuts the wait short
            raise AbortedError("the run is stopping; retry abandoned")
    raise IncompleteError(f"{len(retries)} transient errors; last: {retries[-1]}", attempts=policy.attempts)
