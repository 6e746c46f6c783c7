"""The limiter's policies, pure: each is told events with the time they happened and keeps a
short log of what it decided.

``Pause`` waits out a server's retry-after, ``Aimd`` holds an endpoint's concurrency (additive
increase, multiplicative decrease), ``Pacer`` spaces calls at the rate a server accepted once it
refused one, ``TokenBucket`` is an arm's ``rate_limit:``. None of them reads a clock, sleeps or
locks: ``engine.limiter`` combines them per endpoint and blocks the calls they hold back, so the
tests can drive every decision with plain numbers.
"""

from __future__ import annotations

import collections
import math
from dataclasses import dataclass

BETA = 0.5  # a cut keeps this share of the limit (but never below what carried the accepted rate)
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
# a paced endpoint's concurrency: this share of what carries the pace, and one slot more
SLACK = 1.2
PACE_FLOOR = 0.1  # requests a second: 429s without a success in between cut the pace no lower
DEFAULT_PAUSE_S = 1.0  # a 429 without retry-after still pauses the endpoint this long
LOG_SIZE = 32  # decisions kept per policy: enough to read an episode, never a run's worth of memory


@dataclass(frozen=True)
class Decision:
    at: float  # the clock's time of the event that decided it
    text: str


class DecisionLog:
    """The last ``LOG_SIZE`` decisions of one policy, and how many were ever made (so a reader
    that drains it knows which are new even after the oldest were dropped)."""

    def __init__(self) -> None:
        self.entries: collections.deque[Decision] = collections.deque(maxlen=LOG_SIZE)
        self.total = 0

    def record(self, at: float, text: str) -> None:
        self.entries.append(Decision(at, text))
        self.total += 1

    def since(self, seen: int) -> list[Decision]:
        """The decisions made after the first ``seen`` (those still kept)."""
        fresh = min(self.total - seen, len(self.entries))
        return list(self.entries)[len(self.entries) - fresh:] if fresh > 0 else []


class Observed:
    """What the endpoint's answers showed: successes over the last window, the smoothed latency,
    and when its first call started."""

    def __init__(self) -> None:
        self.successes: collections.deque[float] = collections.deque()
        self.latency = 0.0  # smoothed seconds per successful call
        self.since: float | None = None

    def on_start(self, now: float) -> None:
        if self.since is None:
            self.since = now

    def on_success(self, now: float, started_at: float) -> None:
        latency = now - started_at
        self.latency = latency if not self.latency else 0.9 * self.latency + 0.1 * latency
        self.successes.append(now)
        self._forget(now)

    def accepted(self, now: float) -> float:
        """Requests a second the server answered over the last window."""
        self._forget(now)
        return len(self.successes) / WINDOW_S

    def whole_window(self, now: float) -> bool:
        """The endpoint has been called for a whole window: its accepted rate means something."""
        return self.since is not None and now - self.since >= WINDOW_S

    def _forget(self, now: float) -> None:
        while self.successes and now - self.successes[0] > WINDOW_S:
            self.successes.popleft()


class Pause:
    """No call starts before the server's retry-after has passed."""

    def __init__(self) -> None:
        self.resume_at = 0.0
        self.log = DecisionLog()

    def wait_s(self, now: float) -> float:
        return max(0.0, self.resume_at - now)

    def on_rate_limited(self, now: float, retry_after: float | None) -> None:
        pause = DEFAULT_PAUSE_S if retry_after is None else retry_after
        if now + pause > self.resume_at:  # the longer pause stands
            self.resume_at = now + pause
            why = "its retry-after" if retry_after is not None else "no retry-after: the default"
            self.log.record(now, f"pause {pause:.2f} s ({why})")


class Aimd:
    """The concurrency limit: about one slot more per round of
    successes, cut once per episode of 429s."""

    def __init__(self, ceiling: int) -> None:
        self.ceiling = ceiling
        self.limit = float(ceiling)
        self.cut_at = -math.inf  # 429s of calls started before the last cut do not cut again
        self.grow_after = -math.inf  # no growth until then: let the cut show its effect first
        self.log = DecisionLog()

    @property
    def current(self) -> int:
        return max(1, int(self.limit))

    def raise_ceiling(self, ceiling: int) -> None:
        """Another arm with a higher limit shares this endpoint."""
        if ceiling > self.ceiling:
            self.limit += ceiling - self.ceiling
            self.ceiling = ceiling

    def on_success(self, now: float) -> bool:
        """Grow, unless a cut is still settling; True if it was time to grow."""
        if now < self.grow_after:
            return False
        before = self.current
        self.limit = min(float(self.ceiling), self.limit + 1.0 / max(1.0, self.limit))
        if self.current != before:
            self.log.record(now, f"limit {before} -> {self.current} (calls succeed)")
        return True

    def answers(self, started_at: float) -> bool:
        """A 429 of a call started after the last cut: the cut did not answer it yet."""
        return started_at >= self.cut_at

    def on_rate_limited(self, now: float, floor: float, retry_after: float | None) -> None:
        """Cut to half, but not below ``floor`` (what carries the rate the server accepted)."""
        before = self.current
        self.limit = max(1.0, min(self.limit, max(self.limit * BETA, floor)))
        self.cut_at = now
        self.grow_after = now + max(WINDOW_S, retry_after or 0.0)
        self.log.record(now, f"limit {before} -> {self.current} (429)")


