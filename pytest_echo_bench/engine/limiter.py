"""Adaptive concurrency per endpoint, and an arm's optional client-side rate limit.

Every call of a network arm goes through the ``Limiter`` of its endpoint (base URL and key):
it starts at the configured concurrency, is cut multiplicatively when the server answers 429,
waits out the server's ``retry-after`` before the endpoint's next call, and grows back by about
one slot per round of successful calls. An arm's ``rate_limit:`` adds a ``TokenBucket`` for its
requests and one for its tokens. The decisions are pure functions of an injected clock, so the
tests drive them without sleeping; ``Limited`` adds the blocking and the run-wide stop.
"""

from __future__ import annotations

import collections
import hashlib
import math
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

from pytest_echo_bench.errors import AbortedError, ProviderError, TransientError
from pytest_echo_bench.providers.base import Completion, Provider, Request
from pytest_echo_bench.spec.load import ArmSpec

Clock = Callable[[], float]
BETA = 0.5  # a cut keeps this share of the limit (but see ``Limiter.throttled``: never below the observed rate)
WINDOW_S = 1.0  # successes are counted over this span to know the rate the server accepts
HEADROOM = 0.95  # after a cut, run at this share of the concurrency that carried the accepted rate
# Once a 429 came after a whole window of calls, the endpoint is paced at the rate it accepted over
# that window. While calls succeed the pace grows by PACE_GROWTH requests/s per success (1% a
# second) near the pace the last 429 came at, by PACE_RECOVERY (10%) below PACE_NEAR of it; a 429
# while paced keeps at least PACE_CUT of the pace: the rate measured just after a pause is low.
PACE_GROWTH = 0.01
PACE_RECOVERY = 0.1
PACE_NEAR = 0.98
PACE_CUT = 0.9
SLACK = 1.2  # a paced endpoint's concurrency: this share of what carries the pace, and one slot more
PACE_FLOOR = 0.1  # requests a second: 429s without a success in between cut the pace no lower
# A pause longer than this is not waited out call by call: each call fails at once as transient
# (with the time left as its retry-after), so the retries decide (see engine.calls).
LONG_PAUSE_S = 60.0
DEFAULT_PAUSE_S = 1.0  # a 429 without retry-after still pauses the endpoint this long
WAIT_TICK_S = 0.25  # a waiting call looks at the run-wide stop this often
DEFAULT_CEILING = 64  # the limit when no pool size was given (a Runner used on its own)


class Stop(Protocol):
    def is_set(self) -> bool: ...


