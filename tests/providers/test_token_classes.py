"""Every billed token class kept apart and priced, end to end: OpenAI's cached and reasoning tokens
(``prompt_tokens_details``, ``completion_tokens_details``) and Anthropic's cache reads and writes
(counted apart from its ``input_tokens``) in the rows' ``usage``, through the official SDKs and the
lean clients against the loopback servers, each class at its price in ``cost_usd``. A server that
reports no classes gives rows of the two keys they always had. The usage boundary under generated
replies: never an exception, a class never outside its side's total when the reply's counts add
up, a hostile detail noted and the usage unknown."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from anthropic_server import FakeAnthropic
from hypothesis import given, settings
from hypothesis import strategies as st
from openai_server import FakeOpenAI

from conftest import Sweep, make_spec, sim_spec
from pytest_echo_bench.providers.answer import (
    ANTHROPIC_USAGE,
    CACHE_APART,
    MAX_COUNT,
    OPENAI_USAGE,
    read_usage,
)
from pytest_echo_bench.spec.pricing import Price

PROFILE = settings(max_examples=300, deadline=None, derandomize=True, database=None)
PROMPT_WORDS, ANSWER_WORDS = 2, 1  # "2+2=? (i)" and "4", as the servers count tokens
PRICES = "{input: 2.0, output: 8.0, cache_read: 0.5, cache_write: 2.5, reasoning: 10.0}"


@pytest.fixture(params=["sdk", "http"])
def client(request: pytest.FixtureRequest) -> str:
    """Both clients: the official SDK and the lean HTTP one."""
    return str(request.param)


@pytest.fixture
def anthropic_server() -> Iterator[FakeAnthropic]:
    with FakeAnthropic(answer=lambda prompt: "4") as fake:
        yield fake


pytestmark = pytest.mark.usefixtures("api_key")


def spec(provider: str, url: str, client: str, prices: str = PRICES) -> str:
    arms = (f"  m:\n    provider: {provider}\n    model: local-model\n    base_url: {url}\n"
            f"    api_key_env: TEST_{provider.upper()}_KEY\n    client: {client}\n")
    return sim_spec(2, arms=arms, extra=f"timeout_s: 10\npricing:\n  m: {prices}\n")


def test_openai_cached_and_reasoning_tokens_are_kept_apart_and_priced(
    pytester: pytest.Pytester, sweep: Sweep, openai_server: FakeOpenAI, client: str
) -> None:
    openai_server.answer = lambda prompt: "4"
    openai_server.cached_tokens, openai_server.reasoning_tokens = 1000, 50
    make_spec(pytester, spec("openai", openai_server.base_url, client))
    result, _, rows = sweep.run()
    result.assert_outcomes(passed=2)
    for row in rows:
        assert row["usage"] == {"prompt_tokens": PROMPT_WORDS + 1000,
                                "completion_tokens": ANSWER_WORDS + 50,
                                "cache_read_tokens": 1000, "reasoning_tokens": 50}
        priced = PROMPT_WORDS * 2.0 + 1000 * 0.5 + ANSWER_WORDS * 8.0 + 50 * 10.0
        assert row["cost_usd"] == pytest.approx(priced / 1e6)


def test_anthropic_cache_reads_and_writes_are_counted_in_and_priced(
    pytester: pytest.Pytester, sweep: Sweep, anthropic_server: FakeAnthropic, client: str
) -> None:
    anthropic_server.cache_read, anthropic_server.cache_write = 4000, 300
    make_spec(pytester, spec("anthropic", anthropic_server.base_url, client))
    result, _, rows = sweep.run()
    result.assert_outcomes(passed=2)
    for row in rows:
        # The Messages API's input_tokens leave the cache out: prompt_tokens is all input billed.
        assert row["usage"] == {"prompt_tokens": PROMPT_WORDS + 4300,
                                "completion_tokens": ANSWER_WORDS,
                                "cache_read_tokens": 4000, "cache_write_tokens": 300}
        priced = PROMPT_WORDS * 2.0 + 4000 * 0.5 + 300 * 2.5 + ANSWER_WORDS * 8.0
        assert row["cost_usd"] == pytest.approx(priced / 1e6)


def test_a_reported_zero_is_kept(
    pytester: pytest.Pytester, sweep: Sweep, anthropic_server: FakeAnthropic
) -> None:
    anthropic_server.cache_read, anthropic_server.cache_write = 0, 0
    make_spec(pytester, spec("anthropic", anthropic_server.base_url, "http"))
    _, _, rows = sweep.run()
    assert rows[0]["usage"] == {"prompt_tokens": PROMPT_WORDS, "completion_tokens": ANSWER_WORDS,
                                "cache_read_tokens": 0, "cache_write_tokens": 0}


def test_rows_of_a_server_reporting_no_classes_are_as_they_were(
    pytester: pytest.Pytester, sweep: Sweep, openai_server: FakeOpenAI, client: str
) -> None:
    """No details sent: the two keys rows always had, priced at input and output."""
    openai_server.answer = lambda prompt: "4"
    make_spec(pytester, spec("openai", openai_server.base_url, client, "{input: 2, output: 8}"))
    _, _, rows = sweep.run()
    assert [r["usage"] for r in rows] == [
        {"prompt_tokens": PROMPT_WORDS, "completion_tokens": ANSWER_WORDS}] * 2
    assert rows[0]["cost_usd"] == (PROMPT_WORDS * 2.0 + ANSWER_WORDS * 8.0) / 1e6


@pytest.mark.parametrize(
    ("raw", "names", "apart", "expected"),
    [
        # gateways send null details: not reported
        ({"prompt_tokens": 5, "completion_tokens": 1, "prompt_tokens_details": None,
          "completion_tokens_details": {"reasoning_tokens": None}}, OPENAI_USAGE, (),
         {"prompt_tokens": 5, "completion_tokens": 1}),
        ({"input_tokens": 5, "output_tokens": 1, "cache_read_input_tokens": None},
         ANTHROPIC_USAGE, CACHE_APART, {"prompt_tokens": 5, "completion_tokens": 1}),
        # a cache count with no input count: kept, nothing to add it to
        ({"cache_read_input_tokens": 7}, ANTHROPIC_USAGE, CACHE_APART, {"cache_read_tokens": 7}),
    ],
)
def test_classes_not_reported_are_left_out(
    raw: dict[str, Any], names: Any, apart: tuple[str, ...], expected: dict[str, int]
) -> None:
    assert read_usage(raw, names, apart) == (expected, None)


@pytest.mark.parametrize(
    ("raw", "apart", "note"),
    [
        ({"prompt_tokens": 5, "prompt_tokens_details": "cached"}, (),
         'usage.prompt_tokens_details was "cached", not a token count'),
        ({"prompt_tokens": 5, "prompt_tokens_details": {"cached_tokens": -1}}, (),
         "usage.prompt_tokens_details.cached_tokens was -1, not a token count"),
        ({"prompt_tokens": 5, "completion_tokens_details": [1]}, (),
         "usage.completion_tokens_details was [1], not a token count"),
    ],
)
def test_a_hostile_detail_makes_the_usage_unknown_with_a_note(
    raw: dict[str, Any], apart: tuple[str, ...], note: str
) -> None:
    usage, said = read_usage(raw, OPENAI_USAGE, apart)
    assert usage is None and said is not None and said.startswith(note)


def test_a_sum_past_the_largest_count_is_unknown() -> None:
    raw = {"input_tokens": MAX_COUNT, "output_tokens": 1, "cache_read_input_tokens": 1}
    usage, note = read_usage(raw, ANTHROPIC_USAGE, CACHE_APART)
    assert usage is None and note is not None and "with its cache_read_tokens" in note


JSON = st.recursive(
    st.none() | st.booleans() | st.integers(-5, 2**60) | st.floats() | st.text(max_size=4),
    lambda inner: st.lists(inner, max_size=3)
    | st.dictionaries(st.text(max_size=4), inner, max_size=3),
    max_leaves=8,
)
COUNTS = st.integers(0, 10**9)


@PROFILE
@given(st.dictionaries(st.sampled_from(["prompt_tokens", "completion_tokens",
                                        "prompt_tokens_details", "completion_tokens_details"]),
                       JSON | st.fixed_dictionaries({}, optional={
                           "cached_tokens": JSON | COUNTS, "reasoning_tokens": JSON | COUNTS})))
def test_any_openai_usage_is_read_or_noted(raw: dict[str, Any]) -> None:
    usage, note = read_usage(raw, OPENAI_USAGE)
    assert (usage is None) or note is None
    for value in (usage or {}).values():
        assert isinstance(value, int) and 0 <= value <= MAX_COUNT
    if usage is not None:  # every count it priced is then finite and not negative
        cost = Price(1.0, 2.0, 0.5, 3.0, 4.0).cost(usage)
        assert cost is not None and cost >= 0


@PROFILE
@given(st.fixed_dictionaries({}, optional={
    "input_tokens": COUNTS, "output_tokens": COUNTS, "cache_read_input_tokens": COUNTS,
    "cache_creation_input_tokens": COUNTS}))
def test_anthropic_classes_are_parts_of_the_input_billed(raw: dict[str, int]) -> None:
    usage, note = read_usage(raw, ANTHROPIC_USAGE, CACHE_APART)
    assert note is None
    usage = usage or {}
    if "prompt_tokens" in usage:
        assert usage["prompt_tokens"] == raw["input_tokens"] + raw.get(
            "cache_read_input_tokens", 0) + raw.get("cache_creation_input_tokens", 0)
        assert usage.get("cache_read_tokens", 0) + usage.get("cache_write_tokens", 0) <= usage[
            "prompt_tokens"]
