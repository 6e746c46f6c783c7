"""Proxies as the SDKs use them, through a real forward proxy (proxy.py, started on 127.0.0.1):
``HTTP_PROXY`` / ``HTTPS_PROXY`` / ``ALL_PROXY`` with ``NO_PROXY``'s rules, https in a ``CONNECT``
tunnel with TLS to the origin, the arm's ``proxy: none | URL``, credentials sent and never shown."""

from __future__ import annotations

import base64
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import quote

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from netparts import Cert, ForwardProxy, forward_proxy, free_port, https_url, make_cert, tls_server
from openai_server import FakeOpenAI

from conftest import Sweep, make_spec, sim_spec
from pytest_echo_bench.providers.network import Network, parse_proxy

SECRET = "pr0xy-s3cret"
FAST = "retries: {attempts: 2, backoff_s: 0.05, max_backoff_s: 0.1}\ntimeout_s: 10\n"


pytestmark = pytest.mark.usefixtures("api_key", "no_network_variables")


@pytest.fixture(scope="module")
def proxy(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ForwardProxy]:
    with forward_proxy(tmp_path_factory.mktemp("proxy")) as running:
        yield running


@pytest.fixture(scope="module")
def cert(tmp_path_factory: pytest.TempPathFactory) -> Cert:
    return make_cert(tmp_path_factory.mktemp("certs"), "echo-bench-proxy-ca")


@pytest.fixture(params=["http", "sdk"])
def client(request: pytest.FixtureRequest) -> str:
    return str(request.param)


def spec(url: str, client: str, n: int = 4, gpt: str = "") -> str:
    arms = (f"  gpt:\n    provider: openai\n    model: local-model\n    base_url: {url}\n"
            f"    api_key_env: TEST_OPENAI_KEY\n    client: {client}\n{gpt}")
    return sim_spec(n, arms=arms, extra=FAST).replace('target: "4"', 'target: "42"')


def run(pytester: pytest.Pytester, sweep: Sweep, body: str) -> list[dict[str, object]]:
    make_spec(pytester, body)
    result, _, rows = sweep.run("--bench-concurrency", "2", "--bench-cache", "off")
    assert result.ret == 0, result.stdout.str()[-3000:]
    assert len(rows) == 4 and {r["status"] for r in rows} == {"correct"}
    return rows


def port_of(server: FakeOpenAI) -> str:
    return f"127.0.0.1:{server.httpd.server_address[1]}"


