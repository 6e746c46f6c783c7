"""Making one call safely: classify every error, retry transient
ones with backoff, stop on abort."""

from __future__ import annotations

import dataclasses
import random
import time
from collections.abc import Callable
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


# However short its waits, an item is refused this many rate-limit 429s
# at most (a bound on the loop).
MAX_RATE_LIMITED = 1000
# A refused connection on an arm's first call is tried this often before the arm is given up:
# a server that is still starting deserves a second look; a wrong port does not deserve ten.
PROBE_TRIES = 3


def _settle(
    error: ProviderError | LocalError, probing: bool, attempt: int, policy: RetryPolicy
) -> ProviderError | LocalError:
    """An arm-scope error with a fallback is the arm's end only while probing, after a few tries."""
    if not isinstance(error, ArmError) or error.fallback is None:
        return error
    if not probing:
        return error.fallback
    if isinstance(error.fallback, TransientError) and attempt < min(PROBE_TRIES, policy.attempts):
        return error.fallback
    return error


def backoff_delay(
    policy: RetryPolicy, attempt: int, retry_after: float | None, rng: random.Random
) -> float:
    """The server's Retry-After when it gives one (above 0), else exponential backoff with jitter.

    The server knows when it admits the next call: a 429 saying "20 ms" waited out for our second
    of backoff stalls every item reported after it. The endpoint's limiter spaces the retries of
    calls refused together (engine.limiter), so honouring it exactly does not make them a burst.
    """
    if retry_after is not None and retry_after > 0:
        return retry_after
    base = min(policy.max_backoff_s, policy.backoff_s * 2 ** (attempt - 1))
    # jitter keeps many workers from retrying in lockstep
    delay: float = base * (0.5 + rng.random() / 2)
    return delay


class Stop(Protocol):
    """The run-wide stop: ``threading.Event`` fits, and so does the runner's marker-aware signal."""

    def is_set(self) -> bool: ...

    def wait(self, timeout: float) -> bool: ...


def rate_limited(error: ProviderError | LocalError) -> bool:
    """A 429 that is a rate limit (quota exhaustion's 429 is an ExhaustedError, never here): a wait
    the server asked for, not a failure of the call, so it spends the item's wait budget
    (``retries.max_wait_s``), not its attempts. A gateway routing to two deployments of 20
    requests a minute refuses a third of a 60-item run at once; four attempts left it incomplete."""
    return isinstance(error, TransientError) and error.status == 429


def call_with_retries(
    provider: Provider,
    request: Request,
    policy: RetryPolicy,
    classifier: Classifier,
    stop: Stop,
    rng: random.Random | None = None,
    probing: bool = False,
    clock: Callable[[], float] = time.monotonic,
) -> Attempted:
    """Call until success, a permanent error, exhaustion, abort, the
    last attempt or the wait budget.

    ``probing``: the arm has not answered yet in this process, so an error that would mean the
    arm is unusable (``ArmError`` with a fallback) is taken as that, after ``PROBE_TRIES``
    attempts where once could be chance; otherwise it is what it would be for an arm that works.
    A rate limit's 429 is not an attempt. Every wait the server asks for (a 429's, or any
    ``retry-after``) is honoured, however long, as long as the item's waits end within
    ``policy.max_wait_s`` of its first one; a wait that would pass it leaves the item for a resume
    at once, without sleeping on it.
    """
    retries: list[str] = []
    failures, waiting_since = 0, None
    # bounded: rate-limit waits are counted too
    for call in range(1, policy.attempts + MAX_RATE_LIMITED + 1):
        if stop.is_set():
            raise AbortedError("the run is stopping; no call was made")
        req = dataclasses.replace(request, attempt=call)
        try:
            return Attempted(provider.complete(req), call, retries)
        except (AbortedError, IncompleteError, UnavailableError):
            raise  # a composite arm's sub-call already decided, or a sub-arm cannot run here
        except Exception as exc:  # every error is classified; nothing escapes as a wrong answer
            error = _settle(classifier.classify(exc), probing, failures + 1, policy)
        if not isinstance(error, TransientError):
            raise error
        retries.append(str(error))
        # made when first needed: seeding one costs as much as a call's bookkeeping
        rng = rng or random.Random()
        server_wait = rate_limited(error) or (
            error.retry_after is not None and error.retry_after > 0
        )
        if rate_limited(error):
            delay = backoff_delay(policy, min(len(retries) - failures, 30), error.retry_after, rng)
        else:
            failures += 1
            if failures == policy.attempts:
                raise IncompleteError(f"{failures} transient errors; last: {error}", attempts=call)
            delay = backoff_delay(policy, failures, error.retry_after, rng)
        # a wait the server asked for (or a 429's): it spends the item's wait budget
        if server_wait:
            now = clock()
            waiting_since = now if waiting_since is None else waiting_since
            _within_wait_budget(error, policy, now - waiting_since, delay, call)
        if stop.wait(delay):  # an abort elsewhere cuts the wait short
            raise AbortedError("the run is stopping; retry abandoned")
    raise IncompleteError(
        f"rate-limited {MAX_RATE_LIMITED} times; last: {retries[-1]}", attempts=len(retries)
    )


def _within_wait_budget(
    error: TransientError, policy: RetryPolicy, waited: float, delay: float, call: int
) -> None:
    """Refuse a wait that would end past the item's ``retries.max_wait_s``: a server asking for ten
    minutes under a three-minute budget is not slept on only to give up after it."""
    if waited + delay <= policy.max_wait_s:
        return
    if waited <= 0:
        raise IncompleteError(
            f"the server asks to wait {_seconds(delay)} s, more than the item's "
            f"{policy.max_wait_s:g} s (retries.max_wait_s): left for a resume; last: {error}",
            attempts=call,
        )
    raise IncompleteError(
        f"waited {waited:.0f} s for the server, and the next wait ({_seconds(delay)} s) would "
        f"pass the item's {policy.max_wait_s:g} s (retries.max_wait_s): left for a resume; "
        f"last: {error}",
        attempts=call,
    )


def _seconds(value: float) -> str:
    """599.988 as 600, 0.25 as 0.25: the time left of a pause is not worth its milliseconds."""
    return f"{value:.0f}" if value >= 10 else f"{value:.2g}"
