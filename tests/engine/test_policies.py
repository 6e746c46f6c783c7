"""The limiter's pure policies, one table per policy: events with their times in, decisions out.

And the gate around them: each endpoint blocks on its own condition, so a call ending on one
endpoint wakes no call waiting on another; the decisions show in the end summary under ``-v``.
"""

from __future__ import annotations

import threading
import time

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from openai_server import RATE_LIMIT, FakeOpenAI

from conftest import Sweep, make_spec, sim_spec
from pytest_echo_bench.datasets.example import Example
from pytest_echo_bench.engine.limiter import Limiter, Limits
from pytest_echo_bench.engine.policies import (
    DEFAULT_PAUSE_S,
    LOG_SIZE,
    PACE_CUT,
    PACE_FLOOR,
    Aimd,
    DecisionLog,
    Observed,
    Pacer,
    Pause,
    TokenBucket,
)
from pytest_echo_bench.errors import TransientError
from pytest_echo_bench.providers.base import BaseProvider, Completion, Request
from pytest_echo_bench.spec.load import ArmSpec, RateLimit


@pytest.mark.parametrize(
    ("events", "waits", "logged"),
    [
        ([(0.0, 0.5)], [(0.0, 0.5), (0.4, 0.1), (0.5, 0.0)], ["pause 0.50 s (its retry-after)"]),
        ([(0.0, None)], [(0.0, DEFAULT_PAUSE_S)], ["pause 1.00 s (no retry-after: the default)"]),
        # the longer pause stands
        ([(0.0, 2.0), (1.0, 0.5)], [(1.0, 1.0)], ["pause 2.00 s (its retry-after)"]),
        (
            [(0.0, 0.5), (0.2, 1.0)],
            [(1.0, 0.2)],
            ["pause 0.50 s (its retry-after)", "pause 1.00 s (its retry-after)"],
        ),
        ([(0.0, 0.0)], [(0.0, 0.0)], []),  # a zero retry-after: no pause
    ],
)
def test_pause(
    events: list[tuple[float, float | None]], waits: list[tuple[float, float]], logged: list[str]
) -> None:
    pause = Pause()
    for now, retry_after in events:
        pause.on_rate_limited(now, retry_after)
    assert [pause.wait_s(now) for now, _ in waits] == [pytest.approx(w) for _, w in waits]
    assert [d.text for d in pause.log.entries] == logged


@pytest.mark.parametrize(
    ("ceiling", "events", "limit", "logged"),
    [
        (8, [("success", 0.0)], 8.0, []),  # at the ceiling: no growth, nothing to say
        (8, [("cut", 0.0, 0.0)], 4.0, ["limit 8 -> 4 (429)"]),
        # never below what carried the accepted rate
        (8, [("cut", 0.0, 6.0)], 6.0, ["limit 8 -> 6 (429)"]),
        (8, [("cut", 0.0, 20.0)], 8.0, ["limit 8 -> 8 (429)"]),  # nor above the limit it had
        (1, [("cut", 0.0, 0.0)], 1.0, ["limit 1 -> 1 (429)"]),  # never below one slot
        # the cut settles a second first
        (8, [("cut", 0.0, 0.0), ("success", 0.5)], 4.0, ["limit 8 -> 4 (429)"]),
        (
            8,
            [("cut", 0.0, 0.0), *[("success", 1.0)] * 5],
            5.124,
            ["limit 8 -> 4 (429)", "limit 4 -> 5 (calls succeed)"],
        ),
    ],
)
def test_aimd(
    ceiling: int, events: list[tuple[object, ...]], limit: float, logged: list[str]
) -> None:
    aimd = Aimd(ceiling)
    for kind, now, *floor in events:
        assert isinstance(now, float)
        if kind == "cut":
            aimd.on_rate_limited(now, float(floor[0]), retry_after=None)  # type: ignore[arg-type]
        else:
            aimd.on_success(now)
    assert aimd.limit == pytest.approx(limit, abs=0.01)
    assert [d.text for d in aimd.log.entries] == logged


