"""Gemini's reply boundary: any reply is an answer, a refusal, or an error of the tree, never a
crash, through both clients. Generated replies are served as exact bytes by the loopback Gemini
server; a sweep through it shows that no reply shape ends a run or loses an answer."""

from __future__ import annotations

import json
import math
from collections.abc import Iterator
from typing import Any

import pytest
from gemini_server import FakeGemini
from hypothesis import given, settings
from hypothesis import strategies as st

from conftest import Sweep, make_spec, sim_spec
from pytest_echo_bench.engine.scope import Classifier
from pytest_echo_bench.errors import (
    EchoBenchError,
    ExhaustedError,
    LocalError,
    ProviderError,
    TransientError,
)
from pytest_echo_bench.providers import gemini
from pytest_echo_bench.providers.answer import CLASSES, MAX_COUNT, NOTE
from pytest_echo_bench.providers.base import Completion, Request
from pytest_echo_bench.providers.gemini_reply import REFUSALS, USAGE

REQUEST = Request(None, "gem", "2+2")  # type: ignore[arg-type]
PROFILE = settings(max_examples=80, deadline=None, derandomize=True, database=None)
MODEL = "gemini-2.5-flash"


@pytest.fixture(scope="module")
def server() -> Iterator[FakeGemini]:
    with FakeGemini() as running:
        yield running


@pytest.fixture(scope="module")
def providers(server: FakeGemini) -> Iterator[dict[str, gemini.GeminiProvider]]:
    from google import genai

    sdk = genai.Client(api_key="k", http_options=genai.types.HttpOptions(
        base_url=server.base_url.removesuffix("/v1beta") + "/", api_version="v1beta"))
    made = {
        "http": gemini.GeminiProvider(gemini.HTTPTransport(server.base_url, MODEL, "k", 5.0),
                                      MODEL, None, {}),
        "sdk": gemini.GeminiProvider(gemini.SDKTransport(sdk, genai, MODEL, server.base_url),
                                     MODEL, None, {}),
    }
    yield made
    for provider in made.values():
        provider.close()


def outcome(provider: gemini.GeminiProvider, server: FakeGemini, status: int, body: bytes
            ) -> tuple[Completion | None, ProviderError | LocalError | None]:
    """The answer, or the scope the classifier gives the error; nothing outside the error tree."""
    server.faults.clear()
    server.push("raw", (status, "application/json", body, {}))
    try:
        return provider.complete(REQUEST), None
    except EchoBenchError as exc:
        return None, Classifier().classify(exc)


COUNTS = st.one_of(st.integers(0, 10**6), st.sampled_from([0, MAX_COUNT, 12.0]))
NO_COUNTS = st.sampled_from([None, -1, 12.5, "12", True, [], {}, 10**40, math.inf])
TEXT = st.text(max_size=12)
PART = st.one_of(
    st.builds(lambda t: {"text": t}, TEXT),
    st.builds(lambda t: {"text": t, "thought": True}, TEXT),
    st.just({"functionCall": {"name": "f", "args": {}}}),
    st.builds(lambda t: {"inlineData": {"mimeType": "image/png", "data": t}}, TEXT),
)
FINISH = st.one_of(st.sampled_from(["STOP", "MAX_TOKENS", "OTHER", *sorted(REFUSALS)]),
                   st.none(), st.integers(), st.lists(st.text(max_size=3), max_size=2))
NAMES = ("promptTokenCount", "candidatesTokenCount", "thoughtsTokenCount",
         "cachedContentTokenCount")


@st.composite
def usages(draw: st.DrawFn) -> tuple[Any, dict[str, int] | None, bool]:
    """(the usageMetadata a server sends, the usage kept, whether a note says it is unknown)."""
    present = draw(st.lists(st.sampled_from(NAMES), max_size=4, unique=True))
    sent: dict[str, Any] = {name: draw(COUNTS) for name in present}
    if present and draw(st.booleans()):
        name = draw(st.sampled_from(present))
        sent[name] = draw(NO_COUNTS)
        if not (sent[name] is None and USAGE[name] in CLASSES):
            return sent, None, True
        # a null class is a class not reported (providers.answer): the others are kept
    counts = {k: int(v) for k, v in sent.items() if v is not None}
    kept: dict[str, int] = {}
    if "promptTokenCount" in counts:
        kept["prompt_tokens"] = counts["promptTokenCount"]
    if "candidatesTokenCount" in counts or "thoughtsTokenCount" in counts:
        billed = counts.get("candidatesTokenCount", 0) + counts.get("thoughtsTokenCount", 0)
        if billed > MAX_COUNT:
            return sent, None, True
        kept["completion_tokens"] = billed
    if "cachedContentTokenCount" in counts:
        kept["cache_read_tokens"] = counts["cachedContentTokenCount"]
    if "thoughtsTokenCount" in counts:
        kept["reasoning_tokens"] = counts["thoughtsTokenCount"]
    return sent, kept or None, False


