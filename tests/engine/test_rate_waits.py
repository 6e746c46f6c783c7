"""A rate limit's 429 is a wait, not a failed attempt: the item waits as the server says, within
``retries.max_wait_s``; every other transient error still spends an
attempt; exhaustion stays a stop.

``call_with_retries`` runs on a fake clock that the waits advance, so nothing here sleeps.
"""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pytest_echo_bench.datasets.example import Example
from pytest_echo_bench.engine.calls import Classifier, call_with_retries
from pytest_echo_bench.errors import ExhaustedError, IncompleteError, TransientError
from pytest_echo_bench.providers.base import Completion, Request
from pytest_echo_bench.providers.http_json import LONGEST_RETRY_AFTER_S, retry_after
from pytest_echo_bench.spec.load import RetryPolicy

REQ = Request(Example("t1", "in", "out"), "arm", "in")


class Clock:
    """Time that passes only when the call waits (``Stop.wait``) or the provider says so."""

    def __init__(self) -> None:
        self.now = 0.0
        self.waits: list[float] = []

    def __call__(self) -> float:
        return self.now

    def is_set(self) -> bool:
        return False

    def wait(self, timeout: float) -> bool:
        self.waits.append(timeout)
        self.now += timeout
        return False


class Scripted:
    def __init__(self, errors: list[Exception]) -> None:
        self.errors, self.calls = list(errors), 0

    def complete(self, request: Request) -> Completion:
        self.calls += 1
        assert request.attempt == self.calls  # each call numbered, waits included
        if self.errors:
            raise self.errors.pop(0)
        return Completion("ok")


def limited(after: float | None = 60.0) -> TransientError:
    return TransientError("HTTP 429: No deployments available", retry_after=after, status=429)


def run(errors: list[Exception], policy: RetryPolicy) -> tuple[Scripted, Clock, object]:
    provider, clock = Scripted(errors), Clock()
    try:
        outcome: object = call_with_retries(provider, REQ, policy, Classifier(), clock, clock=clock)
    except (IncompleteError, ExhaustedError) as exc:
        outcome = exc
    return provider, clock, outcome


def test_rate_limits_spend_no_attempt_and_their_waits_are_the_servers() -> None:
    provider, clock, done = run(
        [limited(), limited(), limited(), limited(), limited()], RetryPolicy(attempts=2)
    )
    assert done.completion.text == "ok" and provider.calls == 6
    assert clock.waits == [60.0] * 5  # LiteLLM's llm_provider-retry-after, waited exactly


def test_other_transient_errors_still_spend_the_attempts_between_rate_limits() -> None:
    errors: list[Exception] = [
        limited(1),
        TransientError("529", status=529),
        limited(1),
        TransientError("529", status=529),
    ]
    provider, _, done = run(errors, RetryPolicy(attempts=2, backoff_s=0.5))
    assert isinstance(done, IncompleteError) and "2 transient errors" in str(done)
    assert provider.calls == 4 and done.attempts == 4


def test_the_wait_budget_leaves_the_item_for_a_resume_before_overrunning_it() -> None:
    provider, clock, done = run([limited(60)] * 20, RetryPolicy(attempts=4, max_wait_s=150))
    assert isinstance(done, IncompleteError) and "retries.max_wait_s" in str(done)
    assert clock.waits == [60.0, 60.0] and clock.now <= 150 and provider.calls == 3


def test_a_rate_limit_without_retry_after_backs_off_exponentially_up_to_max_backoff() -> None:
    provider, clock, done = run(
        [limited(None)] * 8, RetryPolicy(attempts=1, backoff_s=1, max_backoff_s=8, max_wait_s=600)
    )
    assert done.completion.text == "ok" and provider.calls == 9
    assert all(0.5 * min(8, 2**i) <= w <= min(8, 2**i) for i, w in enumerate(clock.waits)), (
        clock.waits
    )


def test_quota_exhaustions_429_is_still_a_stop() -> None:
    provider, _, done = run([ExhaustedError("insufficient_quota", status=429)], RetryPolicy())
    assert isinstance(done, ExhaustedError) and provider.calls == 1


