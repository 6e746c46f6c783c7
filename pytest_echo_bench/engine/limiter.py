"""Adaptive concurrency per endpoint, and an arm's optional client-side rate limit.

Every call of a network arm goes through the ``Gate`` of its endpoint (base URL and key): it
starts at the configured concurrency, is cut multiplicatively when the server answers 429, waits
out the server's ``retry-after`` before the endpoint's next call, and grows back by about one slot
per round of successful calls. An arm's ``rate_limit:`` adds a ``TokenBucket`` for its requests and
one for its tokens. The decisions are the pure policies of ``engine.policies`` combined by
``Limiter`` on an injected clock, so the tests drive them without sleeping; ``Limited`` adds the
blocking (one ``Condition`` per endpoint: a call ending on one endpoint wakes no other's waiters)
and the run-wide stop.
"""

from __future__ import annotations

import collections
import hashlib
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

from pytest_echo_bench.engine.policies import (
    HEADROOM,
    Aimd,
    DecisionLog,
    Observed,
    Pacer,
    Pause,
    TokenBucket,
)
from pytest_echo_bench.errors import AbortedError, ProviderError, TransientError
from pytest_echo_bench.providers.base import Completion, Provider, Request
from pytest_echo_bench.spec.load import ArmSpec

Clock = Callable[[], float]
# A pause longer than this (or than the item's retries.max_wait_s, if shorter) is not waited out
# call by call: each call fails at once as transient (with the time left as its retry-after), so
# the item's wait budget decides (see engine.calls). A pause of 30 s under max_wait_s: 3 cost
# every item 30 s here before.
LONG_PAUSE_S = 60.0
WAIT_TICK_S = 0.25  # a waiting call looks at the run-wide stop this often
DEFAULT_CEILING = 64  # the limit when no pool size was given (a Runner used on its own)


class Stop(Protocol):
    def is_set(self) -> bool: ...


class Limiter:
    """One endpoint's policies, told each call's start and end: the pause, AIMD and the pacer."""

    def __init__(self, ceiling: int, clock: Clock = time.monotonic) -> None:
        self.clock = clock
        self.pause, self.aimd, self.pacer, self.observed = (
            Pause(),
            Aimd(ceiling),
            Pacer(),
            Observed(),
        )
        self.in_flight = 0
        self.throttled_count = 0  # 429 answers seen

    @property
    def current(self) -> int:
        return self.aimd.current

    @property
    def limit(self) -> float:
        return self.aimd.limit

    @property
    def pace(self) -> float:
        return self.pacer.pace

    @property
    def logs(self) -> dict[str, DecisionLog]:
        return {"pause": self.pause.log, "aimd": self.aimd.log, "pacer": self.pacer.log}

    def wait_s(self) -> float:
        """Seconds until a call may start (0: now); the caller retries after that long."""
        now = self.clock()
        if (pause := self.pause.wait_s(now)) > 0:
            return pause
        if self.in_flight >= self.aimd.current:
            return WAIT_TICK_S
        return self.pacer.wait_s(now)

    def started(self) -> float:
        self.in_flight += 1
        now = self.clock()
        self.observed.on_start(now)
        self.pacer.on_start(now)
        return now

    def succeeded(self, started_at: float) -> None:
        now = self.clock()
        self.in_flight -= 1
        self.observed.on_success(now, started_at)
        if self.aimd.on_success(now):
            self.pacer.on_success(now, self.observed.latency, self.aimd.ceiling)

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
        the pace holds the rate where the server's limit is, not a whole slot's share below it.
        """
        now = self.clock()
        self.in_flight -= 1
        self.throttled_count += 1
        self.pause.on_rate_limited(now, retry_after)
        if not self.aimd.answers(started_at):
            return  # sent before the last cut: the cut already answered it
        accepted = self.observed.accepted(now)
        self.pacer.on_rate_limited(now, accepted, self.observed.whole_window(now))
        latency = self.observed.latency
        floor = (
            self.pacer.concurrency_floor(latency)
            if self.pacer.pace
            else accepted * latency * HEADROOM
        )
        self.aimd.on_rate_limited(now, floor, retry_after)


class Gate:
    """One endpoint's limiter with what blocks on it: its own condition, and the
    calls waiting to start, in turn."""

    def __init__(self, name: str, limiter: Limiter) -> None:
        self.name, self.limiter = name, limiter
        self.condition = threading.Condition()
        self.queue: collections.deque[object] = collections.deque()
        self.buckets: list[TokenBucket] = []  # the rate limits of the arms calling it (their logs)
        self._seen: dict[int, int] = {}  # id(log) -> decisions already taken (``take_decisions``)
        self._taken = 0  # how many decisions all its logs had made when they were last taken

    def _made(self) -> int:
        limiter = self.limiter
        policies = limiter.pause.log.total + limiter.aimd.log.total + limiter.pacer.log.total
        return policies + sum(bucket.log.total for bucket in self.buckets)

    def take_decisions(self) -> list[tuple[float, str]]:
        """The decisions made since the last time as (clock time, text), oldest first, each named by
        endpoint and policy."""
        # Asked after every item, by every thread: most of the time nothing was decided, and the
        # condition every call of the endpoint takes need not be taken to see that (a decision
        # made meanwhile is taken the next time).
        if self._made() == self._taken:
            return []
        with self.condition:
            self._taken = self._made()
            logs = [
                *self.limiter.logs.items(),
                *((bucket.unit, bucket.log) for bucket in self.buckets),
            ]
            fresh = []
            for policy, log in logs:
                fresh += [
                    (d.at, f"{self.name} {policy}: {d.text}")
                    for d in log.since(self._seen.get(id(log), 0))
                ]
                self._seen[id(log)] = log.total
        return sorted(fresh, key=lambda pair: pair[0])


def decision_stamp(wall: float) -> str:
    """A decision's UTC time, to the millisecond: as text, its order is the time order."""
    whole = int(wall)
    return (
        time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(whole))
        + f".{int((wall - whole) * 1000):03d}Z"
    )