@PROFILE
@given(parts=st.lists(PART, max_size=5), finish=FINISH, usage=usages(),
       version=st.one_of(st.text(max_size=8), st.none(), st.integers()),
       client=st.sampled_from(["http", "sdk"]))
def test_a_valid_reply_is_kept_whatever_its_parts_finish_and_usage(
    server: FakeGemini, providers: dict[str, gemini.GeminiProvider], parts: list[dict[str, Any]],
    finish: Any, usage: tuple[Any, dict[str, int] | None, bool], version: Any, client: str,
) -> None:
    sent, kept, noted = usage
    body = {"candidates": [{"content": {"role": "model", "parts": parts},
                            "finishReason": finish}], "usageMetadata": sent,
            "modelVersion": version}
    done, error = outcome(providers[client], server, 200, json.dumps(body).encode())
    assert error is None and done is not None, error
    assert done.text == "".join(p["text"] for p in parts if "text" in p and not p.get("thought"))
    assert done.usage == kept and (NOTE in done.extra) is noted
    refused = isinstance(finish, str) and finish in REFUSALS
    assert done.extra.get("refusal") == (finish if refused else None)
    assert done.model == (version if isinstance(version, str) and version else None)


JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=5),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(
        st.sampled_from(["candidates", "content", "parts", "text", "thought", "finishReason",
                         "promptFeedback", "blockReason", "usageMetadata", "error", "status",
                         "details", "@type", "retryDelay", "violations", "quotaId"]),
        inner, max_size=3),
    max_leaves=14,
)


@PROFILE
@given(body=st.one_of(st.builds(lambda v: json.dumps(v).encode(), JSON), st.binary(max_size=40)),
       status=st.sampled_from([200, 200, 400, 401, 403, 404, 429, 500, 503]),
       client=st.sampled_from(["http", "sdk"]))
def test_any_body_at_any_status_is_an_answer_or_an_error_of_the_tree(
    server: FakeGemini, providers: dict[str, gemini.GeminiProvider], body: bytes, status: int,
    client: str,
) -> None:
    done, error = outcome(providers[client], server, status, body)
    assert (done is None) != (error is None)
    if done is not None:
        assert isinstance(done.text, str) and status == 200
        assert done.usage is None or all(0 <= v <= MAX_COUNT for v in done.usage.values())


@pytest.mark.parametrize("client", ["http", "sdk"])
@pytest.mark.parametrize("status", [400, 503])
def test_an_error_body_that_is_no_utf8_is_an_error_of_the_tree(
    server: FakeGemini, providers: dict[str, gemini.GeminiProvider], client: str, status: int
) -> None:
    done, error = outcome(providers[client], server, status, b"\x80")  # the SDK raised its own
    assert done is None and error is not None


@pytest.mark.parametrize("client", ["http", "sdk"])
@pytest.mark.parametrize("status", [201, 203])
def test_any_2xx_with_the_apis_reply_is_the_answer(
    server: FakeGemini, providers: dict[str, gemini.GeminiProvider], client: str, status: int
) -> None:
    body = b'{"candidates": [{"content": {"parts": [{"text": "4"}]}}]}'
    done, error = outcome(providers[client], server, status, body)
    assert error is None and done is not None and done.text == "4"


DELAYS = st.one_of(st.sampled_from(["0.25s", "3s", "1.5s", " 2s ", "", "s", "-1s", "1e9s"]),
                   st.integers(), st.none(), st.text(max_size=4))


@PROFILE
@given(quota=st.sampled_from(["GenerateRequestsPerMinutePerProjectPerModel-FreeTier",
                              "GenerateContentInputTokensPerModelPerMinute", "", None]),
       delay=DELAYS, message=st.text(max_size=20), client=st.sampled_from(["http", "sdk"]))
def test_a_rate_limit_is_waited_never_a_stop_whatever_its_details(
    server: FakeGemini, providers: dict[str, gemini.GeminiProvider], quota: Any, delay: Any,
    message: str, client: str,
) -> None:
    error = {"code": 429, "status": "RESOURCE_EXHAUSTED", "message": message, "details": [
        {"@type": "type.googleapis.com/google.rpc.QuotaFailure",
         "violations": [{"quotaId": quota, "quotaValue": "15"}]},
        {"@type": "type.googleapis.com/google.rpc.RetryInfo", "retryDelay": delay}]}
    if any(word in message.lower() for word in ("day", "daily", "prepay", "depleted", "limit: 0")):
        return  # the words of a lasting quota: the next test's
    _, found = outcome(providers[client], server, 429, json.dumps({"error": error}).encode())
    assert isinstance(found, TransientError), found
    if delay in ("0.25s", "3s", "1.5s", " 2s "):
        assert found.retry_after == float(delay.strip().removesuffix("s"))