def test_a_server_that_rate_limits_forever_is_bounded_in_calls() -> None:
    provider, _, done = run(
        [limited(0.0)] * 2000, RetryPolicy(attempts=1, backoff_s=0, max_backoff_s=0, max_wait_s=10)
    )
    # the first call and 1000 rate-limit waits
    assert isinstance(done, IncompleteError) and provider.calls == 1001


@settings(max_examples=100, derandomize=True, database=None, deadline=None)
@given(script=st.lists(st.sampled_from(["429", "529"]), max_size=12), attempts=st.integers(1, 4),
       budget=st.sampled_from([30.0, 90.0, 600.0]))
def test_generated_mixes_of_rate_limits_and_failures(
    script: list[str], attempts: int, budget: float
) -> None:
    """The item ends by its attempts (529s only) or its wait budget
    (429s' waits only), never sooner."""
    errors: list[Exception] = [
        limited(20.0) if k == "429" else TransientError("529", status=529) for k in script
    ]
    provider, clock, done = run(
        errors, RetryPolicy(attempts=attempts, backoff_s=0.0, max_backoff_s=0.0, max_wait_s=budget)
    )
    calls = failures = 0
    waited = 0.0
    expected = "ok"
    for kind in [*script, "ok"]:
        calls += 1
        if kind == "ok":
            break
        if kind == "529":
            failures += 1
            if failures == attempts:
                expected = "attempts"
                break
        elif waited + 20.0 > budget:
            expected = "budget"
            break
        else:
            waited += 20.0
    assert provider.calls == calls
    if expected == "ok":
        assert done.completion.text == "ok"
    else:
        assert isinstance(done, IncompleteError)
        assert ("retries.max_wait_s" in str(done)) is (expected == "budget")
    assert clock.now <= budget + 1e-9


@pytest.mark.parametrize(
    ("headers", "seconds"),
    [
        ({"llm_provider-retry-after": "60"}, 60.0),  # LiteLLM's router: its only wait header
        ({"retry-after": "2", "llm_provider-retry-after": "60"}, 2.0),  # the standard one first
        ({"retry-after-ms": "250", "llm_provider-retry-after": "60"}, 0.25),
        ({"llm_provider-retry-after": "soon"}, None),
        ({"llm_provider-retry-after": "inf"}, None),
        # one that says nothing usable is skipped
        ({"retry-after-ms": "soon", "retry-after": "2"}, 2.0),
        (
            {
                "retry-after": "Wed, 21 Oct 2015 07:28:30 GMT",
                "date": "Wed, 21 Oct 2015 07:28:00 GMT",
            },
            30.0,
        ),
        # RFC 850
        (
            {
                "retry-after": "Wednesday, 21-Oct-15 07:28:30 GMT",
                "date": "Wed, 21 Oct 2015 07:28:00 GMT",
            },
            30.0,
        ),
        # asctime
        (
            {"retry-after": "Wed Oct 21 07:28:30 2015", "date": "Wed, 21 Oct 2015 07:28:00 GMT"},
            30.0,
        ),
        # past: now
        (
            {
                "retry-after": "Wed, 21 Oct 2015 07:27:00 GMT",
                "date": "Wed, 21 Oct 2015 07:28:00 GMT",
            },
            0.0,
        ),
        ({"retry-after": "Fri, 31 Dec 9999 23:59:59 GMT"}, LONGEST_RETRY_AFTER_S),
        ({"retry-after": "1e300"}, LONGEST_RETRY_AFTER_S),
        ({"retry-after": "-5"}, 0.0),
        ({"retry-after": "Wed, 32 Oct 2015 07:28:30 GMT"}, None),
    ],
)
def test_gateways_wait_headers(headers: dict[str, str], seconds: float | None) -> None:
    assert retry_after(headers) == (pytest.approx(seconds) if seconds is not None else None)


