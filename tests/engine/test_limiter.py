"""The adaptive limit per endpoint and the arms' rate limits, on an injected clock (no sleeping)."""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass
from pathlib import Path

import msgspec
import pytest
from openai_server import FakeOpenAI

from pytest_echo_bench.datasets.example import Example
from pytest_echo_bench.engine.limiter import Limiter, Limits, estimate_tokens
from pytest_echo_bench.engine.policies import DEFAULT_PAUSE_S, PACE_FLOOR, PACE_GROWTH, TokenBucket
from pytest_echo_bench.errors import AbortedError, ExhaustedError, SpecError, TransientError
from pytest_echo_bench.plugin.live import LiveRun
from pytest_echo_bench.plugin.payload import Payload
from pytest_echo_bench.providers.base import BaseProvider, Completion, Request
from pytest_echo_bench.providers.http_json import JSONClient, retry_after
from pytest_echo_bench.spec.load import ArmSpec, RateLimit, load_spec


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def run_calls(limiter: Limiter, clock: Clock, n: int, latency: float = 0.2) -> None:
    """``n`` successful calls, ``limiter.current`` at a time, each taking ``latency``."""
    for _ in range(n):
        started = limiter.started()
        clock.now += latency / limiter.current
        limiter.succeeded(started)


def test_it_starts_at_the_configured_limit_and_holds_calls_beyond_it() -> None:
    clock = Clock()
    limiter = Limiter(4, clock)
    for _ in range(4):
        assert limiter.wait_s() == 0
        limiter.started()
    assert limiter.wait_s() > 0
    limiter.failed()
    assert limiter.wait_s() == 0 and limiter.current == 4


def test_a_429_halves_the_limit_once_and_pauses_the_endpoint_for_its_retry_after() -> None:
    clock = Clock()
    limiter = Limiter(32, clock)
    before = [limiter.started() for _ in range(3)]
    clock.now += 0.01
    limiter.throttled(before[0], retry_after=0.5)
    assert limiter.current == 16 and limiter.throttled_count == 1
    assert limiter.wait_s() == pytest.approx(0.5)
    # Sent before the cut: counted and waited for, but the cut already answered it.
    limiter.throttled(before[1], retry_after=0.2)
    assert limiter.current == 16 and limiter.throttled_count == 2
    assert limiter.wait_s() == pytest.approx(0.5)  # the longer pause stands
    clock.now += 0.5
    assert limiter.wait_s() == 0
    later = limiter.started()
    limiter.throttled(later, retry_after=None)  # a fresh 429 cuts again; no header: a default pause
    assert limiter.current == 8 and limiter.wait_s() == pytest.approx(DEFAULT_PAUSE_S)


def accepted_for_a_second(limiter: Limiter, clock: Clock) -> None:
    """50 calls answered over one second, each after 0.2 s: 10 in flight carried them."""
    for _ in range(50):
        clock.now += 0.02
        limiter.in_flight += 1
        limiter.succeeded(clock.now - 0.2)


def test_a_cut_keeps_the_concurrency_that_carried_the_accepted_rate() -> None:
    # 50 calls a second accepted at 0.2 s each need 10 in flight: halving 32 to 16 is fine, but
    # the next cut stops near 10 (less 5%), not at 8.
    clock = Clock()
    limiter = Limiter(32, clock)
    accepted_for_a_second(limiter, clock)
    limiter.throttled(limiter.started(), retry_after=0.0)
    assert limiter.current == 16
    limiter.throttled(limiter.started(), retry_after=0.0)
    assert limiter.limit == pytest.approx(50 * 0.2 * 0.95)
    assert limiter.current == 9


def test_successes_older_than_a_second_do_not_hold_the_limit_up() -> None:
    clock = Clock()
    limiter = Limiter(32, clock)
    accepted_for_a_second(limiter, clock)
    clock.now += 5.0  # nothing answered since: the rate they showed is not the server's now
    limiter.throttled(limiter.started(), retry_after=0.0)
    assert limiter.current == 16
    limiter.throttled(limiter.started(), retry_after=0.0)
    assert limiter.current == 8


def calls_for_a_second(
    limiter: Limiter, clock: Clock, per_s: int = 50, latency: float = 0.2
) -> None:
    """``per_s`` calls answered over one second, each after
    ``latency`` (several in flight at once)."""
    start = clock.now
    for i in range(per_s):
        limiter.started()
        limiter.succeeded(clock.now - latency)
        clock.now = start + (i + 1) / per_s


