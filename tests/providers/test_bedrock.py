"""The bedrock provider against a Converse server on 127.0.0.1 that checks each SigV4 signature
with botocore's own signer: answers, usage, refusals, every error kind, credentials kept out of
sight, a proxy and a private CA."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from bedrock_server import (
    ACCESS_KEY,
    BLOCKED,
    GUARDRAIL,
    MODEL,
    REGION,
    SECRET_KEY,
    SESSION_TOKEN,
    FakeBedrock,
    error,
)
from netparts import forward_proxy, make_cert, tls_server

from conftest import Sweep, make_spec

pytestmark = pytest.mark.usefixtures("aws", "no_network_variables")
SECRETS = (SECRET_KEY, SESSION_TOKEN)


@pytest.fixture
def aws(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """The test credentials in the variables botocore's chain reads first, with a trailing
    newline as a secret file leaves it; no shared file or instance role of the machine's."""
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", ACCESS_KEY)
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", SECRET_KEY + "\n")
    for name in ("AWS_SESSION_TOKEN", "AWS_PROFILE", "AWS_DEFAULT_PROFILE", "AWS_REGION",
                 "AWS_DEFAULT_REGION", "ECHO_BENCH_BUDGET_USD"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "no-config"))
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "no-credentials"))
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")


@pytest.fixture
def server() -> Iterator[FakeBedrock]:
    with FakeBedrock(answer=lambda prompt: "4") as fake:
        yield fake


def bedrock_spec(base_url: str, n: int = 3, options: str = "", timeout: float = 10) -> str:
    items = "\n".join(f'    - {{id: q{i}, input: "2+2=? ({i})", target: "4"}}' for i in range(n))
    return (f"benchmark: demo\ndataset:\n  loader: inline\n  items:\n{items}\nscorer: exact\n"
            f"arms:\n  claude:\n    provider: bedrock\n    model: {MODEL}\n"
            f"    region: {REGION}\n    base_url: {base_url}\n{options}"
            "retries: {attempts: 4, backoff_s: 0.01, max_backoff_s: 0.05, max_wait_s: 5}\n"
            f"timeout_s: {timeout}\n")


def no_secret(sweep: Sweep, output: str) -> None:
    """No credential in the results, beside them, or on the terminal."""
    files = "".join(p.read_text(errors="replace") for p in sweep.out.parent.glob("results*"))
    for secret in SECRETS:
        assert secret not in files and secret not in output


def test_answers_signed_usage_and_no_secret_anywhere(
    pytester: pytest.Pytester, sweep: Sweep, server: FakeBedrock
) -> None:
    options = ("    system: Answer with a number.\n    max_tokens: 64\n    temperature: 0\n"
               "    top_p: 0.5\n    stop_sequences: [END]\n")
    make_spec(pytester, bedrock_spec(server.base_url, options=options))
    result, _, rows = sweep.run()
    result.assert_outcomes(passed=3)
    assert server.refused_signatures == 0
    assert [r["usage"] for r in rows] == [{"prompt_tokens": 2, "completion_tokens": 1}] * 3
    assert {r["served_model"] for r in rows} == {MODEL}
    sent = server.requests[0]
    assert sent["model"] == MODEL and sent["token"] is None
    assert sent["body"]["system"] == [{"text": "Answer with a number."}]
    assert sent["body"]["inferenceConfig"] == {"maxTokens": 64, "temperature": 0, "topP": 0.5,
                                               "stopSequences": ["END"]}
    assert sorted(r["body"]["messages"][0]["content"][0]["text"] for r in server.requests) == [
        "2+2=? (0)", "2+2=? (1)", "2+2=? (2)"]
    no_secret(sweep, result.stdout.str() + result.stderr.str())


def test_xdist_workers_each_sign_their_calls(
    pytester: pytest.Pytester, sweep: Sweep, server: FakeBedrock
) -> None:
    make_spec(pytester, bedrock_spec(server.base_url, n=4))
    result, _, rows = sweep.run("-n", "2")
    result.assert_outcomes(passed=4)
    assert len(rows) == 4 and server.refused_signatures == 0