def test_http_proxy_carries_an_http_base_url(
    pytester: pytest.Pytester,
    sweep: Sweep,
    proxy: ForwardProxy,
    openai_server: FakeOpenAI,
    client: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("HTTP_PROXY", proxy.url)
    before = len(proxy.lines(port_of(openai_server)))
    run(pytester, sweep, spec(openai_server.base_url, client))
    # one upstream connection per kept client connection; kept alive, one carries several calls
    assert 1 <= len(proxy.lines(port_of(openai_server), before + 1)) - before <= 4
    assert len(openai_server.requests) == 4


@pytest.mark.parametrize("no_proxy", ["127.0.0.1", "127.0.0.0/8", "*"])
def test_no_proxy_goes_direct(
    pytester: pytest.Pytester,
    sweep: Sweep,
    proxy: ForwardProxy,
    openai_server: FakeOpenAI,
    client: str,
    monkeypatch: pytest.MonkeyPatch,
    no_proxy: str,
) -> None:
    monkeypatch.setenv("http_proxy", proxy.url)
    monkeypatch.setenv("NO_PROXY", no_proxy)
    run(pytester, sweep, spec(openai_server.base_url, client))
    assert proxy.lines(port_of(openai_server)) == []


def test_the_arms_proxy_none_goes_direct_and_its_proxy_url_through(
    pytester: pytest.Pytester,
    sweep: Sweep,
    proxy: ForwardProxy,
    openai_server: FakeOpenAI,
    client: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("ALL_PROXY", proxy.url)
    run(pytester, sweep, spec(openai_server.base_url, client, gpt="    proxy: none\n"))
    assert proxy.lines(port_of(openai_server)) == []
    monkeypatch.delenv("ALL_PROXY")
    (pytester.path / "results.jsonl").unlink()
    run(pytester, sweep, spec(openai_server.base_url, client, gpt=f"    proxy: {proxy.url}\n"))
    assert 1 <= len(proxy.lines(port_of(openai_server), 1)) <= 4


def test_https_goes_through_a_connect_tunnel_with_tls_to_the_origin(
        pytester: pytest.Pytester, sweep: Sweep, proxy: ForwardProxy, cert: Cert, client: str,
        monkeypatch: pytest.MonkeyPatch) -> None:
    with tls_server(cert) as server:
        monkeypatch.setenv("HTTPS_PROXY", proxy.url)
        run(pytester, sweep, spec(https_url(server), client, gpt=f"    ca_file: {cert.cert}\n"))
        # One tunnel per kept connection; the server speaks only TLS,
        # so the proxy carried it unread.
        assert 1 <= len(proxy.lines(port_of(server), 1)) <= 4
        assert len(server.requests) == 4


def test_proxy_credentials_are_sent_and_never_shown(
    pytester: pytest.Pytester, sweep: Sweep, tmp_path: Path, openai_server: FakeOpenAI, client: str
) -> None:
    with forward_proxy(tmp_path, basic_auth=f"bench:{SECRET}") as guarded:
        host = guarded.url.removeprefix("http://")
        run(
            pytester,
            sweep,
            spec(openai_server.base_url, client, gpt=f"    proxy: http://bench:{SECRET}@{host}\n"),
        )
        assert 1 <= len(guarded.lines(port_of(openai_server), 1)) <= 4
        (pytester.path / "results.jsonl").unlink()
        make_spec(
            pytester,
            spec(
                openai_server.base_url,
                client,
                gpt=f"    proxy: http://bench:wrong-{SECRET}@{host}\n",
            ),
        )
        result, _, rows = sweep.run("--bench-concurrency", "2")
    text = result.stdout.str() + result.stderr.str()
    assert result.ret == 2 and rows == [], text[-3000:]
    assert "407" in text and "cannot work as configured" in text, text[-3000:]
    assert SECRET not in text and SECRET not in sweep.out.read_text(encoding="utf-8")


def test_a_proxy_nothing_listens_on_stops_the_arm_naming_the_proxy(
    pytester: pytest.Pytester, sweep: Sweep, openai_server: FakeOpenAI
) -> None:
    closed = free_port()
    make_spec(
        pytester,
        spec(
            openai_server.base_url,
            "http",
            gpt=f"    proxy: http://bench:{SECRET}@127.0.0.1:{closed}\n",
        ),
    )
    result, _, rows = sweep.run("--bench-concurrency", "2")
    text = result.stdout.str()
    assert result.ret == 2 and rows == [] and openai_server.requests == [], text[-3000:]
    assert f"through the proxy 127.0.0.1:{closed}" in text and "cannot work as configured" in text
    assert SECRET not in text


@pytest.mark.parametrize("url, no_proxy, expected", [
    ("https://api.openai.com/v1", "openai.com", True),
    ("https://api.openai.com/v1", ".openai.com", True),
    ("https://notopenai.com/v1", "openai.com", False),
    ("http://127.0.0.1:8000/v1", "127.0.0.1", True),
    ("http://10.2.3.4/v1", "10.0.0.0/8", True),
    ("http://11.2.3.4/v1", "10.0.0.0/8", False),
    ("http://[::1]/v1", "::1", True),
    ("http://[::1]:8080/v1", "[::1]:8080", True),
    ("http://localhost:8000/v1", "localhost:9000", False),
    ("http://localhost:8000/v1", "localhost:8000", True),
    ("http://anything.example:1/v1", " , *", True),
    ("http://host.example:1/v1", "", False),
    ("http://host.example:1/v1", "10.0.0.0/8", False),
], ids=lambda v: str(v))
def test_no_proxys_rules(
    url: str, no_proxy: str, expected: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    """More cases, and httpx's own answers for generated ones: tests/providers/test_proxy_env.py."""
    monkeypatch.setenv("ALL_PROXY", "http://proxy.corp:3128")
    monkeypatch.setenv("NO_PROXY", no_proxy)
    assert (Network().proxy_for(url) is None) is expected


def test_a_proxy_url_is_parsed_and_its_credentials_never_shown() -> None:
    proxy = parse_proxy(f"http://us%40er:{SECRET}@proxy.corp:3128")
    assert (proxy.host, proxy.port) == ("proxy.corp", 3128) and proxy.authorization
    assert SECRET not in repr(proxy) and SECRET not in proxy.shown
    assert parse_proxy("proxy.corp:8080").port == 8080
    for bad, said in (
        ("socks5://h:1080", "http:// URL"),
        ("http://:80", "no host"),
        ("http://h:x", "port"),
    ):
        with pytest.raises(ValueError, match=said):
            parse_proxy(bad)


def test_an_env_proxy_the_lean_client_cannot_use_makes_the_arm_unavailable(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from pytest_echo_bench.errors import UnavailableError
    from pytest_echo_bench.providers.http_json import JSONClient
    monkeypatch.setenv("HTTPS_PROXY", f"socks5://user:{SECRET}@127.0.0.1:1080")
    client = JSONClient("https://api.example/v1/chat/completions", {}, 1.0, Network())
    with pytest.raises(UnavailableError, match="proxy: none") as info:
        client.post({})
    assert SECRET not in str(info.value)


@settings(max_examples=100, derandomize=True, database=None, deadline=None)
@given(user=st.text(min_size=1, max_size=12), password=st.text(min_size=8, max_size=20))
def test_proxy_credentials_round_trip_and_stay_out_of_every_text(user: str, password: str) -> None:
    proxy = parse_proxy(f"http://{quote(user, safe='')}:{quote(password, safe='')}@proxy.corp:3128")
    assert proxy.authorization is not None
    sent = base64.b64decode(proxy.authorization.removeprefix("Basic ")).decode("utf-8")
    assert sent == f"{user}:{password}"
    for text in (repr(proxy), proxy.shown, str(proxy)):
        assert password not in text and quote(password, safe="") not in text