@dataclass
class Limiter:
    """One endpoint's concurrency limit (additive increase, multiplicative decrease) and pause."""

    ceiling: int
    clock: Clock = time.monotonic
    limit: float = 0.0
    in_flight: int = 0
    resume_at: float = 0.0  # no call starts before this (the server's retry-after)
    throttled_count: int = 0  # 429 answers seen
    _cut_at: float = -math.inf  # when the limit was last cut: 429s of calls started before it do not cut again
    _grow_after: float = -math.inf  # no growth until then: let the cut show its effect first
    _successes: collections.deque[float] = field(default_factory=collections.deque)
    _latency: float = 0.0  # smoothed seconds per successful call
    pace: float = 0.0  # requests a second the endpoint is held to after a 429 (0: not paced)
    _refused_pace: float = 0.0  # the pace the last 429 came at
    queue: collections.deque[object] = field(default_factory=collections.deque)  # calls waiting to start, in turn
    _next_start: float = -math.inf  # the pace's earliest start for the next call
    _since: float | None = None  # when the endpoint's first call started

    def __post_init__(self) -> None:
        self.limit = self.limit or float(self.ceiling)

    def raise_ceiling(self, ceiling: int) -> None:
        """Another arm with a higher limit shares this endpoint."""
        if ceiling > self.ceiling:
            self.limit += ceiling - self.ceiling
            self.ceiling = ceiling

    def wait_s(self) -> float:
        """Seconds until a call may start (0: now); the caller retries after that long."""
        now = self.clock()
        if now < self.resume_at:
            return self.resume_at - now
        if self.in_flight >= max(1, int(self.limit)):
            return WAIT_TICK_S
        return max(0.0, self._next_start - now) if self.pace else 0.0

    def started(self) -> float:
        self.in_flight += 1
        now = self.clock()
        if self._since is None:
            self._since = now
        if self.pace:
            # Evenly spaced. A call that starts late (its thread waited for the GIL) does not push
            # the next ones back: up to one step of lateness is made up; a quiet spell is not.
            step = 1.0 / self.pace
            self._next_start = max(now - step, self._next_start) + step
        return now

    def succeeded(self, started_at: float) -> None:
        now = self.clock()
        self.in_flight -= 1
        latency = now - started_at
        self._latency = latency if not self._latency else 0.9 * self._latency + 0.1 * latency
        self._successes.append(now)
        self._forget(now)
        if now >= self._grow_after:
            self.limit = min(float(self.ceiling), self.limit + 1.0 / max(1.0, self.limit))
            if self.pace:
                self.pace += PACE_RECOVERY if self.pace < PACE_NEAR * self._refused_pace else PACE_GROWTH
                if self.pace * self._latency > self.ceiling:
                    self.pace = 0.0  # the ceiling holds the rate below this anyway

    def _forget(self, now: float) -> None:
        """Keep the successes of the last ``WINDOW_S`` only."""
        while self._successes and now - self._successes[0] > WINDOW_S:
            self._successes.popleft()

    def failed(self) -> None:
        """Any other error: the slot is free, the limit unchanged."""
        self.in_flight -= 1

    def throttled(self, started_at: float, retry_after: float | None) -> None:
        """A 429: pause for the server's retry-after, and cut the limit once per episode.

        The cut keeps half the limit, but not less than the concurrency that carried the rate the
        server accepted over the last second (Little's law: rate x latency), less 5%: halving
        alone would fall far below the server's rate and spend the time between cuts climbing back.
        Once the endpoint has been called for a whole second, that accepted rate is also its pace
        (calls evenly spaced at it); the concurrency then keeps one slot more than carries it, so
        the pace holds the rate where the server's limit is, not a whole slot's share below it. A
        429 while paced cuts the pace to the accepted rate, by a tenth at most (see PACE_CUT).
        """
        now = self.clock()
        self.in_flight -= 1
        self.throttled_count += 1
        self.resume_at = max(self.resume_at, now + (DEFAULT_PAUSE_S if retry_after is None else retry_after))
        if started_at < self._cut_at:
            return  # sent before the last cut: the cut already answered it
        self._forget(now)
        accepted = len(self._successes) / WINDOW_S
        if self.pace:
            # Never up: successes of calls started before the pace (or a faster one) may count.
            self._refused_pace, self.pace = self.pace, min(self.pace, max(PACE_FLOOR, accepted, self.pace * PACE_CUT))
        elif accepted and self._since is not None and now - self._since >= WINDOW_S:
            self._refused_pace = self.pace = accepted
        # Paced, the pace holds the rate: the concurrency only has to carry it, latency jitter too.
        floor = self.pace * self._latency * SLACK + 1.0 if self.pace else accepted * self._latency * HEADROOM
        self.limit = max(1.0, min(self.limit, max(self.limit * BETA, floor)))
        self._cut_at = now
        self._grow_after = now + max(WINDOW_S, retry_after or 0.0)

    @property
    def current(self) -> int:
        return max(1, int(self.limit))


@dataclass
class TokenBucket:
    """``per_minute`` units spread evenly: a call may start while the bucket is not in debt.

    The bucket holds at most ``burst_s`` seconds' worth (at least one unit), so a fresh run does
    not burst a whole minute's allowance into a server that counts in shorter windows: requests
    are spaced evenly (``burst_s`` 0: one at a time), tokens may come a second's worth at once
    (one call's tokens are many). A call takes its estimate on starting and settles the
    difference when its usage is known; the debt that leaves is paid off before the next call.
    """

    per_minute: float
    clock: Clock = time.monotonic
    burst_s: float = 0.0
    level: float = 0.0
    _at: float = -1.0

    def __post_init__(self) -> None:
        self.level = self.capacity
        self._at = self.clock()

    @property
    def capacity(self) -> float:
        return max(1.0, self.per_minute / 60.0 * self.burst_s)

    def _refill(self) -> None:
        now = self.clock()
        self.level = min(self.capacity, self.level + (now - self._at) * self.per_minute / 60.0)
        self._at = now

    def wait_s(self, amount: float) -> float:
        """Seconds until ``amount`` may be taken (0: now)."""
        self._refill()
        need = min(amount, self.capacity) - self.level  # a call larger than the bucket waits for a full one
        return max(0.0, need * 60.0 / self.per_minute)

    def take(self, amount: float) -> None:
        self._refill()
        self.level -= amount

    def settle(self, estimated: float, actual: float) -> None:
        self.level += estimated - actual