@pytest.mark.parametrize(("started_at", "answered"), [(-1.0, False), (0.0, True), (0.5, True)])
def test_aimd_answers_a_429_once_per_episode(started_at: float, answered: bool) -> None:
    aimd = Aimd(8)
    aimd.on_rate_limited(0.0, 0.0, retry_after=None)
    assert aimd.answers(started_at) is answered


def test_aimd_grows_only_up_to_a_raised_ceiling() -> None:
    aimd = Aimd(4)
    aimd.raise_ceiling(2)  # a lower one changes nothing
    assert (aimd.ceiling, aimd.limit) == (4, 4.0)
    aimd.raise_ceiling(10)
    assert (aimd.ceiling, aimd.limit) == (10, 10.0)


@pytest.mark.parametrize(("pace", "accepted", "known", "after", "logged"), [
    (0.0, 50.0, True, 50.0, ["paced at 50.0/s (accepted over the last 1 s)"]),
    (0.0, 50.0, False, 0.0, []),  # the first second: the accepted rate is not known yet
    (0.0, 0.0, True, 0.0, []),  # nothing accepted: nothing to pace at
    (50.0, 40.0, True, 45.0, ["pace 50.0 -> 45.0/s (429)"]),  # a tenth at most
    (50.0, 48.0, True, 48.0, ["pace 50.0 -> 48.0/s (429)"]),
    (50.0, 80.0, True, 50.0, ["pace 50.0 -> 50.0/s (429)"]),  # never up
    (0.1, 0.0, True, PACE_FLOOR, ["pace 0.1 -> 0.1/s (429)"]),  # never below the floor
])
def test_pacer_on_a_429(
    pace: float, accepted: float, known: bool, after: float, logged: list[str]
) -> None:
    pacer = Pacer()
    pacer.pace = pace
    pacer.on_rate_limited(0.0, accepted, known)
    assert pacer.pace == pytest.approx(after)
    assert [d.text for d in pacer.log.entries] == logged
    assert after == 0.0 or pacer.refused == pace or pace == 0.0


@pytest.mark.parametrize(("starts", "now", "wait"), [
    ([], 0.0, 0.0),
    ([0.0], 0.0, 0.0),  # one step of lateness is made up
    ([0.0, 0.0], 0.0, 0.1),  # then one start a step
    ([0.0, 0.0], 0.1, 0.0),
    ([0.0, 5.0, 5.0], 5.0, 0.1),  # a quiet spell earns no burst
])
def test_pacer_spaces_starts(starts: list[float], now: float, wait: float) -> None:
    pacer = Pacer()
    pacer.on_rate_limited(0.0, 10.0, known=True)
    for at in starts:
        pacer.on_start(at)
    assert pacer.wait_s(now) == pytest.approx(wait)


def test_pacer_ends_where_the_ceiling_holds_the_rate_anyway() -> None:
    pacer = Pacer()
    pacer.on_rate_limited(0.0, 159.99, known=True)
    pacer.on_success(1.0, latency=0.2, ceiling=32)  # 160.0/s x 0.2 s = 32 slots: still paced
    assert pacer.pace == pytest.approx(160.0)
    pacer.on_success(1.1, latency=0.2, ceiling=32)
    assert pacer.pace == 0.0 and pacer.wait_s(1.1) == 0.0
    assert pacer.log.entries[-1].text.startswith("unpaced at 160.0/s: 32 slots")


@pytest.mark.parametrize(("per_minute", "burst_s", "events", "wait"), [
    (120, 0.0, [], 0.0),
    (120, 0.0, [("take", 0.0, 1)], 0.5),
    (120, 0.0, [("take", 0.0, 1), ("at", 0.5)], 0.0),
    (120, 0.0, [("take", 0.0, 1), ("take", 0.0, 1)], 1.0),  # a debt is paid off first
    (6000, 1.0, [("take", 0.0, 100)], 1.0),  # 100 tokens a second, a second's worth at once
    (6000, 1.0, [("take", 0.0, 151), ("settle", 0.0, 151, 251)], 2.51),
    (6000, 1.0, [("take", 0.0, 151), ("settle", 0.0, 151, 51)], 0.51),  # fewer used: given back
])
def test_token_bucket(
    per_minute: float, burst_s: float, events: list[tuple[object, ...]], wait: float
) -> None:
    bucket = TokenBucket(per_minute, 0.0, burst_s=burst_s)
    now = 0.0
    for kind, at, *amounts in events:
        now = float(at)  # type: ignore[arg-type]
        if kind == "take":
            bucket.take(now, float(amounts[0]))  # type: ignore[arg-type]
        elif kind == "settle":
            bucket.settle(now, float(amounts[0]), float(amounts[1]))  # type: ignore[arg-type]
    assert bucket.wait_s(now, 100 if burst_s else 1) == pytest.approx(wait)
    in_debt = any(
        kind == "settle" and amounts[1] > amounts[0]  # type: ignore[operator]
        for kind, _, *amounts in events
    )
    assert len(bucket.log.entries) == int(in_debt)