def paced(per_s: int = 50) -> tuple[Limiter, Clock]:
    """A limiter whose endpoint took ``per_s`` calls a second for a
    whole second, then answered 429."""
    clock = Clock()
    limiter = Limiter(32, clock)
    calls_for_a_second(limiter, clock, per_s=per_s)
    limiter.throttled(limiter.started(), retry_after=0.0)
    return limiter, clock


def test_a_429_after_a_whole_second_paces_the_endpoint_at_the_rate_it_accepted() -> None:
    # A server admitting 50 calls a second: one slot fewer than carries them would cost a tenth of
    # its rate, so the calls are spaced at the accepted rate and the
    # concurrency keeps one spare slot.
    limiter, clock = paced()
    assert limiter.pace == pytest.approx(50.0)
    assert limiter.limit == pytest.approx(max(16.0, 50 * 0.2 + 1))
    assert limiter.wait_s() == 0
    limiter.started()
    limiter.started()  # one step of lateness is made up (a thread that woke late)...
    assert limiter.wait_s() == pytest.approx(1 / 50)  # ... then one start per step
    clock.now += 1 / 50
    assert limiter.wait_s() == 0
    clock.now += 5.0  # a quiet spell earns no burst: one step made up, then one call per step
    limiter.started()
    limiter.started()
    assert limiter.wait_s() == pytest.approx(1 / 50)


def test_a_429_in_the_first_second_does_not_pace_the_accepted_rate_is_not_known_yet() -> None:
    clock = Clock()
    limiter = Limiter(32, clock)
    first = limiter.started()
    clock.now += 0.3
    limiter.throttled(first, retry_after=0.0)
    assert limiter.pace == 0.0 and limiter.current == 16


def test_a_429_while_paced_never_raises_the_pace() -> None:
    # Successes of calls started before the pace count in the accepted rate: it may be higher.
    limiter, clock = paced(per_s=80)
    limiter.pacer.pace = 20.0  # paced lower meanwhile
    clock.now += 0.5
    # half a second of 80 a second: 40 accepted
    limiter.throttled(limiter.started(), retry_after=0.0)
    assert limiter.pace == 20.0


def test_429s_without_a_success_between_cut_the_pace_no_lower_than_its_floor() -> None:
    limiter, clock = paced()
    assert limiter.pace == pytest.approx(50.0)
    for _ in range(200):
        # a call starts when the pace lets it; every 429 cuts again
        clock.now += 2.0 + limiter.wait_s()
        limiter.throttled(limiter.started(), retry_after=0.0)
    assert limiter.pace == PACE_FLOOR
    # one call per 10 s at the least, never a standstill
    assert 0 < limiter.wait_s() <= 1 / PACE_FLOOR


def test_the_pace_grows_while_calls_succeed_and_ends_where_the_ceiling_holds_the_rate_anyway() -> (
    None
):
    limiter, clock = paced()
    limiter.in_flight = 0
    clock.now += 1.0  # past the cut's settling time
    pace = limiter.pace
    calls_for_a_second(limiter, clock)
    assert limiter.pace == pytest.approx(pace + 50 * PACE_GROWTH)
    limiter.pacer.pace = 32 / 0.2 - PACE_GROWTH / 2  # about to exceed what 32 slots carry at 0.2 s
    calls_for_a_second(limiter, clock, per_s=2)
    assert limiter.pace == 0.0 and limiter.wait_s() == 0


def test_it_grows_back_by_about_one_per_round_after_a_pause_never_above_the_ceiling() -> None:
    clock = Clock()
    limiter = Limiter(8, clock)
    limiter.throttled(limiter.started(), retry_after=0.1)
    assert limiter.current == 4
    run_calls(limiter, clock, 3)  # within the second after the cut: no growth yet
    assert limiter.current == 4
    clock.now += 1.0
    run_calls(limiter, clock, 5)  # about one round: +1/limit a call
    assert limiter.current == 5
    run_calls(limiter, clock, 200)
    assert limiter.limit == 8.0