def test_a_session_token_is_signed_and_sent(
    pytester: pytest.Pytester, sweep: Sweep, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("AWS_SESSION_TOKEN", SESSION_TOKEN)
    with FakeBedrock(answer=lambda prompt: "4", token=SESSION_TOKEN) as server:
        make_spec(pytester, bedrock_spec(server.base_url, n=2))
        result, _, rows = sweep.run()
    result.assert_outcomes(passed=2)
    assert {r["token"] for r in server.requests} == {SESSION_TOKEN}
    no_secret(sweep, result.stdout.str())


def test_a_profile_from_the_shared_files(
    pytester: pytest.Pytester, sweep: Sweep, server: FakeBedrock, monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path
) -> None:
    for name in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"):
        monkeypatch.delenv(name)
    credentials = tmp_path / "credentials"
    credentials.write_text(f"[bench]\naws_access_key_id = {ACCESS_KEY}\n"
                           f"aws_secret_access_key = {SECRET_KEY}\n")
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(credentials))
    make_spec(pytester, bedrock_spec(server.base_url, n=1, options="    profile: bench\n"))
    result, _, rows = sweep.run()
    result.assert_outcomes(passed=1)
    no_secret(sweep, result.stdout.str())


def test_a_wrong_secret_is_the_arms_failure_never_shown(
    pytester: pytest.Pytester, sweep: Sweep, server: FakeBedrock, monkeypatch: pytest.MonkeyPatch
) -> None:
    wrong = "wJalrXUtnFEMI/K7MDENG/bPxRfiCYWRONGSECRETxx"
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", wrong)
    make_spec(pytester, bedrock_spec(server.base_url, n=2))
    result, _, rows = sweep.run("--bench-concurrency", "1")
    assert result.ret == 2 and rows == [] and server.refused_signatures == 1
    marker = json.loads((pytester.path / "results.jsonl.stop.json").read_text())
    assert marker["reason"] == "arm-unavailable"
    assert "InvalidSignatureException" in marker["message"]
    assert "AWS_SECRET_ACCESS_KEY" in result.stdout.str()
    assert wrong not in result.stdout.str() and wrong not in sweep.out.read_text()


def test_no_credentials_skip_with_what_to_set(
    pytester: pytest.Pytester, sweep: Sweep, server: FakeBedrock, monkeypatch: pytest.MonkeyPatch
) -> None:
    for name in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"):
        monkeypatch.delenv(name)
    make_spec(pytester, bedrock_spec(server.base_url, n=2))
    result, _, rows = sweep.run("-rs")
    result.assert_outcomes(skipped=2)
    result.stdout.fnmatch_lines(["*needs AWS credentials: set AWS_ACCESS_KEY_ID*"])
    assert rows == [] and server.requests == []


def test_cache_counts_join_the_prompt(
    pytester: pytest.Pytester, sweep: Sweep, server: FakeBedrock
) -> None:
    server.cache = (5, 0)  # a reported 0 is a fact: kept
    make_spec(pytester, bedrock_spec(server.base_url, n=1))
    _, _, rows = sweep.run()
    assert rows[0]["usage"] == {"prompt_tokens": 7, "completion_tokens": 1,
                                "cache_read_tokens": 5, "cache_write_tokens": 0}


def test_a_guardrail_is_a_refusal_recorded_once_and_graded_wrong(
    pytester: pytest.Pytester, sweep: Sweep, server: FakeBedrock
) -> None:
    spec = bedrock_spec(server.base_url, n=2).replace("2+2=? (1)", f"2+2=? {GUARDRAIL}")
    make_spec(pytester, spec)
    result, _, rows = sweep.run("--bench-concurrency", "1")
    result.assert_outcomes(passed=1, failed=1)  # a wrong answer fails its test; nothing stops
    refused = [r for r in rows if r["task_id"] == "q1"]
    assert len(refused) == 1 and refused[0]["extra"]["refusal"] == "guardrail_intervened"
    assert refused[0]["output"] == BLOCKED and refused[0]["status"] == "wrong"
    assert refused[0]["attempts"] == 1 and len(server.requests) == 2


def test_quota_stops_the_run_with_the_resume_command(
    pytester: pytest.Pytester, sweep: Sweep, server: FakeBedrock
) -> None:
    server.quota_after = 2
    make_spec(pytester, bedrock_spec(server.base_url, n=5))
    result, _, rows = sweep.run("--bench-concurrency", "1", "--bench-order", "file")
    assert result.ret == 2
    assert sorted(r["task_id"] for r in rows) == ["q0", "q1"]
    assert len(server.requests) == 3  # never retried
    marker = json.loads((pytester.path / "results.jsonl.stop.json").read_text())
    assert marker["reason"] == "exhausted"
    assert "ServiceQuotaExceededException" in marker["message"]
    result.stdout.fnmatch_lines([f"*pytest --bench-resume {sweep.out}*"])