def endpoint_of(provider: Provider) -> str | None:
    """The provider's endpoint (URL and a digest of its key), when it calls one over the network."""
    url, key = getattr(provider, "endpoint_url", None), getattr(provider, "endpoint_key", None)
    if not isinstance(url, str):
        return None
    return f"{url}#{hashlib.sha256(str(key).encode()).hexdigest()[:12]}"  # the key itself is kept nowhere


class Limits:
    """The process's limiters, one per endpoint; ``ceiling`` is ``--bench-concurrency``."""

    def __init__(self, stop: Stop, clock: Clock = time.monotonic) -> None:
        self.stop, self.clock = stop, clock
        self.ceiling: int | None = None
        self.processes = 1  # xdist workers calling the same endpoints: each keeps 1/processes of a rate_limit
        self.endpoints: dict[str, Limiter] = {}
        self._by_arm: dict[int, Limiter] = {}  # id(ArmSpec) -> its endpoint's limiter
        self._lock = threading.Condition()
        self._local = threading.local()  # the 429s of the item this thread runs (``take_throttled``)

    def wrap(self, provider: Provider, arm: ArmSpec) -> Provider:
        """``provider`` behind its endpoint's limiter (a provider without an endpoint, as it is)."""
        endpoint = endpoint_of(provider)
        if endpoint is None:
            return provider
        ceiling = min(c for c in (self.ceiling or DEFAULT_CEILING, arm.concurrency) if c)
        with self._lock:
            limiter = self.endpoints.get(endpoint)
            if limiter is None:
                limiter = self.endpoints[endpoint] = Limiter(ceiling, self.clock)
            limiter.raise_ceiling(ceiling)
            self._by_arm[id(arm)] = limiter
        return Limited(provider, self, limiter, _buckets(arm, self.clock, self.processes), _max_tokens(arm))

    def take_throttled(self) -> int:
        """429s this thread met since it last asked: the item just run."""
        count: int = getattr(self._local, "throttled", 0)
        self._local.throttled = 0
        return count

    def note_throttled(self) -> None:
        self._local.throttled = getattr(self._local, "throttled", 0) + 1

    def current(self, arm: ArmSpec) -> int | None:
        """The current limit of ``arm``'s endpoint (None until it has called one)."""
        limiter = self._by_arm.get(id(arm))
        return limiter.current if limiter is not None else None

    def pace(self, arm: ArmSpec) -> float | None:
        """Requests a second ``arm``'s endpoint is paced at after a 429 (None: not paced)."""
        limiter = self._by_arm.get(id(arm))
        return round(limiter.pace, 1) if limiter is not None and limiter.pace else None


@dataclass
class Buckets:
    requests: TokenBucket | None
    tokens: TokenBucket | None


def _buckets(arm: ArmSpec, clock: Clock, processes: int) -> Buckets:
    """The arm's ``rate_limit:`` is what the provider allows the whole run: this process's share."""
    rate = arm.rate_limit
    if rate is None:
        return Buckets(None, None)
    rpm, tpm = rate.requests_per_minute, rate.tokens_per_minute
    return Buckets(TokenBucket(rpm / processes, clock) if rpm else None,
                   TokenBucket(tpm / processes, clock, burst_s=1.0) if tpm else None)


def _max_tokens(arm: ArmSpec) -> int:
    value = arm.options.get("max_tokens")
    return value if isinstance(value, int) and not isinstance(value, bool) else 0