class Pacer:
    """Evenly spaced starts at the rate the server accepted, once it
    refused a call (0: not paced)."""

    def __init__(self) -> None:
        self.pace = 0.0  # requests a second
        self.refused = 0.0  # the pace the last 429 came at
        self.next_start = -math.inf
        self.log = DecisionLog()

    def wait_s(self, now: float) -> float:
        return max(0.0, self.next_start - now) if self.pace else 0.0

    def on_start(self, now: float) -> None:
        if self.pace:
            # A call that starts late (its thread waited for the GIL) does not push the next ones
            # back: up to one step of lateness is made up; a quiet spell is not.
            step = 1.0 / self.pace
            self.next_start = max(now - step, self.next_start) + step

    def on_success(self, now: float, latency: float, ceiling: int) -> None:
        if not self.pace:
            return
        self.pace += PACE_RECOVERY if self.pace < PACE_NEAR * self.refused else PACE_GROWTH
        if self.pace * latency > ceiling:
            self.log.record(
                now, f"unpaced at {self.pace:.1f}/s: {ceiling} slots hold the rate below it"
            )
            self.pace = 0.0

    def on_rate_limited(self, now: float, accepted: float, known: bool) -> None:
        """Paced: cut to the accepted rate, by PACE_CUT at most and never up (successes of calls
        started before the pace may count). Not paced: pace at the accepted rate once ``known``."""
        if self.pace:
            before = self.pace
            self.refused, self.pace = (
                self.pace,
                min(self.pace, max(PACE_FLOOR, accepted, self.pace * PACE_CUT)),
            )
            self.log.record(now, f"pace {before:.1f} -> {self.pace:.1f}/s (429)")
        elif accepted and known:
            self.refused = self.pace = accepted
            self.log.record(
                now, f"paced at {self.pace:.1f}/s (accepted over the last {WINDOW_S:g} s)"
            )

    def concurrency_floor(self, latency: float) -> float:
        """The concurrency that carries the pace, latency jitter too."""
        return self.pace * latency * SLACK + 1.0


class TokenBucket:
    """``per_minute`` units spread evenly: a call may start while the bucket is not in debt.

    The bucket holds at most ``burst_s`` seconds' worth (at least one unit), so a fresh run does
    not burst a whole minute's allowance into a server that counts in shorter windows: requests
    are spaced evenly (``burst_s`` 0: one at a time), tokens may come a second's worth at once
    (one call's tokens are many). A call takes its estimate on starting and settles the
    difference when its usage is known; the debt that leaves is paid off before the next call.
    """

    def __init__(
        self, per_minute: float, now: float, burst_s: float = 0.0, unit: str = "requests"
    ) -> None:
        self.per_minute, self.burst_s, self.unit = per_minute, burst_s, unit
        self.level = self.capacity
        self.at = now
        self.log = DecisionLog()

    @property
    def capacity(self) -> float:
        return max(1.0, self.per_minute / 60.0 * self.burst_s)

    def _refill(self, now: float) -> None:
        self.level = min(self.capacity, self.level + (now - self.at) * self.per_minute / 60.0)
        self.at = now

    def wait_s(self, now: float, amount: float) -> float:
        """Seconds until ``amount`` may be taken (0: now)."""
        self._refill(now)
        # a call larger than the bucket waits for a full one
        need = min(amount, self.capacity) - self.level
        return max(0.0, need * 60.0 / self.per_minute)

    def take(self, now: float, amount: float) -> None:
        self._refill(now)
        self.level -= amount

    def settle(self, now: float, estimated: float, actual: float) -> None:
        self.level += estimated - actual
        if actual > estimated and self.level < 0:
            self.log.record(now, f"used {actual:g} for an estimate of {estimated:g}: "
                                 f"{-self.level:g} in debt, paid off before the next call")