def test_throttling_waits_as_told_then_succeeds(
    pytester: pytest.Pytester, sweep: Sweep, server: FakeBedrock
) -> None:
    server.push(*error("ThrottlingException", headers={"retry-after": "0.6"}))
    make_spec(pytester, bedrock_spec(server.base_url, n=1))
    result, _, rows = sweep.run()
    assert result.ret == 0 and rows[0]["attempts"] == 2 and rows[0]["status"] == "correct"
    assert rows[0]["wall_seconds"] >= 0.6  # the server's wait, not the spec's 0.01 s backoff


@pytest.mark.parametrize("kind", ["ThrottlingException", "ServiceUnavailableException",
                                  "InternalServerException", "ModelNotReadyException",
                                  "ModelTimeoutException"])
def test_transient_kinds_are_retried_not_graded(
    pytester: pytest.Pytester, sweep: Sweep, server: FakeBedrock, kind: str
) -> None:
    server.push(*error(kind), times=2)
    make_spec(pytester, bedrock_spec(server.base_url, n=2))
    result, _, rows = sweep.run("--bench-concurrency", "1")
    result.assert_outcomes(passed=2)
    assert sorted(r["attempts"] for r in rows) == [1, 3]


@pytest.mark.parametrize("kind", ["AccessDeniedException", "ResourceNotFoundException",
                                  "ValidationException"])
def test_access_and_model_errors_stop_the_arm(
    pytester: pytest.Pytester, sweep: Sweep, server: FakeBedrock, kind: str
) -> None:
    """A refused model, an unknown one, or an invalid model id: the arm's settings."""
    server.push(*error(kind))
    make_spec(pytester, bedrock_spec(server.base_url))
    result, _, rows = sweep.run("--bench-concurrency", "1")
    assert result.ret == 2 and rows == [] and len(server.requests) == 1
    marker = json.loads((pytester.path / "results.jsonl.stop.json").read_text())
    assert marker["reason"] == "arm-unavailable" and kind in marker["message"]


def test_a_bad_request_is_a_failed_row(
    pytester: pytest.Pytester, sweep: Sweep, server: FakeBedrock
) -> None:
    server.push(*error("ValidationException", "messages.0.content.0.text: must not be blank"))
    make_spec(pytester, bedrock_spec(server.base_url, n=2))
    result, _, rows = sweep.run("--bench-concurrency", "1")
    assert result.ret == 0
    bad = [r for r in rows if r["status"] == "error"]
    assert len(bad) == 1 and bad[0]["attempts"] == 1
    assert "ValidationException: messages.0.content.0.text: must not be blank" in bad[0]["detail"]


def test_credentials_a_server_echoes_are_redacted_from_the_row(
    pytester: pytest.Pytester, sweep: Sweep, server: FakeBedrock, monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path
) -> None:
    """From a profile's file too: values no variable of the spec holds."""
    for name in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"):
        monkeypatch.delenv(name)
    credentials = tmp_path / "credentials"
    credentials.write_text(f"[bench]\naws_access_key_id = {ACCESS_KEY}\n"
                           f"aws_secret_access_key = {SECRET_KEY}\n")
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(credentials))
    server.push(*error("ValidationException", f"bad request signed with {SECRET_KEY}"))
    make_spec(pytester, bedrock_spec(server.base_url, n=2, options="    profile: bench\n"))
    result, _, rows = sweep.run("--bench-concurrency", "1")
    bad = [r for r in rows if r["status"] == "error"]
    assert len(bad) == 1 and "bad request signed with" in bad[0]["detail"]
    no_secret(sweep, result.stdout.str() + result.stderr.str())


def test_a_priced_arm_with_a_budget_records_its_cost(
    pytester: pytest.Pytester, sweep: Sweep, server: FakeBedrock
) -> None:
    options = "    max_tokens: 16\n"
    make_spec(pytester, bedrock_spec(server.base_url, n=2, options=options)
              + "pricing:\n  claude: {input: 1.0, output: 2.0}\n")
    result, _, rows = sweep.run("--bench-budget-usd", "1")
    result.assert_outcomes(passed=2)
    assert [r["cost_usd"] for r in rows] == [pytest.approx(4e-6)] * 2  # 2 in at $1, 1 out at $2


