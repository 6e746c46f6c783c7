"""Azure OpenAI (an ``openai`` arm with ``azure:``) against a loopback Azure server, through both
clients."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from typing import Any

import pytest
from azure_server import RATE_LIMIT, FakeAzure, content_filter_error
from hypothesis import given, settings
from hypothesis import strategies as st
from netparts import Cert, ForwardProxy, forward_proxy, https_url, make_cert, tls_server

from conftest import Sweep, make_spec, sim_spec
from pytest_echo_bench.engine.scope import Classifier
from pytest_echo_bench.errors import EchoBenchError
from pytest_echo_bench.providers import azure, openai_chat
from pytest_echo_bench.providers.answer import MAX_COUNT
from pytest_echo_bench.providers.base import Request

AZURE_KEY = "3f9a0c6d2b7e41d8a5c1e0f4b9d27a63"  # Azure's keys: 32 hex digits
FAST = "retries: {attempts: 4, backoff_s: 0.01, max_backoff_s: 0.05}\ntimeout_s: 10\n"

pytestmark = pytest.mark.usefixtures("api_key", "no_network_variables", "azure_key")


@pytest.fixture
def azure_key(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AZURE_OPENAI_API_KEY", AZURE_KEY)


@pytest.fixture
def server() -> Iterator[FakeAzure]:
    with FakeAzure(AZURE_KEY) as running:
        yield running


@pytest.fixture(params=["http", "sdk"])
def client(request: pytest.FixtureRequest) -> str:
    return str(request.param)


def azure_spec(endpoint: str, client: str, n: int = 3, arm: str = "",
               deployment: str = "gpt4o-prod", version: str = "2024-10-21") -> str:
    arms = (f"  az:\n    provider: openai\n    model: gpt-4o\n    client: {client}\n"
            f"    azure: {{endpoint: '{endpoint}', deployment: {deployment}, "
            f"api_version: {version}}}\n{arm}")
    return sim_spec(n, arms=arms, extra=FAST)


def test_the_deployments_url_the_api_key_header_and_no_key_shown(
    pytester: pytest.Pytester, sweep: Sweep, server: FakeAzure, client: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("AZURE_OPENAI_API_KEY", AZURE_KEY + "\r\n")  # a CRLF .env leaves it so
    make_spec(pytester, azure_spec(server.base_url, client, arm="    temperature: 0\n"))
    result, _, rows = sweep.run("--bench-concurrency", "1")
    assert result.ret == 0, result.stdout.str()[-2000:]
    assert {r["status"] for r in rows} == {"correct"} and len(rows) == 3
    assert rows[0]["served_model"] == "gpt-4o-2024-11-20"
    sent = server.requests[0]
    assert sent["path"] == ("/openai/deployments/gpt4o-prod/chat/completions"
                            "?api-version=2024-10-21")
    assert sent["key"] == AZURE_KEY and sent["auth"] is None
    assert sent["body"]["temperature"] == 0
    assert AZURE_KEY not in sweep.out.read_text() and AZURE_KEY not in result.stdout.str()


@pytest.mark.parametrize("where", ["prompt", "reply"])
def test_the_content_filter_is_a_refusal_recorded_once_and_never_retried(
    pytester: pytest.Pytester, sweep: Sweep, server: FakeAzure, client: str, where: str
) -> None:
    server.filter_word = "(1)"  # the prompt of q1; "(cut)" lets it through to the reply's filter
    if where == "reply":
        make_spec(pytester, azure_spec(server.base_url, client).replace(
            '"2+2=? (1)"', '"2+2=? (1) (cut)"'))
    else:
        make_spec(pytester, azure_spec(server.base_url, client))
    result, _, rows = sweep.run("--bench-concurrency", "1")
    assert result.ret == 0, result.stdout.str()[-2000:]
    assert len(server.requests) == 3 and len(rows) == 3
    by_id = {r["task_id"]: r for r in rows}
    assert by_id["q1"]["extra"]["refusal"] == "content_filter" and by_id["q1"]["attempts"] == 1
    assert by_id["q1"]["status"] in ("wrong", "unparseable")
    assert by_id["q1"]["output"] == ("The answer is" if where == "reply" else "")
    assert "refusal" not in by_id["q0"].get("extra", {})


def test_a_rate_limit_waits_as_retry_after_says_then_succeeds(
    pytester: pytest.Pytester, sweep: Sweep, server: FakeAzure, client: str
) -> None:
    times: list[float] = []
    server.answer = lambda prompt: (times.append(time.monotonic()), "4")[1]
    server.push("ok")
    server.push("error", (429, RATE_LIMIT, {"retry-after": "1"}))
    make_spec(pytester, azure_spec(server.base_url, client, n=2))
    result, _, rows = sweep.run("--bench-concurrency", "1")
    assert result.ret == 0 and {r["status"] for r in rows} == {"correct"}
    assert len(times) == 2 and times[1] - times[0] >= 0.95


@pytest.mark.parametrize("change, says", [
    ("key", "check the key in AZURE_OPENAI_API_KEY"),
    ("deployment", "DeploymentNotFound*check azure.deployment"),
    ("version", "Resource not found*azure.api_version"),
])
def test_a_wrong_key_deployment_or_version_stops_the_arm(
    pytester: pytest.Pytester, sweep: Sweep, server: FakeAzure, client: str, change: str,
    says: str, monkeypatch: pytest.MonkeyPatch,
) -> None:
    body = azure_spec(server.base_url, client)
    if change == "key":
        monkeypatch.setenv("AZURE_OPENAI_API_KEY", "0" * 32)
    elif change == "deployment":
        body = azure_spec(server.base_url, client, deployment="gpt4o-staging")
    else:
        body = azure_spec(server.base_url, client, version="2023-01-01")
    make_spec(pytester, body)
    result, _, rows = sweep.run("--bench-concurrency", "1")
    assert result.ret == 2 and rows == [] and len(server.requests) == 1
    result.stdout.fnmatch_lines([f"*{server.base_url}*{says}*"])


class WithdrawnAzure(FakeAzure):
    """Answers its first call, then has no such deployment (one deleted mid-run)."""

    def reply(self, body: dict[str, Any]) -> dict[str, Any]:
        self.deployments = ()
        return super().reply(body)


def test_a_deployment_gone_after_the_arm_answered_never_advises_allow_mismatch(
    pytester: pytest.Pytester, sweep: Sweep, client: str,
) -> None:
    """Its settings changed and resumed with --bench-allow-mismatch, the arm would hold the old
    deployment's rows and the new one's under one name: the stop says to make a new arm."""
    with WithdrawnAzure(AZURE_KEY) as server:
        make_spec(pytester, azure_spec(server.base_url, client))
        result, _, rows = sweep.run("--bench-concurrency", "1")
        assert result.ret == 2 and len(rows) == 1 and len(server.requests) == 2
        out = result.stdout.str()
        result.stdout.fnmatch_lines(["*DeploymentNotFound*its 1 row recorded in the results file"
                                     "*makes a new arm (rename it in the spec, or start a new "
                                     "results file)*"])
        assert "allow-mismatch" not in out and "recorded nothing" not in out
        # Resumed, the arm fails on this run's first call: the resumed file's row still counts.
        result, _, rows = sweep.run("--bench-resume", str(sweep.out), "--bench-concurrency", "1")
        assert result.ret == 2 and len(rows) == 1 and len(server.requests) == 3
        result.stdout.fnmatch_lines(["*DeploymentNotFound*its 1 row recorded*makes a new arm*"])
        assert "allow-mismatch" not in result.stdout.str()


@pytest.mark.parametrize("azure_value, message", [
    ("{endpoint: 'https://x.openai.azure.com', deployment: d}", "azure needs api_version"),
    ("{endpoint: x.openai.azure.com, deployment: d, api_version: v}", "must be an https:// URL"),
    ("{endpoint: 'https://x', deployment: d, api_version: v, region: w}", "unknown azure key"),
    ("https://x.openai.azure.com", "azure must be a mapping"),
    ("{endpoint: 'https://x', deployment: team/gpt4o, api_version: v}",
     "azure.deployment must be an Azure deployment name*got 'team/gpt4o'*"),
    ("{endpoint: 'https://x', deployment: 'gpt 4o?', api_version: v}",
     "azure.deployment must be an Azure deployment name*got 'gpt 4o?'*"),
])
def test_a_bad_azure_setting_is_a_spec_error_naming_it(
    pytester: pytest.Pytester, sweep: Sweep, azure_value: str, message: str
) -> None:
    arms = (f"  az:\n    provider: openai\n    model: gpt-4o\n    azure: {azure_value}\n")
    make_spec(pytester, sim_spec(2, arms=arms))
    result, _, rows = sweep.run()
    assert result.ret != 0 and rows == []
    result.stdout.fnmatch_lines([f"*demo.yaml:*{message}*"])


def test_a_missing_key_names_the_azure_variable(
    pytester: pytest.Pytester, sweep: Sweep, server: FakeAzure, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("AZURE_OPENAI_API_KEY")
    make_spec(pytester, azure_spec(server.base_url, "http"))
    result, _, rows = sweep.run("-rs")
    result.stdout.fnmatch_lines(["*set the environment variable AZURE_OPENAI_API_KEY*"])
    assert rows == [] and server.requests == []


# -- proxies and private CAs
# ---------------------------------------------------------------------

@pytest.fixture(scope="module")
def cert(tmp_path_factory: pytest.TempPathFactory) -> Cert:
    return make_cert(tmp_path_factory.mktemp("certs"), "echo-bench-azure-ca")


@pytest.fixture(scope="module")
def proxy(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ForwardProxy]:
    with forward_proxy(tmp_path_factory.mktemp("proxy")) as running:
        yield running


def test_a_private_ca_and_an_https_proxy_tunnel(
    pytester: pytest.Pytester, sweep: Sweep, cert: Cert, proxy: ForwardProxy, client: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    with tls_server(cert, lambda: FakeAzure(AZURE_KEY)) as running:
        monkeypatch.setenv("HTTPS_PROXY", proxy.url)
        url = https_url(running, path="")
        make_spec(pytester, azure_spec(url, client, arm=f"    ca_file: {cert.cert}\n"))
        result, _, rows = sweep.run("--bench-concurrency", "2")
        assert result.ret == 0 and {r["status"] for r in rows} == {"correct"}, \
            result.stdout.str()[-2000:]
        assert len(proxy.lines(f"127.0.0.1:{running.httpd.server_address[1]}", 1)) >= 1


def test_an_untrusted_certificate_stops_the_arm(
    pytester: pytest.Pytester, sweep: Sweep, cert: Cert, client: str
) -> None:
    with tls_server(cert, lambda: FakeAzure(AZURE_KEY)) as running:
        make_spec(pytester, azure_spec(https_url(running, path=""), client))
        result, _, rows = sweep.run("--bench-concurrency", "1")
    assert result.ret == 2 and rows == []
    result.stdout.fnmatch_lines(["*TLS: the certificate of 127.0.0.1:*failed verification*"])


# -- hostile replies
# ---------------------------------------------------------------------------------------

PROFILE = settings(max_examples=60, deadline=None, derandomize=True, database=None)
REQUEST = Request(None, "az", "2+2")  # type: ignore[arg-type]
SETTINGS = azure.Azure("", "gpt4o-prod", "2024-10-21")


@pytest.fixture(scope="module")
def hostile() -> Iterator[tuple[FakeAzure, dict[str, openai_chat.OpenAIProvider]]]:
    import openai

    with FakeAzure(AZURE_KEY) as running:
        where = azure.Azure(running.base_url, "gpt4o-prod", "2024-10-21")
        sdk = openai.AzureOpenAI(api_key=AZURE_KEY, azure_endpoint=where.endpoint,
                                 azure_deployment=where.deployment, api_version=where.api_version,
                                 max_retries=0)
        made = {
            "http": azure.HTTPTransport(where, AZURE_KEY, "K", 5.0, openai_chat.AZURE_WIRE),
            "sdk": azure.SDKTransport(sdk, openai, "K", openai_chat.AZURE_WIRE, where.base_url),
        }
        yield running, {name: openai_chat.OpenAIProvider(t, "gpt-4o", None, {})
                        for name, t in made.items()}


JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=5) | st.just("content_filter"),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(
        st.sampled_from(["error", "code", "innererror", "message", "choices", "finish_reason",
                         "content", "usage", "prompt_tokens"]), inner, max_size=3),
    max_leaves=12,
)


@PROFILE
@given(body=st.one_of(st.builds(lambda v: json.dumps(v).encode(), JSON), st.binary(max_size=30)),
       status=st.sampled_from([200, 400, 400, 401, 404, 429, 500]),
       client=st.sampled_from(["http", "sdk"]))
def test_any_reply_is_an_answer_a_refusal_or_an_error_of_the_tree(
    hostile: tuple[FakeAzure, dict[str, openai_chat.OpenAIProvider]], body: bytes, status: int,
    client: str,
) -> None:
    server, providers = hostile
    server.faults.clear()
    server.push("raw", (status, "application/json", body, {}))
    try:
        done = providers[client].complete(REQUEST)
    except EchoBenchError as exc:
        Classifier().classify(exc)  # any error is of the tree, and classifies
        return
    assert isinstance(done.text, str)
    assert done.usage is None or all(0 <= v <= MAX_COUNT for v in done.usage.values())
    if status != 200:  # only the content filter's 400 is an answer
        assert status == 400 and done.extra == {"refusal": "content_filter"}


@pytest.mark.parametrize("client", ["http", "sdk"])
@pytest.mark.parametrize("error", [
    content_filter_error(),
    {"code": "content_filter", "message": None},
    {"code": None, "innererror": {"code": "ResponsibleAIPolicyViolation"}},
])
def test_each_shape_of_the_filters_400_is_a_refusal(
    hostile: tuple[FakeAzure, dict[str, openai_chat.OpenAIProvider]], client: str,
    error: dict[str, Any],
) -> None:
    server, providers = hostile
    server.faults.clear()
    server.push("error", (400, error, {}))
    done = providers[client].complete(REQUEST)
    assert done.text == "" and done.extra == {"refusal": "content_filter"}