def endpoint_of(provider: Provider) -> str | None:
    """The provider's endpoint (URL and a digest of its key), when it calls one over the network."""
    url, key = provider.endpoint_url, provider.endpoint_key
    if not isinstance(url, str):
        return None
    # the key itself is kept nowhere
    return f"{url}#{hashlib.sha256(str(key).encode()).hexdigest()[:12]}"


class Limits:
    """The process's gates, one per endpoint.

    ``ceiling`` is ``--bench-concurrency`` (no endpoint's limit goes above the pool); ``processes``
    the xdist workers calling the same endpoints (each keeps 1/processes of a ``rate_limit:``).
    """

    def __init__(self, stop: Stop, ceiling: int = DEFAULT_CEILING, processes: int = 1,
                 clock: Clock = time.monotonic) -> None:
        self.stop, self.ceiling, self.processes, self.clock = stop, ceiling, processes, clock
        self.endpoints: dict[str, Gate] = {}
        self._by_arm: dict[int, Gate] = {}  # id(ArmSpec) -> its endpoint's gate
        self._gates: tuple[Gate, ...] = ()  # the endpoints' gates, read without the lock
        self._lock = threading.Lock()  # the two maps only: each gate has its own condition
        # the 429s of the item this thread runs (``take_throttled``)
        self._local = threading.local()

    def wrap(self, provider: Provider, arm: ArmSpec, max_wait_s: float = LONG_PAUSE_S) -> Provider:
        """``provider`` behind its endpoint's gate (a provider without an endpoint, as it is);
        ``max_wait_s``: the items' wait budget (``retries.max_wait_s``), the
        longest a call waits at the gate."""
        endpoint = endpoint_of(provider)
        if endpoint is None:
            return provider
        ceiling = min(c for c in (self.ceiling, arm.concurrency) if c)
        buckets = _buckets(arm, self.clock(), self.processes)
        with self._lock:
            gate = self.endpoints.get(endpoint)
            if gate is None:
                gate = self.endpoints[endpoint] = Gate(
                    endpoint.partition("#")[0], Limiter(ceiling, self.clock)
                )
                self._gates = (*self._gates, gate)
            self._by_arm[id(arm)] = gate
        with gate.condition:
            gate.limiter.aimd.raise_ceiling(ceiling)
            gate.buckets += [b for b in (buckets.requests, buckets.tokens) if b is not None]
        return Limited(
            provider, self, gate, buckets, _max_tokens(arm), min(LONG_PAUSE_S, max_wait_s)
        )

    def take_throttled(self) -> int:
        """429s this thread met since it last asked: the item just run."""
        count: int = getattr(self._local, "throttled", 0)
        self._local.throttled = 0
        return count

    def note_throttled(self) -> None:
        self._local.throttled = getattr(self._local, "throttled", 0) + 1

    def take_decisions(self) -> list[str]:
        """Every gate's decisions since they were last taken, oldest first across the
        endpoints, each stamped with its UTC time (for ``-v``: the controller puts every
        process's in time order by it)."""
        fresh = sorted(
            (pair for gate in self._gates for pair in gate.take_decisions()),
            key=lambda pair: pair[0],
        )
        if not fresh:
            return []
        # the clock is monotonic: processes agree only on the wall clock
        offset = time.time() - self.clock()
        return [f"{decision_stamp(at + offset)} {text}" for at, text in fresh]

    def current(self, arm: ArmSpec) -> int | None:
        """The current limit of ``arm``'s endpoint (None until it has called one)."""
        gate = self._by_arm.get(id(arm))
        return gate.limiter.current if gate is not None else None

    def pace(self, arm: ArmSpec) -> float | None:
        """Requests a second ``arm``'s endpoint is paced at after a 429 (None: not paced)."""
        gate = self._by_arm.get(id(arm))
        return round(gate.limiter.pace, 1) if gate is not None and gate.limiter.pace else None


@dataclass
class Buckets:
    requests: TokenBucket | None
    tokens: TokenBucket | None


