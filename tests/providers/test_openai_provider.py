"""The openai provider against a real OpenAI-compatible HTTP server on 127.0.0.1."""

from __future__ import annotations

import json
import time

import pytest
from openai_server import BAD_REQUEST, OVERLOADED, RATE_LIMIT, FakeOpenAI

from conftest import OPENAI_KEY, Sweep, make_spec, sim_spec


@pytest.fixture(params=["sdk", "http"])
def client(request: pytest.FixtureRequest) -> str:
    """Every test runs against both clients: the official SDK and the lean HTTP one."""
    return str(request.param)


def openai_spec(
    server: FakeOpenAI, n: int = 3, extra: str = "", client: str = "sdk", timeout: float = 10
) -> str:
    """``timeout`` only as short as a test of hangs needs: on a loaded
    machine 1 s can pass by itself."""
    arms = (
        f"  gpt:\n    provider: openai\n    model: local-model\n    base_url: {server.base_url}\n"
        f"    api_key_env: TEST_OPENAI_KEY\n    temperature: 0\n    client: {client}\n"
    )
    return sim_spec(
        n,
        arms=arms,
        extra="retries: {attempts: 4, backoff_s: 0.01, max_backoff_s: 0.05}\n"
        f"timeout_s: {timeout}\n" + extra,
    )


pytestmark = pytest.mark.usefixtures("api_key")


def test_answers_usage_and_no_secret_in_results(
    pytester: pytest.Pytester, sweep: Sweep, openai_server: FakeOpenAI, client: str
) -> None:
    openai_server.answer = lambda prompt: "4"
    make_spec(pytester, openai_spec(openai_server, client=client))
    result, meta, rows = sweep.run()
    result.assert_outcomes(passed=3)
    assert [r["usage"]["completion_tokens"] for r in rows] == [1, 1, 1]
    sent = openai_server.requests[0]
    assert sent["body"]["model"] == "local-model" and sent["body"]["temperature"] == 0
    assert sent["auth"] == f"Bearer {OPENAI_KEY}"
    assert OPENAI_KEY not in sweep.out.read_text() and OPENAI_KEY not in result.stdout.str()


@pytest.mark.parametrize(
    "fault",
    [("error", (429, RATE_LIMIT, {"retry-after": "0.05"})), ("error", (529, OVERLOADED, {})),
     ("error", (503, {"message": "upstream down"}, {})), ("hang", 2.0), ("reset", None)],
    ids=["rate-limit", "overloaded", "5xx", "timeout", "connection-reset"],
)
def test_transient_faults_are_retried_not_graded(
    pytester: pytest.Pytester, sweep: Sweep, openai_server: FakeOpenAI, fault: tuple[str, object],
    client: str,
) -> None:
    openai_server.answer = lambda prompt: "4"
    openai_server.push(*fault, times=2)
    make_spec(
        pytester,
        openai_spec(openai_server, n=2, client=client, timeout=1 if fault[0] == "hang" else 10),
    )
    result, _, rows = sweep.run("--bench-concurrency", "1")
    result.assert_outcomes(passed=2)
    assert result.ret == 0
    assert sorted(r["attempts"] for r in rows) == [1, 3]
    result.stdout.fnmatch_lines(["*q0[[]gpt[]] took 2 retries*"])


def test_quota_exhaustion_stops_the_run(
    pytester: pytest.Pytester, sweep: Sweep, openai_server: FakeOpenAI, client: str
) -> None:
    openai_server.answer = lambda prompt: "4"
    openai_server.quota_after = 2
    make_spec(pytester, openai_spec(openai_server, n=6, client=client))
    result, _, rows = sweep.run("--bench-concurrency", "1")
    assert result.ret == 2
    assert len(rows) == 2
    quota_calls = [r for r in openai_server.requests][2:]
    assert len(quota_calls) == 1  # never retried: one 429 insufficient_quota and the run stops
    marker = json.loads((pytester.path / "results.jsonl.stop.json").read_text())
    assert marker["reason"] == "exhausted" and "insufficient_quota" in marker["message"]


def test_exhaustion_under_xdist_then_resume_completes(
    pytester: pytest.Pytester, sweep: Sweep, openai_server: FakeOpenAI, client: str
) -> None:
    openai_server.answer = lambda prompt: "4"
    openai_server.quota_after = 5
    make_spec(pytester, openai_spec(openai_server, n=20, client=client))
    start = time.monotonic()
    result, _, rows = sweep.run("-n", "2", "--bench-concurrency", "4")
    # a hang, not the load: a -n 2 run of two plain tests took up to a minute at load 20
    assert time.monotonic() - start < 90
    out = result.stdout.str()
    assert result.ret == 2 and "crashed" not in out
    assert len(rows) == 5 and out.count("resume with:") == 1
    openai_server.quota_after = None  # the usage window has passed
    result, _, rows = sweep.run("--bench-resume", str(sweep.out), "-n", "2")
    assert result.ret == 0
    assert sorted(r["task_id"] for r in rows) == sorted(f"q{i}" for i in range(20))