def test_through_a_proxy_to_a_private_ca(
    pytester: pytest.Pytester, sweep: Sweep, tmp_path: Path
) -> None:
    cert = make_cert(tmp_path / "certs", "bedrock")
    with tls_server(cert, lambda: FakeBedrock(answer=lambda prompt: "4")) as server, \
            forward_proxy(tmp_path) as proxy:
        url = f"https://127.0.0.1:{server.httpd.server_address[1]}"
        options = f"    proxy: {proxy.url}\n    ca_file: {cert.cert}\n"
        make_spec(pytester, bedrock_spec(url, n=2, options=options))
        result, _, rows = sweep.run()
        assert proxy.lines(f"127.0.0.1:{server.httpd.server_address[1]}", at_least=1)
    result.assert_outcomes(passed=2)
    assert server.refused_signatures == 0


def test_an_untrusted_certificate_stops_the_arm(
    pytester: pytest.Pytester, sweep: Sweep, tmp_path: Path
) -> None:
    cert = make_cert(tmp_path / "certs", "bedrock")
    with tls_server(cert, lambda: FakeBedrock(answer=lambda prompt: "4")) as server:
        url = f"https://127.0.0.1:{server.httpd.server_address[1]}"
        make_spec(pytester, bedrock_spec(url, n=1))
        result, _, rows = sweep.run()
    assert result.ret == 2 and rows == []
    result.stdout.fnmatch_lines(["*certificate*"])


def test_bad_options_are_spec_errors(pytester: pytest.Pytester, sweep: Sweep) -> None:
    make_spec(pytester, bedrock_spec("http://127.0.0.1:9", options="    max_token: 5\n"))
    result, _, _ = sweep.run()
    assert result.ret != 0
    result.stdout.fnmatch_lines(["*unknown bedrock option 'max_token'*"])


def region_spec(server: FakeBedrock, monkeypatch: pytest.MonkeyPatch, where: str,
                value: str) -> str:
    """The arm's region ``value`` in the spec (``where`` "spec"), or in the variable ``where``."""
    body = bedrock_spec(server.base_url, n=2)
    if where == "spec":
        return body.replace(f"region: {REGION}", f"region: {value}")
    monkeypatch.setenv(where, value)
    return body.replace(f"    region: {REGION}\n", "")


@pytest.mark.parametrize("where, value", [
    ("AWS_REGION", f"{REGION}\n"), ("AWS_REGION", f"{REGION} "),
    ("AWS_DEFAULT_REGION", f" {REGION}\r\n"), ("spec", f"'{REGION} '"),
])
def test_white_space_around_the_region_is_stripped(
    pytester: pytest.Pytester, sweep: Sweep, server: FakeBedrock,
    monkeypatch: pytest.MonkeyPatch, where: str, value: str,
) -> None:
    make_spec(pytester, region_spec(server, monkeypatch, where, value))
    result, _, rows = sweep.run()
    # The fake server checks the signature's region: the call is signed for us-east-1.
    assert result.ret == 0 and [r["status"] for r in rows] == ["correct", "correct"]
    assert len(server.requests) == 2


@pytest.mark.parametrize("where, value, says", [
    ("AWS_REGION", "us east-1", "*AWS_REGION holds 'us east-1', not an AWS region*"),
    ("AWS_DEFAULT_REGION", "us-east-1/x",
     "*AWS_DEFAULT_REGION holds 'us-east-1/x', not an AWS region*set region: in the arm*"),
    ("spec", "'us-east-1.evil'",
     "*demo.yaml:*region must be an AWS region such as us-east-1*got 'us-east-1.evil'*"),
    ("spec", "US-EAST-1", "*demo.yaml:*region must be an AWS region*got 'US-EAST-1'*"),
])
def test_a_region_that_is_no_regions_name_is_refused_naming_where_it_came_from(
    pytester: pytest.Pytester, sweep: Sweep, server: FakeBedrock,
    monkeypatch: pytest.MonkeyPatch, where: str, value: str, says: str,
) -> None:
    make_spec(pytester, region_spec(server, monkeypatch, where, value))
    result, _, rows = sweep.run("-rs")
    assert result.ret != 0 and rows == [] and server.requests == []
    result.stdout.fnmatch_lines([says])