def test_observed_counts_the_last_second_only() -> None:
    observed = Observed()
    assert not observed.whole_window(0.0)
    observed.on_start(0.0)
    for i in range(10):
        observed.on_success(0.1 * i, 0.1 * i - 0.2)
    assert observed.accepted(0.95) == 10 and observed.latency == pytest.approx(0.2)
    assert observed.accepted(1.55) == 4 and observed.whole_window(1.0)


@settings(max_examples=100, deadline=None, derandomize=True, database=None)
@given(st.integers(0, 3 * LOG_SIZE), st.integers(0, 3 * LOG_SIZE))
def test_a_decision_log_is_bounded_and_hands_out_each_kept_decision_once(
    first: int, second: int
) -> None:
    log = DecisionLog()
    for i in range(first):
        log.record(float(i), f"d{i}")
    taken = log.since(0)
    seen = log.total
    for i in range(first, first + second):
        log.record(float(i), f"d{i}")
    fresh = log.since(seen)
    assert len(log.entries) == min(LOG_SIZE, first + second)
    assert [d.text for d in taken] == [f"d{i}" for i in range(max(0, first - LOG_SIZE), first)]
    assert [d.text for d in fresh] == [
        f"d{i}" for i in range(max(first, first + second - LOG_SIZE), first + second)
    ]
    assert log.since(log.total) == []


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_the_endpoints_decisions_are_taken_once_oldest_first_named_by_endpoint() -> None:
    clock = Clock()
    limits = Limits(threading.Event(), ceiling=8, clock=clock)
    provider = limits.wrap(
        Scripted("http://a.example/v1", [TransientError("429", retry_after=0.5, status=429)]),
        ArmSpec("a", "openai", {}, 1, None, False, None),
    )
    with pytest.raises(TransientError):
        provider.complete(request("x"))
    assert [line.split(" ", 1)[1] for line in limits.take_decisions()] == [
        "http://a.example/v1 pause: pause 0.50 s (its retry-after)",
        "http://a.example/v1 aimd: limit 8 -> 4 (429)",
    ]
    assert limits.take_decisions() == []


def test_a_decision_after_an_empty_take_is_taken_by_the_next() -> None:
    """Most items see no decision: the take counts the logs without the gate's condition. A
    decision made after an empty take (a policy's or an arm's bucket's) is still taken once."""
    clock = Clock()
    limits = Limits(threading.Event(), ceiling=8, clock=clock)
    arm = ArmSpec("gpt", "openai", {}, 1, None, False, RateLimit(tokens_per_minute=6000))

    class Costly(Scripted):
        def complete(self, request: Request) -> Completion:
            if self.errors:
                raise self.errors.pop(0)
            return Completion("4", {"prompt_tokens": 500, "completion_tokens": 500})

    provider = limits.wrap(
        Costly("http://a.example/v1", [TransientError("429", retry_after=0.5, status=429)]), arm
    )
    assert limits.take_decisions() == []
    with pytest.raises(TransientError):
        provider.complete(request("x"))
    assert [line.split(" ", 1)[1] for line in limits.take_decisions()] == [
        "http://a.example/v1 pause: pause 0.50 s (its retry-after)",
        "http://a.example/v1 aimd: limit 8 -> 4 (429)",
    ]
    assert limits.take_decisions() == []
    clock.now += 1.0  # past the pause
    provider.complete(request("y"))
    taken = [line.split(" ", 1)[1] for line in limits.take_decisions()]
    assert taken and all(line.startswith("http://a.example/v1 gpt tokens: ") for line in taken)
    assert limits.take_decisions() == []


