"""What served a call: the ``model`` (and OpenAI's ``system_fingerprint``) a reply names, read by
both clients of both chat providers from the loopback servers, and a hostile reply's fields
(huge, not text, control characters) kept only when short text, never a crash."""

from __future__ import annotations

import json
import unicodedata
from collections.abc import Iterator
from typing import Any

import pytest
from anthropic_server import FakeAnthropic
from hypothesis import given, settings
from hypothesis import strategies as st
from openai_server import FakeOpenAI
from test_reply_boundaries import (
    ByteServer,
    anthropic_provider,
    dumps,
    on_the_wire,
    openai_provider,
    outcome,
)

from conftest import Sweep, make_spec, sim_spec
from pytest_echo_bench.providers.answer import MAX_MODEL
from pytest_echo_bench.store.records import Row
from pytest_echo_bench.store.rows import read_row
from pytest_echo_bench.store.safe_text import shown

PROFILE = settings(max_examples=120, deadline=None, derandomize=True, database=None)
pytestmark = pytest.mark.usefixtures("api_key")
# what reorders a line a reader sees (the bidi embeddings, overrides, isolates and marks)
BIDI = set("\u061c\u200e\u200f\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069")


@pytest.fixture(params=["sdk", "http"])
def client(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
def anthropic_server() -> Iterator[FakeAnthropic]:
    with FakeAnthropic(lambda prompt: "4") as server:
        yield server


@pytest.fixture(scope="module")
def server() -> Iterator[ByteServer]:
    byte_server = ByteServer()
    yield byte_server
    byte_server.close()


def chat_spec(provider: str, base_url: str, client: str, model: str = "asked-model") -> str:
    key = "TEST_OPENAI_KEY" if provider == "openai" else "TEST_ANTHROPIC_KEY"
    arms = (f"  a:\n    provider: {provider}\n    model: {model}\n    base_url: {base_url}\n"
            f"    api_key_env: {key}\n    client: {client}\n")
    return sim_spec(3, arms=arms, extra="retries: {attempts: 2, backoff_s: 0.01}\n")


def test_openai_rows_record_the_served_model_and_fingerprint(
    pytester: pytest.Pytester, sweep: Sweep, openai_server: FakeOpenAI, client: str
) -> None:
    openai_server.answer = lambda prompt: "4"
    openai_server.served_model, openai_server.fingerprint = "gpt-x-2026-01-01", "fp_44709d6fcb"
    make_spec(pytester, chat_spec("openai", openai_server.base_url, client))
    result, _, rows = sweep.run("--bench-cache", "off")
    result.assert_outcomes(passed=3)
    assert {(r["served_model"], r["served_fingerprint"]) for r in rows} == {
        ("gpt-x-2026-01-01", "fp_44709d6fcb")}


def test_anthropic_rows_record_the_served_model_and_no_fingerprint(
    pytester: pytest.Pytester, sweep: Sweep, anthropic_server: FakeAnthropic, client: str
) -> None:
    anthropic_server.served_model = "claude-x-20260101"
    make_spec(pytester, chat_spec("anthropic", anthropic_server.base_url, client))
    result, _, rows = sweep.run("--bench-cache", "off")
    result.assert_outcomes(passed=3)
    assert {r["served_model"] for r in rows} == {"claude-x-20260101"}
    assert not any("served_fingerprint" in r for r in rows)


def test_a_server_whose_served_model_changes_is_seen_in_the_next_run(
    pytester: pytest.Pytester, sweep: Sweep, openai_server: FakeOpenAI
) -> None:
    """The nightly's drift: the same arm, the same items, another model behind the name."""
    openai_server.answer = lambda prompt: "4"
    make_spec(pytester, chat_spec("openai", openai_server.base_url, "http"))
    _, _, first = sweep.run("--bench-cache", "off")
    openai_server.served_model = "asked-model-v2"
    sweep.out = pytester.path / "second.jsonl"
    _, _, second = sweep.run("--bench-cache", "off")
    assert {r["served_model"] for r in first} == {"asked-model"}
    assert {r["served_model"] for r in second} == {"asked-model-v2"}
    assert not any("served_fingerprint" in r for r in first + second)  # the server gives none
    digests = {r["task_id"]: r["item_sha256"] for r in first}
    assert digests == {r["task_id"]: r["item_sha256"] for r in second}


# -- hostile replies
# ------------------------------------------------------------------------------------

HOSTILE = st.one_of(
    st.text(max_size=MAX_MODEL + 5),
    st.text(min_size=MAX_MODEL + 1, max_size=MAX_MODEL * 30),
    st.text(alphabet=st.characters(codec="utf-8", categories=["Cc", "Cf"]), max_size=20),
    st.integers(), st.floats(allow_nan=False), st.booleans(), st.none(),
    st.lists(st.text(max_size=5), max_size=3), st.dictionaries(st.text(max_size=5), st.integers()),
)


def expected(value: Any) -> str | None:
    """What a row keeps of a reply's field (written apart from the code under test)."""
    if type(value) is str and 1 <= len(value) <= 200:
        return value
    return None


def assert_recorded(model: str | None, fingerprint: str | None) -> None:
    """The row with them: one ASCII line that reads back the same, and shown escaped."""
    row = Row(task_id="q0", arm="a", passed=True, detail="", wall_seconds=0.1, sub_calls=1,
              benchmark="demo", status="passed", output="4", answer="4", target="4", attempts=1,
              started_at="s", finished_at="f", worker="w", run_id="r", served_model=model,
              served_fingerprint=fingerprint)
    line = row.to_line()
    assert line.isascii() and line.count(b"\n") == 1
    read = read_row(json.loads(line), "demo")
    assert (read.served_model, read.served_fingerprint) == (model, fingerprint)
    for text in (model, fingerprint):
        if text is not None:
            seen = shown(text, newlines=False)
            assert not any(unicodedata.category(c) in ("Cc", "Cs") or c in BIDI for c in seen)


@PROFILE
@given(model=HOSTILE, fingerprint=HOSTILE)
def test_openai_a_hostile_model_or_fingerprint_is_kept_only_as_short_text(
    server: ByteServer, model: Any, fingerprint: Any
) -> None:
    body = {"model": model, "system_fingerprint": fingerprint,
            "choices": [{"message": {"role": "assistant", "content": "4"}}]}
    done, error = outcome(openai_provider(server), server, on_the_wire(dumps(body)))
    assert error is None and done is not None and done.text == "4"
    assert (done.model, done.fingerprint) == (expected(model), expected(fingerprint))
    assert_recorded(done.model, done.fingerprint)


@PROFILE
@given(model=HOSTILE)
def test_anthropic_a_hostile_model_is_kept_only_as_short_text(
    server: ByteServer, model: Any
) -> None:
    body = {"model": model, "system_fingerprint": "fp_not_anthropics",
            "content": [{"type": "text", "text": "4"}]}
    done, error = outcome(anthropic_provider(server), server, on_the_wire(dumps(body)))
    assert error is None and done is not None and done.text == "4"
    assert (done.model, done.fingerprint) == (expected(model), None)
    assert_recorded(done.model, done.fingerprint)


@pytest.mark.parametrize("model", ["m\x1b[2J\u202e", "x" * 5000, 12, ["m"], {"m": 1}, None, "",
                                   "\ud800"])
def test_a_sweep_through_the_sdk_keeps_going_whatever_the_model_field(
    pytester: pytest.Pytester, sweep: Sweep, openai_server: FakeOpenAI, model: Any
) -> None:
    openai_server.answer = lambda prompt: "4"
    openai_server.served_model, openai_server.fingerprint = model, model
    make_spec(pytester, chat_spec("openai", openai_server.base_url, "sdk"))
    result, _, rows = sweep.run("--bench-cache", "off")
    result.assert_outcomes(passed=3)
    # the server names the model asked when it is given none (None, "")
    assert {r.get("served_model") for r in rows} == {expected(model or "asked-model")}
    assert {r.get("served_fingerprint") for r in rows} == {expected(model)}
    assert sweep.out.read_bytes().isascii()
