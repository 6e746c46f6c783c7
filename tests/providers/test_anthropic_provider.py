"""The anthropic provider against a real Messages API server on 127.0.0.1, through both clients."""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator

import pytest
from anthropic_server import (
    API_ERROR,
    AUTHENTICATION,
    BAD_REQUEST,
    BILLING,
    OVERLOADED,
    PERMISSION,
    RATE_LIMIT,
    FakeAnthropic,
)

from conftest import ANTHROPIC_KEY, Sweep, make_spec, sim_spec


@pytest.fixture(params=["sdk", "http"])
def client(request: pytest.FixtureRequest) -> str:
    """Every test runs against both clients: the official SDK and the lean HTTP one."""
    return str(request.param)


@pytest.fixture
def server() -> Iterator[FakeAnthropic]:
    with FakeAnthropic(answer=lambda prompt: "4") as fake:
        yield fake


pytestmark = pytest.mark.usefixtures("api_key")


def anthropic_spec(
    server: FakeAnthropic, client: str, n: int = 3, options: str = "", timeout: float = 10
) -> str:
    """``timeout`` only as short as a test of hangs needs: on a loaded
    machine 1 s can pass by itself."""
    arms = (
        "  claude:\n    provider: anthropic\n    model: local-model\n    base_url: "
        f"{server.base_url}\n"
        f"    api_key_env: TEST_ANTHROPIC_KEY\n    temperature: 0\n    client: {client}\n{options}"
    )
    return sim_spec(
        n,
        arms=arms,
        extra="retries: {attempts: 4, backoff_s: 0.01, max_backoff_s: 0.05}\ntimeout_s: "
        f"{timeout}\n",
    )


def test_answers_usage_and_no_secret_in_results(
    pytester: pytest.Pytester, sweep: Sweep, server: FakeAnthropic, client: str
) -> None:
    options = "    system: Answer with a number.\n    stop_sequences: [END]\n"
    make_spec(pytester, anthropic_spec(server, client, options=options))
    result, _, rows = sweep.run()
    result.assert_outcomes(passed=3)
    assert [r["usage"] for r in rows] == [{"prompt_tokens": 2, "completion_tokens": 1}] * 3
    sent = server.requests[0]
    if client == "http":
        assert (
            sent["key"] == ANTHROPIC_KEY
            and sent["version"] == "2023-06-01"
            and sent["auth"] is None
        )
    else:  # the SDK's own choice of header and API version, which differs between releases
        assert ANTHROPIC_KEY in (sent["key"], (sent["auth"] or "").removeprefix("Bearer "))
    body = sent["body"]
    assert (
        body["model"] == "local-model" and body["max_tokens"] == 1024 and body["temperature"] == 0
    )
    assert body["system"] == "Answer with a number." and body["stop_sequences"] == ["END"]
    prompts = sorted(r["body"]["messages"][0]["content"] for r in server.requests)
    assert prompts == ["2+2=? (0)", "2+2=? (1)", "2+2=? (2)"] and len(body["messages"]) == 1
    assert ANTHROPIC_KEY not in sweep.out.read_text() and ANTHROPIC_KEY not in result.stdout.str()


@pytest.mark.parametrize(
    "fault",
    [("error", (429, RATE_LIMIT, {"retry-after": "0.05"})), ("error", (529, OVERLOADED, {})),
     ("error", (500, API_ERROR, {})), ("hang", 2.0), ("reset", None)],
    ids=["rate-limit", "overloaded-529", "5xx", "timeout", "connection-reset"],
)
def test_transient_faults_are_retried_not_graded(
    pytester: pytest.Pytester,
    sweep: Sweep,
    server: FakeAnthropic,
    fault: tuple[str, object],
    client: str,
) -> None:
    server.push(*fault, times=2)
    make_spec(
        pytester, anthropic_spec(server, client, n=2, timeout=1 if fault[0] == "hang" else 10)
    )
    result, _, rows = sweep.run("--bench-concurrency", "1")
    result.assert_outcomes(passed=2)
    assert result.ret == 0
    assert sorted(r["attempts"] for r in rows) == [1, 3]
    result.stdout.fnmatch_lines(["*q0[[]claude[]] took 2 retries*"])


def test_retry_after_is_honoured(
    pytester: pytest.Pytester, sweep: Sweep, server: FakeAnthropic, client: str
) -> None:
    server.push("error", (429, RATE_LIMIT, {"retry-after": "0.6"}))
    make_spec(pytester, anthropic_spec(server, client, n=1))
    result, _, rows = sweep.run()
    assert result.ret == 0 and rows[0]["attempts"] == 2
    assert rows[0]["wall_seconds"] >= 0.6  # not the spec's 0.01 s backoff