def test_the_request_bucket_spreads_calls_evenly() -> None:
    clock = Clock()
    bucket = TokenBucket(120, clock.now)  # 2 a second, one at a time: no burst at the start
    assert bucket.wait_s(clock.now, 1) == 0
    bucket.take(clock.now, 1)
    assert bucket.wait_s(clock.now, 1) == pytest.approx(0.5)
    clock.now += 0.5
    assert bucket.wait_s(clock.now, 1) == 0
    clock.now += 60
    # refilled, but never beyond its capacity
    assert bucket.wait_s(clock.now, 1) == 0 and bucket.level == 1


def test_the_token_bucket_takes_an_estimate_and_settles_it_from_the_usage() -> None:
    clock = Clock()
    # 100 tokens a second, a second's worth at once
    bucket = TokenBucket(6000, clock.now, burst_s=1.0)
    estimate = estimate_tokens("x" * 400, max_tokens=50)
    assert estimate == 151
    # larger than the bucket: it waits for a full one, not forever
    assert bucket.wait_s(clock.now, estimate) == 0
    bucket.take(clock.now, estimate)
    # the reply used more: the debt delays the next call
    bucket.settle(clock.now, estimate, actual=251)
    assert bucket.level == pytest.approx(100 - 251)
    assert bucket.wait_s(clock.now, 10) == pytest.approx(1.61)  # 161 tokens short at 100 a second


@dataclass
class Endpoint(BaseProvider):
    """A provider as the chat providers are: it names its endpoint; answers are scripted."""

    endpoint_url: str = "http://api.example/v1"
    endpoint_key: str = "sk-one"
    errors: tuple[Exception, ...] = ()

    def complete(self, request: Request) -> Completion:
        if self.errors:
            error, self.errors = self.errors[0], self.errors[1:]
            raise error
        return Completion("4", {"prompt_tokens": 3, "completion_tokens": 1})


def arm(name: str = "a", concurrency: int | None = None, rate: RateLimit | None = None) -> ArmSpec:
    return ArmSpec(name, "openai", {}, 1, concurrency, False, rate)


def request() -> Request:
    return Request(Example("t1", "2+2", "4"), "a", "2+2")


def test_an_arms_rate_limit_is_split_among_the_worker_processes() -> None:
    clock = Clock()
    limits = Limits(threading.Event(), processes=2, clock=clock)
    provider = limits.wrap(Endpoint(), arm(rate=RateLimit(requests_per_minute=120)))
    provider.complete(request())
    # 1 a second here, 2 for the run
    assert provider.buckets.requests.wait_s(clock.now, 1) == pytest.approx(1.0)


def test_arms_on_one_endpoint_share_its_limiter_and_the_pool_is_the_ceiling() -> None:
    limits = Limits(threading.Event(), ceiling=32, clock=Clock())
    first, second = arm("a", concurrency=8), arm("b")
    limits.wrap(Endpoint(), first)
    limits.wrap(Endpoint(), second)
    limits.wrap(Endpoint(endpoint_key="sk-two"), arm("c"))
    # the key is part of the endpoint (and is kept only as a digest)
    assert len(limits.endpoints) == 2
    assert not any("sk-one" in name for name in limits.endpoints)
    assert limits.current(first) == limits.current(second) == 32


def test_a_provider_without_an_endpoint_is_left_as_it_is() -> None:
    class Offline(BaseProvider):
        instant = True

        def complete(self, request: Request) -> Completion:
            return Completion("4")

    provider = Offline()
    assert Limits(threading.Event()).wrap(provider, arm()) is provider


def test_a_429_is_counted_for_the_item_that_met_it_and_cuts_the_endpoint() -> None:
    clock = Clock()
    limits = Limits(threading.Event(), ceiling=8, clock=clock)
    conf = arm()
    provider = limits.wrap(
        Endpoint(errors=(TransientError("HTTP 429", retry_after=0.0, status=429),)), conf
    )
    with pytest.raises(TransientError):
        provider.complete(request())
    assert limits.take_throttled() == 1 and limits.take_throttled() == 0
    assert limits.current(conf) == 4
    assert provider.complete(request()).text == "4"


def test_quota_exhaustion_is_not_a_rate_limit() -> None:
    limits = Limits(threading.Event(), clock=Clock())
    conf = arm()
    provider = limits.wrap(
        Endpoint(errors=(ExhaustedError("insufficient_quota", status=429),)), conf
    )
    with pytest.raises(ExhaustedError):
        provider.complete(request())
    assert limits.take_throttled() == 0 and limits.current(conf) == 64