def estimate_tokens(prompt: str, max_tokens: int) -> int:
    """What a call may count against a tokens-per-minute limit before its usage is known:
    about four characters a token for the prompt, and the reply's ``max_tokens`` (providers
    reserve it), corrected from the reply's usage afterwards."""
    return len(prompt) // 4 + 1 + max_tokens


class Limited:
    """A network provider whose calls wait for their endpoint's limiter and the arm's buckets."""

    def __init__(self, inner: Provider, limits: Limits, limiter: Limiter, buckets: Buckets, max_tokens: int) -> None:
        self.inner, self.limits, self.limiter, self.buckets, self.max_tokens = inner, limits, limiter, buckets, max_tokens

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)  # what the runner asks of a provider (``instant``, ...)

    def complete(self, request: Request) -> Completion:
        estimate = estimate_tokens(request.prompt, self.max_tokens)
        started = self._acquire(estimate)
        try:
            done = self.inner.complete(request)
        except ProviderError as exc:
            self._release(started, exc)
            raise
        except BaseException:
            self._release(started, None)
            raise
        with self.limits._lock:
            self.limiter.succeeded(started)
            if self.buckets.tokens is not None and done.usage:
                self.buckets.tokens.settle(estimate, sum(done.usage.values()))
            self.limits._lock.notify_all()
        return done

    def _acquire(self, estimate: int) -> float:
        """Wait for the arm's buckets, then for the endpoint, in turn; the run's stop ends either
        wait within a tick.

        Calls start in the order they came (``Limiter.queue``): woken together, the newest could
        otherwise win the race again and again while the oldest, which pytest reports next, waits,
        and the items reported after it can start no new calls until it is done. A call joins the
        queue only once its own arm's buckets allow it, so one arm's ``rate_limit:`` holds up no
        other arm's calls to the same endpoint.
        """
        with self.limits._lock:
            while True:
                self._wait_for_buckets(estimate)
                started = self._take_turn(estimate)
                if started is not None:
                    return started

    def _wait_for_buckets(self, estimate: int) -> None:
        while (wait := self._bucket_wait(estimate)) > 0:
            self._check_stop()
            self.limits._lock.wait(min(wait, WAIT_TICK_S))

    def _take_turn(self, estimate: int) -> float | None:
        """Start in turn once the endpoint allows; None if this arm's other calls spent its buckets meanwhile."""
        lock, queue = self.limits._lock, self.limiter.queue
        ticket = object()
        queue.append(ticket)
        try:
            while True:
                self._check_stop()
                pause = self.limiter.wait_s()
                if pause > LONG_PAUSE_S:  # the endpoint asked for a long wait: give the call up for a resume
                    raise TransientError(f"the endpoint asked to wait {pause:.0f} s more (retry-after); not called",
                                         retry_after=pause, status=429)
                first = queue[0] is ticket
                if first and pause <= 0:
                    if self._bucket_wait(estimate) > 0:
                        return None  # waits for the buckets again, out of the endpoint's queue
                    for bucket, amount in ((self.buckets.requests, 1), (self.buckets.tokens, estimate)):
                        if bucket is not None:
                            bucket.take(amount)
                    return self.limiter.started()
                lock.wait(min(pause, WAIT_TICK_S) if first else WAIT_TICK_S)
        finally:
            head = queue[0] is ticket
            queue.remove(ticket)
            if head:  # only the head's leaving changes whose turn it is: wake the waiters once, not per call
                lock.notify_all()

    def _check_stop(self) -> None:
        if self.limits.stop.is_set():
            raise AbortedError("the run is stopping; no call was made")

    def _bucket_wait(self, estimate: int) -> float:
        waits = [bucket.wait_s(amount) for bucket, amount in ((self.buckets.requests, 1), (self.buckets.tokens, estimate))
                 if bucket is not None]
        return max(waits, default=0.0)

    def _release(self, started: float, error: ProviderError | None) -> None:
        with self.limits._lock:
            if isinstance(error, TransientError) and error.status == 429:  # not quota exhaustion's 429
                self.limiter.throttled(started, error.retry_after)
                self.limits.note_throttled()
            else:
                self.limiter.failed()
            self.limits._lock.notify_all()
