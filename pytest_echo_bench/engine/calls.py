"""Making one call safely: classify every error, retry transient ones with backoff, stop on abort."""

from __future__ import annotations

import dataclasses
import random
import re
import socket
from dataclasses import dataclass
from typing import Protocol

from pytest_echo_bench.errors import (
    AbortedError,
    ExhaustedError,
    IncompleteError,
    PermanentError,
    ProviderError,
    TransientError,
    UnavailableError,
)
from pytest_echo_bench.providers.base import Completion, Provider, Request
from pytest_echo_bench.spec.load import RetryPolicy

# Messages that mean "out of quota/credit" whatever the status code says (CLIs and proxies
# often wrap them in a generic 400 or 500).
BUILTIN_EXHAUSTION = (
    r"insufficient_quota", r"exceeded your current quota", r"credit balance is too low",
    r"usage limit", r"billing", r"quota exceeded", r"out of credits",
)


@dataclass(frozen=True)
class Classifier:
    exhaustion: tuple[str, ...] = ()
    transient: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        object.__setattr__(self, "_exhausted", _compile(BUILTIN_EXHAUSTION + self.exhaustion))
        object.__setattr__(self, "_transient", _compile(self.transient))

    def classify(self, exc: BaseException) -> ProviderError:
        """Map any exception onto the three classes; spec patterns refine the built-in rules."""
        error = exc if isinstance(exc, ProviderError) else _builtin(exc)
        text = str(exc)
        if not isinstance(error, ExhaustedError) and self._exhausted.search(text):  # type: ignore[attr-defined]
            return ExhaustedError(text, status=error.status)
        if isinstance(error, PermanentError) and self.transient and self._transient.search(text):  # type: ignore[attr-defined]
            return TransientError(text, retry_after=error.retry_after, status=error.status)
        return error


def _compile(patterns: tuple[str, ...]) -> re.Pattern[str]:
    return re.compile("|".join(f"(?:{p})" for p in patterns) or r"(?!x)x", re.IGNORECASE)


def _builtin(exc: BaseException) -> ProviderError:
    name = f"{type(exc).__name__}: {exc}"
    if isinstance(exc, (TimeoutError, ConnectionError, socket.timeout)):
        return TransientError(name)
    return PermanentError(name)


@dataclass
class Attempted:
    completion: Completion
    attempts: int
    retries: list[str]


def backoff_delay(policy: RetryPolicy, attempt: int, retry_after: float | None, rng: random.Random) -> float:
    """Exponential backoff with jitter; a server's Retry-After is a floor, not a suggestion."""
    base = min(policy.max_backoff_s, policy.backoff_s * 2 ** (attempt - 1))
    delay: float = base * (0.5 + rng.random() / 2)  # jitter keeps many workers from retrying in lockstep
    return max(delay, retry_after or 0.0)


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
) -> Attempted:
    """Call until success, a permanent error, exhaustion, abort or the last attempt."""
    rng = rng or random.Random()
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
            error = classifier.classify(exc)
        if not isinstance(error, TransientError):
            raise error
        retries.append(str(error))
        if attempt == policy.attempts:
            break
        delay = backoff_delay(policy, attempt, error.retry_after, rng)
        if stop.wait(delay):  # an abort elsewhere cuts the wait short
            raise AbortedError("the run is stopping; retry abandoned")
    raise IncompleteError(f"{len(retries)} transient errors; last: {retries[-1]}", attempts=policy.attempts)