def test_decisions_of_several_endpoints_and_processes_are_in_time_order() -> None:
    """Each endpoint keeps its own log: taken together, and from two
    processes, they interleave by time."""
    clock = Clock()
    one, two = (
        Limits(threading.Event(), ceiling=8, clock=clock),
        Limits(threading.Event(), ceiling=8, clock=clock),
    )
    arm = ArmSpec("a", "openai", {}, 1, None, False, None)
    providers = [
        (
            limits.wrap(
                Scripted(url, [TransientError("429", retry_after=0.5, status=429)] * 2), arm
            ),
            url,
        )
        for limits, url in (
            (one, "http://a.example/v1"),
            (one, "http://b.example/v1"),
            (two, "http://c.example/v1"),
        )
    ]
    order = [2, 1, 0, 2, 0]  # b, a... then again, each a second later
    for step, index in enumerate(order):
        clock.now = 100.0 + step
        with pytest.raises(TransientError):
            providers[index][0].complete(request(f"x{step}"))
    # the order their reports reached the controller
    lines = two.take_decisions() + one.take_decisions()
    merged = [
        line.split(" ", 2)[1] for line in sorted(lines, key=lambda line: line.partition(" ")[0])
    ]
    expected = [providers[i][1] for i in order]
    # each call logged a pause and a cut, same endpoint, same time
    assert list(dict.fromkeys(merged)) != merged
    assert [u for k, u in enumerate(merged) if k == 0 or merged[k - 1] != u] == expected
    stamps = [line.split(" ", 1)[0] for line in lines]
    assert all(len(s) == len("2026-12-02T01:02:03.456Z") and s.endswith("Z") for s in stamps)


@pytest.mark.parametrize(
    ("wall", "shown"),
    [
        (0.0, "1970-01-01T00:00:00.000Z"),
        (86399.9996, "1970-01-01T23:59:59.999Z"),
        (1_800_000_000.25, "2027-01-15T08:00:00.250Z"),
    ],
)
def test_a_decisions_stamp_is_utc_to_the_millisecond(wall: float, shown: str) -> None:
    from pytest_echo_bench.engine.limiter import decision_stamp

    assert decision_stamp(wall) == shown


def test_a_limiters_pause_aimd_and_pace_act_together_on_a_429_after_a_second() -> None:
    clock = Clock()
    limiter = Limiter(32, clock)
    for _ in range(50):  # 50 a second answered, each after 0.2 s
        started = limiter.started()
        clock.now += 0.02
        limiter.succeeded(started - 0.18)
    clock.now += 0.01
    limiter.throttled(limiter.started(), retry_after=0.3)
    assert limiter.pause.wait_s(clock.now) == pytest.approx(0.3)
    assert limiter.pace == pytest.approx(50.0)
    # halved: more than the 13 slots the pace needs (50/s x 0.2 s x 1.2 + 1)
    assert limiter.limit == pytest.approx(16.0)
    clock.now += 0.3
    # 35 accepted in the last second: the pace loses a tenth only
    limiter.throttled(limiter.started(), retry_after=0.0)
    assert limiter.pace == pytest.approx(50.0 * PACE_CUT)
    assert limiter.limit == pytest.approx(45.0 * 0.2 * 1.2 + 1)


class Scripted(BaseProvider):
    """A provider as the chat providers are: it names its endpoint; its errors come in turn."""

    def __init__(
        self,
        url: str,
        errors: list[Exception] | None = None,
        answer_after: threading.Event | None = None,
        latency_s: float = 0.0,
    ) -> None:
        self.endpoint_url, self.endpoint_key = url, "sk"
        self.errors, self.answer_after, self.latency_s = errors or [], answer_after, latency_s

    def complete(self, request: Request) -> Completion:
        if self.errors:
            raise self.errors.pop(0)
        if self.answer_after is not None:
            self.answer_after.wait(5)
        time.sleep(self.latency_s)  # as a network call, it lets other threads run meanwhile
        return Completion("4")


def request(prompt: str) -> Request:
    return Request(Example("t", prompt, "4"), "a", prompt)