def test_credit_balance_too_low_stops_the_run(
    pytester: pytest.Pytester, sweep: Sweep, server: FakeAnthropic, client: str
) -> None:
    server.credit_after = 2
    make_spec(pytester, anthropic_spec(server, client, n=6))
    result, _, rows = sweep.run("--bench-concurrency", "1", "--bench-order", "file")
    assert result.ret == 2
    assert sorted(r["task_id"] for r in rows) == ["q0", "q1"]  # the aborted item has no row
    assert len(server.requests) == 3  # never retried
    marker = json.loads((pytester.path / "results.jsonl.stop.json").read_text())
    assert marker["reason"] == "exhausted" and "credit balance is too low" in marker["message"]
    result.stdout.fnmatch_lines([f"*pytest --bench-resume {sweep.out}*"])


@pytest.mark.parametrize(
    "status, error, scope", [(402, BILLING, "exhausted"), (403, PERMISSION, "arm-unavailable"),
                             (401, AUTHENTICATION, "arm-unavailable")],
    ids=["billing", "permission", "authentication"],
)
def test_lost_access_stops_the_run_or_the_arm(
    pytester: pytest.Pytester,
    sweep: Sweep,
    server: FakeAnthropic,
    client: str,
    status: int,
    error: dict[str, str],
    scope: str,
) -> None:
    """No credit stops every arm (the account is empty); a refused
    key stops the arm that uses it."""
    server.push("error", (status, error, {}))
    make_spec(pytester, anthropic_spec(server, client))
    result, _, rows = sweep.run("--bench-concurrency", "1")
    assert result.ret == 2 and rows == []
    assert len(server.requests) == 1
    marker = json.loads((pytester.path / "results.jsonl.stop.json").read_text())
    assert marker["reason"] == scope and error["type"] in marker["message"]


def test_bad_request_is_a_failed_row_with_the_error(
    pytester: pytest.Pytester, sweep: Sweep, server: FakeAnthropic, client: str
) -> None:
    server.push("error", (400, BAD_REQUEST, {}))
    make_spec(pytester, anthropic_spec(server, client, n=2))
    result, _, rows = sweep.run("--bench-concurrency", "1")
    assert result.ret == 0
    bad = [r for r in rows if r["status"] == "error"]
    assert len(bad) == 1 and bad[0]["attempts"] == 1
    assert (
        "HTTP 400 invalid_request_error: messages: text content blocks must be non-empty"
        in bad[0]["detail"]
    )


def test_missing_key_skips_with_what_to_set(
    pytester: pytest.Pytester,
    sweep: Sweep,
    server: FakeAnthropic,
    monkeypatch: pytest.MonkeyPatch,
    client: str,
) -> None:
    monkeypatch.delenv("TEST_ANTHROPIC_KEY")
    make_spec(pytester, anthropic_spec(server, client, n=2))
    result, _, rows = sweep.run("-rs")
    result.assert_outcomes(skipped=2)
    result.stdout.fnmatch_lines(
        ["*needs an API key: set the environment variable TEST_ANTHROPIC_KEY*"]
    )
    assert rows == [] and server.requests == []


def test_no_key_for_a_local_proxy(pytester: pytest.Pytester, sweep: Sweep, server: FakeAnthropic,
                                  monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("TEST_ANTHROPIC_KEY")
    make_spec(
        pytester,
        anthropic_spec(server, "http", n=1).replace(
            "api_key_env: TEST_ANTHROPIC_KEY", "api_key_env: null"
        ),
    )
    result, _, rows = sweep.run()
    assert result.ret == 0 and len(rows) == 1
    assert server.requests[0]["key"] is None


def test_missing_sdk_skips_with_what_to_install(
    pytester: pytest.Pytester, sweep: Sweep, server: FakeAnthropic, monkeypatch: pytest.MonkeyPatch
) -> None:
    # what `import anthropic` meets when it is not installed
    monkeypatch.setitem(sys.modules, "anthropic", None)
    make_spec(pytester, anthropic_spec(server, "sdk", n=2))
    result, _, rows = sweep.run("-rs")
    result.assert_outcomes(skipped=2)
    result.stdout.fnmatch_lines(
        ["*anthropic SDK is not installed: pip install 'pytest-echo-bench[[]anthropic[]]'*"]
    )
    assert rows == []


@pytest.mark.parametrize(
    "option, message",
    [("    top_k: 5\n", "*unknown anthropic option 'top_k'*"),
     ("    max_tokens: many\n", "*max_tokens has the wrong type*"),
     ("    client: grpc\n", "*client must be sdk or http*")],
    ids=["unknown", "max-tokens-type", "client"],
)
def test_bad_options_are_spec_errors(
    pytester: pytest.Pytester, sweep: Sweep, server: FakeAnthropic, option: str, message: str
) -> None:
    spec = anthropic_spec(server, "http", n=1, options=option)
    if "client: grpc" in option:
        spec = spec.replace("    client: http\n", "")
    make_spec(pytester, spec)
    result, _, rows = sweep.run()
    assert result.ret == 2 and rows == [] and server.requests == []
    result.stdout.fnmatch_lines([message])
