"""Hostile Converse replies: generated bodies at any status, served by the signing-checking
loopback server, are an answer or an error of the tree, never a crash; odd usage keeps the answer;
a sweep over them records every item."""

from __future__ import annotations

import json
import math
from collections.abc import Iterator
from typing import Any
from urllib.parse import quote

import pytest
from bedrock_server import ACCESS_KEY, MODEL, REGION, SECRET_KEY, FakeBedrock
from botocore.credentials import Credentials
from hypothesis import given, settings
from hypothesis import strategies as st

from conftest import Sweep, make_spec
from pytest_echo_bench.engine.scope import Classifier
from pytest_echo_bench.errors import EchoBenchError, PermanentError, ProviderError
from pytest_echo_bench.providers.answer import CLASSES, MAX_COUNT, NOTE
from pytest_echo_bench.providers.base import Completion, Request
from pytest_echo_bench.providers.bedrock import REFUSALS, BedrockProvider, Signer
from pytest_echo_bench.providers.http_json import JSONClient
from pytest_echo_bench.providers.wire import Target

REQUEST = Request(None, "claude", "2+2")  # type: ignore[arg-type]
PROFILE = settings(max_examples=120, deadline=None, derandomize=True, database=None)
NAMES = {"inputTokens": "prompt_tokens", "outputTokens": "completion_tokens",
         "cacheReadInputTokens": "cache_read_tokens", "cacheWriteInputTokens": "cache_write_tokens"}


@pytest.fixture(scope="module")
def server() -> Iterator[FakeBedrock]:
    with FakeBedrock() as fake:
        yield fake


def provider(server: FakeBedrock) -> BedrockProvider:
    url = f"{server.base_url}/model/{quote(MODEL, safe='')}/converse"
    signer = Signer(Credentials(ACCESS_KEY, SECRET_KEY), REGION, url, Target.parse(url).host_header)
    return BedrockProvider(JSONClient(url, {}, 5.0, sign=signer), MODEL, None, {})


def outcome(server: FakeBedrock, body: bytes, status: int = 200,
            headers: dict[str, str] | None = None) -> tuple[Completion | None, Any]:
    """The answer to ``body`` served as is, or the scope the classifier gives the error."""
    server.push("raw", (status, "application/json", body, headers or {}))
    made = provider(server)
    try:
        return made.complete(REQUEST), None
    except EchoBenchError as exc:
        return None, Classifier().classify(exc)
    finally:
        made.close()


COUNT = st.one_of(st.integers(0, 10**6), st.sampled_from([0, MAX_COUNT, 12.0]))
NO_COUNT = st.sampled_from([None, math.nan, math.inf, -1, 10**400, MAX_COUNT + 1, 12.5, "12",
                            True, [], {}])
TEXT_BLOCK = st.builds(lambda t: {"text": t}, st.text(max_size=20))
OTHER_BLOCK = st.one_of(
    st.builds(lambda t: {"reasoningContent": {"reasoningText": {"text": t}}}, st.text(max_size=5)),
    st.builds(lambda n: {"toolUse": {"toolUseId": "t", "name": n, "input": {}}},
              st.text(max_size=5)),
    st.just({"image": {"format": "png"}}),
)
STOP = st.one_of(
    st.sampled_from(["end_turn", "max_tokens", "stop_sequence", "tool_use", *sorted(REFUSALS)]),
    st.none(), st.integers(), st.text(max_size=5))


@st.composite
def usages(draw: st.DrawFn) -> tuple[Any, dict[str, int] | None, bool]:
    """(the usage the server sends, the usage kept, whether a note says it is unknown)."""
    shape = draw(st.sampled_from(["absent", "good", "bad", "not-an-object"]))
    if shape == "absent":
        return None, None, False
    if shape == "not-an-object":
        return draw(st.one_of(st.text(max_size=5), st.integers(), st.lists(st.integers()))), None, \
            True
    present = draw(st.lists(st.sampled_from(sorted(NAMES)), min_size=1, max_size=4, unique=True))
    sent: dict[str, Any] = {name: draw(COUNT) for name in present}
    if shape == "bad":
        name = draw(st.sampled_from(present))
        sent[name] = draw(NO_COUNT)
        if not (sent[name] is None and NAMES[name] in CLASSES):
            return sent, None, True
        # a null class is a class not reported (providers.answer): the others are kept
    kept = {NAMES[name]: int(value) for name, value in sent.items() if value is not None}
    if not kept:
        return sent, None, False
    if "prompt_tokens" in kept:
        kept["prompt_tokens"] += kept.get("cache_read_tokens", 0) + kept.get("cache_write_tokens",
                                                                             0)
        if kept["prompt_tokens"] > MAX_COUNT:
            return sent, None, True
    return sent, kept, False