def test_a_call_waiting_for_its_endpoint_stops_with_the_run() -> None:
    stop = threading.Event()
    clock = Clock()
    limits = Limits(stop, clock=clock)
    provider = limits.wrap(
        Endpoint(errors=(TransientError("HTTP 429", retry_after=3600.0, status=429),)), arm()
    )
    with pytest.raises(TransientError):
        provider.complete(request())
    stop.set()  # the endpoint is paused for an hour; the stop must not wait for it
    with pytest.raises(AbortedError):
        provider.complete(request())


def test_calls_waiting_for_their_endpoint_start_in_the_order_they_came() -> None:
    # Woken together, the newest waiter could win every race while the oldest (the item pytest
    # reports next) waits on, holding up every item after it.
    limits = Limits(threading.Event(), ceiling=1)
    gate, order = threading.Event(), []

    class Recording(Endpoint):
        def complete(self, request: Request) -> Completion:
            order.append(request.prompt)
            if request.prompt == "first":
                gate.wait(10)
            return super().complete(request)

    provider = limits.wrap(Recording(), arm())
    endpoint = next(iter(limits.endpoints.values()))
    threads = []
    for n, prompt in enumerate(["first", *(f"q{i}" for i in range(6))]):
        threads.append(
            threading.Thread(
                target=provider.complete, args=(Request(Example("t", "x", "4"), "a", prompt),)
            )
        )
        threads[-1].start()
        # in the queue (or running) before the next one comes
        while len(order) + len(endpoint.queue) < n + 1:
            time.sleep(0.001)
    gate.set()
    for thread in threads:
        thread.join(10)
    assert order == ["first", *(f"q{i}" for i in range(6))]


def test_one_arms_rate_limit_holds_up_no_other_arms_calls_to_the_same_endpoint() -> None:
    # the clock stands still: the paced arm's bucket stays empty
    stop, clock = threading.Event(), Clock()
    limits = Limits(stop, clock=clock)
    paced = limits.wrap(Endpoint(), arm("a", rate=RateLimit(requests_per_minute=1)))
    free = limits.wrap(Endpoint(), arm("b"))
    paced.complete(request())
    aborted: list[bool] = []

    def wait_for_bucket() -> None:
        with pytest.raises(AbortedError):
            paced.complete(request())
        aborted.append(True)

    waiting = threading.Thread(target=wait_for_bucket)
    waiting.start()
    time.sleep(0.05)  # the paced call now waits for its bucket
    answers: list[str] = []
    other = threading.Thread(target=lambda: answers.append(free.complete(request()).text))
    other.start()
    other.join(2)
    stop.set()
    waiting.join(5)
    assert answers == ["4"] and aborted == [True]


@pytest.mark.parametrize(("headers", "seconds"), [
    ({"retry-after-ms": "250", "retry-after": "1"}, 0.25),
    ({"retry-after": "2"}, 2.0),
    ({"x-ratelimit-remaining-requests": "0", "x-ratelimit-reset-requests": "20ms"}, 0.02),
    ({"x-ratelimit-remaining-tokens": "0", "x-ratelimit-reset-tokens": "1m30s",
      "x-ratelimit-remaining-requests": "0", "x-ratelimit-reset-requests": "1.5s"}, 90.0),
    # not the limit that ran out
    ({"x-ratelimit-remaining-requests": "7", "x-ratelimit-reset-requests": "6m0s"}, None),
    ({"x-ratelimit-remaining-requests": "0", "x-ratelimit-reset-requests": "soon"}, None),
    # would pause the endpoint for good: ignored, our backoff instead
    ({"retry-after": "inf"}, None),
    ({"retry-after-ms": "1e400"}, None),
    ({"retry-after": "nan"}, None),
])
def test_retry_after_reads_every_header_real_apis_send(
    headers: dict[str, str], seconds: float | None
) -> None:
    assert retry_after(headers) == (pytest.approx(seconds) if seconds is not None else None)


def test_the_rate_limited_test_server_answers_429_with_retry_after_beyond_its_rate() -> None:
    with FakeOpenAI() as server:
        server.limit_rate(3)
        client = JSONClient(server.base_url + "/chat/completions", {}, 5.0)
        answers = [
            client.post({"model": "m", "messages": [{"role": "user", "content": "hi"}]})
            for _ in range(5)
        ]
    assert [status for status, _, _ in answers] == [200, 200, 200, 429, 429]
    headers = answers[3][1]
    assert 0 < float(headers["retry-after-ms"]) <= 1000 and headers["retry-after"] == "1"
    assert 0 < retry_after(headers) <= 1.0  # type: ignore[operator]
    assert server.rate is not None and server.rate.refused == 2


