"""API keys never leak: a key read with a trailing newline works, a key with junk inside is refused
by the variable's name, and a server's error that quotes the key is redacted in every artifact."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest
from anthropic_server import FakeAnthropic
from gemini_server import FakeGemini
from openai_server import FakeOpenAI

from conftest import Sweep, make_spec, report_args, reports, sim_spec
from pytest_echo_bench.errors import UnavailableError
from pytest_echo_bench.providers.http_json import JSONClient

KEY = "sk-test-hygiene-7Qx2LmN9pR4vT8wZ"
PARTS = (KEY, KEY[3:], KEY[8:24], KEY[-12:])  # a key cut, masked or wrapped still shows these
ENV = "TEST_HYGIENE_KEY"


@pytest.fixture(params=["openai", "anthropic", "gemini"])
def provider(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture(params=["sdk", "http"])
def client(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
def server(provider: str) -> Iterator[Any]:
    servers = {"openai": FakeOpenAI, "anthropic": FakeAnthropic, "gemini": FakeGemini}
    with servers[provider](answer=lambda prompt: "4") as fake:
        yield fake


def spec(server: Any, provider: str, client: str, n: int = 2) -> str:
    arms = (f"  chat:\n    provider: {provider}\n    model: m\n    base_url: {server.base_url}\n"
            f"    api_key_env: {ENV}\n    client: {client}\n")
    return sim_spec(
        n,
        arms=arms,
        extra="retries: {attempts: 2, backoff_s: 0.01, max_backoff_s: 0.02}\ntimeout_s: 10\n",
    )


def key_seen(server: Any, provider: str) -> str | None:
    """The key of the first request, from whichever header the client chose."""
    sent = server.requests[0]
    if provider in ("anthropic", "gemini") and sent["key"]:
        return str(sent["key"])
    return str(sent["auth"] or "").removeprefix("Bearer ") or None


def assert_nowhere(values: tuple[str, ...], *texts: str) -> None:
    for text in texts:
        for value in values:
            assert value not in text


def artifacts(result: pytest.RunResult, sweep: Sweep, pytester: pytest.Pytester) -> tuple[str, ...]:
    out = sweep.out.read_text() if sweep.out.exists() else ""
    return (result.stdout.str(), result.stderr.str(), out, *reports(pytester))


@pytest.mark.parametrize("ending", ["\n", "\r\n", "  \t"], ids=["lf", "crlf", "blanks"])
def test_a_key_with_white_space_around_it_works(
    pytester: pytest.Pytester, sweep: Sweep, server: Any, provider: str, client: str, ending: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv(ENV, f" {KEY}{ending}")  # as read from a secret file or a CRLF .env
    make_spec(pytester, spec(server, provider, client))
    result, _, rows = sweep.run(*report_args(pytester))
    result.assert_outcomes(passed=2)
    assert key_seen(server, provider) == KEY
    assert [r["status"] for r in rows] == ["correct", "correct"]
    assert_nowhere(PARTS, *artifacts(result, sweep, pytester))


@pytest.mark.parametrize(
    "inner", ["\n", "\r", "\x1b", " ", "\u00e9"], ids=["lf", "cr", "esc", "space", "non-ascii"]
)
def test_a_key_with_junk_inside_is_refused_by_name(
    pytester: pytest.Pytester, sweep: Sweep, server: Any, provider: str, client: str, inner: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    bad = KEY[:10] + inner + KEY[10:]
    monkeypatch.setenv(ENV, bad)
    make_spec(pytester, spec(server, provider, client))
    result, _, rows = sweep.run("-rs", *report_args(pytester))
    result.assert_outcomes(skipped=2)
    result.stdout.fnmatch_lines(
        [f"*the API key in {ENV} has a space or a control*its value is not shown*"]
    )
    assert rows == [] and server.requests == []  # refused before any call
    assert_nowhere((bad, KEY[:10], KEY[10:], *PARTS), *artifacts(result, sweep, pytester))


def echo_key(server: Any, provider: str) -> None:
    """The server answers 400 with a body that quotes the credential header it received."""
    if provider == "openai":
        def fault(body: dict[str, Any]) -> tuple[str, Any]:
            return (
                "error",
                (
                    400,
                    {
                        "message": f"malformed header Authorization: {server.requests[-1]['auth']}",
                        "code": "invalid_header",
                    },
                    {},
                ),
            )
        server.fault_for = fault
    else:
        error = {"type": "invalid_request_error", "message": f"malformed header x-api-key: {KEY}"}
        server.push("error", (400, error, {}), times=2)


def test_an_error_that_echoes_the_key_is_redacted(
    pytester: pytest.Pytester, sweep: Sweep, server: Any, provider: str, client: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv(ENV, KEY + "\n")
    echo_key(server, provider)
    make_spec(pytester, spec(server, provider, client))
    result, _, rows = sweep.run("--bench-concurrency", "1", *report_args(pytester))
    result.assert_outcomes(failed=2)
    assert key_seen(server, provider) == KEY
    assert all(r["status"] == "error" and "sk-…[redacted]" in r["detail"] for r in rows)
    assert "sk-…[redacted]" in result.stdout.str()
    assert_nowhere(PARTS, *artifacts(result, sweep, pytester))


def test_a_refused_header_is_the_arm_unavailable_never_a_row() -> None:
    # The safety net under the key check: http.client's ValueError quotes the header it refused.
    client = JSONClient(
        "http://127.0.0.1:9/v1/chat/completions", {"authorization": f"Bearer {KEY}\n"}, 1.0
    )
    with pytest.raises(UnavailableError) as info:
        client.post({"model": "m"})
    assert KEY not in str(info.value) and info.value.__suppress_context__
    assert "header was refused before sending" in str(info.value)


def test_json_report_metadata_shows_no_key(
    pytester: pytest.Pytester, sweep: Sweep, monkeypatch: pytest.MonkeyPatch
) -> None:
    with FakeOpenAI() as server:
        monkeypatch.setenv(ENV, KEY)
        echo_key(server, "openai")
        make_spec(pytester, spec(server, "openai", "http", n=1))
        result, _, rows = sweep.run(*report_args(pytester))
    tests = json.loads(reports(pytester)[1])["tests"]
    assert "[redacted]" in tests[0]["metadata"]["echo_bench"]["detail"]
    assert_nowhere(PARTS, *artifacts(result, sweep, pytester))
