"""Making one call safely: classify every error, retry transient ones with backoff, stop on abort."""

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


# A server's Retry-After is honoured up to this long (or retries.max_backoff_s, if longer); beyond
# it the item is left for a resume (the supervisor's backoff is the tool for long windows).
LONGEST_WAIT_S = 60.0
# However short its waits, an item is refused this many rate-limit 429s at most (a bound on the loop).
MAX_RATE_LIMITED = 1000
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
    """Call until success, a permanent error, exhaustion, abort, the last attempt or the wait budget.

    ``probing``: the arm has not answered yet in this process, so an error that would mean the
    arm is unusable (``ArmError`` with a fallback) is taken as that, after ``PROBE_TRIES``
    attempts where once could be chance; otherwise it is what it would be for an arm that works.
    A rate limit's 429 is not an attempt: the item waits as the server asks, up to
    ``policy.max_wait_s`` from its first 429, then is left for a resume.
    """
    retries: list[str] = []
    failures, limited_since = 0, None
    for call in range(1, policy.attempts + MAX_RATE_LIMITED + 1):  # bounded: rate-limit waits are counted too
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
        _refuse_long_wait(error, policy, call)
        if rate_limited(error):
            limited_since = clock() if limited_since is None else limited_since
            rng = rng or random.Random()
            delay = backoff_delay(policy, min(len(retries) - failures, 30), error.retry_after, rng)
            if clock() - limited_since + delay > policy.max_wait_s:
                raise IncompleteError(f"rate-limited for {clock() - limited_since:.0f} s, and the next wait would pass "
                                      f"the item's {policy.max_wait_s:g} s (retries.max_wait_s): left for a resume; "
                                      f"last: {error}", attempts=call)
        else:
            failures += 1
            if failures == policy.attempts:
                raise IncompleteError(f"{failures} transient errors; last: {error}", attempts=call)
            rng = rng or random.Random()  # made when first needed: seeding one costs as much as a call's bookkeeping
            delay = backoff_delay(policy, failures, error.retry_after, rng)
        if stop.wait(delay):  # an abort elsewhere cuts the wait short
            raise AbortedError("the run is stopping; retry abandoned")
    raise IncompleteError(f"rate-limited {MAX_RATE_LIMITED} times; last: {retries[-1]}", attempts=len(retries))


def _refuse_long_wait(error: TransientError, policy: RetryPolicy, call: int) -> None:
    longest = max(policy.max_backoff_s, LONGEST_WAIT_S)
    if error.retry_after is not None and not error.retry_after <= longest:
        # Held for a ten-minute Retry-After, this call would hold up every item reported after it.
        raise IncompleteError(f"the server asks to wait {error.retry_after:g} s, more than the {longest:g} s "
                              f"a call waits (retries.max_backoff_s): left for a resume; last: {error}",
                              attempts=call)