def test_an_http_date_without_the_servers_date_counts_from_our_clock() -> None:
    at = 1445412480.0  # Wed, 21 Oct 2015 07:28:00 GMT
    assert retry_after({"retry-after": "Wed, 21 Oct 2015 07:28:12 GMT"}, now=lambda: at) == 12.0
    assert (
        retry_after(
            {"retry-after": "Wed, 21 Oct 2015 07:28:12 GMT", "date": "garbage"}, now=lambda: at
        )
        == 12.0
    )


HEADER_TEXT = st.one_of(
    st.floats(allow_nan=True, allow_infinity=True).map(repr),
    st.integers(-(10**30), 10**30).map(str),
    st.datetimes(timezones=st.none()).map(lambda d: d.strftime("%a, %d %b %Y %H:%M:%S GMT")),
    st.text(max_size=40),
    st.sampled_from(["", " ", "Wed, 21 Oct 2015", "-0", "1_000", "0x10", "١٢"]),
)


@settings(max_examples=300, derandomize=True, database=None, deadline=None)
@given(
    headers=st.dictionaries(
        st.sampled_from(
            [
                "retry-after",
                "retry-after-ms",
                "llm_provider-retry-after",
                "date",
                "x-ratelimit-reset-requests",
                "x-ratelimit-remaining-requests",
            ]
        ),
        HEADER_TEXT,
    )
)
def test_generated_wait_headers_read_as_a_bounded_wait_or_nothing(headers: dict[str, str]) -> None:
    seconds = retry_after(headers)
    assert seconds is None or 0.0 <= seconds <= LONGEST_RETRY_AFTER_S


# -- waits the server asks for, within retries.max_wait_s
# ----------------------------------------------

def test_a_retry_after_longer_than_max_backoff_is_waited_within_max_wait() -> None:
    """61 s with the defaults (max_backoff_s 60, max_wait_s 600) was left undone: it is waited."""
    provider, clock, done = run([limited(61.0)], RetryPolicy())
    assert done.completion.text == "ok" and provider.calls == 2
    assert clock.waits == [61.0]


def test_a_retry_after_past_max_wait_gives_the_item_up_without_sleeping_on_it() -> None:
    provider, clock, done = run([limited(601.0)], RetryPolicy())
    assert (
        isinstance(done, IncompleteError)
        and "asks to wait 601 s" in str(done)
        and "retries.max_wait_s" in str(done)
    )
    assert clock.waits == [] and provider.calls == 1


def test_another_transients_retry_after_is_honoured_within_max_wait_too() -> None:
    overloaded = TransientError("HTTP 503", retry_after=120.0, status=503)
    provider, clock, done = run([overloaded], RetryPolicy(attempts=4, max_backoff_s=1))
    assert done.completion.text == "ok" and clock.waits == [120.0]
    provider, clock, done = run(
        [overloaded] * 3, RetryPolicy(attempts=4, max_backoff_s=1, max_wait_s=300)
    )
    assert (
        isinstance(done, IncompleteError) and clock.waits == [120.0, 120.0] and provider.calls == 3
    )


@settings(max_examples=200, derandomize=True, database=None, deadline=None)
@given(
    waits=st.lists(
        st.one_of(st.none(), st.floats(min_value=0, max_value=1e9)), min_size=1, max_size=8
    ),
    budget=st.sampled_from([0.0, 3.0, 60.0, 600.0]),
    statuses=st.lists(st.sampled_from([429, 503]), min_size=8, max_size=8),
)
def test_generated_server_waits_stay_within_max_wait(waits: list[float | None], budget: float,
                                                     statuses: list[int]) -> None:
    """Whatever the server asks, the item's waits for it end within retries.max_wait_s; the answer
    is the provider's only when a call answered."""
    pairs = zip(waits, statuses, strict=False)
    errors: list[Exception] = [TransientError("HTTP", retry_after=w, status=s) for w, s in pairs]
    provider, clock, done = run(
        errors, RetryPolicy(attempts=9, backoff_s=0.0, max_backoff_s=0.0, max_wait_s=budget)
    )
    assert clock.now <= budget + 1e-6
    if isinstance(done, IncompleteError):
        assert provider.calls <= len(errors)
    else:
        assert done.completion.text == "ok" and provider.calls == len(errors) + 1