@pytest.mark.parametrize("client", ["http", "sdk"])
@pytest.mark.parametrize("violation, message", [
    ({"quotaId": "GenerateRequestsPerDayPerProjectPerModel-FreeTier", "quotaValue": "50"}, ""),
    ({"quotaId": "GenerateRequestsPerMinutePerProjectPerModel-FreeTier", "quotaValue": "0"}, ""),
    ({}, "Quota exceeded for metric: generate_content_free_tier_requests, limit: 0"),
    ({}, "Your prepayment credits are depleted. Please go to AI Studio."),
], ids=["per-day", "value-0", "limit-0-text", "credits"])
def test_a_quota_that_waiting_cannot_bring_back_stops_the_run(
    server: FakeGemini, providers: dict[str, gemini.GeminiProvider], violation: dict[str, str],
    message: str, client: str,
) -> None:
    error = {"code": 429, "status": "RESOURCE_EXHAUSTED", "message": message, "details": [
        {"@type": "type.googleapis.com/google.rpc.QuotaFailure", "violations": [violation]}]}
    _, found = outcome(providers[client], server, 429, json.dumps({"error": error}).encode())
    assert isinstance(found, ExhaustedError), found


# -- whole sweeps
# ---------------------------------------------------------------------------------------

HOSTILE = [
    (200, b'{"candidates": [{"content": {"parts": [{"text": "4"}]}}], "usageMetadata": '
          b'{"promptTokenCount": -3, "candidatesTokenCount": 1}}'),
    (200, b'{"candidates": [{"content": {"parts": 7}}]}'),
    (200, b'{"candidates": [{"finishReason": "SAFETY"}], "usageMetadata": "lots"}'),
    (200, b'{"promptFeedback": {"blockReason": ["x"]}}'),
    (200, b'{"candidates": [{"content": {"parts": [{"text": "4", "thought": true}, '
          b'{"text": "4"}]}, "finishReason": "STOP"}], "modelVersion": {"v": 1}}'),
    (429, b'{"error": {"code": 429, "status": "RESOURCE_EXHAUSTED", "details": "no"}}'),
    (200, b'[{"candidates": []}]'),
    (503, b"<html>upstream</html>"),
]


@pytest.mark.usefixtures("api_key")
@pytest.mark.parametrize("client", ["http", "sdk"])
def test_a_sweep_through_hostile_replies_keeps_every_answer_and_completes(
    pytester: pytest.Pytester, sweep: Sweep, monkeypatch: pytest.MonkeyPatch, client: str
) -> None:
    monkeypatch.setenv("TEST_GEMINI_KEY", "AIzaSy-hostile-test-key")
    served: set[int] = set()
    with FakeGemini(lambda prompt: "4") as running:
        def fault_for(body: dict[str, Any]) -> tuple[str, Any] | None:
            prompt = body["contents"][-1]["parts"][0]["text"]
            number = int(prompt.rsplit("(", 1)[1].rstrip(")"))
            # each hostile reply once, to its item; a retried item then gets a plain answer
            if number >= len(HOSTILE) or number in served:
                return None
            served.add(number)
            status, data = HOSTILE[number]
            return ("raw", (status, "application/json", data, {}))

        running.fault_for = fault_for
        arms = (f"  gem:\n    provider: gemini\n    model: {MODEL}\n    base_url: "
                f"{running.base_url}\n    api_key_env: TEST_GEMINI_KEY\n    client: {client}\n")
        make_spec(pytester, sim_spec(len(HOSTILE) + 2, arms=arms, extra=(
            "retries: {attempts: 3, backoff_s: 0.01, max_backoff_s: 0.02}\n")))
        result, _, rows = sweep.run("--bench-concurrency", "1", "--bench-order", "file")
    assert result.ret == 0, result.stdout.str()[-3000:]
    by_id = {r["task_id"]: r for r in rows}
    assert len(by_id) == len(HOSTILE) + 2  # every item recorded: none lost, the run not ended
    assert by_id["q0"]["status"] == "correct" and by_id["q0"].get("usage") is None
    assert by_id["q1"]["status"] == "error" and "parts is a number" in by_id["q1"]["detail"]
    assert by_id["q2"]["extra"]["refusal"] == "SAFETY" and by_id["q3"]["extra"]["refusal"]
    assert by_id["q4"]["status"] == "correct" and by_id["q4"]["output"] == "4"
    assert by_id["q5"]["status"] == "correct" and by_id["q5"]["attempts"] == 2  # waited, retried
    assert by_id["q7"]["status"] == "correct" and by_id["q7"]["attempts"] == 2