@PROFILE
@given(blocks=st.lists(st.one_of(TEXT_BLOCK, OTHER_BLOCK), max_size=5), usage=usages(), stop=STOP)
def test_a_valid_answer_is_kept_whatever_its_usage_and_stop(
    server: FakeBedrock, blocks: list[dict[str, Any]], usage: tuple[Any, Any, bool], stop: Any
) -> None:
    sent, kept, noted = usage
    body: dict[str, Any] = {"output": {"message": {"role": "assistant", "content": blocks}},
                            "stopReason": stop}
    if sent is not None:
        body["usage"] = sent
    done, error = outcome(server, json.dumps(body).encode())
    assert error is None and done is not None, error
    assert done.text == "".join(b["text"] for b in blocks if "text" in b)
    assert done.usage == kept and (NOTE in done.extra) is noted
    assert done.extra.get("refusal") == (stop if stop in REFUSALS else None)
    assert done.model == MODEL


BAD_CONTENT = st.one_of(
    st.integers(), st.text(max_size=3), st.dictionaries(st.text(max_size=3), st.integers(),
                                                        max_size=2),
    st.lists(st.one_of(st.integers(), st.text(max_size=3), st.none()), min_size=1, max_size=3),
    st.lists(st.builds(lambda t: {"text": t}, st.one_of(st.integers(), st.none(), st.lists(
        st.text()))), min_size=1, max_size=2),
)


@PROFILE
@given(content=BAD_CONTENT)
def test_content_that_is_no_blocks_is_the_items_error(server: FakeBedrock, content: Any) -> None:
    body = {"output": {"message": {"content": content}}}
    done, error = outcome(server, json.dumps(body).encode())
    assert done is None and type(error) is PermanentError, error
    assert "output.message.content" in str(error)


KEYS = ["output", "message", "content", "text", "usage", "stopReason", "inputTokens", "__type",
        "Message"]


@PROFILE
@given(
    body=st.one_of(
        st.builds(lambda v: json.dumps(v).encode(), st.recursive(
            st.none() | st.booleans() | st.integers() | st.text(max_size=5),
            lambda inner: st.lists(inner, max_size=3) | st.dictionaries(
                st.sampled_from(KEYS), inner, max_size=3),
            max_leaves=12)),
        st.binary(max_size=40)),
    status=st.sampled_from([200, 200, 400, 403, 404, 408, 424, 429, 500, 503]),
    kind=st.one_of(st.none(), st.sampled_from(["ThrottlingException", "ValidationException",
                                               "ServiceQuotaExceededException", "x:y#z", ":"]),
                   st.text(max_size=8).filter(lambda t: t.isprintable() and t.isascii())),
)
def test_any_body_at_any_status_is_an_answer_or_an_error_of_the_tree(
    server: FakeBedrock, body: bytes, status: int, kind: str | None
) -> None:
    headers = {"x-amzn-ErrorType": kind} if kind else {}
    done, error = outcome(server, body, status, headers)
    assert (done is None) != (error is None)
    if error is not None:
        assert isinstance(error, ProviderError | EchoBenchError)
    if done is not None:
        assert isinstance(done.text, str)
        assert done.usage is None or all(0 <= v <= MAX_COUNT for v in done.usage.values())


def test_a_sweep_over_odd_replies_keeps_every_answer(
    pytester: pytest.Pytester, sweep: Sweep, monkeypatch: pytest.MonkeyPatch, tmp_path: Any
) -> None:
    """Odd usage, blocks of every kind, a refusal: each item recorded, the sweep ends normally."""
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", ACCESS_KEY)
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", SECRET_KEY)
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "none"))
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")
    odd = [{"inputTokens": -3, "outputTokens": 1}, {"inputTokens": 10**30}, None, "lots",
           {"inputTokens": 2, "outputTokens": 1, "cacheReadInputTokens": MAX_COUNT}]
    replies = [json.dumps({"output": {"message": {"content": [
        {"reasoningContent": {"reasoningText": {"text": "hmm"}}}, {"text": "4"}]}},
        "usage": usage, "stopReason": "content_filtered" if i == 2 else "end_turn"}).encode()
        for i, usage in enumerate(odd)]
    with FakeBedrock() as server:
        for body in replies:
            server.push("raw", (200, "application/json", body, {}))
        items = "\n".join(f'    - {{id: q{i}, input: "2+2=? ({i})", target: "4"}}'
                          for i in range(len(odd)))
        make_spec(pytester, f"benchmark: demo\ndataset:\n  loader: inline\n  items:\n{items}\n"
                  f"scorer: exact\narms:\n  claude:\n    provider: bedrock\n    model: {MODEL}\n"
                  f"    region: {REGION}\n    base_url: {server.base_url}\n")
        result, _, rows = sweep.run("--bench-concurrency", "1", "--bench-order", "file")
    assert result.ret == 0 and len(rows) == len(odd)
    assert all(r["output"] == "4" and r["status"] == "correct" for r in rows)
    assert [r.get("usage") for r in rows] == [None, None, None, None, None]
    assert [NOTE in r.get("extra", {}) for r in rows] == [True, True, False, True, True]
    assert rows[2]["extra"]["refusal"] == "content_filtered"