def spec_text(rate: str) -> str:
    return (
        "benchmark: b\ndataset: {loader: inline, items: [{id: a, input: x, target: "
        "y}]}\nscorer: exact\n"
        f"arms:\n  gpt: {{provider: openai, model: m, rate_limit: {rate}}}\n"
    )


def test_a_spec_sets_an_arms_rate_limit_outside_its_options(tmp_path: Path) -> None:
    path = tmp_path / "s.yaml"
    path.write_text(spec_text("{requests_per_minute: 3000, tokens_per_minute: 1000000}"))
    gpt = load_spec(path).arms["gpt"]
    assert gpt.rate_limit == RateLimit(3000, 1000000) and "rate_limit" not in gpt.options


@pytest.mark.parametrize(
    "rate",
    ["{requests_per_minute: 0}", "{requests_per_day: 5}", "{}", "300", "{tokens_per_minute: true}"],
)
def test_a_bad_rate_limit_names_the_key(tmp_path: Path, rate: str) -> None:
    path = tmp_path / "s.yaml"
    path.write_text(spec_text(rate))
    with pytest.raises(SpecError, match="rate_limit"):
        load_spec(path)


def test_the_progress_line_and_summary_show_the_limit_and_the_429s(tmp_path: Path) -> None:
    lines: list[str] = []
    live = LiveRun(tmp_path / "r.jsonl", "run", ["b"], None, 0.0, lines.append)
    live.expected = {"gpt": 2}
    base = Payload(
        kind="row",
        benchmark="b",
        task_id="t",
        arm="gpt",
        epoch=1,
        status="correct",
        wall_seconds=0.2,
        retries=0,
        message="",
    )
    live.record(msgspec.structs.replace(base, limit=32, throttled=0))
    live.record(msgspec.structs.replace(base, limit=16, throttled=2))
    line = live.progress_line()
    assert "gpt 2/2 pass 1.000 limit 16" in line and "2 rate-limited (429)" in line
    summary = live.summary(partial=False)
    assert summary["rate_limited"] == 2 and summary["arms"]["gpt"]["concurrency_limit"] == 16
    assert summary["arms"]["gpt"]["pace_per_s"] is None and " pace " not in line
    live.expected = {"gpt": 4}
    # paced after a 429
    live.record(msgspec.structs.replace(base, limit=11, throttled=1, pace=49.5))
    assert "gpt 3/4 pass 1.000 limit 11 pace 49.5/s" in live.progress_line()
    assert live.summary(partial=False)["arms"]["gpt"]["pace_per_s"] == 49.5
    # grown past what the ceiling carries
    live.record(msgspec.structs.replace(base, limit=32, throttled=0, pace=None))
    assert " pace " not in live.progress_line()


def test_the_endpoints_pause_holds_a_call_no_longer_than_the_items_wait_budget() -> None:
    """A 30 s retry-after under ``retries.max_wait_s: 3``: the endpoint's next call is handed back
    at once with the time left (the item's budget then gives it up), not held 30 s at the gate."""
    clock = Clock()
    limits = Limits(threading.Event(), clock=clock)
    provider = limits.wrap(
        Endpoint(errors=(TransientError("HTTP 429", retry_after=30.0, status=429),)),
        arm(),
        max_wait_s=3.0,
    )
    with pytest.raises(TransientError):
        provider.complete(request())
    clock.now += 1.0
    outcome: list[BaseException] = []

    def second() -> None:
        try:
            provider.complete(request())
        except BaseException as exc:  # noqa: BLE001 - handed to the test's thread
            outcome.append(exc)

    caller = threading.Thread(target=second, daemon=True)
    caller.start()
    caller.join(5)  # the clock never moves by itself: a call held at the gate would never end
    assert outcome and isinstance(outcome[0], TransientError), outcome
    refused = outcome[0]
    assert "asked to wait 29 s more" in str(refused)
    assert refused.status == 429 and refused.retry_after == pytest.approx(29.0)
    clock.now += 29.0
    assert provider.complete(request()).text  # the pause over, the call goes through