def test_revoked_key_stops_the_arm(
    pytester: pytest.Pytester, sweep: Sweep, openai_server: FakeOpenAI, client: str
) -> None:
    openai_server.push(
        "error", (401, {"message": "Incorrect API key", "code": "invalid_api_key"}, {})
    )
    make_spec(pytester, openai_spec(openai_server, client=client))
    result, _, rows = sweep.run("--bench-concurrency", "1")
    assert result.ret == 2 and rows == []
    assert len(openai_server.requests) == 1
    result.stdout.fnmatch_lines(["*the key was refused: check the key in TEST_OPENAI_KEY*"])
    marker = json.loads((pytester.path / "results.jsonl.stop.json").read_text())
    assert marker["reason"] == "arm-unavailable" and marker["arms"] == ["demo/gpt"]


def test_bad_request_is_a_failed_row_with_the_error(
    pytester: pytest.Pytester, sweep: Sweep, openai_server: FakeOpenAI, client: str
) -> None:
    openai_server.answer = lambda prompt: "4"
    openai_server.push("error", (400, BAD_REQUEST, {}))
    make_spec(pytester, openai_spec(openai_server, n=2, client=client))
    result, _, rows = sweep.run("--bench-concurrency", "1")
    assert result.ret == 0
    bad = [r for r in rows if r["status"] == "error"]
    assert (
        len(bad) == 1 and "HTTP 400 invalid_prompt" in bad[0]["detail"] and bad[0]["attempts"] == 1
    )


def test_missing_key_skips_with_what_to_set(
    pytester: pytest.Pytester,
    sweep: Sweep,
    openai_server: FakeOpenAI,
    monkeypatch: pytest.MonkeyPatch,
    client: str,
) -> None:
    monkeypatch.delenv("TEST_OPENAI_KEY")
    make_spec(pytester, openai_spec(openai_server, n=2, client=client))
    result, _, rows = sweep.run("-rs")
    result.assert_outcomes(skipped=2)
    result.stdout.fnmatch_lines(
        ["*needs an API key: set the environment variable TEST_OPENAI_KEY*"]
    )
    assert rows == [] and openai_server.requests == []


def test_concurrent_calls_overlap(
    pytester: pytest.Pytester, sweep: Sweep, openai_server: FakeOpenAI, client: str
) -> None:
    openai_server.answer = lambda prompt: (time.sleep(0.2), "4")[1]
    make_spec(pytester, openai_spec(openai_server, n=16, client=client))
    result, _, rows = sweep.run("--bench-concurrency", "8")
    assert result.ret == 0 and len(rows) == 16
    # One process keeps several calls in flight (wall-clock figures live
    # in benchmarks/concurrency.py).
    assert 4 <= openai_server.max_in_flight <= 8


def test_missing_sdk_skips_with_what_to_install(
    pytester: pytest.Pytester,
    sweep: Sweep,
    openai_server: FakeOpenAI,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import sys
    # what `import openai` meets when it is not installed
    monkeypatch.setitem(sys.modules, "openai", None)
    make_spec(pytester, openai_spec(openai_server, n=2, client="sdk"))
    result, _, rows = sweep.run("-rs")
    result.assert_outcomes(skipped=2)
    result.stdout.fnmatch_lines(
        ["*openai SDK is not installed: pip install 'pytest-echo-bench[[]openai[]]'*"]
    )
    assert rows == []


def test_a_hung_call_does_not_hold_up_a_stopping_run(
    pytester: pytest.Pytester, sweep: Sweep, openai_server: FakeOpenAI
) -> None:
    openai_server.answer = lambda prompt: "4"
    # The arm's first call runs alone and answers; the next one hangs far past the stop.
    openai_server.push("ok")
    openai_server.push("hang", 30.0)
    openai_server.quota_after = 2
    make_spec(pytester, openai_spec(openai_server, n=12, client="http", timeout=60))
    start = time.monotonic()
    result, _, rows = sweep.run("--bench-concurrency", "4")
    assert result.ret == 2
    assert time.monotonic() - start < 20  # far under the hung call's 30 s
    # the first answer and the two the quota allowed; the hung one never landed
    assert len(rows) == 3