def _buckets(arm: ArmSpec, now: float, processes: int) -> Buckets:
    """The arm's ``rate_limit:`` is what the provider allows the whole run: this process's share."""
    rate = arm.rate_limit
    if rate is None:
        return Buckets(None, None)
    rpm, tpm = rate.requests_per_minute, rate.tokens_per_minute
    return Buckets(
        TokenBucket(rpm / processes, now, unit=f"{arm.name} requests") if rpm else None,
        TokenBucket(tpm / processes, now, burst_s=1.0, unit=f"{arm.name} tokens") if tpm else None,
    )


def _max_tokens(arm: ArmSpec) -> int:
    value = arm.options.get("max_tokens")
    return value if isinstance(value, int) and not isinstance(value, bool) else 0


def estimate_tokens(prompt: str, max_tokens: int) -> int:
    """What a call may count against a tokens-per-minute limit before its usage is known:
    about four characters a token for the prompt, and the reply's ``max_tokens`` (providers
    reserve it), corrected from the reply's usage afterwards."""
    return len(prompt) // 4 + 1 + max_tokens


class Limited:
    """A network provider whose calls wait for their endpoint's gate and the arm's buckets."""

    def __init__(
        self,
        inner: Provider,
        limits: Limits,
        gate: Gate,
        buckets: Buckets,
        max_tokens: int,
        long_pause_s: float = LONG_PAUSE_S,
    ) -> None:
        self.inner, self.limits, self.gate, self.buckets, self.max_tokens = (
            inner,
            limits,
            gate,
            buckets,
            max_tokens,
        )
        self.long_pause_s = long_pause_s
        self.limiter, self.clock = gate.limiter, limits.clock

    @property
    def instant(self) -> bool:
        return self.inner.instant

    @property
    def endpoint_url(self) -> str | None:
        return self.inner.endpoint_url

    @property
    def endpoint_key(self) -> str | None:
        return self.inner.endpoint_key

    def close(self) -> None:
        self.inner.close()

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
        with self.gate.condition:
            self.limiter.succeeded(started)
            if self.buckets.tokens is not None and done.usage:
                self.buckets.tokens.settle(self.clock(), estimate, sum(done.usage.values()))
            self.gate.condition.notify_all()
        return done

    def _acquire(self, estimate: int) -> float:
        """Wait for the arm's buckets, then for the endpoint, in turn; the run's stop ends either
        wait within a tick.

        Calls start in the order they came (``Gate.queue``): woken together, the newest could
        otherwise win the race again and again while the oldest, which pytest reports next, waits,
        and the items reported after it can start no new calls until it is done. A call joins the
        queue only once its own arm's buckets allow it, so one arm's ``rate_limit:`` holds up no
        other arm's calls to the same endpoint.
        """
        with self.gate.condition:
            while True:
                self._wait_for_buckets(estimate)
                started = self._take_turn(estimate)
                if started is not None:
                    return started

    def _wait_for_buckets(self, estimate: int) -> None:
        while (wait := self._bucket_wait(estimate)) > 0:
            self._check_stop()
            self.gate.condition.wait(min(wait, WAIT_TICK_S))

    def _take_turn(self, estimate: int) -> float | None:
        """Start in turn once the endpoint allows; None if this arm's other
        calls spent its buckets meanwhile."""
        condition, queue = self.gate.condition, self.gate.queue
        ticket = object()
        queue.append(ticket)
        try:
            while True:
                self._check_stop()
                pause = self.limiter.wait_s()
                # a long wait: the item's budget decides (engine.calls)
                if pause > self.long_pause_s:
                    raise TransientError(
                        f"the endpoint asked to wait {pause:.0f} s more (retry-after); not called",
                        retry_after=pause,
                        status=429,
                    )
                first = queue[0] is ticket
                if first and pause <= 0:
                    if self._bucket_wait(estimate) > 0:
                        return None  # waits for the buckets again, out of the endpoint's queue
                    now = self.clock()
                    for bucket, amount in (
                        (self.buckets.requests, 1),
                        (self.buckets.tokens, estimate),
                    ):
                        if bucket is not None:
                            bucket.take(now, amount)
                    return self.limiter.started()
                condition.wait(min(pause, WAIT_TICK_S) if first else WAIT_TICK_S)
        finally:
            head = queue[0] is ticket
            queue.remove(ticket)
            # only the head's leaving changes whose turn it is: wake the waiters once, not per call
            if head:
                condition.notify_all()

    def _check_stop(self) -> None:
        if self.limits.stop.is_set():
            raise AbortedError("the run is stopping; no call was made")

    def _bucket_wait(self, estimate: int) -> float:
        now = self.clock()
        waits = [
            bucket.wait_s(now, amount)
            for bucket, amount in ((self.buckets.requests, 1), (self.buckets.tokens, estimate))
            if bucket is not None
        ]
        return max(waits, default=0.0)

    def _release(self, started: float, error: ProviderError | None) -> None:
        with self.gate.condition:
            # not quota exhaustion's 429
            if isinstance(error, TransientError) and error.status == 429:
                self.limiter.throttled(started, error.retry_after)
                self.limits.note_throttled()
            else:
                self.limiter.failed()
            self.gate.condition.notify_all()