def test_calls_ending_on_one_endpoint_wake_no_call_waiting_on_another(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # One condition for all would wake B's waiter twice on each of A's 100 calls (measured: about
    # 200 looks); its own wakes it only on its own tick (WAIT_TICK_S) until B's slot frees.
    limits = Limits(threading.Event(), ceiling=1)
    release = threading.Event()
    a = limits.wrap(
        Scripted("http://a.example/v1", latency_s=0.001),
        ArmSpec("a", "openai", {}, 1, None, False, None),
    )
    b = limits.wrap(
        Scripted("http://b.example/v1", answer_after=release),
        ArmSpec("b", "openai", {}, 1, None, False, None),
    )
    gate_b = limits.endpoints[
        next(name for name in limits.endpoints if name.startswith("http://b."))
    ]
    looks: list[float] = []
    wait_s = gate_b.limiter.wait_s

    def counted() -> float:
        looks.append(time.monotonic())
        return wait_s()

    monkeypatch.setattr(gate_b.limiter, "wait_s", counted)
    holder = threading.Thread(target=b.complete, args=(request("holds B's one slot"),))
    holder.start()
    waiter = threading.Thread(target=b.complete, args=(request("waits for B"),))
    deadline = time.monotonic() + 5
    while gate_b.limiter.in_flight < 1 and time.monotonic() < deadline:
        time.sleep(0.001)
    waiter.start()
    while len(gate_b.queue) < 1 and time.monotonic() < deadline:
        time.sleep(0.001)
    before = len(looks)
    started = time.monotonic()
    for i in range(100):
        a.complete(request(f"a{i}"))
    spent = time.monotonic() - started
    woken = len(looks) - before
    release.set()
    holder.join(5)
    waiter.join(5)
    assert not waiter.is_alive()
    # its own ticks only, not one per call on A
    assert woken <= 2 + int(spent / 0.25), (woken, spent)


def test_dash_v_shows_the_limiters_decisions_at_the_end(pytester: pytest.Pytester, sweep: Sweep,
                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TEST_OPENAI_KEY", "sk-test")
    with FakeOpenAI() as server:
        server.answer = lambda prompt: "4"
        arms = (
            f"  gpt: {{provider: openai, model: m, base_url: '{server.base_url}', "
            "api_key_env: TEST_OPENAI_KEY,"
            " client: http}"
        )
        make_spec(
            pytester,
            sim_spec(
                2, arms=arms, extra="retries: {attempts: 4, backoff_s: 0.01, max_backoff_s: 0.05}\n"
            ),
        )
        server.push("error", (429, RATE_LIMIT, {"retry-after": "0.05"}), times=1)
        quiet, _, _ = sweep.run("--bench-concurrency", "4", "--bench-cache", "off")
        server.push("error", (429, RATE_LIMIT, {"retry-after": "0.05"}), times=1)
        verbose, _, _ = sweep.run("--bench-concurrency", "4", "--bench-cache", "off", "-v",
                                  "--bench-out", str(pytester.path / "v.jsonl"))
    assert "limiter decisions" not in quiet.stdout.str()
    verbose.stdout.fnmatch_lines(["limiter decisions (the last 2, all processes):",
                                  f"  20*Z {server.base_url} pause: pause 0.05 s (its retry-after)",
                                  f"  20*Z {server.base_url} aimd: limit 4 -> 2 (429)"])


def test_a_rate_limit_bucket_in_debt_says_so() -> None:
    clock = Clock()
    limits = Limits(threading.Event(), clock=clock)

    class Costly(Scripted):
        def complete(self, request: Request) -> Completion:
            return Completion("4", {"prompt_tokens": 500, "completion_tokens": 500})

    provider = limits.wrap(
        Costly("http://a.example/v1"),
        ArmSpec("gpt", "openai", {}, 1, None, False, RateLimit(tokens_per_minute=6000)),
    )
    provider.complete(request("x"))
    assert [line.split(" ", 1)[1] for line in limits.take_decisions()] == [
        "http://a.example/v1 gpt tokens: used 1000 for an estimate of 1: 900 in debt, paid "
        "off before the next call"
    ]
