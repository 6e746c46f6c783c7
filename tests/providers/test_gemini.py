"""The gemini provider against a real Gemini API server on 127.0.0.1, through both clients."""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from gemini_server import BAD_REQUEST, LOCATION, RATE_LIMIT, UNAVAILABLE, FakeGemini
from netparts import Cert, ForwardProxy, forward_proxy, https_url, make_cert, tls_server

from conftest import Sweep, make_spec, sim_spec
from pytest_echo_bench.budget.worst import completion_cap
from pytest_echo_bench.providers import gemini
from pytest_echo_bench.spec.load import ArmSpec

GEMINI_KEY = "AIzaSy-test-planted-secret-7c2e91"  # the prefix of Google's API keys
MODEL = "gemini-2.5-flash"
FAST = "retries: {attempts: 4, backoff_s: 0.01, max_backoff_s: 0.05}\ntimeout_s: 10\n"

pytestmark = pytest.mark.usefixtures("api_key", "no_network_variables", "gemini_key")


@pytest.fixture
def gemini_key(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TEST_GEMINI_KEY", GEMINI_KEY)
    monkeypatch.setenv(gemini.SAID_ENV, "0")  # nothing said yet in this test's runs
    for name in ("GEMINI_API_KEY", "GOOGLE_API_KEY"):
        monkeypatch.delenv(name, raising=False)


@pytest.fixture
def server() -> Iterator[FakeGemini]:
    with FakeGemini(lambda prompt: "4", key=GEMINI_KEY) as running:
        yield running


@pytest.fixture(params=["http", "sdk"])
def client(request: pytest.FixtureRequest) -> str:
    """Every test runs against both clients: the lean HTTP one and google-genai."""
    return str(request.param)


def gemini_spec(url: str, client: str, n: int = 3, arm: str = "", extra: str = "") -> str:
    arms = (f"  gem:\n    provider: gemini\n    model: gemini-2.5-flash\n    base_url: {url}\n"
            f"    api_key_env: TEST_GEMINI_KEY\n    client: {client}\n{arm}")
    return sim_spec(n, arms=arms, extra=FAST + extra)


def test_answers_usage_thoughts_and_the_served_model_with_the_key_in_its_header(
    pytester: pytest.Pytester, sweep: Sweep, server: FakeGemini, client: str
) -> None:
    server.thoughts = "Two and two: let me count carefully"
    server.cached_tokens = 1
    arm = ("    system: Answer with a number.\n    temperature: 0\n    max_tokens: 64\n"
           "    stop: [END]\n    generation_config: {thinkingConfig: {thinkingBudget: 128}}\n")
    make_spec(pytester, gemini_spec(server.base_url, client, arm=arm,
                                    extra="pricing:\n  gem: {input: 0.3, output: 2.5}\n"))
    result, _, rows = sweep.run("--bench-concurrency", "1")
    assert result.ret == 0, result.stdout.str()[-2000:]
    assert [r["status"] for r in rows] == ["correct"] * 3
    assert rows[0]["usage"] == {"prompt_tokens": 2, "completion_tokens": 8,
                                "cache_read_tokens": 1, "reasoning_tokens": 7}
    assert rows[0]["served_model"] == "gemini-2.5-flash-001" and rows[0]["cost_usd"] > 0
    sent = server.requests[0]
    assert sent["path"] == "/v1beta/models/gemini-2.5-flash:generateContent"
    assert sent["key"] == GEMINI_KEY and sent["auth"] is None
    assert sent["body"]["systemInstruction"] == {"parts": [{"text": "Answer with a number."}]}
    assert sent["body"]["generationConfig"] == {
        "temperature": 0, "maxOutputTokens": 64, "stopSequences": ["END"],
        "thinkingConfig": {"thinkingBudget": 128}}
    assert sent["body"]["contents"][0]["parts"][0]["text"].startswith("2+2=?")
    assert GEMINI_KEY not in sweep.out.read_text() and GEMINI_KEY not in result.stdout.str()


@pytest.mark.parametrize("fault", [
    ("error", (429, RATE_LIMIT, {})), ("error", (503, UNAVAILABLE, {})),
    ("error", (500, {"code": 500, "message": "An internal error has occurred.",
                     "status": "INTERNAL"}, {})),
    ("reset", None),
], ids=["rate-limit", "unavailable", "internal", "connection-reset"])
def test_transient_faults_are_retried_not_graded(
    pytester: pytest.Pytester, sweep: Sweep, server: FakeGemini, fault: tuple[str, object],
    client: str,
) -> None:
    server.push(*fault, times=2)
    make_spec(pytester, gemini_spec(server.base_url, client, n=2))
    result, _, rows = sweep.run("--bench-concurrency", "1")
    assert result.ret == 0, result.stdout.str()[-2000:]
    assert sorted(r["attempts"] for r in rows) == [1, 3]
    assert {r["status"] for r in rows} == {"correct"}


def test_a_rate_limit_waits_as_its_retry_info_says_then_succeeds(
    pytester: pytest.Pytester, sweep: Sweep, server: FakeGemini, client: str
) -> None:
    times: list[float] = []
    server.answer = lambda prompt: (times.append(time.monotonic()), "4")[1]
    limited = {**RATE_LIMIT, "details": [*RATE_LIMIT["details"][:2], {
        "@type": "type.googleapis.com/google.rpc.RetryInfo", "retryDelay": "0.6s"}]}
    server.push("ok")
    server.push("error", (429, limited, {}))
    make_spec(pytester, gemini_spec(server.base_url, client, n=2))
    start = time.monotonic()
    result, _, rows = sweep.run("--bench-concurrency", "1")
    assert result.ret == 0 and len(rows) == 2, result.stdout.str()[-2000:]
    assert len(times) == 2 and times[1] - times[0] >= 0.55  # waited what retryDelay said
    assert time.monotonic() - start < 30
    assert {r["status"] for r in rows} == {"correct"}


def test_a_spent_daily_quota_stops_the_run_with_the_resume_command(
    pytester: pytest.Pytester, sweep: Sweep, server: FakeGemini, client: str
) -> None:
    server.quota_after = 2
    make_spec(pytester, gemini_spec(server.base_url, client, n=6))
    result, _, rows = sweep.run("--bench-concurrency", "1")
    assert result.ret == 2 and len(rows) == 2
    assert len(server.requests) == 3  # the quota's 429 is not retried
    result.stdout.fnmatch_lines(["*resume with:", "  pytest --bench-resume *"])
    marker = json.loads((pytester.path / "results.jsonl.stop.json").read_text())
    assert marker["reason"] == "exhausted" and "RESOURCE_EXHAUSTED" in marker["message"]
    server.quota_after = None  # the next day
    result, _, rows = sweep.run("--bench-resume", str(sweep.out))
    assert result.ret == 0 and sorted(r["task_id"] for r in rows) == [f"q{i}" for i in range(6)]


def test_a_spent_quota_under_xdist_stops_every_worker_once_then_resumes(
    pytester: pytest.Pytester, sweep: Sweep, server: FakeGemini
) -> None:
    server.quota_after = 5
    make_spec(pytester, gemini_spec(server.base_url, "http", n=16))
    result, _, rows = sweep.run("-n", "2", "--bench-concurrency", "4")
    out = result.stdout.str()
    assert result.ret == 2 and "crashed" not in out and out.count("resume with:") == 1
    assert len(rows) == 5
    server.quota_after = None
    result, _, rows = sweep.run("--bench-resume", str(sweep.out), "-n", "2")
    assert result.ret == 0 and sorted(r["task_id"] for r in rows) == sorted(
        f"q{i}" for i in range(16))


@pytest.mark.parametrize("block", ["SAFETY", "RECITATION", "prompt SAFETY"])
def test_a_refusal_is_an_answer_recorded_once_graded_wrong_and_never_retried(
    pytester: pytest.Pytester, sweep: Sweep, server: FakeGemini, client: str, block: str
) -> None:
    if block.startswith("prompt "):
        server.prompt_block = block.split()[1]
    else:
        server.block = block
    make_spec(pytester, gemini_spec(server.base_url, client, n=3))
    result, _, rows = sweep.run("--bench-concurrency", "1")
    assert result.ret == 0, result.stdout.str()[-2000:]
    assert len(server.requests) == 3 and [r["attempts"] for r in rows] == [1, 1, 1]
    # graded as any answer: an empty one is unparseable, counted against the pass rate
    assert {r["status"] for r in rows} == {"unparseable"}
    assert all(r["output"] == "" and r["extra"]["refusal"] == block for r in rows)


def test_a_refused_key_stops_the_arm_naming_the_variable(
    pytester: pytest.Pytester, sweep: Sweep, server: FakeGemini, client: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("TEST_GEMINI_KEY", "AIzaSy-another-wrong-key-0000")
    make_spec(pytester, gemini_spec(server.base_url, client))
    result, _, rows = sweep.run("--bench-concurrency", "1")
    assert result.ret == 2 and rows == [] and len(server.requests) == 1
    result.stdout.fnmatch_lines(["*API key not valid*check the key in GEMINI_API_KEY*"])
    marker = json.loads((pytester.path / "results.jsonl.stop.json").read_text())
    assert marker["reason"] == "arm-unavailable"


@pytest.mark.parametrize("status, error, scope", [
    (400, BAD_REQUEST, "error-row"), (400, LOCATION, "arm"),
    (404, {"code": 404, "message": "models/gemini-9 is not found for API version v1beta",
           "status": "NOT_FOUND"}, "arm"),
])
def test_the_other_errors_are_the_items_or_the_arms(
    pytester: pytest.Pytester, sweep: Sweep, server: FakeGemini, client: str, status: int,
    error: dict[str, object], scope: str,
) -> None:
    server.push("error", (status, error, {}))
    make_spec(pytester, gemini_spec(server.base_url, client, n=2))
    result, _, rows = sweep.run("--bench-concurrency", "1")
    if scope == "arm":
        assert result.ret == 2 and rows == []
        result.stdout.fnmatch_lines(["*check the model*" if status == 404 else "*region*"])
    else:
        assert result.ret == 0 and sorted(r["status"] for r in rows) == ["correct", "error"]
        assert "INVALID_ARGUMENT" in next(r for r in rows if r["status"] == "error")["detail"]


def test_the_default_keys_a_trailing_newline_and_none_shown(
    pytester: pytest.Pytester, sweep: Sweep, server: FakeGemini, client: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """GEMINI_API_KEY, else GOOGLE_API_KEY, read as a secret file leaves it: with its newline."""
    body = gemini_spec(server.base_url, client).replace("    api_key_env: TEST_GEMINI_KEY\n", "")
    make_spec(pytester, body)
    result, _, rows = sweep.run("-rs")
    result.stdout.fnmatch_lines(
        ["*set the environment variable GEMINI_API_KEY (or GOOGLE_API_KEY)*"])
    monkeypatch.setenv("GOOGLE_API_KEY", GEMINI_KEY + "\n")
    result, _, rows = sweep.run()
    assert result.ret == 0 and len(rows) == 3 and server.requests[-1]["key"] == GEMINI_KEY
    assert GEMINI_KEY not in sweep.out.read_text() and GEMINI_KEY not in result.stdout.str()


def test_both_default_keys_set_the_sdks_choice_is_read_and_said_once(
    pytester: pytest.Pytester, sweep: Sweep, server: FakeGemini, client: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """GOOGLE_API_KEY over GEMINI_API_KEY, as google-genai reads them; neither value shown."""
    other = "AIzaSy-the-other-projects-key-5d01"
    monkeypatch.setenv("GOOGLE_API_KEY", GEMINI_KEY)
    monkeypatch.setenv("GEMINI_API_KEY", other)
    make_spec(pytester, gemini_spec(server.base_url, client).replace(
        "    api_key_env: TEST_GEMINI_KEY\n", ""))
    result, _, rows = sweep.run()
    assert result.ret == 0 and [r["status"] for r in rows] == ["correct"] * 3
    assert {r["key"] for r in server.requests} == {GEMINI_KEY}
    out = result.stdout.str()
    assert out.count("GOOGLE_API_KEY and GEMINI_API_KEY are both set") == 1
    result.stdout.fnmatch_lines(["*different keys; GOOGLE_API_KEY is used*"])
    assert GEMINI_KEY not in out and other not in out and other not in sweep.out.read_text()
    # Under xdist: said once, by the controller that checks the arms before its workers start.
    monkeypatch.setenv(gemini.SAID_ENV, "0")
    sweep.out.unlink()
    result, _, rows = sweep.run("-n", "2", subprocess=True)
    both = result.stdout.str() + result.stderr.str()
    assert len(rows) == 3 and both.count("GOOGLE_API_KEY and GEMINI_API_KEY are both set") == 1
    # The same key in both: nothing to say.
    monkeypatch.setenv("GEMINI_API_KEY", GEMINI_KEY)
    monkeypatch.setenv(gemini.SAID_ENV, "0")
    sweep.out.unlink()
    result, _, rows = sweep.run()
    assert len(rows) == 3 and "both set" not in result.stdout.str()


def test_a_key_in_the_error_page_is_never_shown(
    pytester: pytest.Pytester, sweep: Sweep, server: FakeGemini, client: str
) -> None:
    echoed = {"code": 400, "message": f"bad request from key {GEMINI_KEY}",
              "status": "INVALID_ARGUMENT"}
    server.push("error", (400, echoed, {}))
    make_spec(pytester, gemini_spec(server.base_url, client, n=2))
    result, _, rows = sweep.run("--bench-concurrency", "1")
    assert result.ret == 0 and len(rows) == 2
    assert GEMINI_KEY not in sweep.out.read_text() and GEMINI_KEY not in result.stdout.str()


def test_missing_sdk_skips_with_what_to_install(
    pytester: pytest.Pytester, sweep: Sweep, server: FakeGemini, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setitem(sys.modules, "google.genai", None)  # what the import meets uninstalled
    make_spec(pytester, gemini_spec(server.base_url, "sdk", n=2))
    result, _, rows = sweep.run("-rs")
    result.stdout.fnmatch_lines(["*google-genai SDK is not installed*[[]gemini[]]*"])
    assert rows == [] and server.requests == []


@pytest.mark.parametrize("arm, message", [
    ("    max_tokens: 0\n", "max_tokens must be positive"),
    ("    stop: [1]\n", "stop must be a text or a list of texts"),
    ("    top_k: high\n", "top_k has the wrong type"),
    ("    thinking: on\n", "unknown gemini option 'thinking'"),
])
def test_a_bad_option_is_a_spec_error_naming_it(
    pytester: pytest.Pytester, sweep: Sweep, server: FakeGemini, arm: str, message: str
) -> None:
    make_spec(pytester, gemini_spec(server.base_url, "http", arm=arm))
    result, _, rows = sweep.run()
    assert result.ret != 0 and rows == [] and server.requests == []
    result.stdout.fnmatch_lines([f"*demo.yaml:*{message}*"])


def test_max_output_tokens_is_the_budgets_bound_and_an_unbounded_arm_is_refused(
    pytester: pytest.Pytester, sweep: Sweep, server: FakeGemini
) -> None:
    def arm(**options: object) -> ArmSpec:
        return ArmSpec("g", "gemini", {"model": MODEL, **options}, 1)

    assert completion_cap(arm(max_tokens=64)) == 64
    assert completion_cap(arm(max_tokens=64, generation_config={"maxOutputTokens": 900})) == 900
    assert completion_cap(arm()) is None
    make_spec(pytester, gemini_spec(server.base_url, "http", extra=(
        "pricing:\n  gem: {input: 0.3, output: 2.5}\n")))
    result, _, rows = sweep.run("--bench-budget-usd", "1")
    assert result.ret != 0 and rows == [] and server.requests == []
    assert "arm 'gem' has no worst case" in result.stderr.str() + result.stdout.str()


# -- proxies and private CAs
# ---------------------------------------------------------------------

@pytest.fixture(scope="module")
def cert(tmp_path_factory: pytest.TempPathFactory) -> Cert:
    return make_cert(tmp_path_factory.mktemp("certs"), "echo-bench-gemini-ca")


@pytest.fixture(scope="module")
def proxy(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ForwardProxy]:
    with forward_proxy(tmp_path_factory.mktemp("proxy")) as running:
        yield running


def _gemini() -> FakeGemini:
    return FakeGemini(lambda prompt: "4", key=GEMINI_KEY)


def test_a_private_ca_and_an_https_proxy_tunnel(
    pytester: pytest.Pytester, sweep: Sweep, cert: Cert, proxy: ForwardProxy, client: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    with tls_server(cert, _gemini) as running:
        url = https_url(running, path="/v1beta")
        monkeypatch.setenv("HTTPS_PROXY", proxy.url)
        make_spec(pytester, gemini_spec(url, client, arm=f"    ca_file: {cert.cert}\n"))
        result, _, rows = sweep.run("--bench-concurrency", "2")
        assert result.ret == 0 and {r["status"] for r in rows} == {"correct"}, \
            result.stdout.str()[-2000:]
        assert len(proxy.lines(f"127.0.0.1:{running.httpd.server_address[1]}", 1)) >= 1


def test_an_untrusted_certificate_stops_the_arm_naming_the_host(
    pytester: pytest.Pytester, sweep: Sweep, cert: Cert, client: str, tmp_path: Path
) -> None:
    with tls_server(cert, _gemini) as running:
        make_spec(pytester, gemini_spec(https_url(running, path="/v1beta"), client))
        result, _, rows = sweep.run("--bench-concurrency", "1")
    assert result.ret == 2 and rows == []
    result.stdout.fnmatch_lines(["*TLS: the certificate of 127.0.0.1:*failed verification*"])
